"""Writes and remote operations on data sources.

Credentials are encrypted at rest (common.crypto) and only decrypted here, to build
the connection for one operation. They are never returned, logged, put into an
exception message or into a prompt. Connections to customer databases are opened
outside River's own database transactions.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.crypto import decrypt_json, encrypt_json
from datasources import connectors, network
from datasources.errors import DataSourceUnavailable, HostNotAllowed, QueryFailed, QueryRefused, QueryTimedOut
from datasources.identifiers import DEFAULT_SCHEMAS, qualified_table_parse, schema_matches, table_resolve
from datasources.models import DataSource
from datasources.selectors import data_source_tables, sqlite_path_relative, sqlite_path_resolve
from datasources.sqlguard import query_check
from datasources.types import (
    LIMIT_RANGES,
    DataSourceChanges,
    choice_validate,
    classifications_validate,
    limits_validate,
    patch_merge,
    storable_check,
    type_validate,
)
from datasources.write_retry import write_with_retry
from rivercore.errors import Conflict, InvalidInput, PermissionDenied, pydantic_details
from rivercore.types.datasources import ConnectionConfig, ConnectionTestResult, QueryResult, TableInfo, WriteResult

logger = logging.getLogger(__name__)

MAX_ROWS_LIMIT = 10_000
MAX_WRITE_ROWS = 1_000
WRITE_OPERATIONS = ("insert", "update", "delete")
_CONNECTION_FIELDS = {"type", "connection_config", "credentials"}


class PostgresCredentials(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    user: str = pydantic.Field(min_length=1)
    password: str = ""


# --- validation ----------------------------------------------------------------------------


def _pg_host_validate(config: ConnectionConfig) -> None:
    try:
        network.host_check(host=config.host or "", port=config.port or connectors.DEFAULT_PG_PORT)
    except network.HostNotAllowed as exc:
        raise HostNotAllowed(exc.message, details={"connection_config.host": [exc.message]}) from None


def connection_config_validate(*, type: str, connection_config: Any, workspace_id: int | None = None) -> dict:
    """Check the settings for ``type``. A PostgreSQL host is resolved and must pass
    the network policy (datasources.network); a SQLite path must lie in the
    workspace's directory and is stored relative to it."""
    if not isinstance(connection_config, dict):
        raise InvalidInput("connection_config must be an object.", details={"connection_config": ["must be an object"]})
    storable_check(connection_config, "connection_config")
    try:
        config = ConnectionConfig.model_validate(connection_config)
    except pydantic.ValidationError as exc:
        details = {f"connection_config.{k}": v for k, v in pydantic_details(exc).items()}
        raise InvalidInput("connection_config is invalid.", details=details) from None
    problems: dict[str, list[str]] = {}
    if type == DataSource.Type.POSTGRESQL:
        if not config.host:
            problems["connection_config.host"] = ["required for postgresql"]
        if not config.database:
            problems["connection_config.database"] = ["required for postgresql"]
        elif "=" in config.database or "://" in config.database or len(config.database) > 63:
            problems["connection_config.database"] = ["must be a database name (no connection strings)"]
        if config.path:
            problems["connection_config.path"] = ["only for sqlite"]
        if config.sslmode and config.sslmode not in {
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        }:
            problems["connection_config.sslmode"] = ["not a libpq sslmode"]
        if config.host and "connection_config.host" not in problems:
            try:
                network.host_syntax_check(config.host)
            except network.HostNotAllowed as exc:
                problems["connection_config.host"] = [exc.message]
    elif type == DataSource.Type.SQLITE:
        for key in ("host", "port", "database", "sslmode"):
            if getattr(config, key) is not None:
                problems[f"connection_config.{key}"] = ["not for sqlite"]
        if not config.path:
            problems["connection_config.path"] = ["required for sqlite"]
        elif workspace_id is not None:
            resolved = sqlite_path_resolve(workspace_id=workspace_id, path=config.path)
            config = config.model_copy(update={"path": sqlite_path_relative(workspace_id=workspace_id, path=resolved)})
    if problems:
        raise InvalidInput("connection_config is invalid.", details=problems)
    return config.model_dump(mode="json", exclude_none=True, by_alias=True)


def connection_host_check(*, type: str, connection_config: dict) -> None:
    """A network source's host, resolved, must pass the network policy (checked
    again at every connect). Called once the rest of the input is known to be valid."""
    if type == DataSource.Type.POSTGRESQL:
        _pg_host_validate(ConnectionConfig.model_validate(connection_config))


