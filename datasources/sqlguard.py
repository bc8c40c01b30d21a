"""The SQL guard: decides, before anything reaches a database, whether a query may run.

A query is allowed only when sqlglot parses it, for the source's dialect, into exactly
one read-only statement (``SELECT``, a set operation such as ``UNION``, optionally
with ``WITH``) that contains no data-modifying or session-changing construct, calls
only functions on the dialect's allow-list, reads only tables the data source exposes
in its cached schema, and uses named ``:name`` parameters. Anything sqlglot cannot
parse is refused: the guard never lets through what it does not understand.

Functions are an allow-list, not a deny-list: aggregates, window functions and the
ordinary scalar math, string, date/time, conditional, JSON-access and cast functions.
Every other call is refused at parse time with its name, which closes as a class the
functions that run SQL given as text, read files, settings or server state, sleep,
lock, reach other servers or render whole schemas as documents, including ones this
module has never heard of. Table-valued and set-returning functions in ``FROM``,
schema-qualified calls, ``OPERATOR(...)``, casts to anything but plain data types,
and ``TABLESAMPLE`` are refused too.

The allowed statement is returned re-rendered from the checked syntax tree (comments
dropped, placeholders in the driver's style), and that text is what runs. What the
database executes is therefore exactly what the guard inspected; there is no room for
a tokenizer difference between sqlglot and the server to smuggle a second statement.

The connector's read-only transaction and statement timeout stay in place as the
second line of defence (see ``datasources.connectors``).

Verdicts are kept in a bounded in-process LRU keyed by everything they depend on: the
statement's exact text, the dialect, the allowed tables and the schema. The same
statement against the same schema always gets the same verdict (the guard reads
nothing else), so a repeated query (a retried turn, the same question asked again)
is not parsed again. Each caller gets its own copy of the cached verdict. Statements
longer than ``VERDICT_CACHE_MAX_CHARS`` are not kept, so the cache stays small.
sqlglot's mypyc-compiled build (``sqlglotc``, pinned beside it) parses about twice as
fast as the pure-Python one for a statement seen for the first time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache

import sqlglot
from pydantic import BaseModel, Field
from sqlglot import exp
from sqlglot.errors import SqlglotError

from datasources.identifiers import DEFAULT_SCHEMAS, SQLGLOT_DIALECTS, schema_matches, table_resolve

MAX_QUERY_CHARS = 100_000
VERDICT_CACHE_SIZE = 1024  # verdicts kept per process
VERDICT_CACHE_MAX_CHARS = 8_000  # longer statements are checked every time, never kept
_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LEADING_NAME = re.compile(r"\s*\"?([A-Za-z_][A-Za-z0-9_$]*)")

__all__ = ["GuardVerdict", "query_check", "ALLOWED_FUNCTIONS", "SQLGLOT_DIALECTS"]

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

# The functions a query may call, by the name written in the dialect. Nothing else:
# not pg_*/lo_*/dblink*, current_setting/set_config, version(), nextval, the *_to_xml
# family, generate_series/unnest/json_each, load_extension, readfile/writefile,
# randomblob/zeroblob, printf/format (a width argument makes any size of string), ...
_COMMON_FUNCTIONS = (
    # aggregates
    "count", "sum", "avg", "min", "max",
    # window functions
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
    "first_value", "last_value", "nth_value",
    # math
    "abs", "round", "ceil", "ceiling", "floor", "trunc", "sqrt", "power", "pow", "mod", "sign",
    "ln", "log", "log10", "exp", "pi", "degrees", "radians", "sin", "cos", "tan", "asin", "acos",
    "atan", "atan2", "random",
    # strings
    "lower", "upper", "length", "substring", "substr", "trim", "ltrim", "rtrim", "replace",
    "concat", "concat_ws", "octet_length",
    # conditional
    "coalesce", "nullif",
    # date/time
    "current_date", "current_time", "current_timestamp",
)
ALLOWED_FUNCTIONS: dict[str, frozenset[str]] = {
    "postgresql": frozenset(
        _COMMON_FUNCTIONS
        + (
            "string_agg", "array_agg", "bool_and", "bool_or", "every", "stddev", "stddev_pop",
            "stddev_samp", "variance", "var_pop", "var_samp", "corr", "covar_pop", "covar_samp",
            "regr_slope", "regr_intercept", "regr_r2", "regr_count", "percentile_cont",
            "percentile_disc", "mode", "grouping", "json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg",
            "cbrt", "div", "gcd", "lcm", "width_bucket", "scale", "greatest", "least",
            "initcap", "char_length", "character_length", "bit_length", "btrim", "translate",
            "left", "right", "position", "strpos", "split_part", "starts_with", "reverse",
            "lpad", "rpad", "repeat", "regexp_replace", "regexp_count", "regexp_like", "regexp_substr",
            "ascii", "chr", "md5", "to_hex", "to_char", "to_number",
            "date_trunc", "date_part", "extract", "now", "localtime", "localtimestamp", "clock_timestamp",
            "statement_timestamp", "transaction_timestamp", "age", "to_date", "to_timestamp",
            "make_date", "make_time", "make_timestamp", "make_timestamptz", "make_interval", "date_bin",
            "justify_days", "justify_hours", "justify_interval", "isfinite",
            "num_nulls", "num_nonnulls",
            "to_json", "to_jsonb", "row_to_json", "json_build_object", "jsonb_build_object",
            "json_build_array", "jsonb_build_array", "json_extract_path", "json_extract_path_text",
            "jsonb_extract_path", "jsonb_extract_path_text", "json_typeof", "jsonb_typeof",
            "json_array_length", "jsonb_array_length",
            "array_length", "cardinality", "array_to_string", "array_position",
        )
    ),
    "sqlite": frozenset(
        _COMMON_FUNCTIONS
        + (
            "total", "group_concat", "string_agg", "log2",
            "instr", "char", "unicode", "hex", "quote", "like", "glob",
            "date", "time", "datetime", "julianday", "strftime", "unixepoch",
            "ifnull", "iif", "typeof",
            "json", "json_extract", "json_array_length", "json_type", "json_valid", "json_object",
            "json_array", "json_group_array", "json_group_object",
        )
    ),
}
# Syntax and operators that sqlglot represents as function nodes: CASE, CAST,
# ARRAY[...], ROW(...), AND/OR, EXISTS, COLLATE, the regex, array and JSON operators.
_SYNTAX_FUNCTIONS: tuple[type[exp.Expression], ...] = (
    exp.Case, exp.If, exp.Cast, exp.Array, exp.Extract, exp.And, exp.Or, exp.Xor, exp.Exists,
    exp.Collate, exp.RegexpLike, exp.RegexpILike, exp.ArrayContains, exp.ArrayContainedBy,
    exp.ArrayOverlaps, exp.JSONExtract, exp.JSONExtractScalar, exp.JSONBExtract, exp.JSONBExtractScalar,
    exp.JSONBContains, exp.JSONBContainsTopKey, exp.JSONBContainsAnyTopKeys, exp.JSONBContainsAllTopKeys,
    exp.LowerHex,  # sqlglot's fusion of lower(hex(x))
)
_SYNTAX_NAMES = frozenset({"row"})

# Functions whose result size is set by an argument: that argument must be a literal
# no larger than this, so a query cannot build a gigabyte string in one call.
MAX_SIZE_ARGUMENT = 10_000
_SIZE_ARGUMENTS: dict[type[exp.Expression], str] = {exp.Repeat: "times", exp.Pad: "expression"}

# Keywords that read server state although they look like columns to sqlglot.
_STATE_KEYWORDS = {
    "postgresql": frozenset({"user", "current_user", "current_role", "session_user", "system_user",
                             "current_catalog", "current_schema"}),
    "sqlite": frozenset(),
}

# Cast targets: plain data types only (no reg* lookups, xml, or user-defined types).
_T = exp.DataType.Type
ALLOWED_CAST_TYPES = frozenset(
    {
        _T.ARRAY, _T.BIGINT, _T.BIGDECIMAL, _T.BOOLEAN, _T.BPCHAR, _T.CHAR, _T.DATE, _T.DATETIME,
        _T.DECIMAL, _T.DOUBLE, _T.FLOAT, _T.INT, _T.INTERVAL, _T.JSON, _T.JSONB, _T.MEDIUMINT,
        _T.MONEY, _T.NCHAR, _T.NVARCHAR, _T.SMALLINT, _T.TEXT, _T.TIME, _T.TIMETZ, _T.TIMESTAMP,
        _T.TIMESTAMPTZ, _T.TIMESTAMPLTZ, _T.TIMESTAMPNTZ, _T.TINYINT, _T.UUID, _T.VARCHAR,
        _T.VARBINARY, _T.BLOB,
    }
)


@cache
def _allowed_kinds(dialect: str) -> tuple[frozenset[type], frozenset[str]]:
    """The sqlglot node classes and the unclassified names the dialect's allow-list means.

    sqlglot turns many calls into typed nodes (``string_agg`` -> GroupConcat); each
    allowed name is parsed with a few arities to learn which class stands for it.
    Names sqlglot does not classify stay names (Anonymous nodes).
    """
    read = SQLGLOT_DIALECTS[dialect]
    classes: set[type] = set(_SYNTAX_FUNCTIONS)
    anonymous: set[str] = set(_SYNTAX_NAMES)
    for name in ALLOWED_FUNCTIONS[dialect]:
        anonymous.add(name)
        for sample in (name, *(f"{name}({', '.join(['NULL'] * n)})" for n in range(5))):
            try:
                tree = sqlglot.parse_one(f"SELECT {sample}", read=read)
            except (SqlglotError, ValueError, IndexError):
                continue
            # Every typed node of the sample counts: sqlglot may wrap arguments in
            # helper nodes of its own (strftime's argument becomes TsOrDsToTimestamp).
            classes.update(
                type(node) for node in tree.walk() if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous)
            )
    return frozenset(classes), frozenset(anonymous)


class GuardVerdict(BaseModel):
    allowed: bool
    reason: str
    statement_type: str | None = None
    # Exposed tables the query reads, spelled as in the cached schema, for governance
    # and the result. Policies compare them with datasources.identifiers.identifier_key.
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


def _function_name(node: exp.Func, read: str) -> str:
    """The name of a call as the dialect writes it (for reasons and the record)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    # Render the node alone (arguments replaced by NULL), so naming stays cheap for
    # deeply nested calls; any trouble falls back to sqlglot's own name.
    leaves = (exp.Literal, exp.Var, exp.Identifier, exp.DataType, exp.Boolean, exp.Null)

    def stand_in(value):
        if isinstance(value, list):
            return [stand_in(item) for item in value]
        if isinstance(value, exp.Expression):
            # Leaves are copied: building the stand-in must not re-parent the checked tree.
            return value.copy() if isinstance(value, leaves) else exp.null()
        return value

    try:
        shallow = node.__class__(**{key: stand_in(value) for key, value in node.args.items()})
        match = _LEADING_NAME.match(shallow.sql(dialect=read))
    except Exception:  # noqa: BLE001 - only a display name is at stake
        match = None
    if match:
        return match.group(1).lower()
    return node.sql_name().lower()


