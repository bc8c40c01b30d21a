"""Identifiers are normalized before policies compare them.

A table name reaches a table by the dialect's own folding (PostgreSQL: unquoted to
lower case, quoted kept; SQLite: ASCII case ignored), and a policy on ``canary``
matches the table however a query or a write-back call spelled it: ``Canary``,
``"CANARY"``, ``public.canary``, ``"public"."Canary"``, ``main.canary``, ``[Canary]``.
"""

from __future__ import annotations

import sqlite3

import pytest

from datasources import services
from datasources.identifiers import identifier_fold, identifier_key, policy_name_key, table_resolve
from datasources.services import data_source_create
from datasources.sqlguard import query_check
from governance.checker import auto_approve_matches, check_query_result, check_tool_call
from rivercore.errors import InvalidInput
from rivercore.types.governance import Decision
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect, pg_count, sqlite_count
from tests.governance.policy_support import facts, policy

# --- the dialects' folding ---------------------------------------------------------------------------


def test_postgres_folds_unquoted_names_and_keeps_quoted_ones():
    assert identifier_fold(name="Canary", quoted=False, dialect="postgresql") == "canary"
    assert identifier_fold(name="Canary", quoted=True, dialect="postgresql") == "Canary"
    assert identifier_fold(name="ÉTÉ", quoted=False, dialect="postgresql") == "ÉtÉ"  # ASCII letters only
    assert table_resolve(name="CANARY", quoted=False, exposed=["canary"], dialect="postgresql") == "canary"
    assert table_resolve(name="CANARY", quoted=True, exposed=["canary"], dialect="postgresql") is None
    assert table_resolve(name="Canary", quoted=True, exposed=["canary", "Canary"], dialect="postgresql") == "Canary"


def test_sqlite_ignores_ascii_case_quoted_or_not():
    for quoted in (False, True):
        assert table_resolve(name="CANARY", quoted=quoted, exposed=["canary"], dialect="sqlite") == "canary"
        assert table_resolve(name="canary", quoted=quoted, exposed=["Canary"], dialect="sqlite") == "Canary"


def test_policy_keys_drop_quotes_schema_case_and_unicode_form():
    for spelling in ("canary", "Canary", '"CANARY"', "public.canary", '"public"."Canary"', "main.canary",
                     "[Canary]", "`CANARY`", "PUBLIC.CANARY", " canary "):
        assert policy_name_key(spelling) == "canary", spelling
    assert identifier_key("ＣＡＮＡＲＹ") == "canary"  # full-width letters (NFKC)
    assert policy_name_key("my table") == "my table"  # not SQL syntax: keyed as it stands


# --- the guard resolves every spelling ----------------------------------------------------------------

POSTGRES_REACHES_CANARY = ["canary", "Canary", "CANARY", '"canary"', "public.canary", "PUBLIC.Canary",
                           '"public"."canary"', 'public."canary"', '"public".CANARY']
POSTGRES_MISSES_CANARY = ['"Canary"', '"CANARY"', '"public"."Canary"', '"PUBLIC".canary', "other.canary"]
SQLITE_REACHES_CANARY = ["canary", "Canary", "CANARY", '"canary"', '"CANARY"', "[Canary]", "`CANARY`",
                         "main.canary", "MAIN.Canary", '"main"."Canary"', "[main].[CANARY]"]
SQLITE_MISSES_CANARY = ["temp.canary", "aux.canary", '"canary "', "canary_x"]


@pytest.mark.parametrize("spelling", POSTGRES_REACHES_CANARY)
def test_postgres_spellings_that_reach_canary(spelling):
    verdict = query_check(sql=f"SELECT * FROM {spelling}", dialect="postgresql", allowed_tables=["canary"])
    assert verdict.allowed is True, verdict.reason
    assert verdict.tables == ["canary"]


@pytest.mark.parametrize("spelling", POSTGRES_MISSES_CANARY)
def test_postgres_quoted_other_case_or_schema_is_another_table(spelling):
    verdict = query_check(sql=f"SELECT * FROM {spelling}", dialect="postgresql", allowed_tables=["canary"])
    assert verdict.allowed is False
    assert "canary" in verdict.reason.lower()


@pytest.mark.parametrize("spelling", SQLITE_REACHES_CANARY)
def test_sqlite_spellings_that_reach_canary(spelling):
    verdict = query_check(sql=f"SELECT * FROM {spelling}", dialect="sqlite", allowed_tables=["canary"])
    assert verdict.allowed is True, verdict.reason
    assert verdict.tables == ["canary"]


@pytest.mark.parametrize("spelling", SQLITE_MISSES_CANARY)
def test_sqlite_other_schemas_and_names_are_refused(spelling):
    assert query_check(sql=f"SELECT * FROM {spelling}", dialect="sqlite", allowed_tables=["canary"]).allowed is False


