"""Property-based tests of the SQL guard over generated SQL (Hypothesis).

A small grammar builds queries out of pieces whose nature is known: exposed or
hidden tables (in every spelling and quoting the dialect has), allowed or
non-allowed functions (also qualified and quoted), writes and session statements,
CTEs, subqueries, set operations and stacked statements. Each generated query
carries the labels of what it contains, and the properties are:

* a query that writes, calls a non-allowed function or reads a table outside the
  source never passes the guard;
* a query built only from allowed pieces does pass it, and what the guard returns
  to run passes the guard again, reading the same tables;
* accepted queries run on a PostgreSQL session that could write, and on a writable
  SQLite file, without writing anything.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from functools import cache

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasources.sqlguard import ALLOWED_FUNCTIONS, query_check
from tests.datasources.fixtures import *  # noqa: F403

EXPOSED = ["customers", "tickets", "charges"]
WRITE, FORBIDDEN, OUTSIDE = "writes", "calls a non-allowed function", "reads a table outside the source"

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
DATABASE_SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass(frozen=True)
class Piece:
    sql: str
    labels: frozenset[str] = frozenset()

    def __add__(self, other: Piece) -> Piece:
        return Piece(self.sql + other.sql, self.labels | other.labels)


def join(*pieces: Piece | str) -> Piece:
    out = Piece("")
    for piece in pieces:
        out = out + (Piece(piece) if isinstance(piece, str) else piece)
    return out


# --- names ---------------------------------------------------------------------------------------


@st.composite
def exposed_table(draw, dialect: str) -> Piece:
    """An exposed table in a spelling that reaches it under the dialect's folding."""
    name = draw(st.sampled_from(EXPOSED))
    schema = "public" if dialect == "postgresql" else "main"
    forms = [name, name.upper(), name.title(), f'"{name}"', f"{schema}.{name}", f'"{schema}"."{name}"',
             f"{schema.upper()}.{name.upper()}"]
    if dialect == "sqlite":
        forms += [f'"{name.upper()}"', f"[{name.title()}]", f"`{name}`", f'"{schema.upper()}"."{name.title()}"']
    return Piece(draw(st.sampled_from(forms)))


@st.composite
def outside_table(draw, dialect: str) -> Piece:
    """A table the source does not expose, or one in another schema or database."""
    if dialect == "postgresql":
        forms = ["secret_salaries", "pg_authid", "pg_catalog.pg_authid", "PG_CATALOG.PG_SHADOW",
                 "information_schema.tables", "pg_user", "pg_stat_activity", '"TICKETS"', '"Customers"',
                 'public."Charges"', "other.tickets", '"PUBLIC".tickets', "otherdb.public.tickets",
                 "pg_temp.tickets", "pg_catalog.pg_class"]
    else:
        forms = ["secret_salaries", "sqlite_master", "sqlite_schema", "SQLITE_MASTER", "temp.sqlite_master",
                 "main.sqlite_master", "temp.tickets", "aux.customers", "sqlite_temp_master", '"sqlite_sequence"',
                 "pragma_database_list"]
    return Piece(draw(st.sampled_from(forms)), frozenset({OUTSIDE}))


@cache
def table(dialect: str):
    return st.one_of(exposed_table(dialect), exposed_table(dialect), outside_table(dialect))


DANGEROUS = {
    "postgresql": ["pg_sleep", "pg_read_file", "pg_ls_dir", "current_setting", "set_config", "version",
                   "query_to_xml", "database_to_xml", "lo_import", "dblink", "pg_advisory_lock", "txid_current",
                   "inet_server_addr", "nextval", "pg_terminate_backend", "generate_series", "unnest",
                   "regexp_matches", "format", "pg_notify", "has_table_privilege", "current_database"],
    "sqlite": ["load_extension", "readfile", "writefile", "randomblob", "zeroblob", "printf", "format",
               "sqlite_version", "fts3_tokenizer", "changes", "last_insert_rowid", "sqlite_compileoption_get",
               "edit", "json_each"],
}
UNKNOWN_NAME = st.from_regex(r"\A(zz|udf|evil|fn)_[a-z0-9_]{1,10}\Z")


@st.composite
def forbidden_name(draw, dialect: str) -> str:
    name = draw(st.one_of(st.sampled_from(DANGEROUS[dialect]), UNKNOWN_NAME))
    schema = "pg_catalog" if dialect == "postgresql" else "main"
    allowed = draw(st.sampled_from(sorted(ALLOWED_FUNCTIONS[dialect] & {"lower", "abs", "length"})))
    return draw(st.sampled_from([name, name.upper(), f'"{name}"', f"{schema}.{name}", f'"{schema}"."{name}"',
                                 f"public.{allowed}", f"{schema}.{allowed}"]))