def sqlite_file_ensure(*, workspace_id: int, path: str, create: bool) -> Path:
    """The source's SQLite file, which must exist unless ``create`` asks for an empty one."""
    resolved = sqlite_path_resolve(workspace_id=workspace_id, path=path)
    if resolved.exists():
        if not resolved.is_file():
            raise InvalidInput(
                "connection_config.path is not a regular file.", details={"connection_config.path": ["not a file"]}
            )
        return resolved
    if not create:
        raise InvalidInput(
            "The SQLite file does not exist; send create_file: true to create an empty database.",
            details={"connection_config.path": ["file does not exist (send create_file: true to create it)"]},
        )
    resolved.parent.mkdir(parents=True, exist_ok=True)
    # The parent chain was created inside the workspace directory; resolve again in
    # case a symlink appeared meanwhile, then create the file (and only the file).
    resolved = sqlite_path_resolve(workspace_id=workspace_id, path=path)
    try:
        sqlite3.connect(f"{resolved.as_uri()}?mode=rwc", uri=True).close()
    except sqlite3.Error:
        raise InvalidInput(
            "The SQLite file could not be created.", details={"connection_config.path": ["cannot be created"]}
        ) from None
    logger.info("workspace %s: created empty SQLite file %s", workspace_id, resolved.name)
    return resolved


def credentials_validate(*, type: str, credentials: Any) -> dict:
    if credentials is None:
        credentials = {}
    if not isinstance(credentials, dict):
        raise InvalidInput("credentials must be an object.", details={"credentials": ["must be an object"]})
    if type == DataSource.Type.SQLITE:
        if credentials:
            raise InvalidInput(
                "SQLite sources take no credentials.", details={"credentials": ["must be empty for sqlite"]}
            )
        return {}
    try:
        return PostgresCredentials.model_validate(credentials).model_dump()
    except pydantic.ValidationError as exc:
        # Only field names and messages: never echo the submitted values.
        details = {f"credentials.{k}": v for k, v in pydantic_details(exc).items()}
        raise InvalidInput("credentials are invalid: expected user and password.", details=details) from None


# --- connections -------------------------------------------------------------------------


def _spec(data_source: DataSource) -> connectors.ConnectionSpec:
    config = ConnectionConfig.model_validate(data_source.connection_config or {})
    if data_source.type == DataSource.Type.SQLITE and config.path:
        resolved = sqlite_path_resolve(workspace_id=data_source.workspace_id, path=config.path)
        config = config.model_copy(update={"path": str(resolved)})
    return connectors.ConnectionSpec(
        type=data_source.type,
        config=config,
        credentials=decrypt_json(data_source.credentials_encrypted),
        timeout_ms=data_source.effective_timeout_ms,
    )


def source_connector(data_source: DataSource) -> connectors.Connector:
    try:
        return connectors.connector_for(_spec(data_source))
    except connectors.ConnectorError as exc:
        raise InvalidInput(exc.message, details={"connection_config": [exc.message]}) from None


def connector_error_raise(exc: connectors.ConnectorError) -> None:
    if isinstance(exc, connectors.HostRefused):
        raise HostNotAllowed(exc.message, details={"connection_config.host": [exc.message]}) from None
    if isinstance(exc, connectors.ConnectionFailed):
        raise DataSourceUnavailable(exc.message, details={"failure": exc.kind}) from None
    if isinstance(exc, connectors.QueryTimeout):
        raise QueryTimedOut(exc.message) from None
    if isinstance(exc, connectors.QueryRejected):
        raise QueryRefused(exc.message, details={"query": [exc.message]}) from None
    raise QueryFailed(exc.message, details={"query": [exc.message]}) from None


def _set_status(data_source: DataSource, *, status: str, message: str) -> None:
    message = message[:500]
    DataSource.objects.filter(pk=data_source.pk).update(
        status=status, status_message=message, updated_at=timezone.now()
    )
    data_source.status = status
    data_source.status_message = message


# --- create / update / delete ----------------------------------------------------------------