def test_a_mixed_case_postgres_table_is_reached_only_quoted_and_reported_as_spelled():
    exposed = ["canary", "MixedCase"]
    quoted = query_check(sql='SELECT * FROM "MixedCase"', dialect="postgresql", allowed_tables=exposed)
    assert quoted.allowed and quoted.tables == ["MixedCase"]
    bare = query_check(sql="SELECT * FROM MixedCase", dialect="postgresql", allowed_tables=exposed)
    assert bare.allowed is False and '"MixedCase"' in bare.reason


# --- policies match every spelling -------------------------------------------------------------------

CANARY_POLICIES = [
    "table.name == 'canary'",
    "table.name == 'Canary'",
    "table.name == '\"public\".\"CANARY\"'",
    "'CANARY' IN query.tables",
    "table.name IN ['public.canary', 'other']",
]


@pytest.mark.parametrize("expression", CANARY_POLICIES)
@pytest.mark.parametrize("reported", ["canary", "Canary", "CANARY", "ＣＡＮＡＲＹ"])
def test_export_policies_on_canary_match_however_the_table_is_spelled(expression, reported):
    spec = policy(expression, "block", "data_export_limit")
    call = facts(policies=[spec], tool_name="execute_query", writes=False)
    result = check_query_result(facts=call, rows=1, tables=["tickets", reported], classifications={})
    assert result.decision == Decision.BLOCKED
    other = check_query_result(facts=call, rows=1, tables=["tickets"], classifications={})
    assert other.decision == Decision.PROCEED


def test_classifications_are_found_whatever_the_spelling():
    spec = policy("table.classification == 'pii'", "block", "data_export_limit")
    call = facts(policies=[spec], tool_name="execute_query", writes=False)
    for schema_spelling, reported in (("Canary", "canary"), ("canary", "CANARY"), ("CANARY", '"public"."canary"')):
        result = check_query_result(facts=call, rows=1, tables=[reported], classifications={schema_spelling: "pii"})
        assert result.decision == Decision.BLOCKED, (schema_spelling, reported)


WRITE_BACK_SPELLINGS = ["canary", "Canary", '"CANARY"', "public.canary", '"public"."Canary"', "main.canary",
                        "[Canary]", "PUBLIC.CANARY"]


@pytest.mark.parametrize("spelling", WRITE_BACK_SPELLINGS)
def test_write_back_policies_match_the_table_argument_in_every_spelling(spelling):
    spec = policy("tool.name == 'write_back' AND args.table_name == 'canary'", "block")
    arguments = {"data_source_id": 1, "table_name": spelling, "operation": "delete", "data": {},
                 "conditions": {"id": 1}}
    assert check_tool_call(facts(policies=[spec], arguments=arguments)).decision == Decision.BLOCKED
    elsewhere = {**arguments, "table_name": "tickets"}
    assert check_tool_call(facts(policies=[spec], arguments=elsewhere)).decision == Decision.PROCEED


def test_an_allow_list_policy_is_not_escaped_by_spelling():
    """``NOT IN`` policies (block every table but scratch) treat the spellings alike too."""
    spec = policy("tool.name == 'write_back' AND args.table_name NOT IN ['scratch']", "block")
    for spelling, decision in (('"SCRATCH"', Decision.PROCEED), ("public.Scratch", Decision.PROCEED),
                               ("Canary", Decision.BLOCKED), ('"scratch_2"', Decision.BLOCKED)):
        call = facts(policies=[spec], arguments={"table_name": spelling, "operation": "insert", "data": {"a": 1}})
        assert check_tool_call(call).decision == decision, spelling


def test_write_back_column_names_are_folded_for_policies():
    spec = policy("args.data.ssn != null OR args.conditions.ssn != null", "block")
    for arguments in ({"table_name": "people", "data": {"SSN": "078-05-1120"}},
                      {"table_name": "people", "data": {"name": "x"}, "conditions": {"sSn": "1"}}):
        assert check_tool_call(facts(policies=[spec], arguments=arguments)).decision == Decision.BLOCKED
    clean = {"table_name": "people", "data": {"name": "x"}}
    assert check_tool_call(facts(policies=[spec], arguments=clean)).decision == Decision.PROCEED


def test_auto_approval_is_not_granted_by_respelling_the_table():
    condition = "args.table_name != null AND args.table_name != 'canary'"
    for spelling in WRITE_BACK_SPELLINGS:
        assert auto_approve_matches(condition=condition, facts={"args": {"table_name": spelling}}) is False
    assert auto_approve_matches(condition=condition, facts={"args": {"table_name": "tickets"}}) is True


# --- against real databases -----------------------------------------------------------------------------