# --- expressions ---------------------------------------------------------------------------------

NUMBER_CALLS = {
    "postgresql": [("abs", "n"), ("round", "n"), ("floor", "n"), ("ceil", "n"), ("sign", "n"), ("length", "s"),
                   ("greatest", "nn"), ("least", "nn"), ("coalesce", "nn"), ("nullif", "nn"), ("strpos", "ss"),
                   ("mod", "nn"), ("power", "nn")],
    "sqlite": [("abs", "n"), ("round", "n"), ("length", "s"), ("coalesce", "nn"), ("nullif", "nn"),
               ("ifnull", "nn"), ("instr", "ss"), ("max", "nn"), ("min", "nn"), ("unicode", "s")],
}
STRING_CALLS = {
    "postgresql": [("lower", "s"), ("upper", "s"), ("trim", "s"), ("replace", "sss"), ("substr", "sn"),
                   ("concat", "ss"), ("left", "sn"), ("md5", "s"), ("reverse", "s"), ("initcap", "s")],
    "sqlite": [("lower", "s"), ("upper", "s"), ("trim", "s"), ("replace", "sss"), ("substr", "sn"),
               ("hex", "s"), ("typeof", "n"), ("quote", "s"), ("char", "n")],
}
AGGREGATES = ["count", "sum", "min", "max", "avg"]
STRING_LITERAL = st.text(alphabet="abcXYZ %_'-;*/", max_size=8).map(lambda s: "'" + s.replace("'", "''") + "'")


@cache
def number(dialect: str, depth: int):
    leaves = st.one_of(st.integers(-1000, 1000).map(lambda n: Piece(f"({n})")), st.just(Piece("id")))
    if depth <= 0:
        return leaves
    inner_n, inner_s = number(dialect, depth - 1), string(dialect, depth - 1)

    @st.composite
    def call(draw) -> Piece:
        name, kinds = draw(st.sampled_from(NUMBER_CALLS[dialect]))
        args = [draw(inner_n if kind == "n" else inner_s) for kind in kinds]
        return join(name, "(", *_commas(args), ")")

    @st.composite
    def forbidden(draw) -> Piece:
        name = draw(forbidden_name(dialect))
        args = draw(st.lists(st.one_of(inner_n, inner_s), max_size=2))
        return join(Piece(name, frozenset({FORBIDDEN})), "(", *_commas(args), ")")

    @st.composite
    def arithmetic(draw) -> Piece:
        return join("(", draw(inner_n), draw(st.sampled_from([" + ", " - ", " * "])), draw(inner_n), ")")

    @st.composite
    def case(draw) -> Piece:
        return join("CASE WHEN ", draw(condition(dialect, depth - 1)), " THEN ", draw(inner_n), " ELSE ",
                    draw(inner_n), " END")

    @st.composite
    def scalar_subquery(draw) -> Piece:
        return join("(SELECT ", draw(inner_n), " FROM ", draw(table(dialect)), " ORDER BY 1 LIMIT 1)")

    @st.composite
    def cast(draw) -> Piece:
        target = draw(st.sampled_from(["INTEGER", "BIGINT", "REAL"]))
        return join("CAST(", draw(inner_n), f" AS {target})")

    return st.one_of(leaves, call(), call(), arithmetic(), case(), scalar_subquery(), cast(), forbidden())


@cache
def string(dialect: str, depth: int):
    leaves = STRING_LITERAL.map(Piece)
    if depth <= 0:
        return leaves
    inner_n, inner_s = number(dialect, depth - 1), string(dialect, depth - 1)

    @st.composite
    def call(draw) -> Piece:
        name, kinds = draw(st.sampled_from(STRING_CALLS[dialect]))
        args = [draw(inner_n if kind == "n" else inner_s) for kind in kinds]
        return join(name, "(", *_commas(args), ")")

    @st.composite
    def concat(draw) -> Piece:
        return join("(", draw(inner_s), " || ", draw(inner_s), ")")

    @st.composite
    def cast(draw) -> Piece:
        return join("CAST(", draw(inner_n), " AS TEXT)")

    return st.one_of(leaves, call(), call(), concat(), cast())


@cache
def condition(dialect: str, depth: int):
    n, s = number(dialect, max(depth, 0)), string(dialect, max(depth, 0))

    @st.composite
    def compare(draw) -> Piece:
        return join(draw(n), draw(st.sampled_from([" = ", " < ", " >= ", " <> "])), draw(n))

    @st.composite
    def like(draw) -> Piece:
        return join(draw(s), " LIKE ", draw(s))

    @st.composite
    def exists(draw) -> Piece:
        return join("EXISTS (SELECT 1 FROM ", draw(table(dialect)), ")")

    @st.composite
    def within(draw) -> Piece:
        return join(draw(n), " IN (SELECT id FROM ", draw(table(dialect)), ")")

    @st.composite
    def both(draw) -> Piece:
        return join("(", draw(compare()), draw(st.sampled_from([" AND ", " OR "])), "NOT ", draw(compare()), ")")

    options = [compare(), like(), both()]
    if depth > 0:
        options += [exists(), within()]
    return st.one_of(*options)