def data_source_create(
    *,
    workspace,
    name: str,
    type: str,
    connection_config: dict,
    credentials: dict | None,
    description: str = "",
    access_level: str = DataSource.AccessLevel.READ_ONLY,
    classifications: dict[str, str] | None = None,
    create_file: bool = False,
    query_row_limit: int | None = None,
    observation_byte_limit: int | None = None,
    query_timeout_seconds: int | None = None,
) -> DataSource:
    """A SQLite source's file must exist in the workspace's directory unless
    ``create_file`` asks for an empty database to be created there."""
    storable_check(name, "name")
    storable_check(description, "description")
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidInput("name is required.", details={"name": ["required"]})
    if len(name) > 200:
        raise InvalidInput("name is too long.", details={"name": ["at most 200 characters"]})
    type_validate(type)
    choice_validate(access_level, DataSource.AccessLevel, "access_level")
    limits = limits_validate(
        {
            "query_row_limit": query_row_limit,
            "observation_byte_limit": observation_byte_limit,
            "query_timeout_seconds": query_timeout_seconds,
        }
    )
    config = connection_config_validate(type=type, connection_config=connection_config, workspace_id=workspace.pk)
    secrets = credentials_validate(type=type, credentials=credentials)
    labels = classifications_validate(classifications)
    if DataSource.objects.filter(workspace=workspace, name=name).exists():
        raise Conflict("A data source with this name already exists.", details={"name": ["already exists"]})
    connection_host_check(type=type, connection_config=config)
    if type == DataSource.Type.SQLITE:
        sqlite_file_ensure(workspace_id=workspace.pk, path=config["path"], create=bool(create_file))
    try:
        with transaction.atomic():
            data_source = DataSource.objects.create(
                workspace=workspace,
                name=name,
                description=description or "",
                type=type,
                connection_config=config,
                credentials_encrypted=encrypt_json(secrets),
                access_level=access_level,
                classifications=labels,
                **limits,
            )
    except IntegrityError:
        raise Conflict("A data source with this name already exists.", details={"name": ["already exists"]}) from None
    logger.info("data source %s created in workspace %s (%s)", data_source.pk, workspace.pk, type)
    return data_source


def data_source_update(*, data_source: DataSource, changes: DataSourceChanges, create_file: bool = False) -> DataSource:
    """Apply the fields given in ``changes`` (already checked on their own there); what
    needs the database or the network is checked here: the name is unique in the
    workspace, the merged connection settings are valid for the (new) type, a SQLite
    file lies in the workspace's directory and exists unless ``create_file``, a
    PostgreSQL host passes the network policy. Changing where or how River connects
    drops the cached schema: it must be rediscovered before queries run again."""
    given = changes.model_fields_set
    if not given:
        return data_source
    fields: set[str] = set()
    new_type = changes.type if "type" in given else data_source.type
    for key in LIMIT_RANGES.keys() & given:
        setattr(data_source, key, getattr(changes, key))
        fields.add(key)
    if "name" in given:
        if (
            DataSource.objects.filter(workspace_id=data_source.workspace_id, name=changes.name)
            .exclude(pk=data_source.pk)
            .exists()
        ):
            raise Conflict("A data source with this name already exists.", details={"name": ["already exists"]})
        data_source.name = changes.name
        fields.add("name")
    if "description" in given:
        data_source.description = changes.description
        fields.add("description")
    if "access_level" in given:
        data_source.access_level = changes.access_level
        fields.add("access_level")
    if "classifications" in given:
        data_source.classifications = changes.classifications
        fields.add("classifications")
        if data_source.schema_cache:
            data_source.schema_cache = _cache_classify(data_source.schema_cache, data_source.classifications)
            fields.add("schema_cache")

    if _CONNECTION_FIELDS & given:
        stored_secrets = decrypt_json(data_source.credentials_encrypted)
        current_config = ConnectionConfig.model_validate(data_source.connection_config or {}).model_dump(
            mode="json", exclude_none=True, by_alias=True
        )
        if new_type != data_source.type and "connection_config" in given:
            current_config = {}  # a new engine starts from the given settings only
        config = connection_config_validate(
            type=new_type,
            connection_config=patch_merge(current_config, changes.connection_config or {}),
            workspace_id=data_source.workspace_id,
        )
        if new_type == DataSource.Type.SQLITE:
            sqlite_file_ensure(workspace_id=data_source.workspace_id, path=config["path"], create=create_file)
        if "credentials" in given:
            base = {} if new_type != data_source.type else stored_secrets
            secrets = credentials_validate(type=new_type, credentials=patch_merge(base, changes.credentials or {}))
        else:
            secrets = credentials_validate(type=new_type, credentials=stored_secrets)
        connection_host_check(type=new_type, connection_config=config)
        unchanged = new_type == data_source.type and config == current_config and secrets == stored_secrets
        if not unchanged:  # re-saving the same settings keeps the cache
            data_source.type = new_type
            data_source.connection_config = config
            data_source.credentials_encrypted = encrypt_json(secrets)
            data_source.schema_cache = []
            data_source.schema_discovered_at = None
            data_source.status = DataSource.Status.UNTESTED
            data_source.status_message = ""
            fields |= {
                "type",
                "connection_config",
                "credentials_encrypted",
                "schema_cache",
                "schema_discovered_at",
                "status",
                "status_message",
            }
    fields.add("updated_at")
    try:
        with transaction.atomic():
            data_source.save(update_fields=sorted(fields))
    except IntegrityError:
        raise Conflict("A data source with this name already exists.", details={"name": ["already exists"]}) from None
    logger.info("data source %s updated (%s)", data_source.pk, ", ".join(sorted(given)))
    return data_source