def _size_argument_refusal(node: exp.Func, name: str) -> str | None:
    key = _SIZE_ARGUMENTS.get(type(node))
    if key is None:
        return None
    argument = node.args.get(key)
    if not isinstance(argument, exp.Literal) or argument.is_string:
        return f"The function {name}() needs a literal length of at most {MAX_SIZE_ARGUMENT}."
    try:
        size = float(argument.this)
    except ValueError:
        size = float("inf")
    if not size <= MAX_SIZE_ARGUMENT:
        return f"The function {name}() needs a literal length of at most {MAX_SIZE_ARGUMENT}."
    return None


def _function_refusal(node: exp.Func, dialect: str, read: str) -> str | None:
    classes, anonymous = _allowed_kinds(dialect)
    name = _function_name(node, read)
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return f"Schema-qualified function calls such as {parent.this.sql(dialect=read)}.{name}() are not allowed."
    if isinstance(parent, exp.Table) and parent.this is node:
        return f"The table-valued function {name}() is not allowed in FROM; only exposed tables can be read."
    if isinstance(node, exp.Anonymous):
        if not isinstance(node.this, str | exp.Identifier) or name not in anonymous:
            return f"The function {name}() is not allowed."
        return None
    if type(node) not in classes:
        return f"The function {name}() is not allowed."
    return _size_argument_refusal(node, name)


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


