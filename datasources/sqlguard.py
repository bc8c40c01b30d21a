"""The SQL guard: decides, before anything reaches a database, whether a query may run.

A query is allowed only when sqlglot parses it, for the source's dialect, into exactly
one read-only statement (``SELECT``, a set operation such as ``UNION``, optionally
with ``WITH``) that contains no data-modifying or session-changing construct, calls
no function from the deny list, reads only tables the data source exposes in its
cached schema, and uses named ``:name`` parameters. Anything sqlglot cannot parse is
refused: the guard never lets through what it does not understand.

The allowed statement is returned re-rendered from the checked syntax tree (comments
dropped, placeholders in the driver's style), and that text is what runs. What the
database executes is therefore exactly what the guard inspected; there is no room for
a tokenizer difference between sqlglot and the server to smuggle a second statement.

The connector's read-only transaction and statement timeout stay in place as the
second line of defence (see ``datasources.connectors``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import sqlglot
from pydantic import BaseModel, Field
from sqlglot import exp
from sqlglot.errors import SqlglotError

MAX_QUERY_CHARS = 100_000
_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

SQLGLOT_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite"}

# Node types that write, change the session or the transaction, or are not plain
# queries at all. Found anywhere in the tree (CTE bodies, subqueries) they refuse.
_FORBIDDEN_NODES: tuple[type[exp.Expression], ...] = tuple(
    cls
    for cls in (
        getattr(exp, name, None)
        for name in (
            "Insert",
            "Update",
            "Delete",
            "Merge",
            "Create",
            "Drop",
            "Alter",
            "AlterColumn",
            "Command",
            "Copy",
            "Set",
            "SetItem",
            "Transaction",
            "Commit",
            "Rollback",
            "Into",
            "Lock",
            "TruncateTable",
            "Grant",
            "Revoke",
            "Pragma",
            "Attach",
            "Detach",
            "Use",
            "LoadData",
            "Cache",
            "Uncache",
            "Analyze",
            "Refresh",
            "Kill",
            "Describe",
            "Summarize",
            "Comment",
            "Declare",
            "Execute",
            "Export",
        )
    )
    if isinstance(cls, type)
)

# Functions that read or write server files, sleep, signal other backends, reach
# other servers, change or reveal server settings, advance sequences, or load code.
DENIED_FUNCTIONS = frozenset(
    {
        "set_config",
        "current_setting",  # reveals server configuration (data_directory, ...), not source data
        "nextval",
        "setval",
        "lastval",
        "txid_current",
        "txid_current_if_assigned",
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "table_to_xml",
        "table_to_xmlschema",
        "table_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "schema_to_xml",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "inet_server_addr",
        "inet_server_port",
        "inet_client_addr",
        "inet_client_port",
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "zipfile",
        "sleep",
        "benchmark",
        "copy",
    }
)
# Every pg_* function is refused (pg_sleep, pg_read_file, pg_read_binary_file,
# pg_ls_dir, pg_stat_file, pg_terminate_backend, pg_cancel_backend, pg_reload_conf,
# pg_advisory_lock, ...): none is needed to answer a question about the data.
DENIED_FUNCTION_PREFIXES = ("pg_", "lo_", "dblink", "xact_", "binary_upgrade_")


class GuardVerdict(BaseModel):
    allowed: bool
    reason: str
    statement_type: str | None = None
    # Exposed tables the query reads (lower-case), for governance and the result.
    tables: list[str] = Field(default_factory=list)
    # The text to execute: re-rendered from the checked tree, driver placeholders.
    sql: str | None = None
    # Parameter names in the order the driver binds them (PostgreSQL: $1, $2, ...).
    parameter_names: list[str] = Field(default_factory=list)


def _refuse(reason: str, statement_type: str | None = None) -> GuardVerdict:
    return GuardVerdict(allowed=False, reason=reason, statement_type=statement_type)


def _statement_label(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return str(node.this or "command").upper()
    return node.key.upper()


def _function_names(node: exp.Func) -> set[str]:
    names = {node.key.lower()}
    if isinstance(node, exp.Anonymous):
        names.add(str(node.name).lower())
    else:
        names.add(node.sql_name().lower())
    return names


def _function_denied(names: set[str]) -> str | None:
    for name in sorted(names):
        if name in DENIED_FUNCTIONS or name.startswith(DENIED_FUNCTION_PREFIXES):
            return name
    return None


def _with_clause(node: exp.Expression) -> exp.With | None:
    clause = node.args.get("with_") or node.args.get("with")
    return clause if isinstance(clause, exp.With) else None


def _names_cte(table: exp.Table) -> bool:
    """Whether an unqualified table name refers to a CTE visible at that point.

    Scope matters: a CTE only covers the query that defines it, and a non-recursive
    CTE cannot see itself, so ``WITH t AS (SELECT * FROM t) ...`` reads the real ``t``.
    """
    name = table.name.lower()
    node: exp.Expression = table
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.With) and isinstance(node, exp.CTE):
            ctes = list(parent.expressions)
            visible = ctes if parent.args.get("recursive") else ctes[: ctes.index(node)]
            if any(cte.alias_or_name.lower() == name for cte in visible):
                return True
        else:
            clause = _with_clause(parent)
            if clause is not None and clause is not node:
                if any(cte.alias_or_name.lower() == name for cte in clause.expressions):
                    return True
        node = parent
    return False


def query_check(
    *,
    sql: str,
    dialect: str,
    allowed_tables: Iterable[str],
    schema_name: str | None = None,
) -> GuardVerdict:
    """Decide whether ``sql`` may run against a source exposing ``allowed_tables``.

    ``dialect`` is the data source type (``postgresql`` or ``sqlite``); ``schema_name``
    is the one schema a PostgreSQL source exposes (``public`` by default).
    """
    read = SQLGLOT_DIALECTS.get(dialect)
    if read is None:
        return _refuse(f"Queries are not supported for data source type {dialect!r}.")
    if not sql or not sql.strip():
        return _refuse("The query is empty.")
    if len(sql) > MAX_QUERY_CHARS:
        return _refuse(f"The query is longer than {MAX_QUERY_CHARS} characters.")

    try:
        parsed = sqlglot.parse(sql, read=read)
    except SqlglotError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        return _refuse(f"The query could not be parsed as {dialect} SQL: {first_line}")
    except (ValueError, RecursionError) as exc:
        return _refuse(f"The query could not be parsed as {dialect} SQL: {exc.__class__.__name__}")

    statements = [node for node in parsed if node is not None and not isinstance(node, exp.Semicolon)]
    if not statements:
        return _refuse("The query contains no statement.")
    if len(statements) > 1:
        kinds = ", ".join(_statement_label(node) for node in statements)
        return _refuse(f"Exactly one statement is allowed; found {len(statements)} ({kinds}).")

    root = statements[0]
    while isinstance(root, exp.Subquery | exp.Paren) and isinstance(root.this, exp.Expression):
        root = root.this
    label = _statement_label(root)
    if not isinstance(root, exp.Select | exp.SetOperation):
        return _refuse(f"Only read-only SELECT queries are allowed; this is a {label} statement.", label)

    for node in root.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            what = _statement_label(node)
            if isinstance(node, exp.Lock):
                what = "FOR UPDATE/FOR SHARE row locking"
            elif isinstance(node, exp.Into):
                what = "SELECT ... INTO"
            return _refuse(f"The query contains {what}, which is not allowed in a read-only query.", label)
        if isinstance(node, exp.Func):
            denied = _function_denied(_function_names(node))
            if denied:
                return _refuse(f"The function {denied}() is not allowed.", label)
        if isinstance(node, exp.Parameter):
            return _refuse("Positional parameters are not supported; use named parameters such as :name.", label)
        if isinstance(node, exp.Placeholder) and not _PARAMETER_NAME.fullmatch(node.name or ""):
            return _refuse("Unnamed placeholders are not supported; use named parameters such as :name.", label)

    exposed = {name.lower() for name in allowed_tables}
    expected_schema = (schema_name or ("public" if dialect == "postgresql" else "main")).lower()
    tables: list[str] = []
    for table in root.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function: already checked as a function call
        name = table.name.lower()
        if table.catalog:
            return _refuse(f"Cross-database reference {table.sql(dialect=read)!r} is not allowed.", label)
        if table.db and table.db.lower() != expected_schema:
            return _refuse(f"Table {table.db}.{table.name} is outside the exposed schema {expected_schema!r}.", label)
        if not table.db and _names_cte(table):
            continue
        if name not in exposed:
            return _refuse(f"Table {table.name!r} is not exposed by this data source.", label)
        if name not in tables:
            tables.append(name)

    parameter_names: list[str] = []
    if read == "postgres":
        # psycopg's raw cursor binds $1, $2, ...; a name used twice reuses its number.
        for placeholder in list(root.find_all(exp.Placeholder)):
            name = placeholder.name
            if name not in parameter_names:
                parameter_names.append(name)
            placeholder.replace(exp.Parameter(this=exp.Literal.number(parameter_names.index(name) + 1)))
    else:
        for placeholder in root.find_all(exp.Placeholder):
            if placeholder.name not in parameter_names:
                parameter_names.append(placeholder.name)

    try:
        rendered = root.sql(dialect=read, comments=False)
    except SqlglotError as exc:
        return _refuse(f"The query could not be rendered for {dialect}: {exc}", label)
    return GuardVerdict(
        allowed=True,
        reason="One read-only statement over exposed tables.",
        statement_type=label,
        tables=tables,
        sql=rendered,
        parameter_names=parameter_names,
    )