@pytest.fixture
def pg_canary(workspace, pg_tables):
    with pg_admin_connect(pg_tables) as conn:
        conn.execute("CREATE TABLE canary (id integer PRIMARY KEY, secret text)")
        conn.execute("INSERT INTO canary VALUES (1, 'tweet'), (2, 'chirp')")
        conn.execute('CREATE TABLE "MixedCase" (id integer PRIMARY KEY)')
        conn.execute('INSERT INTO "MixedCase" VALUES (7)')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON canary, "MixedCase" TO "{pg_tables["user"]}"')
    source = data_source_create(
        workspace=workspace,
        name="Canary PG",
        type="postgresql",
        connection_config={"host": pg_tables["host"], "port": pg_tables["port"], "database": pg_tables["database"]},
        credentials={"user": pg_tables["user"], "password": pg_tables["password"]},
        access_level="read_write",
    )
    services.data_source_discover(data_source=source)
    return source


@pytest.fixture
def sqlite_canary(workspace, sqlite_file):
    conn = sqlite3.connect(sqlite_file)
    conn.executescript("CREATE TABLE canary (id INTEGER PRIMARY KEY, secret TEXT);"
                       "INSERT INTO canary VALUES (1, 'tweet'), (2, 'chirp');")
    conn.close()
    source = data_source_create(workspace=workspace, name="Canary SQLite", type="sqlite",
                                connection_config={"path": sqlite_file.name}, credentials={}, access_level="read_write")
    services.data_source_discover(data_source=source)
    return source


def _blocked_by_canary_policy(tables: list[str]) -> bool:
    spec = policy("table.name == 'canary'", "block", "data_export_limit")
    call = facts(policies=[spec], tool_name="execute_query", writes=False)
    return check_query_result(facts=call, rows=1, tables=tables, classifications={}).decision == Decision.BLOCKED


@pytest.mark.parametrize("spelling", POSTGRES_REACHES_CANARY)
def test_postgres_queries_in_every_spelling_read_canary_and_hit_its_policy(pg_canary, spelling):
    result = services.query_execute(data_source=pg_canary, query=f"SELECT secret FROM {spelling} ORDER BY id")
    assert result.rows == [["tweet"], ["chirp"]]
    assert _blocked_by_canary_policy(result.tables)


def test_postgres_quoted_mixed_case_table_runs_when_quoted_as_created(pg_canary):
    result = services.query_execute(data_source=pg_canary, query='SELECT id FROM public."MixedCase"')
    assert result.rows == [[7]] and result.tables == ["MixedCase"]


@pytest.mark.parametrize("spelling", SQLITE_REACHES_CANARY)
def test_sqlite_queries_in_every_spelling_read_canary_and_hit_its_policy(sqlite_canary, spelling):
    result = services.query_execute(data_source=sqlite_canary, query=f"SELECT secret FROM {spelling} ORDER BY id")
    assert result.rows == [["tweet"], ["chirp"]]
    assert _blocked_by_canary_policy(result.tables)


@pytest.mark.parametrize("spelling", ["canary", "Canary", "CANARY", "public.canary", '"public"."canary"'])
def test_postgres_write_back_resolves_the_table_like_sql(pg_canary, pg_tables, spelling):
    written = services.write_back_execute(data_source=pg_canary, table_name=spelling, operation="update",
                                          data={"SECRET": "hush"}, conditions={"Id": 1})
    assert written.rows_affected == 1
    assert pg_count(pg_tables, "SELECT count(*) FROM canary WHERE secret = 'hush'") == 1


@pytest.mark.parametrize("spelling", ["canary", "CANARY", '"Canary"', "[Canary]", "main.canary", "MAIN.Canary"])
def test_sqlite_write_back_resolves_the_table_like_sql(sqlite_canary, sqlite_file, spelling):
    written = services.write_back_execute(data_source=sqlite_canary, table_name=spelling, operation="update",
                                          data={"secret": "hush"}, conditions={"id": 2})
    assert written.rows_affected == 1
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM canary WHERE secret = 'hush'") == 1


@pytest.mark.parametrize("spelling", ['"CANARY"', '"public"."Canary"', "other.canary", "otherdb.public.canary",
                                      "canary; DROP TABLE canary", "canary --", "", "  ", "x" * 2000])
def test_postgres_write_back_refuses_other_tables_and_schemas_naming_the_field(pg_canary, pg_tables, spelling):
    with pytest.raises(InvalidInput) as caught:
        services.write_back_execute(data_source=pg_canary, table_name=spelling, operation="delete", data={},
                                    conditions={"id": 1})
    assert "table_name" in caught.value.details
    assert pg_count(pg_tables, "SELECT count(*) FROM canary") == 2


def test_write_back_refuses_a_column_given_twice_in_different_case(sqlite_canary, sqlite_file):
    with pytest.raises(InvalidInput) as caught:
        services.write_back_execute(data_source=sqlite_canary, table_name="canary", operation="update",
                                    data={"secret": "a", "SECRET": "b"}, conditions={"id": 1})
    assert "data.secret" in caught.value.details
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM canary WHERE secret IN ('a', 'b')") == 0