def _commas(pieces: list[Piece]) -> list[Piece | str]:
    out: list[Piece | str] = []
    for i, piece in enumerate(pieces):
        out += ([", "] if i else []) + [piece]
    return out


# --- statements ----------------------------------------------------------------------------------


@st.composite
def select(draw, dialect: str, *, single: bool = False) -> Piece:
    items = draw(st.lists(st.one_of(number(dialect, 2), string(dialect, 2)), min_size=1, max_size=1 if single else 3))
    if not single and draw(st.booleans()):
        items = [join(draw(st.sampled_from(AGGREGATES)), "(", draw(number(dialect, 1)), ")")]
    columns = _commas([join(item, f" AS c{i}") for i, item in enumerate(items)])
    statement = join("SELECT ", *columns, " FROM ", draw(table(dialect)))
    if draw(st.booleans()):
        statement = join(statement, " WHERE ", draw(condition(dialect, 1)))
    if not single and draw(st.booleans()):
        statement = join(statement, " ORDER BY 1")
    if draw(st.booleans()):
        statement = join(statement, f" LIMIT {draw(st.integers(0, 50))}")
    return statement


@st.composite
def read_query(draw, dialect: str) -> Piece:
    shape = draw(st.sampled_from(["plain", "cte", "union", "derived"]))
    if shape == "cte":
        return join("WITH c1 AS (", draw(select(dialect)), ") SELECT * FROM c1")
    if shape == "union":
        operator = draw(st.sampled_from([" UNION ", " UNION ALL ", " EXCEPT ", " INTERSECT "]))
        return join(draw(select(dialect, single=True)), operator, draw(select(dialect, single=True)))
    if shape == "derived":
        return join("SELECT * FROM (", draw(select(dialect)), ") AS d")
    return draw(select(dialect))


WRITES = {
    "postgresql": [
        "INSERT INTO {t} (id) VALUES (999)", "UPDATE {t} SET id = id", "DELETE FROM {t}", "DROP TABLE {t}",
        "TRUNCATE {t}", "CREATE TABLE stolen AS SELECT * FROM {t}", "ALTER TABLE {t} ADD COLUMN z int",
        "COPY {t} TO '/tmp/river_copy'", "COPY (SELECT 1) TO PROGRAM 'true'", "SELECT * INTO stolen FROM {t}",
        "SELECT * FROM {t} FOR UPDATE", "SELECT id FROM {t} FOR SHARE SKIP LOCKED",
        "WITH d AS (DELETE FROM {t} RETURNING *) SELECT * FROM d",
        "WITH u AS (UPDATE {t} SET id = id RETURNING id) SELECT count(*) FROM u",
        "WITH i AS (INSERT INTO {t} (id) VALUES (998) RETURNING id) SELECT id FROM i",
        "MERGE INTO {t} a USING {t} b ON a.id = b.id WHEN MATCHED THEN DELETE", "GRANT ALL ON {t} TO PUBLIC",
        "LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE", "VACUUM {t}", "ANALYZE {t}", "EXPLAIN ANALYZE DELETE FROM {t}",
        "SET statement_timeout = 0", "SET TRANSACTION READ WRITE", "RESET ALL", "CALL cleanup()",
        "DO $$ BEGIN DELETE FROM {t}; END $$", "CREATE INDEX i ON {t} (id)", "COMMENT ON TABLE {t} IS 'x'",
        "REFRESH MATERIALIZED VIEW {t}", "PREPARE p AS DELETE FROM {t}", "LISTEN x", "NOTIFY x",
        "CREATE TEMP TABLE tmp AS SELECT 1", "BEGIN", "COMMIT",
    ],
    "sqlite": [
        "INSERT INTO {t} (id) VALUES (999)", "UPDATE {t} SET id = id", "DELETE FROM {t}", "DROP TABLE {t}",
        "REPLACE INTO {t} (id) VALUES (1)", "INSERT OR REPLACE INTO {t} (id) VALUES (1)",
        "CREATE TABLE stolen AS SELECT * FROM {t}", "ALTER TABLE {t} ADD COLUMN z int",
        "WITH d AS (SELECT 1) DELETE FROM {t}", "ATTACH DATABASE '/tmp/evil.db' AS evil", "DETACH DATABASE main",
        "PRAGMA writable_schema = 1", "PRAGMA query_only = 0", "VACUUM INTO '/tmp/copy.db'",
        "CREATE TRIGGER tr AFTER INSERT ON {t} BEGIN DELETE FROM {t}; END", "CREATE VIEW v AS SELECT * FROM {t}",
        "CREATE INDEX i ON {t} (id)", "REINDEX {t}", "ANALYZE", "BEGIN IMMEDIATE", "SAVEPOINT s",
        "UPDATE {t} SET id = id RETURNING id",
    ],
}
SEPARATORS = ["; ", ";\n", " ; -- tail\n", "/* a */; ", ";/*", "; /* ; */ "]


