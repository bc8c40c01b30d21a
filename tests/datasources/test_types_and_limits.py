"""Supported types, per-source limits with workspace defaults, row and byte caps,
the statement timeout, and text PostgreSQL cannot store."""

from __future__ import annotations

import json
import sqlite3

import pytest

from datasources import connectors, services
from datasources.errors import QueryTimedOut
from datasources.models import DataSource
from datasources.types import DataSourceChanges
from rivercore.errors import InvalidInput
from tests.datasources.fixtures import *  # noqa: F403

URL = "/api/v1/data-sources/"


# --- types ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mysql", "mongodb", "POSTGRESQL", "", "sqlite3"])
def test_an_unsupported_type_is_a_400_listing_the_supported_ones(api_client_for, owner, workspace, kind):
    body = {"workspace": workspace.pk, "name": "X", "type": kind, "connection_config": {"host": "db"}}
    response = api_client_for(owner).post(URL, body, format="json")
    assert response.status_code == 400, response.content
    problem = " ".join(response.json()["error"]["details"]["type"])
    assert "postgresql" in problem and "sqlite" in problem
    with pytest.raises(InvalidInput) as caught:
        services.data_source_create(workspace=workspace, name="X", type=kind, connection_config={}, credentials={})
    assert "supported types: postgresql, sqlite" in caught.value.details["type"][0]


def test_every_declared_type_has_a_connector():
    assert sorted(DataSource.Type.values) == list(connectors.SUPPORTED_TYPES)


def test_a_stored_type_without_a_connector_is_refused_not_guessed(sqlite_source):
    services.data_source_discover(data_source=sqlite_source)
    DataSource.objects.filter(pk=sqlite_source.pk).update(type="mysql")  # a row written around the services
    sqlite_source.refresh_from_db()
    with pytest.raises(InvalidInput) as caught:
        services.query_execute(data_source=sqlite_source, query="SELECT 1")
    assert "supported types: postgresql, sqlite" in caught.value.message


def test_the_query_dialect_is_the_connectors(sqlite_source, monkeypatch):
    services.data_source_discover(data_source=sqlite_source)
    seen = []
    real = services.query_check

    def spy(**kwargs):
        seen.append(kwargs["dialect"])
        return real(**kwargs)

    monkeypatch.setattr(services, "query_check", spy)
    monkeypatch.setattr(connectors.SQLiteConnector, "dialect", "sqlite")
    services.query_execute(data_source=sqlite_source, query="SELECT id FROM tickets")
    assert seen == ["sqlite"]


# --- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("query_row_limit", 0),
        ("query_row_limit", 100_001),
        ("query_row_limit", "many"),
        ("observation_byte_limit", 1023),
        ("observation_byte_limit", 2_000_000),
        ("query_timeout_seconds", 0),
        ("query_timeout_seconds", 301),
        ("query_timeout_seconds", 1.5),
    ],
)
def test_limits_out_of_range_are_a_400_naming_the_field(api_client_for, owner, sqlite_source, field, value):
    response = api_client_for(owner).patch(f"{URL}{sqlite_source.pk}/", {field: value}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    with pytest.raises(InvalidInput) as caught:
        services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(**{field: value}))
    assert field in caught.value.details


def test_limits_are_the_workspaces_until_the_source_sets_its_own(api_client_for, owner, workspace, sqlite_source):
    assert (sqlite_source.effective_row_limit, sqlite_source.effective_byte_limit) == (1000, 65536)
    assert sqlite_source.effective_timeout_ms == 30_000
    workspace.query_timeout_seconds = 12
    workspace.save()
    sqlite_source.refresh_from_db()
    assert sqlite_source.effective_timeout_ms == 12_000
    response = api_client_for(owner).patch(
        f"{URL}{sqlite_source.pk}/",
        {"query_row_limit": 5, "observation_byte_limit": 4096, "query_timeout_seconds": 7},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["query_row_limit"], body["observation_byte_limit"], body["query_timeout_seconds"]) == (5, 4096, 7)
    sqlite_source.refresh_from_db()
    assert (sqlite_source.effective_row_limit, sqlite_source.effective_byte_limit) == (5, 4096)
    assert sqlite_source.effective_timeout_ms == 7000
    assert services._spec(sqlite_source).timeout_ms == 7000
    response = api_client_for(owner).patch(f"{URL}{sqlite_source.pk}/", {"query_row_limit": None}, format="json")
    assert response.json()["query_row_limit"] is None
    sqlite_source.refresh_from_db()
    assert sqlite_source.effective_row_limit == 1000


def test_a_source_cannot_raise_its_byte_limit_above_the_workspaces(sqlite_source):
    services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(observation_byte_limit=1_048_576))
    assert sqlite_source.effective_byte_limit == 65536


# --- caps on results ------------------------------------------------------------------------------


@pytest.fixture
def wide(sqlite_source, sqlite_file):
    """2,500 rows of ~1 KB each (about 2.5 MB) in the source."""
    with sqlite3.connect(sqlite_file) as db:
        db.execute("CREATE TABLE wide (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO wide VALUES (?, ?)", ((i, "x" * 1000) for i in range(2500)))
    services.data_source_discover(data_source=sqlite_source)
    return sqlite_source


