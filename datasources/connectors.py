"""Database connectors: the only code that opens connections to customer databases.

Two engines are supported, PostgreSQL (psycopg 3) and SQLite (the stdlib module).
Each connector offers the same four operations: ``test_connection``, ``discover``,
``run_read_query`` and ``run_write``. They take plain values (no Django models) so
they can be exercised directly in tests and never touch River's own database.

Safety rules that hold here even when the SQL guard is bypassed:

- reads run in a read-only transaction (PostgreSQL: ``default_transaction_read_only``
  for the session, ``SET TRANSACTION READ ONLY`` and ``SET LOCAL statement_timeout``;
  SQLite: a ``mode=ro`` connection, ``PRAGMA query_only`` and an authorizer that
  denies everything but reading) with a deadline;
- PostgreSQL reads are sent as prepared statements, which the server refuses to
  hold more than one command, so ``SELECT 1; COMMIT; DROP ...`` cannot escape the
  transaction; SQLite's driver refuses more than one statement per call;
- parameters are always bound by the driver, never formatted into the text;
- error messages are scrubbed of the password before they leave this module.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import math
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from common.dberrors import failure_annotate, sqlstate_is_transient
from datasources.network import HostNotAllowed, host_check
from rivercore.fence import FenceClosed, WriteFence, current_fence
from rivercore.text import text_storable
from rivercore.types.datasources import ColumnInfo, ConnectionConfig, ConnectionTestResult, TableInfo

CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_PG_PORT = 5432
DEFAULT_TIMEOUT_MS = 30_000


class ConnectorError(Exception):
    """A failure whose message is safe to show to users, models and logs."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ConnectionFailed(ConnectorError):
    """The database could not be reached or refused the login (worth retrying later).

    ``kind`` is the class of failure shown to users: ``refused``, ``timeout``,
    ``unreachable``, ``auth``, ``protocol``, ``not_found`` or ``not_allowed``. The
    message never carries what the remote server said: a data source must not be
    usable to read banners off other services on the network."""

    def __init__(self, message: str, *, kind: str = "failed"):
        super().__init__(message)
        self.kind = kind


class HostRefused(ConnectionFailed):
    """The host is not one River may connect to; nothing was sent to it."""

    def __init__(self, message: str):
        super().__init__(message, kind="not_allowed")


class QueryTimeout(ConnectorError):
    """The statement ran past its deadline and was cancelled."""


class QueryRejected(ConnectorError):
    """The database refused the statement as not allowed (read-only, authorizer, multi-statement)."""


class QueryFailed(ConnectorError):
    """The statement is wrong (syntax, unknown column, type mismatch, constraint)."""


@dataclass(frozen=True)
class ConnectionSpec:
    """Everything needed to connect; ``credentials`` holds decrypted secrets and must
    never be logged or rendered (the dataclass repr hides it)."""

    type: str
    config: ConnectionConfig
    credentials: dict = field(default_factory=dict, repr=False)
    # The statement timeout for every query and write (the source's, else its workspace's).
    timeout_ms: int = DEFAULT_TIMEOUT_MS


@dataclass
class RawResult:
    columns: list[str]
    rows: list[list]
    truncated: bool
    execution_time_ms: int
    total_available: int | None = None  # rows the statement produced, when known without more work
    note: str | None = None  # why rows or values were cut, for the model and the user


FETCH_CHUNK = 200
# Discovery samples the distinct values of short text columns so that a planner can
# tell which column a word of a question is a value of ("Brazil" is a Country).
SAMPLE_DISTINCT_MAX = 300
SAMPLE_VALUE_MAX_CHARS = 64
SAMPLE_TABLES_MAX = 200
# Sampling reads at most this many rows per column and stops after this long in all, so a
# large source's discovery stays well inside the tool timeout; a partial sample only
# makes the planner refuse a value it did not see.
SAMPLE_ROWS_SCANNED = 10_000
SAMPLE_BUDGET_SECONDS = 5.0
_TEXT_TYPES = ("char", "text", "clob", "string", "citext")


def _is_sampled_type(data_type: str) -> bool:
    return any(word in (data_type or "").lower() for word in _TEXT_TYPES)


