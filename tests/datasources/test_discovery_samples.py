"""Discovery records the distinct values of short text columns (what lets the offline
planner see that "Brazil" is a country), and never those of a classified table or of a
column with too many values."""

from __future__ import annotations

import sqlite3

import pytest

from datasources.catalog import catalog_search
from datasources.connectors import SAMPLE_DISTINCT_MAX, sample_values_keep
from datasources.services import data_source_create, data_source_discover, data_source_update
from datasources.types import DataSourceChanges
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect


def columns_of(tables, table: str) -> dict[str, list[str]]:
    found = next(t for t in tables if t.table_name == table)
    return {c.column_name: c.sample_values for c in found.columns}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_short_text_columns_are_sampled_and_numbers_are_not(kind, request):
    source = request.getfixturevalue("sqlite_source" if kind == "sqlite" else "pg_source")
    tickets = columns_of(data_source_discover(data_source=source), "tickets")
    assert tickets["status"] == ["closed", "open", "pending"]
    assert tickets["priority"] == ["high", "low", "medium"]
    assert tickets["id"] == [] and tickets["customer_id"] == []
    source.refresh_from_db()
    cached = next(t for t in source.schema_cache if t["table_name"] == "tickets")
    assert {c["column_name"]: c["sample_values"] for c in cached["columns"]}["status"] == ["closed", "open", "pending"]


@pytest.mark.django_db
def test_a_classified_table_keeps_no_values(workspace, sqlite_file):
    source = data_source_create(workspace=workspace, name="Classified", type="sqlite",
                                connection_config={"path": sqlite_file.name}, credentials={},
                                classifications={"customers": "pii"})
    tables = data_source_discover(data_source=source)
    assert all(values == [] for values in columns_of(tables, "customers").values())
    assert columns_of(tables, "tickets")["status"]  # the unclassified table still has them


@pytest.mark.django_db
def test_classifying_a_table_later_drops_its_cached_values(sqlite_source):
    data_source_discover(data_source=sqlite_source)
    data_source_update(
        data_source=sqlite_source, changes=DataSourceChanges(classifications={"tickets": "confidential"})
    )
    sqlite_source.refresh_from_db()
    cached = {t["table_name"]: t for t in sqlite_source.schema_cache}
    assert cached["tickets"]["classification"] == "confidential"
    assert all(c["sample_values"] == [] for c in cached["tickets"]["columns"])
    assert any(c["sample_values"] for c in cached["customers"]["columns"])


@pytest.mark.django_db
def test_a_column_with_too_many_values_keeps_none(workspace, sqlite_file, pg_tables):
    conn = sqlite3.connect(sqlite_file)
    conn.executemany("INSERT INTO customers (id, name) VALUES (?, ?)",
                     [(1000 + i, f"Customer {i}") for i in range(SAMPLE_DISTINCT_MAX)])
    conn.commit()
    conn.close()
    with pg_admin_connect(pg_tables) as admin:
        admin.execute(f"INSERT INTO customers (id, name) SELECT 1000 + i, 'Customer ' || i "
                      f"FROM generate_series(1, {SAMPLE_DISTINCT_MAX}) AS i")
    for kind, config, credentials in (
        ("sqlite", {"path": sqlite_file.name}, {}),
        ("postgresql", {"host": pg_tables["host"], "port": pg_tables["port"], "database": pg_tables["database"]},
         {"user": pg_tables["user"], "password": pg_tables["password"]}),
    ):
        source = data_source_create(workspace=workspace, name=f"Many {kind}", type=kind, connection_config=config,
                                    credentials=credentials)
        customers = columns_of(data_source_discover(data_source=source), "customers")
        assert customers["name"] == [], kind
        assert customers["company"] == ["Analytical", "Bletchley", "Navy"], kind


def test_values_that_are_too_long_or_too_many_are_dropped():
    assert sample_values_keep(["b", "a"]) == ["a", "b"]
    assert sample_values_keep([str(i) for i in range(SAMPLE_DISTINCT_MAX + 1)]) == []
    assert sample_values_keep(["short"] * 9 + ["x" * 500]) == ["short"] * 9  # one long name is dropped alone
    assert sample_values_keep(["x" * 500, "y" * 500, "ok"]) == []  # mostly long: free text, keep none
    assert sample_values_keep(["a\x00b", "c"] + ["d"] * 18) == ["c"] + ["d"] * 18


@pytest.mark.django_db
def test_the_catalog_finds_the_column_that_holds_a_sampled_value(sqlite_source):
    data_source_discover(data_source=sqlite_source)
    sqlite_source.refresh_from_db()
    found = catalog_search(data_sources=[sqlite_source], query="Bletchley", top_k=3)
    assert [(m.kind, m.table_name, m.column_name) for m in found.matches][:1] == [("column", "customers", "company")]
