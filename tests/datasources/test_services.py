"""Data source services: encryption at rest, validation, cache invalidation, guarded
queries and write-back rules, on real PostgreSQL and SQLite sources."""

from __future__ import annotations

import pytest

from common.crypto import decrypt_json
from datasources import services
from datasources.errors import DataSourceUnavailable, QueryRefused, QueryTimedOut
from datasources.models import DataSource
from datasources.types import DataSourceChanges
from rivercore.errors import Conflict, InvalidInput, PermissionDenied
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_count, sqlite_count


@pytest.fixture
def pg_discovered(pg_source):
    services.data_source_discover(data_source=pg_source)
    return pg_source


@pytest.fixture
def sqlite_discovered(sqlite_source):
    services.data_source_discover(data_source=sqlite_source)
    return sqlite_source


# --- create / update ------------------------------------------------------------------------------


def test_credentials_are_encrypted_at_rest(pg_source, pg_tables):
    stored = DataSource.objects.get(pk=pg_source.pk)
    assert pg_tables["password"] not in stored.credentials_encrypted
    assert decrypt_json(stored.credentials_encrypted) == {"user": pg_tables["user"], "password": pg_tables["password"]}
    assert stored.has_credentials


@pytest.mark.parametrize(
    ("kind", "config", "credentials", "field"),
    [
        ("postgresql", {"port": 5432}, {"user": "u"}, "connection_config.host"),
        ("postgresql", {"host": "h"}, {"user": "u"}, "connection_config.database"),
        ("postgresql", {"host": "h", "database": "d", "port": 70000}, {"user": "u"}, "connection_config.port"),
        ("postgresql", {"host": "h", "database": "d", "password": "x"}, {"user": "u"}, "connection_config.password"),
        ("postgresql", {"host": "h", "database": "d"}, {"password": "p"}, "credentials.user"),
        ("postgresql", {"host": "h", "database": "d"}, {"user": "u", "token": "t"}, "credentials.token"),
        ("sqlite", {}, {}, "connection_config.path"),
        ("sqlite", {"path": "db.sqlite3"}, {"user": "u"}, "credentials"),
        ("mongodb", {"host": "h"}, {}, "type"),
    ],
)
def test_create_refuses_bad_input_naming_the_field(workspace, sqlite_dir, kind, config, credentials, field):
    with pytest.raises(InvalidInput) as caught:
        services.data_source_create(
            workspace=workspace, name="x", type=kind, connection_config=config, credentials=credentials
        )
    assert field in caught.value.details
    assert DataSource.objects.count() == 0


def test_credential_values_never_appear_in_validation_errors(workspace):
    with pytest.raises(InvalidInput) as caught:
        services.data_source_create(
            workspace=workspace,
            name="x",
            type="postgresql",
            connection_config={"host": "h", "database": "d"},
            credentials={"user": "u", "password": 12345678987},
        )
    assert "12345678987" not in str(caught.value.details) + caught.value.message


def test_sqlite_path_must_stay_inside_the_data_directory(workspace, sqlite_dir, settings):
    river_own_sqlite = settings.VAR_DIR / "river.sqlite3"
    for path in ["/etc/passwd", "../outside.sqlite3", str(river_own_sqlite), "."]:
        with pytest.raises(InvalidInput) as caught:
            services.data_source_create(
                workspace=workspace, name="x", type="sqlite", connection_config={"path": path}, credentials={}
            )
        assert "connection_config.path" in caught.value.details


def test_duplicate_name_is_a_conflict(pg_source, workspace, pg_tables):
    with pytest.raises(Conflict):
        services.data_source_create(
            workspace=workspace,
            name="Support PG",
            type="postgresql",
            connection_config={"host": "h", "database": "d"},
            credentials={"user": "u"},
        )


def test_connection_update_invalidates_the_cached_schema(pg_discovered):
    assert pg_discovered.schema_discovered_at is not None
    services.data_source_update(data_source=pg_discovered, changes=DataSourceChanges(connection_config={"port": 5433}))
    stored = DataSource.objects.get(pk=pg_discovered.pk)
    assert stored.schema_cache == []
    assert stored.schema_discovered_at is None
    assert stored.status == DataSource.Status.UNTESTED
    assert stored.connection_config["port"] == 5433
    assert stored.connection_config["host"] == "127.0.0.1"  # merged, not replaced


def test_credential_update_invalidates_and_merges(pg_discovered, pg_tables):
    services.data_source_update(
        data_source=pg_discovered, changes=DataSourceChanges(credentials={"password": "rotated"})
    )
    stored = DataSource.objects.get(pk=pg_discovered.pk)
    assert stored.schema_discovered_at is None
    assert decrypt_json(stored.credentials_encrypted) == {"user": pg_tables["user"], "password": "rotated"}


