"""Data tools: data source management, schema discovery, guarded queries, write-back,
workspace and storage information, and the deterministic catalog search.

Every handler resolves ids through tenant-scoped selectors using the run's
``ctx.user.workspace_id`` (another workspace's id is ``not_found``) and calls the
datasources services; errors become ToolErrors of the spec's taxonomy. Field names of
inputs and outputs are the spec's (001, Tool Registry); ``truncated`` and ``tables``
on execute_query are River additions (the row cap and the governance export check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field

from artifacts.selectors import artifact_files_usage
from datasources import effects
from datasources import services as ds_services
from datasources.catalog import CatalogMatch, catalog_search
from datasources.connectors import SUPPORTED_TYPES
from datasources.errors import DataSourceUnavailable, QueryTimedOut
from datasources.selectors import data_source_files_usage, data_source_get_in_workspace, data_sources_in_workspace
from datasources.types import DataSourceChanges
from executions.selectors import execution_storage_usage
from executions.tools.fenced import fenced_in_transaction
from governance.previews import approved_write_audit
from governance.selectors import approval_notification_config
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied, RiverError
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, register
from rivercore.types.datasources import TableInfo
from rivercore.types.previews import EffectPreview
from tenancy import permissions as perms
from tenancy.selectors import require_permission, user_active_get, workspace_get_for_user

T = TypeVar("T")
QUERY_DEADLINE_MARGIN_MS = 12_000  # connecting may take up to 10 s (connectors.CONNECT_TIMEOUT_SECONDS)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- error mapping ---------------------------------------------------------------------------


def tool_db_call(fn: Callable[[], T]) -> T:
    """Run a service call and translate River errors into the tool error taxonomy."""
    try:
        return fn()
    except NotFound as exc:
        raise ToolError(ToolErrorKind.NOT_FOUND, exc.message, exc.details) from None
    except PermissionDenied as exc:
        raise ToolError(ToolErrorKind.FORBIDDEN, exc.message, exc.details) from None
    except DataSourceUnavailable as exc:
        raise ToolError(ToolErrorKind.TRANSIENT, exc.message, exc.details) from None
    except QueryTimedOut as exc:
        # Not retried: the same query would hit the same statement timeout again.
        raise ToolError(ToolErrorKind.FAILED, exc.message, {"code": exc.code}) from None
    except (InvalidInput, Conflict) as exc:
        raise ToolError(ToolErrorKind.VALIDATION, exc.message, exc.details) from None
    except RiverError as exc:
        raise ToolError(ToolErrorKind.FAILED, exc.message, exc.details) from None


def tool_user(ctx: ToolContext):
    user = user_active_get(user_id=ctx.user.user_id)
    if user is None:
        raise ToolError(ToolErrorKind.FORBIDDEN, "The run's user no longer exists or is inactive.")
    return user


def tool_workspace(ctx: ToolContext):
    return tool_db_call(lambda: workspace_get_for_user(user=tool_user(ctx), workspace_id=ctx.user.workspace_id))


def _data_source(ctx: ToolContext, data_source_id: int):
    return tool_db_call(
        lambda: data_source_get_in_workspace(workspace_id=ctx.user.workspace_id, data_source_id=data_source_id)
    )


def _require_bound(ctx: ToolContext, data_source_id: int) -> None:
    if data_source_id not in {source.data_source_id for source in ctx.data_sources}:
        raise ToolError(
            ToolErrorKind.FORBIDDEN,
            f"Data source {data_source_id} is not bound to this agent; it may only use its own data sources.",
        )


# --- create / update / delete ----------------------------------------------------------------


class CreateDataSourceInput(_Input):
    name: str = Field(min_length=1, max_length=200, description="Data source display name.")
    type: str = Field(description=f"Connector type, one of: {', '.join(SUPPORTED_TYPES)}.")
    connection_config: dict[str, Any] = Field(
        description="Connection parameters: host, port, database, sslmode, schema (postgresql) or path (sqlite)."
    )
    credentials: dict[str, Any] = Field(description="Authentication credentials: user and password ({} for sqlite).")
    description: str = Field(default="", description="Human-readable description.")
    create_file: bool = Field(
        default=False, description="sqlite only: create an empty database file if the path does not exist."
    )


class CreateDataSourceOutput(BaseModel):
    success: bool
    data_source_id: int
    message: str


def create_data_source(ctx: ToolContext, args: CreateDataSourceInput) -> CreateDataSourceOutput:
    workspace = tool_workspace(ctx)
    source = tool_db_call(
        lambda: ds_services.data_source_create(
            workspace=workspace,
            name=args.name,
            type=args.type,
            connection_config=args.connection_config,
            credentials=args.credentials,
            description=args.description,
            create_file=args.create_file,
        )
    )
    return CreateDataSourceOutput(
        success=True, data_source_id=source.pk, message=f"Created data source {source.name!r} (id {source.pk})."
    )


class UpdateDataSourceInput(_Input):
    data_source_id: int = Field(description="ID of the data source to update.")
    updates: dict[str, Any] = Field(
        description=(
            "Fields to update: name, description, access_level, classifications, type, connection_config, "
            "credentials. connection_config and credentials are merged into the current values."
        )
    )


class SuccessOutput(BaseModel):
    success: bool
    message: str


def update_data_source(ctx: ToolContext, args: UpdateDataSourceInput) -> SuccessOutput:
    source = _data_source(ctx, args.data_source_id)
    updates = dict(args.updates)
    create_file = bool(updates.pop("create_file", False))
    tool_db_call(
        lambda: ds_services.data_source_update(
            data_source=source, changes=DataSourceChanges.model_validate(updates), create_file=create_file
        )
    )
    reconnects = {"type", "connection_config", "credentials"} & set(args.updates)
    dropped = " The cached schema was cleared; run discover_schema again." if reconnects else ""
    return SuccessOutput(success=True, message=f"Updated data source {source.name!r}.{dropped}")


class DataSourceIdInput(_Input):
    data_source_id: int = Field(description="ID of the data source.")


def delete_data_source(ctx: ToolContext, args: DataSourceIdInput) -> SuccessOutput:
    source = _data_source(ctx, args.data_source_id)
    name = source.name
    tool_db_call(lambda: ds_services.data_source_delete(data_source=source))
    return SuccessOutput(success=True, message=f"Deleted data source {name!r}.")


# --- test / discover -------------------------------------------------------------------------


class TestConnectionOutput(BaseModel):
    success: bool
    latency_ms: int
    message: str


def test_connection(ctx: ToolContext, args: DataSourceIdInput) -> TestConnectionOutput:
    source = _data_source(ctx, args.data_source_id)
    result = tool_db_call(lambda: ds_services.data_source_test(data_source=source))
    return TestConnectionOutput(success=result.success, latency_ms=result.latency_ms, message=result.message)


class DiscoverSchemaOutput(BaseModel):
    success: bool
    tables: list[TableInfo]
    total_tables: int


def discover_schema(ctx: ToolContext, args: DataSourceIdInput) -> DiscoverSchemaOutput:
    source = _data_source(ctx, args.data_source_id)
    tables = tool_db_call(lambda: ds_services.data_source_discover(data_source=source))
    return DiscoverSchemaOutput(success=True, tables=tables, total_tables=len(tables))


# --- query / write-back ----------------------------------------------------------------------


class ExecuteQueryInput(_Input):
    data_source_id: int = Field(description="Target data source (one bound to this agent).")
    query: str = Field(min_length=1, description="One read-only SQL SELECT; use :name placeholders for values.")
    max_rows: int | None = Field(
        default=None,
        ge=1,
        le=ds_services.MAX_ROWS_LIMIT,
        description="Maximum rows to return (at most the source's row limit, which is also the default).",
    )
    parameters: dict[str, Any] | None = Field(
        default=None, description="Values for the query's :name placeholders, bound by the driver."
    )


class ExecuteQueryOutput(BaseModel):
    columns: list[str]
    rows: list[list]
    total_rows: int
    execution_time_ms: int
    truncated: bool = False
    tables: list[str] = Field(default_factory=list)
    total_available: int | None = None
    note: str | None = None


def execute_query(ctx: ToolContext, args: ExecuteQueryInput) -> ExecuteQueryOutput:
    _require_bound(ctx, args.data_source_id)
    source = _data_source(ctx, args.data_source_id)
    # The statement must time out before the engine gives up on the tool: a statement
    # timeout is reported and not retried, a tool timeout is retried (another query).
    tool_seconds = ctx.agent.model_settings.timeout_seconds
    result = tool_db_call(
        lambda: ds_services.query_execute(
            data_source=source,
            query=args.query,
            max_rows=args.max_rows,
            parameters=args.parameters,
            timeout_ms_cap=max(1000, int(tool_seconds * 1000) - QUERY_DEADLINE_MARGIN_MS),
        )
    )
    return ExecuteQueryOutput.model_validate(result.model_dump())


class WriteBackInput(_Input):
    data_source_id: int = Field(description="Target data source (bound to this agent, read_write access).")
    table_name: str = Field(min_length=1, description="Target table, as in the discovered schema.")
    operation: Literal["insert", "update", "delete"] = Field(description='"insert", "update" or "delete".')
    data: dict[str, Any] | list[dict[str, Any]] = Field(
        description="Column values: a row (or list of rows) to insert, or the columns to set for update; {} for delete."
    )
    conditions: dict[str, Any] | None = Field(
        default=None,
        description="WHERE conditions for update/delete (required there): {column: value}; a list means IN.",
    )


class WriteBackOutput(BaseModel):
    success: bool
    rows_affected: int
    message: str


def write_back(ctx: ToolContext, args: WriteBackInput) -> WriteBackOutput:
    _require_bound(ctx, args.data_source_id)
    source = _data_source(ctx, args.data_source_id)
    terms = ctx.extras.get("approved_effect")
    if terms:  # approved after a preview: committed only if the effect is still the previewed one
        return write_back_checked(ctx, source, args, terms)
    result = tool_db_call(
        lambda: ds_services.write_back_execute(
            data_source=source,
            table_name=args.table_name,
            operation=args.operation,
            data=args.data,
            conditions=args.conditions,
        )
    )
    return WriteBackOutput(success=result.success, rows_affected=result.rows_affected, message=result.message)


def write_back_preview(ctx: ToolContext, args: WriteBackInput) -> EffectPreview:
    """The rows the write would change, computed in a transaction that is rolled back."""
    _require_bound(ctx, args.data_source_id)
    source = _data_source(ctx, args.data_source_id)
    return tool_db_call(lambda: effects.write_back_preview(
        data_source=source, table_name=args.table_name, operation=args.operation, data=args.data,
        conditions=args.conditions))


def write_back_checked(ctx: ToolContext, source, args: WriteBackInput, terms: dict) -> WriteBackOutput:
    """The approved write, checked against the preview and the ceiling in its own
    transaction; its audit entry names the fingerprint and the rows it changed."""
    agreed = effects.EffectTerms(fingerprint=terms.get("fingerprint"), max_rows=terms.get("max_rows"))

    def apply() -> EffectPreview:
        try:
            return effects.write_back_apply_checked(
                data_source=source, table_name=args.table_name, operation=args.operation, data=args.data,
                conditions=args.conditions, terms=agreed)
        except (effects.EffectChanged, effects.CeilingExceeded) as exc:
            # Nothing was written; not retried (the same data gives the same answer). The
            # engine pauses the call again with this fresh preview (rivercore.previews).
            raise ToolError(ToolErrorKind.FAILED, exc.message,
                            {"code": exc.code, **exc.details, "preview": exc.fresh.model_dump(mode="json")}) from None

    applied = tool_db_call(apply)
    approved_write_audit(execution_id=ctx.execution_id, call_id=str(ctx.extras.get("call_id") or ""),
                         effect=applied, terms={**terms, "tool_name": "write_back"},
                         workspace_id=ctx.extras.get("workspace_id"), agent_id=ctx.agent.agent_id)
    verb = {"insert": "Inserted", "update": "Updated", "delete": "Deleted"}[args.operation]
    return WriteBackOutput(success=True, rows_affected=applied.rows_affected,
                           message=f"{verb} {applied.rows_affected} row(s) in {applied.target} (the approved effect).")


# --- workspace / storage -----------------------------------------------------------------------


class GetWorkspaceInfoInput(_Input):
    workspace_id: int | None = Field(default=None, description="Workspace ID (defaults to the current workspace).")


class GetWorkspaceInfoOutput(BaseModel):
    name: str
    description: str
    status: str
    total_members: int
    settings: dict[str, Any]


def get_workspace_info(ctx: ToolContext, args: GetWorkspaceInfoInput) -> GetWorkspaceInfoOutput:
    if args.workspace_id is None or args.workspace_id == ctx.user.workspace_id:
        workspace = tool_workspace(ctx)
    else:
        user = tool_user(ctx)
        workspace = tool_db_call(lambda: workspace_get_for_user(user=user, workspace_id=args.workspace_id))
        tool_db_call(lambda: require_permission(user=user, workspace=workspace, permission=perms.WORKSPACE_VIEW))
    notification = approval_notification_config(workspace_id=workspace.pk)
    return GetWorkspaceInfoOutput(
        name=workspace.name,
        description=workspace.description,
        status=workspace.status,
        total_members=workspace.memberships.count(),
        settings={
            "slug": workspace.slug,
            "time_zone": workspace.time_zone,
            "organization_id": workspace.organization_id,
            "approval_notification_config": notification.model_dump(mode="json"),
        },
    )


class GetStorageInfoInput(_Input):
    pass


class GetStorageInfoOutput(BaseModel):
    total_size_bytes: int
    quota_bytes: int
    usage_percentage: float
    file_count: int
    remaining_bytes: int


def storage_usage(*, workspace_id: int) -> GetStorageInfoOutput:
    """What the workspace stores: run results (Execution.result) and step outputs
    (ExecutionStep.output), measured as stored JSON bytes, plus the SQLite files of its
    data sources (artifact tables among them) and its stored artifact files.
    ``file_count`` is the number of runs with a stored result plus those files."""
    run_count, stored_bytes = execution_storage_usage(workspace_id=workspace_id)
    file_count, file_bytes = data_source_files_usage(workspace_id=workspace_id)
    artifact_count, artifact_bytes = artifact_files_usage(workspace_id=workspace_id)
    total = stored_bytes + file_bytes + artifact_bytes
    quota = int(settings.RIVER_STORAGE_QUOTA_BYTES)
    percentage = round(total / quota * 100, 4) if quota else (100.0 if total else 0.0)
    return GetStorageInfoOutput(
        total_size_bytes=total,
        quota_bytes=quota,
        usage_percentage=percentage,
        file_count=run_count + file_count + artifact_count,
        remaining_bytes=max(quota - total, 0),
    )


def get_storage_info(ctx: ToolContext, args: GetStorageInfoInput) -> GetStorageInfoOutput:
    return storage_usage(workspace_id=ctx.user.workspace_id)


# --- search_catalog (reasoning, deterministic) -----------------------------------------------------


class SearchCatalogInput(_Input):
    query: str = Field(min_length=1, description="Natural language search query.")
    data_source_ids: list[int] | None = Field(default=None, description="Limit search to these data sources.")
    top_k: int = Field(default=10, ge=1, le=100, description="Number of results to return.")


class SearchCatalogOutput(BaseModel):
    matches: list[CatalogMatch]
    total_results: int


def search_catalog(ctx: ToolContext, args: SearchCatalogInput) -> SearchCatalogOutput:
    """Searches the cached schemas the caller may see: every source of the workspace when
    the user holds data_source:view there, otherwise only the sources bound to the agent."""
    sources = data_sources_in_workspace(workspace_id=ctx.user.workspace_id)
    if perms.DATA_SOURCE_VIEW not in ctx.user.permissions:
        sources = sources.filter(pk__in=[s.data_source_id for s in ctx.data_sources])
    if args.data_source_ids is not None:
        wanted = set(args.data_source_ids)
        sources = sources.filter(pk__in=wanted)
        missing = wanted - set(sources.values_list("pk", flat=True))
        if missing:
            raise ToolError(
                ToolErrorKind.NOT_FOUND, f"Data source(s) not found: {', '.join(map(str, sorted(missing)))}."
            )
    result = catalog_search(data_sources=sources.order_by("pk"), query=args.query, top_k=args.top_k)
    return SearchCatalogOutput(matches=result.matches, total_results=result.total_results)


# --- registration ------------------------------------------------------------------------------


def _execution_tool(name, description, input_model, output_model, handler, permission, *, writes=False,
                    preview=None):
    return register(
        Tool(
            name=name,
            description=description,
            category=ToolCategory.EXECUTION,
            input_model=input_model,
            output_model=output_model,
            handler=handler,
            permission=permission,
            writes=writes,
            idempotent=not writes,
            preview=preview,
        )
    )


CREATE_DATA_SOURCE = _execution_tool(
    "create_data_source",
    "Register a new data source in this workspace (types: " + ", ".join(SUPPORTED_TYPES) + ").",
    CreateDataSourceInput,
    CreateDataSourceOutput,
    fenced_in_transaction(create_data_source),
    perms.DATA_SOURCE_CREATE,
    writes=True,
)
UPDATE_DATA_SOURCE = _execution_tool(
    "update_data_source",
    "Change a data source's settings; connection changes clear its cached schema.",
    UpdateDataSourceInput,
    SuccessOutput,
    fenced_in_transaction(update_data_source),
    perms.DATA_SOURCE_UPDATE,
    writes=True,
)
DELETE_DATA_SOURCE = _execution_tool(
    "delete_data_source",
    "Delete a data source from this workspace.",
    DataSourceIdInput,
    SuccessOutput,
    fenced_in_transaction(delete_data_source),
    perms.DATA_SOURCE_DELETE,
    writes=True,
)
TEST_CONNECTION = _execution_tool(
    "test_connection",
    "Check that River can connect to a data source; reports latency in ms.",
    DataSourceIdInput,
    TestConnectionOutput,
    test_connection,
    perms.DATA_SOURCE_VIEW,
)
DISCOVER_SCHEMA = _execution_tool(
    "discover_schema",
    "Read a data source's tables, columns, keys and row estimates and refresh its cached schema.",
    DataSourceIdInput,
    DiscoverSchemaOutput,
    discover_schema,
    perms.DATA_SOURCE_VIEW,
)
EXECUTE_QUERY = _execution_tool(
    "execute_query",
    "Run one read-only SQL SELECT against a bound data source (read-only transaction, timeout, row cap).",
    ExecuteQueryInput,
    ExecuteQueryOutput,
    execute_query,
    perms.DATA_SOURCE_QUERY,
)
WRITE_BACK = _execution_tool(
    "write_back",
    "Insert, update or delete rows in a bound read_write data source; update and delete need conditions.",
    WriteBackInput,
    WriteBackOutput,
    write_back,
    perms.DATA_SOURCE_UPDATE,
    writes=True,
    preview=write_back_preview,
)
GET_WORKSPACE_INFO = _execution_tool(
    "get_workspace_info",
    "Name, description, status, member count and settings of the workspace.",
    GetWorkspaceInfoInput,
    GetWorkspaceInfoOutput,
    get_workspace_info,
    perms.WORKSPACE_VIEW,
)
GET_STORAGE_INFO = _execution_tool(
    "get_storage_info",
    "Storage used by this workspace's stored results and files, against its quota.",
    GetStorageInfoInput,
    GetStorageInfoOutput,
    get_storage_info,
    perms.STORAGE_VIEW,
)
SEARCH_CATALOG = register(
    Tool(
        name="search_catalog",
        description="Find the tables and columns most relevant to a question in the cached data source schemas.",
        category=ToolCategory.REASONING,
        input_model=SearchCatalogInput,
        output_model=SearchCatalogOutput,
        handler=search_catalog,
        permission=None,
        idempotent=True,
    )
)
