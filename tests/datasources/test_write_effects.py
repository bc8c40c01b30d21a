"""The effect of a write-back, previewed (always rolled back) and checked again in the
approved write's own transaction, on a real PostgreSQL source and a SQLite source."""

from __future__ import annotations

import sqlite3

import pytest

from datasources.effects import (
    CeilingExceeded,
    EffectChanged,
    EffectTerms,
    write_back_apply_checked,
    write_back_preview,
)
from datasources.services import data_source_discover
from rivercore.errors import InvalidInput
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect, pg_count, sqlite_count

CLOSE_OPEN_HIGH = {"table_name": "tickets", "operation": "update", "data": {"status": "closed"},
                   "conditions": {"status": "open", "priority": "high"}}


@pytest.fixture(params=["postgresql", "sqlite"])
def source(request):
    """Each test runs on both engines; ``source.count(sql)`` and ``source.change(sql)``
    read and write the source through another connection."""
    if request.param == "postgresql":
        tables = request.getfixturevalue("pg_tables")
        data_source = request.getfixturevalue("pg_source")

        def change(sql):
            with pg_admin_connect(tables) as conn:
                conn.execute(sql)

        data_source.count = lambda sql: pg_count(tables, sql)
    else:
        path = request.getfixturevalue("sqlite_file")
        data_source = request.getfixturevalue("sqlite_source")

        def change(sql):
            conn = sqlite3.connect(path)
            conn.execute(sql)
            conn.commit()
            conn.close()

        data_source.count = lambda sql: sqlite_count(path, sql)
    data_source_discover(data_source=data_source)
    data_source.change = change
    return data_source


OPEN_COUNT = "SELECT count(*) FROM tickets WHERE status = 'open'"


@pytest.mark.django_db
def test_preview_lists_the_changed_rows_and_writes_nothing(source):
    preview = write_back_preview(data_source=source, **CLOSE_OPEN_HIGH)

    assert preview.rows_affected == 3
    assert preview.summary == "3 rows will change in tickets: status open → closed."
    assert [(c.key, c.before, c.after) for c in preview.changes] == [
        ({"id": 1}, {"status": "open"}, {"status": "closed"}),
        ({"id": 2}, {"status": "open"}, {"status": "closed"}),
        ({"id": 3}, {"status": "open"}, {"status": "closed"}),
    ]
    assert len(preview.fingerprint) == 64 and preview.truncated is False
    assert source.count(OPEN_COUNT) == 4  # rolled back


@pytest.mark.django_db
def test_delete_and_insert_previews(source):
    gone = write_back_preview(data_source=source, table_name="charges", operation="delete", data={},
                              conditions={"status": "paid"})
    assert gone.summary == "2 rows will be deleted from charges."
    assert [c.key for c in gone.changes] == [{"id": 1}, {"id": 3}]
    assert gone.changes[0].before["status"] == "paid" and gone.changes[0].after is None

    added = write_back_preview(data_source=source, table_name="charges", operation="insert",
                               data=[{"customer_id": 1, "amount": 5, "status": "new"}])
    assert added.rows_affected == 1 and added.changes[0].after["status"] == "new"
    assert source.count("SELECT count(*) FROM charges") == 4


@pytest.mark.django_db
def test_the_same_data_gives_the_same_fingerprint_and_a_change_another(source):
    first = write_back_preview(data_source=source, **CLOSE_OPEN_HIGH)
    assert write_back_preview(data_source=source, **CLOSE_OPEN_HIGH).fingerprint == first.fingerprint
    source.change("UPDATE tickets SET status = 'pending' WHERE id = 3")
    second = write_back_preview(data_source=source, **CLOSE_OPEN_HIGH)
    assert second.fingerprint != first.fingerprint and second.rows_affected == 2


@pytest.mark.django_db
def test_an_approved_write_commits_when_the_effect_matches(source):
    preview = write_back_preview(data_source=source, **CLOSE_OPEN_HIGH)
    applied = write_back_apply_checked(data_source=source, **CLOSE_OPEN_HIGH,
                                       terms=EffectTerms(fingerprint=preview.fingerprint, max_rows=3))
    assert applied.fingerprint == preview.fingerprint and applied.rows_affected == 3
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'closed'") == 4


@pytest.mark.django_db
def test_a_stale_preview_writes_nothing(source):
    preview = write_back_preview(data_source=source, **CLOSE_OPEN_HIGH)
    source.change("UPDATE tickets SET priority = 'high' WHERE id = 4")  # a new row matches
    with pytest.raises(EffectChanged) as raised:
        write_back_apply_checked(data_source=source, **CLOSE_OPEN_HIGH,
                                 terms=EffectTerms(fingerprint=preview.fingerprint))
    assert raised.value.code == "preview_stale"
    assert raised.value.fresh.rows_affected == 4
    assert source.count(OPEN_COUNT) == 4


@pytest.mark.django_db
def test_the_ceiling_is_enforced_in_the_write(source):
    with pytest.raises(CeilingExceeded) as raised:
        write_back_apply_checked(data_source=source, **CLOSE_OPEN_HIGH, terms=EffectTerms(max_rows=2))
    assert raised.value.details == {"rows_affected": 3, "max_rows": 2}
    assert source.count(OPEN_COUNT) == 4


@pytest.mark.django_db
@pytest.mark.parametrize("hostile", [
    {"table_name": "tickets; DROP TABLE customers", "operation": "delete", "data": {}, "conditions": {"id": 1}},
    {"table_name": "tickets", "operation": "update", "data": {"status = 'x'; DROP TABLE customers; --": 1},
     "conditions": {"id": 1}},
    {"table_name": "tickets", "operation": "delete", "data": {},
     "conditions": {"id) OR 1=1; DROP TABLE customers; --": 1}},
    {"table_name": "CREATE TABLE evil (x int)", "operation": "insert", "data": {"x": 1}},
])
def test_hostile_sql_is_refused_before_anything_runs(source, hostile):
    with pytest.raises(InvalidInput):
        write_back_preview(data_source=source, **hostile)
    assert source.count("SELECT count(*) FROM customers") == 3
    assert source.count("SELECT count(*) FROM tickets") == 6


@pytest.mark.django_db
def test_hostile_values_are_bound_not_run(source):
    preview = write_back_preview(data_source=source, table_name="tickets", operation="update",
                                 data={"subject": "x'); DROP TABLE customers; --"},
                                 conditions={"subject": "'; DELETE FROM tickets; --"})
    assert preview.rows_affected == 0
    assert preview.summary == "No rows match: nothing will change in tickets."
    assert source.count("SELECT count(*) FROM customers") == 3