def _node_refusal(node: exp.Expression, *, dialect: str, read: str) -> str | None:
    """Why one node of the tree is not allowed in a read-only query, or None."""
    if isinstance(node, _FORBIDDEN_NODES):
        what = _statement_label(node)
        if isinstance(node, exp.Lock):
            what = "FOR UPDATE/FOR SHARE row locking"
        elif isinstance(node, exp.Into):
            what = "SELECT ... INTO"
        return f"The query contains {what}, which is not allowed in a read-only query."
    if isinstance(node, exp.Func):
        return _function_refusal(node, dialect, read)
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier | exp.Func):
        inner = node.find(exp.Func)
        if inner is not None:
            name = _function_name(inner, read)
            return f"The table-valued function {name}() is not allowed in FROM; only exposed tables can be read."
        return "Only exposed tables can be read in FROM."
    if isinstance(node, exp.Operator):
        return "OPERATOR(...) calls are not allowed."
    if isinstance(node, exp.ObjectIdentifier):
        return f"Casts to the object identifier type {node.sql(dialect=read)} are not allowed."
    if isinstance(node, exp.DataType) and node.this not in ALLOWED_CAST_TYPES:
        return f"Casts to {node.sql(dialect=read)} are not allowed; cast only to plain data types."
    if isinstance(node, exp.TableSample):
        return "TABLESAMPLE is not allowed."
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        if not node.this.quoted and node.name.lower() in _STATE_KEYWORDS[dialect]:
            return f"The function {node.name.lower()} is not allowed."
    if isinstance(node, exp.Parameter) or (
        isinstance(node, exp.Identifier) and not node.quoted and str(node.this)[:1] in "$@?:#"
    ):
        # SQLite reads an unquoted $x, @x or ?1 as a parameter even where sqlglot sees a name.
        return "Positional parameters are not supported; use named parameters such as :name."
    if isinstance(node, exp.Placeholder) and not _PARAMETER_NAME.fullmatch(node.name or ""):
        return "Unnamed placeholders are not supported; use named parameters such as :name."
    return None