def sample_values_keep(values: list[Any]) -> list[str]:
    """The sampled values to store, or none when the column has too many or too long ones."""
    if len(values) > SAMPLE_DISTINCT_MAX:
        return []
    kept = [v for v in values if isinstance(v, str) and 0 < len(v) <= SAMPLE_VALUE_MAX_CHARS and "\x00" not in v]
    # A few long names (a compilation's artist list) do not make a column free text.
    return sorted(kept) if len(kept) * 10 >= len(values) * 9 else []
DEFAULT_MAX_BYTES = 65_536


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def _cut_row(row: list, budget: int) -> list:
    """The row with long text cells shortened so that it fits ``budget`` bytes."""
    cut = list(row)
    for index in sorted(range(len(cut)), key=lambda i: -_json_size(cut[i])):
        over = _json_size(cut) - budget
        if over <= 0:
            break
        value = cut[index]
        if isinstance(value, str):
            keep = max(0, len(value) - over - 16)
            cut[index] = value[:keep] + "…[cut]"
        else:
            cut[index] = "[value too large]"
    return cut


def fetch_capped(cur, *, max_rows: int, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[list], bool, str | None]:
    """At most ``max_rows`` rows and about ``max_bytes`` bytes of JSON, fetched in
    chunks so a huge result is never held whole as JSON values. Returns (rows,
    truncated, note)."""
    rows: list[list] = []
    size = 2
    while len(rows) <= max_rows:
        chunk = cur.fetchmany(min(FETCH_CHUNK, max_rows + 1 - len(rows)))
        if not chunk:
            return rows, False, None
        for raw in chunk:
            if len(rows) == max_rows:
                return rows, True, f"Only the first {max_rows} rows are returned (row limit)."
            row = [jsonable(v) for v in raw]
            row_size = _json_size(row) + 1
            if size + row_size > max_bytes:
                if not rows:
                    rows.append(_cut_row(row, max_bytes - size))
                return rows, True, (
                    f"Only the first {len(rows)} rows are returned: the result is cut at {max_bytes} bytes "
                    "(observation byte limit); long values may be shortened."
                )
            rows.append(row)
            size += row_size
    return rows, True, f"Only the first {max_rows} rows are returned (row limit)."