@st.composite
def write_query(draw, dialect: str) -> Piece:
    template = draw(st.sampled_from(WRITES[dialect]))
    target = draw(st.one_of(exposed_table(dialect), outside_table(dialect)))
    statement = Piece(template.format(t=target.sql), frozenset({WRITE}) | target.labels)
    if draw(st.booleans()):
        statement = join(draw(read_query(dialect)), draw(st.sampled_from(SEPARATORS)), statement)
    return statement


def any_query(dialect: str):
    return st.one_of(read_query(dialect), read_query(dialect), write_query(dialect))


# --- properties ----------------------------------------------------------------------------------


def _verdict(piece: Piece, dialect: str):
    return query_check(sql=piece.sql, dialect=dialect, allowed_tables=EXPOSED)


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_no_writing_forbidden_or_outside_query_passes(dialect):
    @PROPERTY_SETTINGS
    @given(any_query(dialect))
    def prop(piece: Piece):
        verdict = _verdict(piece, dialect)
        if piece.labels:
            assert verdict.allowed is False, (piece.labels, piece.sql, verdict.sql)
            assert verdict.sql is None

    prop()


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_clean_queries_pass_and_what_runs_passes_again(dialect):
    @PROPERTY_SETTINGS
    @given(read_query(dialect))
    def prop(piece: Piece):
        verdict = _verdict(piece, dialect)
        if piece.labels:
            assert verdict.allowed is False, (piece.labels, piece.sql)
            return
        assert verdict.allowed is True, (piece.sql, verdict.reason)
        assert set(verdict.tables) <= set(EXPOSED)
        again = query_check(sql=verdict.sql, dialect=dialect, allowed_tables=EXPOSED)
        assert again.allowed is True, (verdict.sql, again.reason)
        assert set(again.tables) == set(verdict.tables)
        assert again.sql == verdict.sql

    prop()


def _accepted(dialect: str):
    return read_query(dialect).map(lambda piece: _verdict(piece, dialect)).filter(lambda verdict: verdict.allowed)


def test_accepted_queries_write_nothing_on_postgres(pg_tables):
    """The login may write these tables; each accepted query runs in a transaction that
    is then asked whether it was assigned a transaction id (any write assigns one)."""
    ran: list[str] = []
    conn = psycopg.connect(host=pg_tables["host"], port=pg_tables["port"], dbname=pg_tables["database"],
                           user=pg_tables["user"], password=pg_tables["password"], connect_timeout=10)
    try:
        conn.execute("SET statement_timeout = '2s'")
        conn.commit()

        @DATABASE_SETTINGS
        @given(_accepted("postgresql"))
        def prop(verdict):
            try:
                conn.execute(verdict.sql).fetchall()
            except psycopg.errors.QueryCanceled:  # pragma: no cover - a slow plan, not a write
                conn.rollback()
                return
            except psycopg.Error:
                conn.rollback()  # a type error in a generated query: it still must not write
                assert conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()[0] is None
                conn.rollback()
                return
            assert conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()[0] is None, verdict.sql
            conn.rollback()
            ran.append(verdict.sql)

        prop()
    finally:
        conn.close()
    assert len(ran) >= 10


def test_accepted_queries_write_nothing_on_sqlite(sqlite_file):
    ran: list[str] = []
    conn = sqlite3.connect(sqlite_file)
    schema_before = conn.execute("SELECT group_concat(sql, ';') FROM sqlite_master").fetchone()[0]
    try:

        @DATABASE_SETTINGS
        @given(_accepted("sqlite"))
        def prop(verdict):
            deadline = time.monotonic() + 2
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
            changes = conn.total_changes
            try:
                conn.execute(verdict.sql).fetchall()
            except sqlite3.OperationalError as exc:
                assert "interrupted" in str(exc) or "no such" in str(exc) or "misuse" in str(exc), verdict.sql
                return
            finally:
                conn.set_progress_handler(None, 0)
            assert conn.total_changes == changes, verdict.sql
            assert conn.in_transaction is False, verdict.sql
            ran.append(verdict.sql)

        prop()
        schema_after = conn.execute("SELECT group_concat(sql, ';') FROM sqlite_master").fetchone()[0]
    finally:
        conn.close()
    assert schema_after == schema_before
    assert len(ran) >= 10
