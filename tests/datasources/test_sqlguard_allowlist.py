"""The SQL guard's functions are an allow-list: every call the dialect's list does not
name is refused at parse time, naming the function, wherever it hides (FROM, CAST,
subqueries, CTEs, schema qualification, quoting). The allowed calls really run on
PostgreSQL and SQLite."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from datasources import connectors
from datasources.sqlguard import ALLOWED_FUNCTIONS, MAX_SIZE_ARGUMENT, query_check
from rivercore.types.datasources import ConnectionConfig
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import PG_ADMIN

EXPOSED = ["customers", "tickets", "charges"]

# Names PostgreSQL or SQLite know as functions that sqlglot reads as syntax, not as a
# call of that function: char(x) is the allowed chr(x), interval/overlaps/match/like
# are keywords or operators, jsonb_contains(a, b) is the @> operator.
READ_AS_SYNTAX = {"char", "interval", "overlaps", "match", "like", "jsonb_contains"}


def check(sql: str, dialect: str = "postgresql"):
    return query_check(sql=sql, dialect=dialect, allowed_tables=EXPOSED)


def _assert_refused_naming(sql: str, name: str, dialect: str = "postgresql") -> None:
    verdict = check(sql, dialect)
    assert verdict.allowed is False, sql
    assert verdict.sql is None
    assert name.lower() in verdict.reason.lower(), (sql, verdict.reason)


def _refused_for_every_arity(name: str, dialect: str) -> list[str]:
    """The calls of ``name`` with 0-3 arguments that the guard lets through."""
    passed = []
    for args in ("", "NULL", "NULL, NULL", "NULL, NULL, NULL"):
        verdict = check(f"SELECT {name}({args}) FROM tickets", dialect)
        if verdict.allowed:
            passed.append(verdict.sql)
        elif "could not be parsed" not in verdict.reason and name not in {"convert", "decode"}:
            # convert() and decode() are read as CAST / CASE forms and refused as such.
            assert name.lower() in verdict.reason.lower(), (name, verdict.reason)
    return passed


def test_every_postgres_function_outside_the_allow_list_is_refused():
    """Ask the server for every function it has (about 2,600 names): each one not on
    the list is refused, so a function nobody thought of cannot slip through."""
    with psycopg.connect(**PG_ADMIN) as admin:
        names = [row[0] for row in admin.execute("SELECT DISTINCT proname FROM pg_proc WHERE prokind <> 'p'")]
    assert len(names) > 1000
    leaked = {}
    for name in names:
        if name in ALLOWED_FUNCTIONS["postgresql"] or name in READ_AS_SYNTAX:
            continue
        passed = _refused_for_every_arity(name, "postgresql")
        if passed:
            leaked[name] = passed
    assert leaked == {}


def test_every_sqlite_function_outside_the_allow_list_is_refused():
    conn = sqlite3.connect(":memory:")
    try:
        names = sorted({row[0] for row in conn.execute("SELECT name FROM pragma_function_list")})
    finally:
        conn.close()
    assert len(names) > 50
    leaked = {}
    for name in names:
        if name in ALLOWED_FUNCTIONS["sqlite"] or name in READ_AS_SYNTAX:
            continue
        passed = _refused_for_every_arity(name, "sqlite")
        if passed:
            leaked[name] = passed
    assert leaked == {}


def test_unknown_functions_are_refused_by_default():
    for dialect in ("postgresql", "sqlite"):
        _assert_refused_naming("SELECT river_made_up_fn(id) FROM tickets", "river_made_up_fn", dialect)
        _assert_refused_naming("SELECT id FROM tickets WHERE zz_top() = 1", "zz_top", dialect)


REFUSED_POSTGRES = [
    # (sql, the function the reason must name)
    ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
    ("SELECT pg_read_binary_file('/etc/passwd')", "pg_read_binary_file"),
    ("SELECT * FROM pg_ls_dir('.')", "pg_ls_dir"),
    ("SELECT lo_import('/etc/passwd')", "lo_import"),
    ("SELECT lo_get(16384)", "lo_get"),
    ("SELECT * FROM dblink('host=127.0.0.1', 'select 1') AS t(a int)", "dblink"),
    ("SELECT dblink_exec('host=127.0.0.1', 'drop table tickets')", "dblink_exec"),
    ("SELECT query_to_xml('select * from customers', true, true, '')", "query_to_xml"),
    ("SELECT database_to_xml(true, true, '')", "database_to_xml"),
    ("SELECT table_to_xml('customers', true, true, '')", "table_to_xml"),
    ("SELECT table_to_xmlschema('customers', true, true, '')", "table_to_xmlschema"),
    ("SELECT schema_to_xml('public', true, true, '')", "schema_to_xml"),
    ("SELECT cursor_to_xml('c', 1, true, true, '')", "cursor_to_xml"),
    ("SELECT current_setting('data_directory')", "current_setting"),
    ("SELECT set_config('transaction_read_only', 'off', true)", "set_config"),
    ("SELECT pg_sleep(1)", "pg_sleep"),
    ("SELECT pg_sleep_for('1 minute')", "pg_sleep_for"),
    ("SELECT pg_sleep_until(now())", "pg_sleep_until"),
    ("SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    ("SELECT pg_try_advisory_xact_lock(1)", "pg_try_advisory_xact_lock"),
    ("SELECT txid_current()", "txid_current"),
    ("SELECT pg_current_xact_id()", "pg_current_xact_id"),
    ("SELECT * FROM pg_stat_get_activity(NULL)", "pg_stat_get_activity"),
    ("SELECT pg_postmaster_start_time()", "pg_postmaster_start_time"),
    ("SELECT version()", "version"),
    ("SELECT inet_server_addr()", "inet_server_addr"),
    ("SELECT inet_client_port()", "inet_client_port"),
    ("SELECT current_database()", "current_database"),
    ("SELECT current_user", "current_user"),
    ("SELECT user", "user"),
    ("SELECT current_role", "current_role"),
    ("SELECT session_user", "session_user"),
    ("SELECT current_schema", "current_schema"),
    ("SELECT nextval('audit_seq')", "nextval"),
    ("SELECT pg_notify('c', 'x')", "pg_notify"),
    ("SELECT format('%1000000000s', 'x')", "format"),
    ("SELECT regexp_matches(subject, '.') FROM tickets", "regexp_matches"),
    ("SELECT has_table_privilege('customers', 'select')", "has_table_privilege"),
    ("SELECT to_regclass('pg_authid')", "to_regclass"),
    ("SELECT xmlagg(xmlelement(name x, subject)) FROM tickets", "xmlagg"),
    # set-returning and table-valued functions, in FROM or in the select list
    ("SELECT * FROM generate_series(1, 3)", "generate_series"),
    ("SELECT generate_series(1, 1000000000)", "generate_series"),
    ("SELECT * FROM unnest(ARRAY[1, 2])", "unnest"),
    ("SELECT unnest(ARRAY[1, 2])", "unnest"),
    ("SELECT * FROM json_each('{\"a\": 1}')", "json_each"),
    ("SELECT * FROM jsonb_to_recordset('[]') AS x(a int)", "jsonb_to_recordset"),
    ("SELECT * FROM ROWS FROM (generate_series(1, 2))", "generate_series"),
    ("SELECT * FROM tickets t, LATERAL generate_series(1, t.id) g", "generate_series"),
    ("SELECT * FROM tickets CROSS JOIN LATERAL json_each('{}') j", "json_each"),
    # hidden: schema-qualified, quoted, inside casts, subqueries, CTEs, windows, ORDER BY
    ("SELECT pg_catalog.pg_sleep(1)", "pg_sleep"),
    ('SELECT "pg_catalog"."pg_sleep"(1)', "pg_sleep"),
    ("SELECT pg_catalog.lower('x')", "lower"),
    ("SELECT public.lower(subject) FROM tickets", "lower"),
    ('SELECT "pg_sleep"(1)', "pg_sleep"),
    ('SELECT "PG_SLEEP"(1)', "pg_sleep"),
    ("SELECT CAST(pg_sleep(1) AS text)", "pg_sleep"),
    ("SELECT pg_sleep(1)::text", "pg_sleep"),
    ("SELECT id FROM tickets WHERE id = (SELECT length(pg_read_file('/etc/passwd')))", "pg_read_file"),
    ("WITH x AS (SELECT current_setting('is_superuser') AS s) SELECT s FROM x", "current_setting"),
    ("SELECT id FROM tickets ORDER BY pg_sleep(0.1)", "pg_sleep"),
    ("SELECT count(*) FROM tickets GROUP BY id HAVING pg_sleep(1) IS NULL", "pg_sleep"),
    ("SELECT sum(id) OVER (PARTITION BY pg_backend_pid()) FROM tickets", "pg_backend_pid"),
    ("SELECT coalesce(NULL, pg_read_file('x'))", "pg_read_file"),
    ("SELECT CASE WHEN id > 0 THEN version() END FROM tickets", "version"),
    ("SELECT id FROM tickets UNION SELECT length(pg_ls_dir('.')) ", "pg_ls_dir"),
    # casts that look things up in catalogs or parse documents, and user-defined types
    ("SELECT 'pg_authid'::regclass", "regclass"),
    ("SELECT 'pg_sleep'::regproc", "regproc"),
    ("SELECT CAST('<a/>' AS xml)", "xml"),
    ("SELECT subject::my_type FROM tickets", "my_type"),
    # operators written as function calls
    ("SELECT 1 OPERATOR(pg_catalog.+) 2", "OPERATOR"),
    ("SELECT id FROM tickets TABLESAMPLE SYSTEM (10)", "TABLESAMPLE"),
    # calls whose size argument builds arbitrarily large values
    ("SELECT repeat('x', 1000000000)", "repeat"),
    ("SELECT repeat(subject, id) FROM tickets", "repeat"),
    ("SELECT lpad('x', 100000000)", "lpad"),
    ("SELECT rpad(subject, 2147483647, 'y') FROM tickets", "rpad"),
]


@pytest.mark.parametrize(("sql", "name"), REFUSED_POSTGRES)
def test_postgres_calls_outside_the_allow_list_are_refused_by_name(sql, name):
    _assert_refused_naming(sql, name)


REFUSED_SQLITE = [
    ("SELECT load_extension('/tmp/evil.so')", "load_extension"),
    ("SELECT readfile('/etc/passwd')", "readfile"),
    ("SELECT writefile('/tmp/x', 'data')", "writefile"),
    ("SELECT edit('x')", "edit"),
    ("SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),
    ("SELECT randomblob(1000000000)", "randomblob"),
    ("SELECT zeroblob(1000000000)", "zeroblob"),
    ("SELECT printf('%.*c', 1000000000, 'x')", "printf"),
    ("SELECT format('%1000000000d', 1)", "format"),
    ("SELECT sqlite_version()", "sqlite_version"),
    ("SELECT sqlite_compileoption_used('ENABLE_LOAD_EXTENSION')", "sqlite_compileoption_used"),
    ("SELECT changes()", "changes"),
    ("SELECT last_insert_rowid()", "last_insert_rowid"),
    ("SELECT * FROM pragma_table_info('tickets')", "pragma_table_info"),
    ("SELECT * FROM pragma_database_list", "sqlite"),
    ("SELECT * FROM json_each('[1, 2]')", "json_each"),
    ("SELECT * FROM json_tree('{}')", "json_tree"),
    ("SELECT * FROM generate_series(1, 10)", "generate_series"),
    ("SELECT * FROM sqlite_master", "sqlite_master"),
    ("SELECT * FROM sqlite_schema", "sqlite_schema"),
    ("SELECT * FROM temp.sqlite_master", "temp"),
    ("SELECT * FROM main.sqlite_master", "sqlite_master"),
    ("SELECT main.lower(subject) FROM tickets", "lower"),
    ("SELECT CAST(load_extension('x') AS TEXT)", "load_extension"),
    ("SELECT id FROM tickets WHERE id IN (SELECT length(readfile('/etc/passwd')))", "readfile"),
    # SQLite's other parameter spellings, which sqlglot reads as names
    ("SELECT * FROM tickets WHERE id = $p", "parameters"),
    ("SELECT * FROM tickets WHERE id = @p", "parameters"),
]


@pytest.mark.parametrize(("sql", "name"), REFUSED_SQLITE)
def test_sqlite_calls_outside_the_allow_list_are_refused_by_name(sql, name):
    if name == "sqlite":  # pragma_database_list without parentheses is an unexposed table
        verdict = check(sql, "sqlite")
        assert verdict.allowed is False and "pragma_database_list" in verdict.reason
        return
    _assert_refused_naming(sql, name, "sqlite")


def test_size_arguments_up_to_the_cap_are_allowed():
    assert check(f"SELECT repeat('-', {MAX_SIZE_ARGUMENT})").allowed
    assert check("SELECT lpad(subject, 20, '.'), rpad(subject, 20) FROM tickets").allowed
    assert not check(f"SELECT repeat('-', {MAX_SIZE_ARGUMENT + 1})").allowed


ALLOWED_POSTGRES = [
    "SELECT count(*), count(DISTINCT status), sum(amount), avg(amount), min(amount), max(amount) FROM charges",
    "SELECT string_agg(subject, ', ' ORDER BY id), array_agg(id), bool_and(id > 0), bool_or(id > 5) FROM tickets",
    "SELECT stddev(amount), variance(amount), corr(amount, id), percentile_cont(0.5) WITHIN GROUP (ORDER BY amount),"
    " mode() WITHIN GROUP (ORDER BY status) FROM charges",
    "SELECT id, row_number() OVER w, rank() OVER w, dense_rank() OVER w, lag(id) OVER w, lead(id, 1) OVER w,"
    " first_value(id) OVER w, ntile(2) OVER w, cume_dist() OVER w FROM tickets WINDOW w AS (ORDER BY id)",
    "SELECT abs(-amount), round(amount, 1), ceil(amount), floor(amount), trunc(amount), sqrt(amount),"
    " power(amount, 2), mod(id, 2), sign(amount), ln(amount), log(amount), exp(1), greatest(id, 2), least(id, 2)"
    " FROM charges",
    "SELECT lower(name), upper(name), initcap(name), length(name), substring(name, 1, 3), substr(name, 2),"
    " trim(name), replace(name, 'a', 'b'), concat(name, '!'), concat_ws('-', name, email), left(name, 2),"
    " right(name, 2), position('a' IN name), strpos(name, 'a'), split_part(email, '@', 2), reverse(name),"
    " lpad(name, 20, '.'), regexp_replace(name, '[aeiou]', '_', 'g'), md5(name), to_char(created_at, 'YYYY')"
    " FROM customers",
    "SELECT date_trunc('day', created_at), extract(year FROM created_at), date_part('month', created_at), now(),"
    " current_date, current_timestamp, age(created_at), created_at + interval '1 day', make_date(2024, 1, 2)"
    " FROM tickets",
    "SELECT coalesce(email, 'none'), nullif(company, ''), CASE WHEN id > 1 THEN 'b' ELSE 'a' END,"
    " CAST(id AS text), id::bigint, created_at::date, '2024-01-01'::timestamptz, id::numeric(10, 2)"
    " FROM customers",
    "SELECT json_build_object('id', id, 'name', name), to_jsonb(name), ARRAY[id, 2] FROM customers",
    "SELECT status, GROUPING(status), count(*) FROM tickets GROUP BY ROLLUP (status)",
    "SELECT count(*) FILTER (WHERE status = 'open') FROM tickets WHERE subject ~* 'refund' OR subject ILIKE '%a%'",
]


@pytest.mark.parametrize("sql", ALLOWED_POSTGRES)
def test_allowed_postgres_calls_pass_and_run(pg_tables, sql):
    verdict = check(sql)
    assert verdict.allowed is True, verdict.reason
    connector = connectors.connector_for(
        connectors.ConnectionSpec(
            type="postgresql",
            config=ConnectionConfig(host=pg_tables["host"], port=pg_tables["port"], database=pg_tables["database"]),
            credentials={"user": pg_tables["user"], "password": pg_tables["password"]},
        )
    )
    result = connector.run_read_query(sql=verdict.sql)
    assert result.columns and result.rows


ALLOWED_SQLITE = [
    "SELECT count(*), sum(amount), total(amount), avg(amount), min(amount), max(amount) FROM charges",
    "SELECT group_concat(subject, ', '), count(DISTINCT priority) FROM tickets",
    "SELECT id, row_number() OVER (ORDER BY id), rank() OVER (ORDER BY id), lag(id) OVER (ORDER BY id) FROM tickets",
    "SELECT abs(-amount), round(amount, 1), max(id, 2), min(id, 2) FROM charges",
    "SELECT lower(name), upper(name), length(name), substr(name, 1, 3), trim(name), replace(name, 'a', 'b'),"
    " instr(name, 'a'), name || '!' FROM customers",
    "SELECT date(created_at), datetime(created_at), julianday(created_at), strftime('%Y', created_at) FROM tickets",
    "SELECT coalesce(email, 'none'), ifnull(company, ''), nullif(company, ''), iif(id > 1, 'b', 'a'),"
    " CASE WHEN id > 1 THEN 1 END, CAST(id AS TEXT), typeof(id) FROM customers",
    "SELECT json_object('id', id), json_extract(json_object('n', name), '$.n') FROM customers",
]


@pytest.mark.parametrize("sql", ALLOWED_SQLITE)
def test_allowed_sqlite_calls_pass_and_run(sqlite_file, sql):
    verdict = check(sql, "sqlite")
    assert verdict.allowed is True, verdict.reason
    connector = connectors.connector_for(
        connectors.ConnectionSpec(type="sqlite", config=ConnectionConfig(path=str(sqlite_file)))
    )
    result = connector.run_read_query(sql=verdict.sql)
    assert result.columns and result.rows


def test_the_allow_lists_hold_no_dangerous_names():
    dangerous = {
        "pg_sleep", "pg_read_file", "current_setting", "set_config", "version", "query_to_xml", "dblink",
        "generate_series", "unnest", "json_each", "load_extension", "readfile", "writefile", "randomblob",
        "zeroblob", "printf", "format", "nextval", "lo_import", "txid_current",
    }
    for dialect, names in ALLOWED_FUNCTIONS.items():
        assert not names & dangerous, dialect
        assert not any(name.startswith(("pg_", "lo_", "dblink", "sqlite_", "pragma_")) for name in names), dialect