def test_non_connection_update_keeps_the_cache(pg_discovered):
    services.data_source_update(
        data_source=pg_discovered, changes=DataSourceChanges(description="Support data", access_level="read_only")
    )
    stored = DataSource.objects.get(pk=pg_discovered.pk)
    assert stored.schema_discovered_at is not None
    assert len(stored.schema_cache) == 3
    assert stored.access_level == "read_only"


def test_update_refuses_unknown_fields():
    with pytest.raises(InvalidInput) as caught:
        DataSourceChanges(credentials_encrypted="x", status="connected")
    assert set(caught.value.details) == {"credentials_encrypted", "status"}


def test_delete(pg_source):
    services.data_source_delete(data_source=pg_source)
    assert not DataSource.objects.filter(pk=pg_source.pk).exists()


# --- test / discover ------------------------------------------------------------------------------------


def test_connection_test_records_status(pg_source, sqlite_source):
    result = services.data_source_test(data_source=pg_source)
    assert result.success and result.latency_ms >= 0
    assert DataSource.objects.get(pk=pg_source.pk).status == DataSource.Status.CONNECTED
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(connection_config={"port": 1}))
    failed = services.data_source_test(data_source=pg_source)
    assert failed.success is False
    stored = DataSource.objects.get(pk=pg_source.pk)
    assert stored.status == DataSource.Status.ERROR
    assert stored.status_message == failed.message


def test_discover_stores_the_schema_with_its_time(sqlite_source):
    sqlite_source.classifications = {"customers": "pii"}
    tables = services.data_source_discover(data_source=sqlite_source)
    stored = DataSource.objects.get(pk=sqlite_source.pk)
    assert stored.schema_discovered_at is not None
    assert [t["table_name"] for t in stored.schema_cache] == [t.table_name for t in tables]
    assert {t["table_name"]: t["classification"] for t in stored.schema_cache}["customers"] == "pii"


def test_discover_on_unreachable_source_is_unavailable(pg_source):
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(connection_config={"port": 1}))
    with pytest.raises(DataSourceUnavailable):
        services.data_source_discover(data_source=pg_source)
    assert DataSource.objects.get(pk=pg_source.pk).status == DataSource.Status.ERROR


# --- query -------------------------------------------------------------------------------------------------


def test_query_requires_a_discovered_schema(pg_source):
    with pytest.raises(QueryRefused, match="discover"):
        services.query_execute(data_source=pg_source, query="SELECT 1")


def test_query_on_postgres_with_parameters(pg_discovered):
    result = services.query_execute(
        data_source=pg_discovered,
        query="SELECT count(*) AS n FROM tickets WHERE priority = :p AND status = :s "
        "AND created_at >= now() - interval '24 hours'",
        parameters={"p": "high", "s": "open"},
    )
    assert result.columns == ["n"]
    assert result.rows == [[2]]
    assert result.total_rows == 1
    assert result.tables == ["tickets"]
    assert result.truncated is False
    assert result.execution_time_ms >= 0


def test_query_on_sqlite(sqlite_discovered):
    result = services.query_execute(
        data_source=sqlite_discovered,
        query="SELECT c.name, count(*) FROM tickets t JOIN customers c ON c.id = t.customer_id "
        "WHERE t.status = :s GROUP BY c.name ORDER BY c.name",
        parameters={"s": "open"},
    )
    assert result.rows == [["Ada Lovelace", 2], ["Alan Turing", 1], ["Grace Hopper", 1]]
    assert sorted(result.tables) == ["customers", "tickets"]


def test_row_cap_sets_truncated(pg_discovered):
    result = services.query_execute(data_source=pg_discovered, query="SELECT id FROM tickets ORDER BY id", max_rows=2)
    assert result.rows == [[1], [2]]
    assert result.total_rows == 2
    assert result.truncated is True


def test_statement_timeout_is_enforced(pg_discovered, sqlite_discovered):
    services.data_source_update(  # keeps the cache
        data_source=pg_discovered, changes=DataSourceChanges(description="x")
    )
    for source in (pg_discovered, sqlite_discovered):
        config = dict(source.connection_config)
        config["statement_timeout_ms"] = 200
        DataSource.objects.filter(pk=source.pk).update(connection_config=config)
        source.refresh_from_db()
    with pytest.raises(QueryTimedOut):
        services.query_execute(
            data_source=pg_discovered,
            query="WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500000000) "
            "SELECT count(*) FROM n",
        )
    with pytest.raises(QueryTimedOut):
        services.query_execute(
            data_source=sqlite_discovered,
            query="WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
            "SELECT count(*) FROM n",
        )


def test_guard_refusal_never_reaches_the_database(pg_discovered, pg_tables):
    with pytest.raises(QueryRefused) as caught:
        services.query_execute(data_source=pg_discovered, query="SELECT 1; DELETE FROM tickets")
    assert "query" in caught.value.details
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets") == 6


