"""The data tools: declared like the spec, schemas round-trip, ids are tenant-scoped,
queries only reach bound sources, and each handler works against real databases."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agents.models import Agent, AgentVersion
from datasources.models import DataSource
from datasources.selectors import data_source_prompt_metadata
from datasources.services import data_source_create, data_source_discover, data_source_update
from datasources.types import DataSourceChanges
from executions.models import Execution, ExecutionStep
from rivercore.contracts import AgentConfig, DataSourceMetadata, UserContext
from rivercore.tools import ToolCategory, ToolContext, ToolError, ToolErrorKind, get_tool
from tenancy.permissions import ROLE_PERMISSIONS, Role
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import sqlite_count

EXAMPLE = json.loads((Path(__file__).parent / "example_execution_request.json").read_text())

# name -> (category, permission, writes) as the spec's Tool Registry declares them
SPEC = {
    "create_data_source": (ToolCategory.EXECUTION, "data_source:create", True),
    "update_data_source": (ToolCategory.EXECUTION, "data_source:update", True),
    "delete_data_source": (ToolCategory.EXECUTION, "data_source:delete", True),
    "test_connection": (ToolCategory.EXECUTION, "data_source:view", False),
    "discover_schema": (ToolCategory.EXECUTION, "data_source:view", False),
    "execute_query": (ToolCategory.EXECUTION, "data_source:query", False),
    "write_back": (ToolCategory.EXECUTION, "data_source:update", True),
    "get_workspace_info": (ToolCategory.EXECUTION, "workspace:view", False),
    "get_storage_info": (ToolCategory.EXECUTION, "storage:view", False),
    "search_catalog": (ToolCategory.REASONING, None, False),
}

# name -> (required inputs, all inputs, output fields), field names from the spec
FIELDS = {
    "create_data_source": (
        {"name", "type", "connection_config", "credentials"},
        {"name", "type", "connection_config", "credentials", "description", "create_file"},
        {"success", "data_source_id", "message"},
    ),
    "update_data_source": ({"data_source_id", "updates"}, {"data_source_id", "updates"}, {"success", "message"}),
    "delete_data_source": ({"data_source_id"}, {"data_source_id"}, {"success", "message"}),
    "test_connection": ({"data_source_id"}, {"data_source_id"}, {"success", "latency_ms", "message"}),
    "discover_schema": ({"data_source_id"}, {"data_source_id"}, {"success", "tables", "total_tables"}),
    "execute_query": (
        {"data_source_id", "query"},
        {"data_source_id", "query", "max_rows", "parameters"},
        {"columns", "rows", "total_rows", "execution_time_ms", "truncated", "tables", "total_available", "note"},
    ),
    "write_back": (
        {"data_source_id", "table_name", "operation", "data"},
        {"data_source_id", "table_name", "operation", "data", "conditions"},
        {"success", "rows_affected", "message"},
    ),
    "get_workspace_info": (set(), {"workspace_id"}, {"name", "description", "status", "total_members", "settings"}),
    "get_storage_info": (
        set(),
        set(),
        {"total_size_bytes", "quota_bytes", "usage_percentage", "file_count", "remaining_bytes"},
    ),
    "search_catalog": (set(["query"]), {"query", "data_source_ids", "top_k"}, {"matches", "total_results"}),
}

SAMPLES = {
    "create_data_source": {
        "name": "CRM",
        "type": "postgresql",
        "connection_config": {"host": "db", "port": 5432, "database": "crm"},
        "credentials": {"user": "r", "password": "p"},
        "description": "CRM replica",
    },
    "update_data_source": {"data_source_id": 3, "updates": {"description": "x"}},
    "delete_data_source": {"data_source_id": 3},
    "test_connection": {"data_source_id": 3},
    "discover_schema": {"data_source_id": 3},
    "execute_query": {"data_source_id": 3, "query": "SELECT 1", "max_rows": 10, "parameters": {"a": 1}},
    "write_back": {
        "data_source_id": 3,
        "table_name": "tickets",
        "operation": "update",
        "data": {"status": "closed"},
        "conditions": {"id": 1},
    },
    "get_workspace_info": {"workspace_id": 1},
    "get_storage_info": {},
    "search_catalog": {"query": "open tickets", "data_source_ids": [1], "top_k": 3},
}


def ctx_for(user, workspace, *, permissions=None, sources=()) -> ToolContext:
    granted = permissions if permissions is not None else sorted(ROLE_PERMISSIONS[Role.ADMIN])
    return ToolContext(
        execution_id=1,
        user=UserContext(
            user_id=user.pk,
            org_id=workspace.organization_id,
            workspace_id=workspace.pk,
            roles=["admin"],
            permissions=list(granted),
        ),
        agent=AgentConfig.model_validate(EXAMPLE["agent_config"]),
        data_sources=[DataSourceMetadata.model_validate(data_source_prompt_metadata(data_source=s)) for s in sources],
    )


def call(tool_name, ctx, /, **arguments):
    tool = get_tool(tool_name)
    return tool.handler(ctx, tool.input_model.model_validate(arguments))


def error_of(tool_name, ctx, /, **arguments) -> ToolError:
    with pytest.raises(ToolError) as caught:
        call(tool_name, ctx, **arguments)
    return caught.value


# --- declarations and schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPEC))
def test_tool_is_declared_as_the_spec_says(name):
    category, permission, writes = SPEC[name]
    tool = get_tool(name)
    assert tool is not None
    assert tool.category == category
    assert tool.permission == permission
    assert tool.writes is writes
    assert tool.idempotent is (not writes)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_schema_round_trip(name):
    tool = get_tool(name)
    schema = tool.function_schema()
    assert schema["type"] == "function" and schema["function"]["name"] == name
    parameters = schema["function"]["parameters"]
    required, everything, outputs = FIELDS[name]
    assert set(parameters.get("required", [])) == required
    assert set(parameters.get("properties", {})) == everything
    assert set(tool.output_model.model_fields) == outputs
    jsonschema.validate(SAMPLES[name], parameters)
    parsed = tool.input_model.model_validate(SAMPLES[name])
    assert tool.input_model.model_validate(parsed.model_dump()) == parsed
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**SAMPLES[name], "unexpected_field": 1}, parameters)


@pytest.mark.parametrize("name", [n for n, (_, permission, _) in SPEC.items() if permission])
def test_viewer_lacks_what_writing_tools_need(name):
    """The engine refuses a call whose permission the user lacks before dispatch; a
    viewer may only run the read tools."""
    permission = get_tool(name).permission
    allowed = permission in ROLE_PERMISSIONS[Role.VIEWER]
    assert allowed is (name in {"test_connection", "discover_schema", "get_workspace_info", "get_storage_info"})


# --- tenant scoping -----------------------------------------------------------------------------------------


@pytest.fixture
def foreign_source(other_workspace, sqlite_dir):
    (sqlite_dir / str(other_workspace.pk)).mkdir(parents=True, exist_ok=True)
    (sqlite_dir / str(other_workspace.pk) / "foreign.sqlite3").write_bytes(b"")
    return data_source_create(
        workspace=other_workspace,
        name="Foreign",
        type="sqlite",
        connection_config={"path": "foreign.sqlite3"},
        credentials={},
        access_level="read_write",
    )


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("update_data_source", {"updates": {"description": "mine"}}),
        ("delete_data_source", {}),
        ("test_connection", {}),
        ("discover_schema", {}),
        ("execute_query", {"query": "SELECT 1"}),
        ("write_back", {"table_name": "t", "operation": "delete", "data": {}, "conditions": {"id": 1}}),
    ],
)
def test_other_workspaces_ids_are_not_found(owner, workspace, foreign_source, name, arguments):
    # Even listed as bound (a forged context), the id resolves only inside the run's workspace.
    ctx = ctx_for(owner, workspace, sources=[foreign_source])
    error = error_of(name, ctx, data_source_id=foreign_source.pk, **arguments)
    assert error.kind == ToolErrorKind.NOT_FOUND
    assert DataSource.objects.get(pk=foreign_source.pk).description == ""


def test_search_catalog_ignores_and_refuses_other_workspaces(owner, workspace, sqlite_source, foreign_source):
    data_source_discover(data_source=sqlite_source)
    DataSource.objects.filter(pk=foreign_source.pk).update(
        schema_cache=[{"table_name": "tickets_secret", "columns": [{"column_name": "id", "data_type": "int"}]}]
    )
    ctx = ctx_for(owner, workspace)
    result = call("search_catalog", ctx, query="tickets")
    assert {m.data_source_id for m in result.matches} == {sqlite_source.pk}
    assert result.matches[0].table_name == "tickets"
    error = error_of("search_catalog", ctx, query="tickets", data_source_ids=[foreign_source.pk])
    assert error.kind == ToolErrorKind.NOT_FOUND


def test_search_catalog_without_view_permission_sees_only_bound_sources(owner, workspace, sqlite_source, pg_source):
    data_source_discover(data_source=sqlite_source)
    data_source_discover(data_source=pg_source)
    ctx = ctx_for(owner, workspace, permissions=["agent:execute"], sources=[pg_source])
    result = call("search_catalog", ctx, query="customers email")
    assert result.matches and {m.data_source_id for m in result.matches} == {pg_source.pk}


def test_get_workspace_info_other_tenant_is_not_found(owner, workspace, other_workspace, member):
    ctx = ctx_for(owner, workspace)
    info = call("get_workspace_info", ctx)
    assert info.name == "Support"
    assert info.total_members == 2  # owner and member
    assert info.status == "active"
    assert info.settings["time_zone"] == "UTC"
    assert "approval_notification_config" in info.settings
    assert error_of("get_workspace_info", ctx, workspace_id=other_workspace.pk).kind == ToolErrorKind.NOT_FOUND


# --- data source management through tools ------------------------------------------------------------------


def test_create_update_test_discover_delete(owner, workspace, sqlite_file):
    ctx = ctx_for(owner, workspace)
    created = call(
        "create_data_source",
        ctx,
        name="Local",
        type="sqlite",
        connection_config={"path": sqlite_file.name},
        credentials={},
    )
    assert created.success
    source = DataSource.objects.get(pk=created.data_source_id)
    assert source.workspace_id == workspace.pk
    tested = call("test_connection", ctx, data_source_id=source.pk)
    assert tested.success and tested.latency_ms >= 0
    discovered = call("discover_schema", ctx, data_source_id=source.pk)
    assert discovered.success and discovered.total_tables == 3
    assert {t.table_name for t in discovered.tables} == {"customers", "tickets", "charges"}
    updated = call(
        "update_data_source",
        ctx,
        data_source_id=source.pk,
        updates={"connection_config": {"statement_timeout_ms": 5000}},
    )
    assert updated.success and "discover_schema" in updated.message
    assert DataSource.objects.get(pk=source.pk).schema_discovered_at is None
    assert call("delete_data_source", ctx, data_source_id=source.pk).success
    assert not DataSource.objects.filter(pk=source.pk).exists()


def test_management_tools_report_validation_errors(owner, workspace, pg_source):
    ctx = ctx_for(owner, workspace)
    bad = error_of(
        "create_data_source", ctx, name="X", type="postgresql", connection_config={"port": 5432}, credentials={}
    )
    assert bad.kind == ToolErrorKind.VALIDATION
    assert "connection_config.host" in bad.details
    unknown = error_of("update_data_source", ctx, data_source_id=pg_source.pk, updates={"status": "connected"})
    assert unknown.kind == ToolErrorKind.VALIDATION


@pytest.mark.parametrize(
    "updates",
    [
        {"status": "connected", "credentials_encrypted": "x"},
        {"data_source": 1, "description": "swapped"},
        {"schema_cache": [], "name": "Renamed"},
    ],
)
def test_update_tool_refuses_unknown_and_read_only_keys_before_writing(owner, workspace, pg_source, updates):
    refused = error_of("update_data_source", ctx_for(owner, workspace), data_source_id=pg_source.pk, updates=updates)
    unknown = sorted(set(updates) - {"name", "description"})
    assert refused.kind == ToolErrorKind.VALIDATION
    assert refused.message == f"Unknown or read-only fields: {', '.join(unknown)}."
    assert refused.details == {key: ["cannot be updated"] for key in unknown}
    stored = DataSource.objects.get(pk=pg_source.pk)
    assert (stored.name, stored.description, stored.status) == ("Support PG", "", DataSource.Status.UNTESTED)


def test_update_tool_passes_create_file_to_the_service(owner, workspace, sqlite_source, sqlite_dir):
    updated = call(
        "update_data_source",
        ctx_for(owner, workspace),
        data_source_id=sqlite_source.pk,
        updates={"connection_config": {"path": "made.sqlite3"}, "create_file": True},
    )
    assert updated.success
    assert (sqlite_dir / str(workspace.pk) / "made.sqlite3").is_file()
    assert DataSource.objects.get(pk=sqlite_source.pk).connection_config["path"] == "made.sqlite3"


def test_unreachable_source_is_transient(owner, workspace, pg_source):
    data_source_update(data_source=pg_source, changes=DataSourceChanges(connection_config={"port": 1}))
    ctx = ctx_for(owner, workspace)
    assert call("test_connection", ctx, data_source_id=pg_source.pk).success is False
    assert error_of("discover_schema", ctx, data_source_id=pg_source.pk).kind == ToolErrorKind.TRANSIENT


# --- execute_query and write_back --------------------------------------------------------------------------------


def test_execute_query_only_on_bound_sources(owner, workspace, pg_source, sqlite_source):
    data_source_discover(data_source=pg_source)
    ctx = ctx_for(owner, workspace, sources=[sqlite_source])
    error = error_of("execute_query", ctx, data_source_id=pg_source.pk, query="SELECT 1")
    assert error.kind == ToolErrorKind.FORBIDDEN


def test_execute_query_runs_guarded_sql(owner, workspace, pg_source):
    data_source_discover(data_source=pg_source)
    ctx = ctx_for(owner, workspace, sources=[pg_source])
    result = call(
        "execute_query",
        ctx,
        data_source_id=pg_source.pk,
        query="SELECT count(*) AS n FROM tickets WHERE status = :status AND priority = :priority "
        "AND created_at >= now() - interval '24 hours'",
        parameters={"status": "open", "priority": "high"},
    )
    assert result.columns == ["n"] and result.rows == [[2]]
    assert result.total_rows == 1 and result.tables == ["tickets"] and result.truncated is False
    capped = call("execute_query", ctx, data_source_id=pg_source.pk, query="SELECT id FROM tickets", max_rows=2)
    assert capped.truncated is True and capped.total_rows == 2
    refused = error_of("execute_query", ctx, data_source_id=pg_source.pk, query="DELETE FROM tickets")
    assert refused.kind == ToolErrorKind.VALIDATION
    assert "SELECT" in refused.message


def test_write_back_through_the_tool(owner, workspace, sqlite_source, sqlite_file):
    data_source_discover(data_source=sqlite_source)
    ctx = ctx_for(owner, workspace, sources=[sqlite_source])
    result = call(
        "write_back",
        ctx,
        data_source_id=sqlite_source.pk,
        table_name="tickets",
        operation="update",
        data={"status": "resolved"},
        conditions={"id": [1, 2]},
    )
    assert result.success and result.rows_affected == 2
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'resolved'") == 2
    unconditioned = error_of(
        "write_back",
        ctx,
        data_source_id=sqlite_source.pk,
        table_name="tickets",
        operation="delete",
        data={},
    )
    assert unconditioned.kind == ToolErrorKind.VALIDATION
    unknown = error_of(
        "write_back", ctx, data_source_id=sqlite_source.pk, table_name="payroll", operation="insert", data={"a": 1}
    )
    assert unknown.kind == ToolErrorKind.VALIDATION
    data_source_update(data_source=sqlite_source, changes=DataSourceChanges(access_level="read_only"))
    read_only = error_of(
        "write_back",
        ctx,
        data_source_id=sqlite_source.pk,
        table_name="tickets",
        operation="update",
        data={"status": "x"},
        conditions={"id": 1},
    )
    assert read_only.kind == ToolErrorKind.FORBIDDEN
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets") == 6


# --- storage --------------------------------------------------------------------------------------------------------


def _run(workspace, owner, agent, version, result):
    return Execution.objects.create(
        workspace=workspace, agent=agent, agent_version=version, requested_by=owner, result=result
    )


def test_get_storage_info_measures_stored_results_and_files(
    owner, workspace, other_workspace, sqlite_source, sqlite_file, settings
):
    settings.RIVER_STORAGE_QUOTA_BYTES = 1_000_000
    agent = Agent.objects.create(workspace=workspace, name="A", business_function="customer_support", owner=owner)
    version = AgentVersion.objects.create(agent=agent, version=1, goal="g", instructions="i", action_level="read_only")
    with_result = _run(workspace, owner, agent, version, {"summary": "Two open tickets. ✓"})
    _run(workspace, owner, agent, version, {})  # nothing stored
    ExecutionStep.objects.create(
        execution=with_result, step_number=1, step_type="observation", output={"result": {"rows": [[1, "é"]]}}
    )
    ExecutionStep.objects.create(execution=with_result, step_number=2, step_type="reasoning", output=None)
    other_agent = Agent.objects.create(
        workspace=other_workspace, name="B", business_function="customer_support", owner=owner
    )
    other_version = AgentVersion.objects.create(
        agent=other_agent, version=1, goal="g", instructions="i", action_level="read_only"
    )
    _run(other_workspace, owner, other_agent, other_version, {"summary": "x" * 5000})

    from django.db import connection

    size = "octet_length({}::text)" if connection.vendor == "postgresql" else "LENGTH(CAST({} AS BLOB))"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {size.format('result')} FROM executions_execution WHERE id = %s", [with_result.pk])
        result_bytes = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT {size.format('output')} FROM executions_executionstep WHERE execution_id = %s "
            "AND output IS NOT NULL",
            [with_result.pk],
        )
        output_bytes = cursor.fetchone()[0]
    expected = result_bytes + output_bytes + sqlite_file.stat().st_size

    info = call("get_storage_info", ctx_for(owner, workspace))
    assert info.total_size_bytes == expected
    assert info.file_count == 2  # one run with a stored result + one SQLite file
    assert info.quota_bytes == 1_000_000
    assert info.remaining_bytes == 1_000_000 - expected
    assert info.usage_percentage == pytest.approx(expected / 1_000_000 * 100, rel=1e-3)