def _statement_parse(sql: str, *, dialect: str, read: str) -> exp.Expression | GuardVerdict:
    """The one statement ``sql`` holds, unwrapped from parentheses, or the refusal."""
    try:
        parsed = sqlglot.parse(sql, read=read)
    except SqlglotError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        return _refuse(f"The query could not be parsed as {dialect} SQL: {first_line}")
    except (ValueError, RecursionError, TypeError, KeyError, IndexError, AttributeError) as exc:
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
    return root


def _tree_refusal(root: exp.Expression, *, dialect: str, read: str) -> str | None:
    """Why some node of the statement is not allowed, or None."""
    try:
        for node in root.walk():
            refusal = _node_refusal(node, dialect=dialect, read=read)
            if refusal:
                return refusal
    except RecursionError:
        return "The query is nested too deeply."
    return None


def _table_refusal(table: exp.Table, *, dialect: str, read: str, expected_schema: str) -> str | None:
    """Why a table reference reaches outside the exposed schema, or None."""
    if table.catalog:
        return f"Cross-database reference {table.sql(dialect=read)!r} is not allowed."
    schema = table.args.get("db")
    if isinstance(schema, exp.Identifier) and not schema_matches(
        name=schema.name, quoted=schema.quoted, schema_name=expected_schema, dialect=dialect
    ):
        return f"Table {table.sql(dialect=read)} is outside the exposed schema {expected_schema!r}."
    if table.db and not isinstance(schema, exp.Identifier):
        return f"Table {table.sql(dialect=read)} has an unsupported qualifier."
    return None


