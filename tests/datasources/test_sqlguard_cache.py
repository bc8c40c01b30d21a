"""The guard keeps verdicts by statement, dialect, allowed tables and schema: a repeated
check is not parsed again, anything that could change the verdict is a different entry,
and no caller can change what the next one gets."""

from __future__ import annotations

from unittest import mock

import sqlglot

from datasources import sqlguard
from datasources.sqlguard import VERDICT_CACHE_MAX_CHARS, query_check

SQL = "SELECT count(*) AS n FROM tickets WHERE status = :status -- cache test {}"


def _parses():
    return mock.patch.object(sqlguard.sqlglot, "parse", wraps=sqlglot.parse)


def test_a_repeated_statement_is_not_parsed_again():
    sql = SQL.format("repeat")
    with _parses() as parse:
        first = query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"])
        second = query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"])
    assert first.allowed and second.allowed
    assert first == second
    assert parse.call_count == 1


def test_tables_dialect_and_schema_are_part_of_the_key():
    sql = SQL.format("key")
    allowed = query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"])
    refused = query_check(sql=sql, dialect="sqlite", allowed_tables=["customers"])
    assert allowed.allowed
    assert not refused.allowed and "not exposed" in refused.reason
    with _parses() as parse:
        query_check(sql=sql, dialect="postgresql", allowed_tables=["tickets"])
        query_check(sql=sql, dialect="postgresql", allowed_tables=["tickets"], schema_name="sales")
    assert parse.call_count == 2


def test_a_caller_changing_its_verdict_changes_nothing_for_the_next():
    sql = SQL.format("copy")
    first = query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"])
    first.tables.append("customers")
    first.parameter_names.clear()
    second = query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"])
    assert second.tables == ["tickets"]
    assert second.parameter_names == ["status"]


def test_long_statements_are_checked_every_time():
    sql = SQL.format("long " + "x" * VERDICT_CACHE_MAX_CHARS)
    with _parses() as parse:
        assert query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"]).allowed
        assert query_check(sql=sql, dialect="sqlite", allowed_tables=["tickets"]).allowed
    assert parse.call_count == 2
