"""The PostgreSQL and SQLite connectors against real databases: test, discover, query, write."""

from __future__ import annotations

import pytest

from datasources import connectors
from rivercore.types.datasources import ConnectionConfig
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_count, sqlite_count


def pg_connector(pg, **config) -> connectors.PostgresConnector:
    spec = connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host=pg["host"], port=pg["port"], database=pg["database"], **config),
        credentials={"user": pg["user"], "password": pg["password"]},
    )
    return connectors.connector_for(spec)


def sqlite_connector(path, **config) -> connectors.SQLiteConnector:
    return connectors.connector_for(
        connectors.ConnectionSpec(type="sqlite", config=ConnectionConfig(path=str(path), **config))
    )


# --- test_connection ----------------------------------------------------------------------


def test_postgres_connection_reports_latency(pg_tables):
    result = pg_connector(pg_tables).test_connection()
    assert result.success is True
    assert result.latency_ms >= 0
    assert result.message.startswith("Connected to PostgreSQL")
    assert "superuser" not in result.message


def test_postgres_failure_is_clear_and_never_shows_the_password(pg_tables):
    password = "hunter2-very-secret-value"
    spec = connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host="127.0.0.1", port=1, database="nowhere"),
        credentials={"user": "someone", "password": password},
    )
    result = connectors.connector_for(spec).test_connection()
    assert result.success is False
    assert result.message.startswith("Connection refused")
    assert password not in result.message
    assert password not in repr(spec)


def test_postgres_unknown_database_is_reported_by_class(pg_tables):
    result = pg_connector({**pg_tables, "database": "river_no_such_db"}).test_connection()
    assert result.success is False
    assert result.message.startswith("Not found: the server has no such database")


def test_sqlite_connection_and_missing_file(sqlite_file):
    assert sqlite_connector(sqlite_file).test_connection().success is True
    missing = sqlite_connector(sqlite_file.parent / "absent.sqlite3").test_connection()
    assert missing.success is False
    assert "not found" in missing.message
    assert not (sqlite_file.parent / "absent.sqlite3").exists()  # a read-only open never creates the file


# --- discover ---------------------------------------------------------------------------------


def _by_name(tables):
    return {t.table_name: t for t in tables}


def test_postgres_discover_tables_columns_keys_and_estimates(pg_tables):
    tables = _by_name(pg_connector(pg_tables).discover())
    assert set(tables) == {"customers", "tickets", "charges"}
    tickets = {c.column_name: c for c in tables["tickets"].columns}
    assert list(tickets) == ["id", "customer_id", "subject", "priority", "status", "created_at"]
    assert tickets["id"].is_primary_key and not tickets["id"].is_nullable
    assert tickets["customer_id"].foreign_key == "customers.id"
    assert tickets["created_at"].data_type == "timestamp with time zone"
    assert tables["tickets"].row_estimate == 6  # reltuples after ANALYZE
    charges = {c.column_name: c for c in tables["charges"].columns}
    assert charges["amount"].data_type == "numeric(10,2)"
    assert charges["status"].is_nullable is True
    assert tables["customers"].description == "People and companies we support"


def test_sqlite_discover_counts_rows(sqlite_file):
    tables = _by_name(sqlite_connector(sqlite_file).discover())
    assert set(tables) == {"customers", "tickets", "charges"}
    assert tables["tickets"].row_estimate == 6
    assert tables["customers"].row_estimate == 3
    tickets = {c.column_name: c for c in tables["tickets"].columns}
    assert tickets["id"].is_primary_key
    assert tickets["customer_id"].foreign_key == "customers.id"
    assert tickets["subject"].is_nullable is False
    assert tickets["subject"].data_type == "text"


# --- read queries -------------------------------------------------------------------------------