class Connector(Protocol):
    dialect: str  # the SQL dialect (sqlglot's name) the engine speaks

    def test_connection(self) -> ConnectionTestResult: ...

    def discover(self) -> list[TableInfo]: ...

    def run_read_query(
        self,
        *,
        sql: str,
        parameters: Any = None,
        max_rows: int = 1000,
        timeout_ms: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> RawResult: ...

    def run_write(self, *, table: str, operation: str, rows: list[dict], conditions: dict | None = None) -> int: ...


def connector_for(spec: ConnectionSpec) -> Connector:
    """The connector for ``spec.type``; its ``dialect`` is what queries are parsed,
    guarded and run as, whatever a source is labelled."""
    connector_class = CONNECTORS.get(spec.type)
    if connector_class is None:
        raise ConnectorError(
            f"Unsupported data source type {spec.type!r}; supported types: {', '.join(sorted(CONNECTORS))}."
        )
    return connector_class(spec)


def jsonable(value: Any) -> Any:
    """A result cell as a JSON value (results are stored in the run's trace)."""
    if isinstance(value, str):
        return text_storable(value)  # a NUL or lone surrogate in a cell must not break the run's journal
    if value is None or isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return str(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {text_storable(str(k)): jsonable(v) for k, v in value.items()}
    return text_storable(str(value))


def _elapsed_ms(started: float) -> int:
    return max(0, int(round((time.monotonic() - started) * 1000)))


def conditions_sql(conditions: dict, quote, placeholder) -> tuple[list[str], list]:
    """``column = value``, ``column IS NULL`` or ``column IN (...)`` joined by AND."""
    parts: list[str] = []
    params: list = []
    for column, value in conditions.items():
        if value is None:
            parts.append(f"{quote(column)} IS NULL")
        elif isinstance(value, list | tuple):
            marks = []
            for item in value:
                params.append(item)
                marks.append(placeholder(len(params)))
            parts.append(f"{quote(column)} IN ({', '.join(marks)})")
        else:
            params.append(value)
            parts.append(f"{quote(column)} = {placeholder(len(params))}")
    return parts, params


def build_write_statements(
    *, table: str, operation: str, rows: list[dict], conditions: dict | None, quote, placeholder
) -> list[tuple[str, list]]:
    """Parameterized INSERT / UPDATE / DELETE text. Identifiers are quoted by the
    caller's dialect function and have already been checked against the schema."""
    statements: list[tuple[str, list]] = []
    if operation == "insert":
        for row in rows:
            columns = list(row)
            marks = ", ".join(placeholder(i + 1) for i in range(len(columns)))
            text = f"INSERT INTO {quote(table)} ({', '.join(quote(c) for c in columns)}) VALUES ({marks})"
            statements.append((text, [row[c] for c in columns]))
        return statements
    if not conditions:
        raise ConnectorError(f"{operation} needs at least one condition.")
    if operation == "update":
        values = rows[0]
        params = list(values.values())
        sets = ", ".join(f"{quote(c)} = {placeholder(i + 1)}" for i, c in enumerate(values))
        offset = len(params)
        where, where_params = conditions_sql(conditions, quote, lambda n: placeholder(n + offset))
        statements.append((f"UPDATE {quote(table)} SET {sets} WHERE {' AND '.join(where)}", params + where_params))
        return statements
    if operation == "delete":
        where, where_params = conditions_sql(conditions, quote, placeholder)
        statements.append((f"DELETE FROM {quote(table)} WHERE {' AND '.join(where)}", where_params))
        return statements
    raise ConnectorError(f"Unknown write operation {operation!r}.")


# --- PostgreSQL ----------------------------------------------------------------------------

_PG_TABLES = """
SELECT c.oid, c.relname, c.relkind, c.reltuples::bigint, coalesce(obj_description(c.oid, 'pg_class'), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY c.relname
"""

_PG_COLUMNS = """
SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce(col_description(a.attrelid, a.attnum), '')
FROM pg_attribute a
WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""

_PG_KEYS = """
SELECT con.conrelid, con.contype, src.attname, ref_class.relname, ref.attname
FROM pg_constraint con
CROSS JOIN LATERAL unnest(con.conkey, coalesce(con.confkey, con.conkey)) AS k(src_att, ref_att)
JOIN pg_attribute src ON src.attrelid = con.conrelid AND src.attnum = k.src_att
LEFT JOIN pg_class ref_class ON ref_class.oid = con.confrelid
LEFT JOIN pg_attribute ref ON ref.attrelid = con.confrelid AND ref.attnum = k.ref_att
WHERE con.conrelid = ANY($1) AND con.contype IN ('p', 'f')
"""


_PG_FAILURES = (
    # (kind, phrases of libpq's message, what users see); first match wins.
    ("timeout", ("timeout expired", "timed out"), "Timed out: the server did not answer within {t} s."),
    ("refused", ("connection refused",), "Connection refused: nothing accepted the connection at that address."),
    ("unreachable", ("no route to host", "network is unreachable", "host is unreachable"),
     "Unreachable: there is no route to that address."),
    ("protocol", ("invalid response", "closed the connection unexpectedly", "expected authentication request",
                  "unexpected message", "invalid message", "insufficient data"),
     "Connection failed: the server did not answer as PostgreSQL."),
    ("not_found", ("database",), "Not found: the server has no such database (or the login may not see it)."),
    ("auth", ("authentication", "password", "pg_hba.conf", "role", "does not exist", "permission denied",
              "not permitted", "certificate", "ssl"),
     "Authentication failed: the server refused the login (check user, password, database and sslmode)."),
)


def pg_connect_failure(exc: BaseException) -> ConnectionFailed:
    """The class of a connection failure, without any of the remote server's words."""
    text = str(exc).lower()
    for kind, phrases, message in _PG_FAILURES:
        if any(phrase in text for phrase in phrases):
            return ConnectionFailed(message.format(t=CONNECT_TIMEOUT_SECONDS), kind=kind)
    return ConnectionFailed(
        "Connection failed: the server did not complete a PostgreSQL login.", kind="protocol"
    )


# Which PostgreSQL database a connection reached: the cluster's system identifier (readable
# through pg_control_system(), executable by PUBLIC unless an operator revoked it), the
# postmaster's start time (PUBLIC; the cluster's identity when the identifier is not
# readable), and the database's oid. Asked of the server itself, so a forwarder, another
# address or another name for River's own database answers with River's identity.
_DATABASE_IDENTITY_SQL = (
    "SELECT CASE WHEN has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') "
    "THEN (SELECT system_identifier FROM pg_catalog.pg_control_system())::text END, "
    "pg_catalog.pg_postmaster_start_time()::text, d.oid::bigint "
    "FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()"
)


@dataclass(frozen=True)
class DatabaseIdentity:
    system_identifier: str | None
    started_at: str
    database_oid: int

    def same_database(self, other: DatabaseIdentity) -> bool:
        if self.database_oid != other.database_oid:
            return False
        if self.system_identifier and other.system_identifier:
            return self.system_identifier == other.system_identifier
        return self.started_at == other.started_at


_own_identities: dict[tuple, DatabaseIdentity | None] = {}


def own_database_identity() -> DatabaseIdentity | None:
    """River's own database's identity over River's own connection, kept once its system
    identifier is known (None when River does not run on PostgreSQL)."""
    from django.db import connections

    connection = connections["default"]
    if connection.vendor != "postgresql":
        return None
    key = tuple(connection.settings_dict.get(name) for name in ("NAME", "HOST", "PORT"))
    if key in _own_identities:
        return _own_identities[key]
    with connection.cursor() as cursor:
        cursor.execute(_DATABASE_IDENTITY_SQL)
        row = cursor.fetchone()
    identity = DatabaseIdentity(row[0], row[1], int(row[2])) if row else None
    if identity is not None and identity.system_identifier:
        _own_identities[key] = identity  # a start time changes with a restart: read it again
    return identity


def _refuse_river_database(conn: psycopg.Connection, *, host: str) -> None:
    """Raise HostRefused when ``conn`` reached River's own database, however it got there.

    Other databases of River's cluster are not refused (a login cannot read across
    databases); a server that cannot answer the question is not River's."""
    own = own_database_identity()
    if own is None:
        return
    try:
        row = conn.execute(_DATABASE_IDENTITY_SQL).fetchone()
    except psycopg.Error:
        row = None
    conn.rollback()
    if row is not None and own.same_database(DatabaseIdentity(row[0], row[1], int(row[2]))):
        conn.close()
        raise HostRefused(f"Not allowed: River does not connect to {host!r} (River's own database).")


class PostgresConnector:
    dialect = "postgresql"

    def __init__(self, spec: ConnectionSpec):
        self.config = spec.config
        self.timeout_ms = spec.timeout_ms
        self.credentials = spec.credentials or {}
        self.schema = spec.config.schema_name or "public"

    # -- plumbing
    def _scrub(self, message: str) -> str:
        password = str(self.credentials.get("password") or "")
        if password:
            message = message.replace(password, "***")
        return message.strip().splitlines()[0] if message.strip() else "database error"

    def _connect(self, *, read_only: bool, timeout_ms: int) -> psycopg.Connection:
        options = f"-c statement_timeout={int(timeout_ms)}"
        if read_only:
            options += " -c default_transaction_read_only=on"
        port = self.config.port or DEFAULT_PG_PORT
        try:
            # Checked again at every connect, and the connection goes to the checked
            # address (hostaddr): a name cannot resolve elsewhere in between.
            checked = host_check(host=self.config.host or "", port=port)
        except HostNotAllowed as exc:
            raise HostRefused(exc.message) from None
        kwargs: dict[str, Any] = {
            "host": checked.host,
            "hostaddr": checked.address,
            "port": port,
            "dbname": self.config.database,
            "user": self.credentials.get("user") or self.credentials.get("username"),
            "password": self.credentials.get("password"),
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "application_name": "river",
            "options": options,
            "cursor_factory": psycopg.RawCursor,
        }
        if self.config.sslmode:
            kwargs["sslmode"] = self.config.sslmode
        try:
            conn = psycopg.connect(**{k: v for k, v in kwargs.items() if v is not None})
        except psycopg.Error as exc:
            raise pg_connect_failure(exc) from None
        try:
            _refuse_river_database(conn, host=self.config.host or "")
        except BaseException:
            conn.close()
            raise
        return conn

    def _begin_read_only(self, cur, timeout_ms: int) -> None:
        cur.execute("SET TRANSACTION READ ONLY")
        cur.execute("SELECT set_config('statement_timeout', $1, true)", [str(int(timeout_ms))])
        cur.execute("SELECT set_config('search_path', $1, true)", [self.schema])

    def _translate(self, exc: psycopg.Error) -> ConnectorError:
        message = self._scrub(str(exc))
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return QueryTimeout(f"The query was cancelled by the statement timeout: {message}")
        if isinstance(
            exc,
            psycopg.errors.ReadOnlySqlTransaction
            | psycopg.errors.InsufficientPrivilege
            | psycopg.errors.ActiveSqlTransaction,
        ):
            return QueryRejected(f"The database refused the statement: {message}")
        if isinstance(exc, psycopg.OperationalError) and (not exc.sqlstate or sqlstate_is_transient(exc.sqlstate)):
            return ConnectionFailed("Lost the connection to the database.", kind="lost")
        if isinstance(exc, psycopg.errors.SyntaxError) and "multiple commands" in message:
            return QueryRejected(f"The database refused the statement: {message}")
        return QueryFailed(f"The database reported an error: {message}")

    # -- operations
    def test_connection(self) -> ConnectionTestResult:
        started = time.monotonic()
        try:
            with self._connect(read_only=True, timeout_ms=self.timeout_ms) as conn:
                conn.execute("SELECT 1").fetchone()
                version = conn.info.server_version
                superuser = conn.info.parameter_status("is_superuser") == "on"
        except ConnectionFailed as exc:
            return ConnectionTestResult(success=False, latency_ms=_elapsed_ms(started), message=exc.message)
        except psycopg.Error as exc:
            return ConnectionTestResult(
                success=False, latency_ms=_elapsed_ms(started), message=self._translate(exc).message
            )
        major, minor = divmod(version, 10000)
        message = f"Connected to PostgreSQL {major}.{minor}."
        if superuser:
            # A read-only transaction does not stop superuser-only functions; the SQL
            # guard does, but a least-privileged role is the second line of defence.
            message += " Warning: this login is a superuser; use a role limited to the tables agents need."
        return ConnectionTestResult(success=True, latency_ms=_elapsed_ms(started), message=message)

    def discover(self) -> list[TableInfo]:
        # Catalog queries may need longer than an agent's query, but must still end
        # well inside the 30 s tool timeout (connecting may take up to 10 s).
        timeout_ms = min(max(self.timeout_ms, 15_000), 20_000)
        try:
            with self._connect(read_only=True, timeout_ms=timeout_ms) as conn:
                cur = conn.cursor()
                self._begin_read_only(cur, timeout_ms)
                tables = cur.execute(_PG_TABLES, [self.schema]).fetchall()
                oids = [row[0] for row in tables]
                columns = cur.execute(_PG_COLUMNS, [oids]).fetchall() if oids else []
                keys = cur.execute(_PG_KEYS, [oids]).fetchall() if oids else []
                samples = self._sample_values(cur, tables, columns)
                conn.rollback()
        except psycopg.Error as exc:
            raise self._translate(exc) from None

        primary: set[tuple[int, str]] = set()
        foreign: dict[tuple[int, str], str] = {}
        for relid, kind, column, ref_table, ref_column in keys:
            if kind == "p":
                primary.add((relid, column))
            elif ref_table and ref_column:
                foreign[(relid, column)] = f"{ref_table}.{ref_column}"
        by_table: dict[int, list[ColumnInfo]] = {}
        for relid, name, data_type, not_null, description in columns:
            by_table.setdefault(relid, []).append(
                ColumnInfo(
                    column_name=name,
                    data_type=data_type,
                    is_nullable=not not_null,
                    is_primary_key=(relid, name) in primary,
                    foreign_key=foreign.get((relid, name)),
                    description=description,
                    sample_values=samples.get((relid, name), []),
                )
            )
        result = []
        for oid, name, relkind, reltuples, description in tables:
            # reltuples is -1 (PG 14+) for a table never vacuumed or analyzed: unknown.
            known = relkind in ("r", "p", "m") and reltuples is not None and reltuples >= 0
            result.append(
                TableInfo(
                    table_name=name,
                    columns=by_table.get(oid, []),
                    row_estimate=int(reltuples) if known else None,
                    description=description,
                )
            )
        return result

    def _sample_values(self, cur, tables: list, columns: list) -> dict[tuple[int, str], list[str]]:
        """Distinct values of the short text columns of ordinary tables; a column the
        login may not read is skipped (a savepoint keeps the transaction usable)."""
        names = {oid: name for oid, name, relkind, _rows, _desc in tables[:SAMPLE_TABLES_MAX] if relkind in ("r", "p")}
        samples: dict[tuple[int, str], list[str]] = {}
        deadline = time.monotonic() + SAMPLE_BUDGET_SECONDS
        for relid, name, data_type, _not_null, _description in columns:
            if relid not in names or not _is_sampled_type(data_type) or time.monotonic() >= deadline:
                continue
            statement = pgsql.SQL(
                "SELECT DISTINCT {col} FROM (SELECT {col} FROM {table} WHERE {col} IS NOT NULL LIMIT {rows}) AS s "
                "LIMIT {n}"
            ).format(
                col=pgsql.Identifier(name), table=pgsql.Identifier(self.schema, names[relid]),
                rows=pgsql.Literal(SAMPLE_ROWS_SCANNED), n=pgsql.Literal(SAMPLE_DISTINCT_MAX + 1),
            )
            try:
                cur.execute("SAVEPOINT river_sample")
                values = [row[0] for row in cur.execute(statement).fetchall()]
                cur.execute("RELEASE SAVEPOINT river_sample")
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.QueryCanceled):
                cur.execute("ROLLBACK TO SAVEPOINT river_sample")
                continue
            samples[(relid, name)] = sample_values_keep(values)
        return samples

    def run_read_query(
        self,
        *,
        sql: str,
        parameters: Any = None,
        max_rows: int = 1000,
        timeout_ms: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> RawResult:
        """Run one statement with ``$n`` placeholders and positional ``parameters``."""
        timeout_ms = int(timeout_ms or self.timeout_ms)
        params = list(parameters or [])
        with self._connect(read_only=True, timeout_ms=timeout_ms) as conn:
            try:
                cur = conn.cursor()
                self._begin_read_only(cur, timeout_ms)
                started = time.monotonic()
                cur.execute(sql, params, prepare=True)
                columns = [col.name for col in (cur.description or [])]
                rows, truncated, note = (
                    fetch_capped(cur, max_rows=max_rows, max_bytes=max_bytes) if cur.description else ([], False, None)
                )
                # A client-side cursor holds the whole result: its size costs nothing.
                total = cur.rowcount if cur.description and cur.rowcount >= 0 else None
                elapsed = _elapsed_ms(started)
            except psycopg.Error as exc:
                raise self._translate(exc) from None
            finally:
                if not conn.closed:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
        return RawResult(
            columns=columns, rows=rows, truncated=truncated, execution_time_ms=elapsed, total_available=total, note=note
        )

    def run_write(self, *, table: str, operation: str, rows: list[dict], conditions: dict | None = None) -> int:
        fence = current_fence()
        timeout_ms = write_timeout_ms(self.timeout_ms, fence)
        with self._connect(read_only=False, timeout_ms=timeout_ms) as conn:

            def quote(name: str) -> str:
                return pgsql.Identifier(name).as_string(conn)

            statements = build_write_statements(
                table=table,
                operation=operation,
                rows=rows,
                conditions=conditions,
                quote=quote,
                placeholder=lambda n: f"${n}",
            )
            affected = 0
            committing = False  # True once every statement ran: leaving the block sends COMMIT
            try:
                try:
                    cur = conn.cursor()
                    cur.execute("SELECT set_config('statement_timeout', $1, true)", [str(int(timeout_ms))])
                    cur.execute("SELECT set_config('search_path', $1, true)", [self.schema])
                    current_ms = int(timeout_ms)
                    for text, params in statements:
                        # Each statement ends by the tool's deadline (within a second: the
                        # timeout is set again only once it is a second too long; COMMIT
                        # after the deadline is refused by the fence anyway).
                        if fence is not None and fence.remaining_ms() + 1000 < current_ms:
                            current_ms = fence.remaining_ms()
                            cur.execute("SELECT set_config('statement_timeout', $1, true)", [str(current_ms)])
                        cur.execute(text, [pg_param(p) for p in params])
                        affected += max(cur.rowcount, 0)
                    committing = True
                    with fence.commit() if fence is not None else contextlib.nullcontext():
                        conn.commit()
                except BaseException:
                    if not conn.closed:
                        with contextlib.suppress(psycopg.Error):
                            conn.rollback()
                    raise
            except psycopg.Error as exc:
                raise failure_annotate(self._translate(exc), exc, committing=committing) from None
            except FenceClosed as exc:
                raise QueryTimeout(str(exc)) from None
        return affected


def write_timeout_ms(timeout_ms: int, fence: WriteFence | None) -> int:
    """The source's statement timeout, cut to the tool call's deadline when there is one."""
    if fence is None:
        return int(timeout_ms)
    try:
        return min(int(timeout_ms), fence.remaining_ms())
    except FenceClosed as exc:
        raise QueryTimeout(str(exc)) from None


def pg_param(value: Any) -> Any:
    # JSON objects/arrays written to a column go in as JSON text; PostgreSQL casts
    # text to json/jsonb on assignment.
    if isinstance(value, dict):
        return Jsonb(value)
    return value


# --- SQLite --------------------------------------------------------------------------------

_SQLITE_READ_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}
_SQLITE_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zipfile"}
_SQLITE_REFUSALS = ("readonly", "read-only", "not authorized", "authorization denied", "query_only", "prohibited")
PROGRESS_EVERY = 1000  # VM instructions between deadline checks


def _sqlite_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _read_only_authorizer(action, arg1, arg2, db_name, trigger):
    if action not in _SQLITE_READ_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQLITE_DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class SQLiteConnector:
    dialect = "sqlite"

    def __init__(self, spec: ConnectionSpec):
        if not spec.config.path:
            raise ConnectorError("A SQLite data source needs connection_config.path.")
        self.path = Path(spec.config.path)
        self.config = spec.config
        self.timeout_ms = spec.timeout_ms

    def _connect(self, *, read_only: bool) -> sqlite3.Connection:
        if not self.path.is_file():
            raise ConnectionFailed(f"SQLite database file not found: {self.path.name}")
        mode = "ro" if read_only else "rw"
        try:
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode={mode}", uri=True, timeout=5, isolation_level=None
            )
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            # Text that is not valid UTF-8 is read with U+FFFD in place of the bad
            # bytes rather than failing the whole query.
            conn.text_factory = _sqlite_text
            if read_only:
                conn.execute("PRAGMA query_only = ON")
            else:
                conn.execute("PRAGMA foreign_keys = ON")
            return conn
        except sqlite3.Error as exc:
            raise ConnectionFailed(f"Could not open the SQLite database {self.path.name}: {exc}") from None

    @staticmethod
    def _translate(exc: sqlite3.Error) -> ConnectorError:
        message = str(exc)
        lowered = message.lower()
        if "interrupted" in lowered:
            return QueryTimeout("The query was cancelled by the statement timeout.")
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in lowered:
            return QueryRejected(f"The database refused the statement: {message}")
        if any(word in lowered for word in _SQLITE_REFUSALS):
            return QueryRejected(f"The database refused the statement: {message}")
        if isinstance(exc, sqlite3.OperationalError) and ("unable to open" in lowered or "locked" in lowered):
            return ConnectionFailed(f"SQLite error: {message}")
        return QueryFailed(f"The database reported an error: {message}")

    def test_connection(self) -> ConnectionTestResult:
        started = time.monotonic()
        try:
            conn = self._connect(read_only=True)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                conn.close()
        except ConnectionFailed as exc:
            return ConnectionTestResult(success=False, latency_ms=_elapsed_ms(started), message=exc.message)
        except sqlite3.Error as exc:
            return ConnectionTestResult(
                success=False, latency_ms=_elapsed_ms(started), message=self._translate(exc).message
            )
        return ConnectionTestResult(
            success=True, latency_ms=_elapsed_ms(started), message=f"Opened SQLite {sqlite3.sqlite_version} database."
        )

    def discover(self) -> list[TableInfo]:
        conn = self._connect(read_only=True)
        try:
            names = conn.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
            tables = []
            sample_deadline = time.monotonic() + SAMPLE_BUDGET_SECONDS
            for name, kind in names:
                quoted = sqlite_quote(name)
                foreign = {
                    row[3]: f"{row[2]}.{row[4]}" if row[4] else f"{row[2]}"
                    for row in conn.execute(f"PRAGMA foreign_key_list({quoted})").fetchall()
                }
                columns = [
                    ColumnInfo(
                        column_name=col_name,
                        data_type=(col_type or "").lower() or "any",
                        is_nullable=not notnull and not pk,
                        is_primary_key=bool(pk),
                        foreign_key=foreign.get(col_name),
                    )
                    for _cid, col_name, col_type, notnull, _default, pk in conn.execute(
                        f"PRAGMA table_info({quoted})"
                    ).fetchall()
                ]
                estimate = conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0] if kind == "table" else None
                if kind == "table" and len(tables) < SAMPLE_TABLES_MAX:
                    for column in columns:
                        if _is_sampled_type(column.data_type) and time.monotonic() < sample_deadline:
                            col = sqlite_quote(column.column_name)
                            values = conn.execute(
                                f"SELECT DISTINCT {col} FROM (SELECT {col} FROM {quoted} WHERE {col} IS NOT NULL "
                                f"LIMIT {SAMPLE_ROWS_SCANNED}) LIMIT {SAMPLE_DISTINCT_MAX + 1}"
                            ).fetchall()
                            column.sample_values = sample_values_keep([row[0] for row in values])
                tables.append(TableInfo(table_name=name, columns=columns, row_estimate=estimate))
            return tables
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        finally:
            conn.close()

    def run_read_query(
        self,
        *,
        sql: str,
        parameters: Any = None,
        max_rows: int = 1000,
        timeout_ms: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> RawResult:
        """Run one statement with ``:name`` placeholders and a ``parameters`` dict."""
        timeout_ms = int(timeout_ms or self.timeout_ms)
        conn = self._connect(read_only=True)
        deadline = time.monotonic() + timeout_ms / 1000
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, PROGRESS_EVERY)
        conn.set_authorizer(_read_only_authorizer)
        try:
            started = time.monotonic()
            cur = conn.execute(sql, parameters if parameters is not None else {})
            columns = [col[0] for col in (cur.description or [])]
            rows, truncated, note = (
                fetch_capped(cur, max_rows=max_rows, max_bytes=max_bytes) if cur.description else ([], False, None)
            )
            elapsed = _elapsed_ms(started)
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        finally:
            conn.close()
        total = None if truncated else len(rows)
        return RawResult(
            columns=columns, rows=rows, truncated=truncated, execution_time_ms=elapsed, total_available=total, note=note
        )

    def run_write(self, *, table: str, operation: str, rows: list[dict], conditions: dict | None = None) -> int:
        statements = build_write_statements(
            table=table,
            operation=operation,
            rows=rows,
            conditions=conditions,
            quote=sqlite_quote,
            placeholder=lambda n: f"?{n}",
        )
        fence = current_fence()
        timeout_ms = write_timeout_ms(self.timeout_ms, fence)
        conn = self._connect(read_only=False)
        deadline = time.monotonic() + timeout_ms / 1000
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, PROGRESS_EVERY)
        # Waiting for another writer's lock ends by the deadline too.
        conn.execute(f"PRAGMA busy_timeout = {min(5000, timeout_ms)}")
        affected = 0
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for text, params in statements:
                    cur = conn.execute(text, [sqlite_param(p) for p in params])
                    affected += max(cur.rowcount, 0)
                with fence.commit() if fence is not None else contextlib.nullcontext():
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        except FenceClosed as exc:
            raise QueryTimeout(str(exc)) from None
        finally:
            conn.close()
        return affected


def sqlite_param(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


CONNECTORS: dict[str, type] = {"postgresql": PostgresConnector, "sqlite": SQLiteConnector}
SUPPORTED_TYPES = tuple(sorted(CONNECTORS))