def data_source_delete(*, data_source: DataSource) -> None:
    pk = data_source.pk
    data_source.delete()
    logger.info("data source %s deleted", pk)


# --- remote operations ---------------------------------------------------------------------


def data_source_test(*, data_source: DataSource) -> ConnectionTestResult:
    """Open a connection, run a trivial query and record the outcome as the status."""
    try:
        result = source_connector(data_source).test_connection()
    except InvalidInput as exc:
        result = ConnectionTestResult(success=False, latency_ms=0, message=exc.message)
    _set_status(
        data_source,
        status=DataSource.Status.CONNECTED if result.success else DataSource.Status.ERROR,
        message=result.message,
    )
    return result


def _cache_classify(cache: list, classifications: dict[str, str]) -> list[dict]:
    """The cached schema relabelled; a classified table's sampled values are dropped at once."""
    tables = [TableInfo.model_validate(t) for t in cache]
    for table in tables:
        table.classification = classifications.get(table.table_name)
        if table.classification:
            for column in table.columns:
                column.sample_values = []
    return [table.model_dump(mode="json") for table in tables]


def data_source_discover(*, data_source: DataSource) -> list[TableInfo]:
    """Read tables, columns, keys and row estimates and store them as the cached schema."""
    try:
        tables = source_connector(data_source).discover()
    except connectors.ConnectorError as exc:
        if isinstance(exc, connectors.ConnectionFailed):
            _set_status(data_source, status=DataSource.Status.ERROR, message=exc.message)
        connector_error_raise(exc)
    classifications = data_source.classifications or {}
    for table in tables:
        table.classification = classifications.get(table.table_name)
        if table.classification:
            # A classified table's values must not travel into prompts and payloads.
            for column in table.columns:
                column.sample_values = []
    now = timezone.now()
    cache = [table.model_dump(mode="json") for table in tables]
    DataSource.objects.filter(pk=data_source.pk).update(
        schema_cache=cache,
        schema_discovered_at=now,
        status=DataSource.Status.CONNECTED,
        status_message=f"Discovered {len(tables)} tables.",
        updated_at=now,
    )
    data_source.schema_cache = cache
    data_source.schema_discovered_at = now
    data_source.status = DataSource.Status.CONNECTED
    data_source.status_message = f"Discovered {len(tables)} tables."
    logger.info("data source %s: discovered %d tables", data_source.pk, len(tables))
    return tables


def _cached_tables(data_source: DataSource) -> list[TableInfo]:
    if data_source.schema_discovered_at is None:
        raise QueryRefused(
            "The schema of this data source has not been discovered yet; run discover_schema first.",
            details={"data_source_id": ["schema not discovered"]},
        )
    return data_source_tables(data_source=data_source)