def _tables_read(
    root: exp.Expression, *, dialect: str, read: str, exposed: list[str], expected_schema: str
) -> list[str] | str:
    """The exposed tables the statement reads, as the cached schema spells them, or the refusal."""
    tables: list[str] = []
    for table in root.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function: refused by the tree walk
        refusal = _table_refusal(table, dialect=dialect, read=read, expected_schema=expected_schema)
        if refusal:
            return refusal
        if not table.db and _names_cte(table):
            continue
        resolved = table_resolve(name=table.name, quoted=table.this.quoted, exposed=exposed, dialect=dialect)
        if resolved is None:
            near = [name for name in exposed if name.lower() == table.name.lower()]
            hint = (
                f" PostgreSQL folds unquoted names to lower case and keeps quoted ones: write "
                f"{exp.to_identifier(near[0], quoted=near[0] != near[0].lower()).sql(dialect=read)}."
                if near
                else ""
            )
            return f"Table {table.name!r} is not exposed by this data source.{hint}"
        if resolved not in tables:
            tables.append(resolved)
    return tables


def _parameters_bind(root: exp.Expression, *, read: str) -> list[str]:
    """Parameter names in the driver's binding order; PostgreSQL's become ``$n`` in the tree."""
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
    return parameter_names


def query_check(
    *,
    sql: str,
    dialect: str,
    allowed_tables: Iterable[str],
    schema_name: str | None = None,
) -> GuardVerdict:
    """Decide whether ``sql`` may run against a source exposing ``allowed_tables``.

    ``dialect`` is the data source type (``postgresql`` or ``sqlite``); ``schema_name``
    is the one schema a PostgreSQL source exposes (``public`` by default). Table and
    schema names resolve by the dialect's own folding (``datasources.identifiers``).
    """
    if not isinstance(sql, str) or len(sql) > VERDICT_CACHE_MAX_CHARS or not isinstance(dialect, str):
        return _query_check(sql=sql, dialect=dialect, allowed_tables=tuple(allowed_tables), schema_name=schema_name)
    return _query_check_cached(sql, dialect, tuple(allowed_tables), schema_name).model_copy(deep=True)


@lru_cache(maxsize=VERDICT_CACHE_SIZE)
def _query_check_cached(sql: str, dialect: str, allowed_tables: tuple[str, ...], schema_name: str | None
                        ) -> GuardVerdict:
    return _query_check(sql=sql, dialect=dialect, allowed_tables=allowed_tables, schema_name=schema_name)


def _query_check(*, sql: str, dialect: str, allowed_tables: tuple[str, ...], schema_name: str | None
                 ) -> GuardVerdict:
    read = SQLGLOT_DIALECTS.get(dialect)
    if read is None:
        return _refuse(f"Queries are not supported for data source type {dialect!r}.")
    if not isinstance(sql, str) or not sql.strip():
        return _refuse("The query is empty.")
    if len(sql) > MAX_QUERY_CHARS:
        return _refuse(f"The query is longer than {MAX_QUERY_CHARS} characters.")

    root = _statement_parse(sql, dialect=dialect, read=read)
    if isinstance(root, GuardVerdict):
        return root
    label = _statement_label(root)
    if not isinstance(root, exp.Select | exp.SetOperation):
        return _refuse(f"Only read-only SELECT queries are allowed; this is a {label} statement.", label)

    refusal = _tree_refusal(root, dialect=dialect, read=read)
    if refusal:
        return _refuse(refusal, label)
    tables = _tables_read(root, dialect=dialect, read=read, exposed=list(allowed_tables),
                          expected_schema=schema_name or DEFAULT_SCHEMAS[dialect])
    if isinstance(tables, str):
        return _refuse(tables, label)
    parameter_names = _parameters_bind(root, read=read)

    try:
        rendered = root.sql(dialect=read, comments=False)
    except (SqlglotError, ValueError, RecursionError) as exc:
        return _refuse(f"The query could not be rendered for {dialect}: {exc.__class__.__name__}", label)
    return GuardVerdict(
        allowed=True,
        reason="One read-only statement over exposed tables.",
        statement_type=label,
        tables=tables,
        sql=rendered,
        parameter_names=parameter_names,
    )