def test_postgres_query_binds_parameters_and_reports_truncation(pg_tables):
    connector = pg_connector(pg_tables)
    result = connector.run_read_query(
        sql="SELECT id, subject FROM tickets WHERE priority = $1 AND status = $2 ORDER BY id",
        parameters=["high", "open"],
        max_rows=10,
    )
    assert result.columns == ["id", "subject"]
    assert result.rows == [[1, "Cannot log in"], [2, "Refund request"], [3, "Invoice missing"]]
    assert result.truncated is False
    capped = connector.run_read_query(sql="SELECT id FROM tickets ORDER BY id", max_rows=4)
    assert capped.rows == [[1], [2], [3], [4]]
    assert capped.truncated is True
    exact = connector.run_read_query(sql="SELECT id FROM tickets", max_rows=6)
    assert len(exact.rows) == 6 and exact.truncated is False


def test_postgres_parameters_are_never_interpreted_as_sql(pg_tables):
    result = pg_connector(pg_tables).run_read_query(
        sql="SELECT count(*) FROM tickets WHERE subject = $1", parameters=["x' OR '1'='1"]
    )
    assert result.rows == [[0]]


def test_postgres_values_are_json_ready(pg_tables):
    result = pg_connector(pg_tables).run_read_query(sql="SELECT amount, created_at FROM charges WHERE id = 1")
    amount, created_at = result.rows[0]
    assert amount == 120.5
    assert isinstance(created_at, str) and "T" in created_at


def test_postgres_statement_timeout_cancels(pg_tables):
    with pytest.raises(connectors.QueryTimeout):
        pg_connector(pg_tables).run_read_query(sql="SELECT count(*) FROM generate_series(1, 500000000)", timeout_ms=200)


def test_sqlite_query_with_named_parameters_and_cap(sqlite_file):
    connector = sqlite_connector(sqlite_file)
    result = connector.run_read_query(
        sql="SELECT id FROM tickets WHERE priority = :p ORDER BY id", parameters={"p": "high"}, max_rows=2
    )
    assert result.rows == [[1], [2]]
    assert result.truncated is True


def test_sqlite_timeout_interrupts_long_query(sqlite_file):
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) SELECT count(*) FROM n"
    with pytest.raises(connectors.QueryTimeout):
        sqlite_connector(sqlite_file).run_read_query(sql=slow, timeout_ms=150)


# --- writes -----------------------------------------------------------------------------------------


def test_postgres_write_insert_update_delete(pg_tables):
    connector = pg_connector(pg_tables)
    inserted = connector.run_write(
        table="tickets",
        operation="insert",
        rows=[
            {"customer_id": 1, "subject": "New", "priority": "low", "status": "open"},
            {"customer_id": 2, "subject": "Newer", "priority": "low", "status": "open"},
        ],
    )
    assert inserted == 2
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets") == 8
    updated = connector.run_write(
        table="tickets", operation="update", rows=[{"status": "closed"}], conditions={"priority": "low"}
    )
    assert updated == 3
    deleted = connector.run_write(table="tickets", operation="delete", rows=[], conditions={"id": [101, 102]})
    assert deleted == 2
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE status = 'closed'") == 2


def test_postgres_write_rolls_back_as_a_whole(pg_tables):
    connector = pg_connector(pg_tables)
    with pytest.raises(connectors.QueryFailed):
        connector.run_write(
            table="tickets",
            operation="insert",
            rows=[
                {"customer_id": 1, "subject": "ok", "priority": "low", "status": "open"},
                {"customer_id": 999, "subject": "bad fk", "priority": "low", "status": "open"},
            ],
        )
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets") == 6


def test_sqlite_write_insert_update_delete(sqlite_file):
    connector = sqlite_connector(sqlite_file)
    assert (
        connector.run_write(
            table="charges", operation="insert", rows=[{"customer_id": 3, "amount": 5, "status": "paid"}]
        )
        == 1
    )
    assert (
        connector.run_write(
            table="charges", operation="update", rows=[{"status": "void"}], conditions={"status": "paid"}
        )
        == 3
    )
    assert connector.run_write(table="charges", operation="delete", rows=[], conditions={"status": None}) == 0
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM charges WHERE status = 'void'") == 3


def test_write_without_conditions_is_refused_by_the_builder(sqlite_file):
    with pytest.raises(connectors.ConnectorError):
        sqlite_connector(sqlite_file).run_write(table="charges", operation="delete", rows=[], conditions={})
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM charges") == 4