def _scalar_ok(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def query_execute(
    *,
    data_source: DataSource,
    query: str,
    max_rows: int | None = None,
    parameters: dict | None = None,
    timeout_ms_cap: int | None = None,
) -> QueryResult:
    """Run one guarded read-only statement against the source (see datasources.sqlguard).

    The dialect the query is parsed, guarded and bound in is the connector's, not the
    source's label. Rows are capped at ``max_rows`` and at the source's row limit
    (else its workspace's), and the result at the source's observation byte limit;
    a cut result says ``truncated`` and carries a ``note``. ``timeout_ms_cap`` lowers
    the statement timeout (a caller with its own deadline: the query must end first)."""
    row_limit = data_source.effective_row_limit
    if max_rows is not None and (
        not isinstance(max_rows, int) or isinstance(max_rows, bool) or not 1 <= max_rows <= MAX_ROWS_LIMIT
    ):
        raise InvalidInput(
            f"max_rows must be between 1 and {MAX_ROWS_LIMIT}.", details={"max_rows": [f"1..{MAX_ROWS_LIMIT}"]}
        )
    max_rows = min(max_rows or row_limit, row_limit)
    if not isinstance(query, str):
        raise InvalidInput("query must be text.", details={"query": ["must be a string"]})
    storable_check(query, "query")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidInput(
            "parameters must be an object of named values.", details={"parameters": ["must be {name: value}"]}
        )
    parameters = parameters or {}
    storable_check(parameters, "parameters")
    tables = _cached_tables(data_source)
    config = ConnectionConfig.model_validate(data_source.connection_config or {})
    connector = source_connector(data_source)
    verdict = query_check(
        sql=query,
        dialect=connector.dialect,
        allowed_tables=[t.table_name for t in tables],
        schema_name=config.schema_name,
    )
    if not verdict.allowed:
        logger.info("data source %s: query refused by the guard: %s", data_source.pk, verdict.reason)
        raise QueryRefused(verdict.reason, details={"query": [verdict.reason]})
    missing = [name for name in verdict.parameter_names if name not in parameters]
    extra = sorted(set(parameters) - set(verdict.parameter_names))
    if missing or extra:
        details = {f"parameters.{n}": ["missing"] for n in missing} | {f"parameters.{n}": ["not used"] for n in extra}
        raise InvalidInput("parameters do not match the query's placeholders.", details=details)
    bad = [n for n, v in parameters.items() if not (_scalar_ok(v) or (isinstance(v, list) and all(map(_scalar_ok, v))))]
    if bad:
        raise InvalidInput(
            "parameter values must be scalars or lists of scalars.",
            details={f"parameters.{n}": ["bad type"] for n in bad},
        )
    if connector.dialect == DataSource.Type.POSTGRESQL:
        bound: Any = [parameters[name] for name in verdict.parameter_names]
    else:
        bound = {name: parameters[name] for name in verdict.parameter_names}
    try:
        raw = connector.run_read_query(
            sql=verdict.sql,
            parameters=bound,
            max_rows=max_rows,
            timeout_ms=min(data_source.effective_timeout_ms, timeout_ms_cap or data_source.effective_timeout_ms),
            max_bytes=data_source.effective_byte_limit,
        )
    except connectors.ConnectorError as exc:
        connector_error_raise(exc)
    return QueryResult(
        columns=raw.columns,
        rows=raw.rows,
        total_rows=len(raw.rows),
        execution_time_ms=raw.execution_time_ms,
        truncated=raw.truncated,
        tables=verdict.tables,
        total_available=raw.total_available,
        note=raw.note,
    )


def _write_table(*, data_source: DataSource, table_name: Any) -> TableInfo:
    """The cached table a write-back ``table_name`` reaches, by the dialect's SQL rules.

    ``canary``, ``Canary``, ``public.canary`` and ``"public"."canary"`` reach ``canary``
    (see datasources.identifiers); a name that is not SQL syntax (``my table``) must
    then be the schema's exact spelling. Any other schema is refused."""
    cached = _cached_tables(data_source)
    exposed = [t.table_name for t in cached]
    unknown = InvalidInput(
        f"Table {str(table_name)[:200]!r} is not in the discovered schema.", details={"table_name": ["unknown table"]}
    )
    if not isinstance(table_name, str):
        raise unknown
    try:
        parsed = qualified_table_parse(text=table_name, dialect=data_source.type)
    except ValueError:
        resolved = table_name if table_name in exposed else None
    else:
        config = ConnectionConfig.model_validate(data_source.connection_config or {})
        schema = parsed.args.get("db")
        if parsed.catalog or (
            schema is not None
            and not schema_matches(
                name=schema.name,
                quoted=schema.quoted,
                schema_name=config.schema_name or DEFAULT_SCHEMAS[data_source.type],
                dialect=data_source.type,
            )
        ):
            raise InvalidInput(
                f"Table {table_name[:200]!r} is outside the data source's schema.",
                details={"table_name": ["outside the exposed schema"]},
            )
        resolved = table_resolve(
            name=parsed.name, quoted=parsed.this.quoted, exposed=exposed, dialect=data_source.type
        )
    if resolved is None:
        raise unknown
    return next(t for t in cached if t.table_name == resolved)


@dataclass(frozen=True)
class WritePlan:
    """A write-back call checked against the cached schema: the table, its canonical
    column names, and the rows and conditions the connector's statements are built from."""

    table: TableInfo
    operation: str
    rows: list[dict]
    conditions: dict | None


def write_plan(
    *, data_source: DataSource, table_name: str, operation: str, data: Any, conditions: dict | None = None
) -> WritePlan:
    """Check a write-back call (the rules of ``write_back_execute``) without touching the
    database it writes to. Shared by the write and its effect preview (datasources.effects)."""
    if data_source.access_level != DataSource.AccessLevel.READ_WRITE:
        raise PermissionDenied("This data source is read only; write-back is not allowed.")
    storable_check(data, "data")
    storable_check(conditions, "conditions")
    if operation not in WRITE_OPERATIONS:
        raise InvalidInput(
            f"operation must be one of {', '.join(WRITE_OPERATIONS)}.", details={"operation": ["invalid choice"]}
        )
    table = _write_table(data_source=data_source, table_name=table_name)
    columns = {c.column_name.lower(): c.column_name for c in table.columns}

    def canonical(row: dict, field: str) -> dict:
        if not isinstance(row, dict):
            raise InvalidInput(f"{field} must be an object of column values.", details={field: ["must be an object"]})
        unknown = [k for k in row if str(k).lower() not in columns]
        if unknown:
            raise InvalidInput(
                f"Unknown columns for {table.table_name}: {', '.join(map(str, unknown))}.",
                details={f"{field}.{k}": ["unknown column"] for k in unknown},
            )
        named = {columns[str(k).lower()]: v for k, v in row.items()}
        if len(named) != len(row):
            spelled = [columns[str(k).lower()] for k in row]
            twice = sorted({name for name in spelled if spelled.count(name) > 1})
            raise InvalidInput(
                f"Columns given more than once (names ignore case): {', '.join(twice)}.",
                details={f"{field}.{name}": ["given more than once"] for name in twice},
            )
        return named

    if operation == "insert":
        raw_rows = data if isinstance(data, list) else [data]
        if not raw_rows or len(raw_rows) > MAX_WRITE_ROWS:
            raise InvalidInput(
                f"insert needs 1 to {MAX_WRITE_ROWS} rows.", details={"data": [f"1..{MAX_WRITE_ROWS} rows"]}
            )
        rows = [canonical(row, "data") for row in raw_rows]
        if any(not row for row in rows):
            raise InvalidInput("Each inserted row needs at least one column.", details={"data": ["empty row"]})
        where = None
    else:
        if not conditions or not isinstance(conditions, dict):
            raise InvalidInput(
                f"{operation} requires conditions; unconditioned changes to a whole table are refused.",
                details={"conditions": ["required for update and delete"]},
            )
        where = canonical(conditions, "conditions")
        for column, value in where.items():
            if isinstance(value, list) and not value:
                raise InvalidInput(
                    "An IN condition needs at least one value.", details={f"conditions.{column}": ["empty"]}
                )
            if isinstance(value, dict):
                raise InvalidInput(
                    "Conditions compare columns to values.", details={f"conditions.{column}": ["bad type"]}
                )
        if operation == "update":
            values = canonical(data, "data")
            if not values:
                raise InvalidInput("update needs at least one column to set.", details={"data": ["empty"]})
            rows = [values]
        else:
            rows = []
    return WritePlan(table=table, operation=operation, rows=rows, conditions=where)


def write_back_execute(
    *, data_source: DataSource, table_name: str, operation: str, data: Any, conditions: dict | None = None
) -> WriteResult:
    """Insert, update or delete rows with a parameterized statement in its own transaction.

    The table and every column must exist in the cached schema; update and delete need
    at least one condition (``{column: value}``, a list value means IN, null means IS
    NULL), so a mass change of a whole table is impossible through this path."""
    plan = write_plan(data_source=data_source, table_name=table_name, operation=operation, data=data,
                      conditions=conditions)
    table, rows, where = plan.table, plan.rows, plan.conditions
    connector = source_connector(data_source)
    try:
        # One transaction per attempt; transient errors are retried (datasources.write_retry).
        affected = write_with_retry(
            lambda: connector.run_write(table=table.table_name, operation=operation, rows=rows, conditions=where)
        )
    except connectors.ConnectorError as exc:
        connector_error_raise(exc)
    logger.info(
        "data source %s: write_back %s on %s affected %d rows", data_source.pk, operation, table.table_name, affected
    )
    verb = {"insert": "Inserted", "update": "Updated", "delete": "Deleted"}[operation]
    return WriteResult(success=True, rows_affected=affected, message=f"{verb} {affected} row(s) in {table.table_name}.")