def test_rows_are_capped_at_the_source_limit_with_truncated(wide):
    services.data_source_update(data_source=wide, changes=DataSourceChanges(query_row_limit=3))
    result = services.query_execute(data_source=wide, query="SELECT id FROM wide ORDER BY id")
    assert [r[0] for r in result.rows] == [0, 1, 2]
    assert result.truncated is True and result.total_rows == 3
    assert "row limit" in result.note
    asked = services.query_execute(data_source=wide, query="SELECT id FROM wide ORDER BY id", max_rows=2)
    assert len(asked.rows) == 2
    small = services.query_execute(data_source=wide, query="SELECT id FROM wide WHERE id < 2")
    assert small.truncated is False and small.total_available == 2 and small.note is None


def test_the_default_row_cap_is_a_thousand(wide):
    result = services.query_execute(data_source=wide, query="SELECT id FROM wide")
    assert len(result.rows) == 1000 and result.truncated is True


def test_a_row_limit_above_the_max_rows_ceiling_still_applies(wide):
    services.data_source_update(data_source=wide, changes=DataSourceChanges(query_row_limit=20_000))
    result = services.query_execute(data_source=wide, query="SELECT id FROM wide")
    assert len(result.rows) == 2500 and result.truncated is False


def test_results_are_cut_at_the_byte_limit_with_a_note(wide):
    services.data_source_update(data_source=wide, changes=DataSourceChanges(observation_byte_limit=8192))
    result = services.query_execute(data_source=wide, query="SELECT id, body FROM wide")
    assert result.truncated is True
    assert "8192 bytes" in result.note
    assert len(json.dumps(result.rows)) <= 8192
    assert 1 <= len(result.rows) < 10


def test_one_huge_value_is_shortened_not_passed_on(sqlite_source, sqlite_file):
    with sqlite3.connect(sqlite_file) as db:
        db.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO blobs VALUES (1, ?)", ("y" * 5_000_000,))
    services.data_source_discover(data_source=sqlite_source)
    result = services.query_execute(data_source=sqlite_source, query="SELECT id, body FROM blobs")
    assert len(json.dumps(result.model_dump())) < 70_000
    assert result.rows[0][0] == 1 and result.rows[0][1].endswith("…[cut]")
    assert result.truncated is True


def test_postgres_reports_the_total_and_cuts_at_the_row_limit(pg_source):
    services.data_source_discover(data_source=pg_source)
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(query_row_limit=2))
    result = services.query_execute(data_source=pg_source, query="SELECT id FROM tickets ORDER BY id")
    assert len(result.rows) == 2 and result.truncated is True
    assert result.total_available == 6


def test_postgres_statement_timeout_comes_from_the_source(pg_source):
    services.data_source_discover(data_source=pg_source)
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(query_timeout_seconds=1))
    with pytest.raises(QueryTimedOut):
        services.query_execute(
            data_source=pg_source,
            query="WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
            "SELECT count(*) FROM n",
        )


# --- text PostgreSQL cannot store -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "a\x00b"}, "name"),
        ({"description": "ok\x00"}, "description"),
        ({"description": "lone \ud800"}, "description"),
        ({"classifications": {"tick\x00ets": "pii"}}, "classifications"),
        ({"classifications": {"tickets": "p\x00ii"}}, "classifications.tickets"),
        ({"connection_config": {"path": "x\x00y"}}, "connection_config.path"),
    ],
)
def test_nul_in_data_source_fields_is_a_400_naming_the_field(sqlite_source, changes, field):
    with pytest.raises(InvalidInput) as caught:
        services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(**changes))
    assert any(key.startswith(field) for key in caught.value.details), caught.value.details
    sqlite_source.refresh_from_db()
    assert "\x00" not in sqlite_source.name + sqlite_source.description


def test_nul_in_rows_is_escaped_so_results_can_be_stored(sqlite_source, sqlite_file):
    with sqlite3.connect(sqlite_file) as db:
        db.execute("UPDATE customers SET name = ? WHERE id = 1", ("Ada\x00Lovelace",))
    services.data_source_discover(data_source=sqlite_source)
    result = services.query_execute(data_source=sqlite_source, query="SELECT name FROM customers WHERE id = 1")
    assert result.rows == [["Ada\\0Lovelace"]]


def test_nul_in_query_text_or_write_values_is_refused(sqlite_source):
    services.data_source_discover(data_source=sqlite_source)
    with pytest.raises(InvalidInput) as caught:
        services.query_execute(data_source=sqlite_source, query="SELECT 1 -- \x00")
    assert "query" in caught.value.details
    with pytest.raises(InvalidInput) as caught:
        services.write_back_execute(
            data_source=sqlite_source, table_name="tickets", operation="update",
            data={"status": "x\x00"}, conditions={"id": 1},
        )
    assert "data.status" in caught.value.details
