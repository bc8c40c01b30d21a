"""Run, step and approval statuses are enums used everywhere, not strings.

The stored values stay what they were; the code names them through
Execution.Status, ApprovalRequest.Status, the engine's ResponseStatus/StepStatus and
governance's ResolutionStatus, and maps the engine's values to the run's once."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest

from executions.models import Execution, ExecutionStep
from executions.services.segment import _STATUS_FROM_RESPONSE
from governance.approvals import _STATUS_FOR
from governance.models import ApprovalRequest
from rivercore.contracts import ResolutionStatus as EngineResolutionStatus
from rivercore.contracts import ResponseStatus, StepStatus
from rivercore.types.agents import NotificationConfig
from rivercore.types.governance import ResolutionStatus
from rivercore.types.runs import RunStatus
from triggers.types import WorkflowConfig

ROOT = Path(__file__).resolve().parents[2]
APPS = ("rivercore", "executions", "governance", "agents", "telemetry", "triggers", "datasources", "tenancy",
        "riverapp", "common")

STATUS_VALUES = sorted(
    ({s.value for s in Execution.Status} | {s.value for s in ApprovalRequest.Status} | {s.value for s in ResponseStatus}
     | {s.value for s in StepStatus} | {s.value for s in ResolutionStatus})
    # "timeout" is also an error kind of tools and models (ToolErrorKind, LLMErrorKind), compared as such.
    - {"timeout"}
)
# A status value compared with, assigned to a status, or listed as a choice.
_CONTEXT = r"""(==|!=|\bin\s*[\(\[{]|\bstatus\w*\s*=|default\s*=|choices\s*=\s*\[\(?)"""
USED_AS_STATUS = re.compile(_CONTEXT + r"""\s*["'](""" + "|".join(STATUS_VALUES) + r""")["']""")


def test_no_app_code_spells_a_status_as_a_string():
    offenders = []
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if USED_AS_STATUS.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_engine_and_governance_share_one_resolution_enum():
    assert EngineResolutionStatus is ResolutionStatus
    assert {s.value for s in ResolutionStatus} == {"approved", "rejected", "edited_approved"}
    # Each resolution has its stored approval status; the stored values did not change.
    assert {k.value: v.value for k, v in _STATUS_FOR.items()} == {
        "approved": "approved", "rejected": "rejected", "edited_approved": "edited",
    }


def test_the_runs_stored_statuses_are_the_cores_run_statuses():
    assert [(s.name, s.value) for s in Execution.Status] == [(s.name, s.value) for s in RunStatus]


def test_configuration_names_run_statuses_through_the_enum():
    assert NotificationConfig().notify_on == [RunStatus.FAILED]
    assert WorkflowConfig(upstream_agent="00000000-0000-0000-0000-000000000001").on_statuses == [RunStatus.COMPLETED]
    with pytest.raises(pydantic.ValidationError) as raised:
        NotificationConfig(notify_on=["failed", "exploded"])
    assert raised.value.errors()[0]["loc"] == ("notify_on", 1)


def test_every_engine_outcome_maps_to_one_run_status():
    assert set(_STATUS_FROM_RESPONSE) == set(ResponseStatus)
    assert all(isinstance(status, Execution.Status) for status in _STATUS_FROM_RESPONSE.values())


def test_a_steps_default_status_is_the_engines_completed():
    assert ExecutionStep._meta.get_field("status").default == StepStatus.COMPLETED