def test_tables_created_after_discovery_are_not_exposed(pg_discovered, pg_tables):
    from tests.datasources.fixtures import pg_admin_connect

    with pg_admin_connect(pg_tables) as conn:
        conn.execute("CREATE TABLE salaries (id int)")
        conn.execute(f'GRANT SELECT ON salaries TO "{pg_tables["user"]}"')
    with pytest.raises(QueryRefused, match="salaries"):
        services.query_execute(data_source=pg_discovered, query="SELECT * FROM salaries")


@pytest.mark.parametrize(
    ("parameters", "field"),
    [({}, "parameters.p"), ({"p": "high", "q": 1}, "parameters.q"), ({"p": {"nested": 1}}, "parameters.p")],
)
def test_parameters_must_match_the_placeholders(pg_discovered, parameters, field):
    with pytest.raises(InvalidInput) as caught:
        services.query_execute(
            data_source=pg_discovered, query="SELECT id FROM tickets WHERE priority = :p", parameters=parameters
        )
    assert field in caught.value.details


def test_max_rows_is_bounded(pg_discovered):
    for bad in (0, -1, services.MAX_ROWS_LIMIT + 1):
        with pytest.raises(InvalidInput) as caught:
            services.query_execute(data_source=pg_discovered, query="SELECT 1", max_rows=bad)
        assert "max_rows" in caught.value.details


# --- write-back ---------------------------------------------------------------------------------------------


def test_write_back_insert_update_delete_on_postgres(pg_discovered, pg_tables):
    inserted = services.write_back_execute(
        data_source=pg_discovered,
        table_name="tickets",
        operation="insert",
        data={"customer_id": 3, "subject": "Escalated", "priority": "high", "status": "open"},
    )
    assert inserted.success and inserted.rows_affected == 1
    updated = services.write_back_execute(
        data_source=pg_discovered,
        table_name="tickets",
        operation="update",
        data={"status": "pending"},
        conditions={"priority": "high", "status": "open"},
    )
    assert updated.rows_affected == 4
    deleted = services.write_back_execute(
        data_source=pg_discovered,
        table_name="tickets",
        operation="delete",
        data={},
        conditions={"id": [4, 6]},
    )
    assert deleted.rows_affected == 2
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE status = 'pending'") == 4
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets") == 5


def test_write_back_on_sqlite(sqlite_discovered, sqlite_file):
    result = services.write_back_execute(
        data_source=sqlite_discovered,
        table_name="TICKETS",
        operation="update",
        data={"Status": "closed"},
        conditions={"id": 1},
    )
    assert result.rows_affected == 1
    assert "tickets" in result.message
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'closed'") == 2


@pytest.mark.parametrize(
    ("table", "operation", "data", "conditions", "field"),
    [
        ("secrets", "insert", {"a": 1}, None, "table_name"),
        ("tickets", "insert", {"subject": "x", "hacked": True}, None, "data.hacked"),
        ("tickets", "update", {"status": "closed"}, None, "conditions"),
        ("tickets", "update", {"status": "closed"}, {}, "conditions"),
        ("tickets", "delete", {}, None, "conditions"),
        ("tickets", "delete", {}, {"nope": 1}, "conditions.nope"),
        ("tickets", "update", {"status": "x"}, {"id": []}, "conditions.id"),
        ("tickets", "update", {}, {"id": 1}, "data"),
        ("tickets", "insert", [], None, "data"),
        ("tickets", "upsert", {"status": "x"}, None, "operation"),
    ],
)
def test_write_back_refusals(pg_discovered, pg_tables, table, operation, data, conditions, field):
    with pytest.raises(InvalidInput) as caught:
        services.write_back_execute(
            data_source=pg_discovered, table_name=table, operation=operation, data=data, conditions=conditions
        )
    assert field in caught.value.details
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE status = 'open'") == 4


def test_write_back_refused_on_read_only_source(pg_discovered, pg_tables):
    services.data_source_update(data_source=pg_discovered, changes=DataSourceChanges(access_level="read_only"))
    with pytest.raises(PermissionDenied):
        services.write_back_execute(
            data_source=pg_discovered,
            table_name="tickets",
            operation="update",
            data={"status": "closed"},
            conditions={"id": 1},
        )
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE status = 'closed'") == 1


def test_prompt_metadata_has_schema_and_current_labels_but_no_connection_details(sqlite_discovered, pg_discovered):
    from datasources.selectors import data_source_prompt_metadata

    services.data_source_update(
        data_source=pg_discovered, changes=DataSourceChanges(classifications={"customers": "pii"})
    )
    metadata = data_source_prompt_metadata(data_source=pg_discovered)
    assert set(metadata) == {"data_source_id", "name", "type", "status", "access_level", "schemas"}
    labels = {t["table_name"]: t["classification"] for t in metadata["schemas"]}
    assert labels == {"customers": "pii", "tickets": None, "charges": None}
    assert "127.0.0.1" not in str(metadata)
