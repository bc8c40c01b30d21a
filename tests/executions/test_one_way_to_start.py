"""Every run starts through ``execution_start`` with a ``RunRequest``: no product module
creates an ``Execution`` row any other way, and the services folder imports no private
name of another module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from executions.types import (
    DelegationOrigin,
    HandOffOrigin,
    PersonOrigin,
    RunRequest,
    SessionOrigin,
    TriggerOrigin,
)
from rivercore.types.sessions import SessionContext

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["agents", "artifacts", "common", "datasources", "executions", "governance", "riverapp", "rivercore",
           "telemetry", "tenancy", "triggers", "web"]
AGENT = "7d1f4a52-8a8e-4a8e-9d5b-2f9b1c1e0c11"


def _product_files():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _execution_creations(tree: ast.AST):
    """Calls that write a new run row: ``Execution.objects.create/bulk_create/get_or_create``
    and ``Execution(...)`` constructed directly."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "Execution":
            yield node.lineno
        if (isinstance(func, ast.Attribute) and func.attr in {"create", "bulk_create", "get_or_create",
                                                              "update_or_create"}
                and isinstance(func.value, ast.Attribute) and func.value.attr == "objects"
                and isinstance(func.value.value, ast.Name) and func.value.value.id == "Execution"):
            yield node.lineno


def test_only_execution_start_creates_runs():
    found = {}
    for path in _product_files():
        lines = list(_execution_creations(ast.parse(path.read_text(), filename=str(path))))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert list(found) == ["executions/services/start.py"], found
    start = (ROOT / "executions/services/start.py").read_text()
    tree = ast.parse(start)
    creating = [fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                and any(True for _ in _execution_creations(fn))]
    assert creating == ["execution_start"]


def test_the_checker_catches_a_second_way_to_create_a_run():
    """The scan above would see a new one (it is not vacuous)."""
    sneaky = ast.parse("Execution.objects.create(agent=a)\nrow = Execution(agent=a)\nExecution.objects.filter()")
    assert list(_execution_creations(sneaky)) == [1, 2]


def test_no_private_name_is_imported_across_executions_modules():
    offenders = []
    for path in sorted((ROOT / "executions").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCT:
                offenders += [f"{path.relative_to(ROOT)}: {node.module}.{alias.name}" for alias in node.names
                              if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert offenders == []


@pytest.mark.parametrize(("origin", "trigger_type", "trigger_source"), [
    (PersonOrigin(user_id=1, source="api"), "manual", "api"),
    (TriggerOrigin(trigger_id="5b1d2d8e-0c61-4a55-9e4e-0d3c8a3f9a10", trigger_type="scheduled", source="cron",
                   user_id=2), "scheduled", "cron"),
    (DelegationOrigin(user_id=1, parent_execution_id=41, parent_call_id="c1", depth=1,
                      action_level_cap="read_only"), "workflow", "delegation:41"),
    (SessionOrigin(user_id=1, session_id=9, context=SessionContext(session_id=9)), "manual", "session:9"),
    (HandOffOrigin(user_id=1, session_id=9, context=SessionContext(session_id=9), from_execution_id=40,
                   from_agent_id=AGENT, depth=1, action_level_cap="recommend"), "manual", "handoff:40"),
])
def test_each_origin_names_the_trigger_columns_it_always_did(origin, trigger_type, trigger_source):
    request = RunRequest(agent_id=AGENT, origin=origin, prompt="hi")
    assert (request.trigger_type.value, request.trigger_source) == (trigger_type, trigger_source)
    again = RunRequest.model_validate_json(request.model_dump_json())
    assert again == request and type(again.origin) is type(origin)


@pytest.mark.parametrize(("bad", "field"), [
    ({"origin": {"kind": "robot", "user_id": 1}}, "origin"),
    ({"origin": {"kind": "person", "user_id": 1, "source": "cron"}}, "source"),
    ({"origin": {"kind": "delegation", "user_id": 1, "parent_execution_id": 1, "parent_call_id": "c",
                 "depth": 0, "action_level_cap": "read_only"}}, "depth"),
    ({"origin": {"kind": "delegation", "user_id": 1, "parent_execution_id": 1, "parent_call_id": "c",
                 "depth": 1, "action_level_cap": "godmode"}}, "action_level_cap"),
    ({"origin": {"kind": "person", "user_id": 1}, "attachments": ["x"]}, "attachments"),
    ({"origin": {"kind": "person", "user_id": 1}, "extra": 1}, "extra"),
])
def test_a_malformed_request_is_refused_naming_the_field(bad, field):
    with pytest.raises(ValidationError) as refused:
        RunRequest.model_validate({"agent_id": AGENT, **bad})
    assert any(field in map(str, error["loc"]) or (field == "origin" and error["loc"][0] == "origin")
               for error in refused.value.errors())
