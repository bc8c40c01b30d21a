"""The artifact tools called directly: declared as governed, lookups confined to the
run's workspace by id and by name, versions, spreadsheets pointed at execute_query,
and an unavailable store reported as transient."""

from __future__ import annotations

import io

import pydantic
import pytest

from artifacts.services import artifact_create
from rivercore.tools import ToolCategory, ToolError, ToolErrorKind, get_tool
from tests.artifacts.conftest import xlsx_bytes
from tests.executions.test_data_tools import ctx_for

pytestmark = pytest.mark.django_db


def _create(workspace, user, name, content: bytes):
    return artifact_create(workspace=workspace, stream=io.BytesIO(content), file_name=name, created_by=user)


def _load(ctx, **arguments):
    tool = get_tool("load_artifact")
    return tool.handler(ctx, tool.input_model.model_validate(arguments))


def _error(ctx, **arguments) -> ToolError:
    with pytest.raises(ToolError) as caught:
        _load(ctx, **arguments)
    return caught.value


def test_the_tools_are_declared_as_governed():
    load, save = get_tool("load_artifact"), get_tool("save_artifact")
    assert (load.category, load.writes, load.idempotent, load.permission) == (
        ToolCategory.EXECUTION, False, True, "workspace:view")
    assert (save.category, save.writes, save.idempotent, save.permission) == (
        ToolCategory.EXECUTION, True, False, "agent:execute")


def test_lookups_stay_in_the_runs_workspace(owner, outsider, workspace, other_workspace, artifact_dirs):
    theirs = _create(other_workspace, outsider, "plan.md", b"their plan")
    ctx = ctx_for(owner, workspace)
    assert _error(ctx, artifact_id=theirs.pk).kind == ToolErrorKind.NOT_FOUND
    by_name = _error(ctx, name="plan.md")
    assert by_name.kind == ToolErrorKind.NOT_FOUND and "their plan" not in by_name.message
    ours = _create(workspace, owner, "plan.md", b"our plan")
    assert _load(ctx, name="plan.md").text == "our plan" and _load(ctx, name="plan.md").artifact_id == ours.pk


def test_versions_by_name(owner, workspace, artifact_dirs):
    _create(workspace, owner, "notes.txt", b"first")
    _create(workspace, owner, "notes.txt", b"second")
    ctx = ctx_for(owner, workspace)
    assert (_load(ctx, name="notes.txt").text, _load(ctx, name="notes.txt").version) == ("second", 2)
    assert _load(ctx, name="notes.txt", version=1).text == "first"
    assert _error(ctx, name="notes.txt", version=3).kind == ToolErrorKind.NOT_FOUND


def test_one_reference_exactly(owner, workspace, artifact_dirs):
    tool = get_tool("load_artifact")
    for arguments in ({}, {"artifact_id": 1, "name": "x.txt"}, {"artifact_id": 1, "version": 2}):
        with pytest.raises(pydantic.ValidationError):
            tool.input_model.model_validate(arguments)


def test_a_spreadsheet_is_pointed_at_execute_query(owner, workspace, artifact_dirs):
    book = _create(workspace, owner, "book.xlsx", xlsx_bytes({"Sales": [["a"], [1]]}))
    error = _error(ctx_for(owner, workspace), artifact_id=book.pk)
    assert error.kind == ToolErrorKind.VALIDATION
    assert f"execute_query on data source {book.data_source_id} (tables: sales)" in error.message


def test_an_unavailable_store_is_transient(owner, workspace, artifact_dirs):
    notes = _create(workspace, owner, "notes.txt", b"x")
    store, _ = artifact_dirs
    (store / notes.storage_name).unlink()  # the file went missing under the row
    assert _error(ctx_for(owner, workspace), artifact_id=notes.pk).kind == ToolErrorKind.TRANSIENT
