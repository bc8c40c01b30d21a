"""The validated schema a process remembers per data source: reused while the row is
unchanged, read afresh after any change of the schema or the classifications, bounded."""

from __future__ import annotations

import pytest

from datasources import selectors, services
from datasources.models import DataSource
from datasources.types import DataSourceChanges
from rivercore.errors import NotFound
from tests.datasources.fixtures import *  # noqa: F403


@pytest.fixture
def discovered(sqlite_source):
    services.data_source_discover(data_source=sqlite_source)
    return sqlite_source


def _read(source) -> DataSource:
    """The row as a tool reads it (``schema_cache`` deferred)."""
    return selectors.data_source_get_in_workspace(workspace_id=source.workspace_id, data_source_id=source.pk)


def test_an_unchanged_source_reuses_its_validated_tables_without_reading_the_schema(discovered,
                                                                                     django_assert_num_queries):
    first = selectors.data_source_tables(data_source=_read(discovered))
    row = _read(discovered)

    with django_assert_num_queries(0):  # the deferred schema_cache is not loaded
        again = selectors.data_source_tables(data_source=row)

    assert [t.table_name for t in again] == [t.table_name for t in first]
    assert all(a is b for a, b in zip(again, first, strict=True))


def test_a_classification_change_is_seen_at_once(discovered):
    before = selectors.data_source_prompt_tables(data_source=_read(discovered))
    assert {t.classification for t in before} == {None}

    services.data_source_update(data_source=_read(discovered),
                                changes=DataSourceChanges(classifications={"customers": "pii"}))

    tables = selectors.data_source_prompt_tables(data_source=_read(discovered))
    labels = {t.table_name: t.classification for t in tables}
    assert labels["customers"] == "pii"
    stored = {t.table_name: t.classification for t in selectors.data_source_tables(data_source=_read(discovered))}
    assert stored["customers"] == "pii"


def test_a_rediscovered_schema_replaces_the_remembered_one(discovered):
    import sqlite3

    from datasources.selectors import sqlite_path_resolve

    assert "refunds" not in {t.table_name for t in selectors.data_source_tables(data_source=_read(discovered))}
    path = sqlite_path_resolve(workspace_id=discovered.workspace_id, path=discovered.connection_config["path"])
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE refunds (id INTEGER PRIMARY KEY)")
    services.data_source_discover(data_source=_read(discovered))

    assert "refunds" in {t.table_name for t in selectors.data_source_tables(data_source=_read(discovered))}


def test_the_memory_is_bounded(discovered, monkeypatch):
    monkeypatch.setattr(selectors, "SCHEMA_CACHE_MAX", 2)
    monkeypatch.setattr(selectors, "_schemas", type(selectors._schemas)())
    row = _read(discovered)
    for minute in range(5):
        row.updated_at = row.updated_at.replace(minute=minute)
        selectors.data_source_tables(data_source=row)

    assert len(selectors._schemas) == 2


def test_a_tool_resolves_only_its_workspaces_source_in_one_statement(sqlite_source, other_workspace,
                                                                      django_assert_num_queries):
    """The lookup a tool makes on every call (compiled once per process): the source with its
    workspace in one statement; any id that is not this workspace's source is a 404."""
    with django_assert_num_queries(1):
        row = _read(sqlite_source)
        assert row.workspace.pk == sqlite_source.workspace_id  # loaded with it
    assert row.pk == sqlite_source.pk and row.name == sqlite_source.name
    assert "schema_cache" in row.get_deferred_fields()

    for wrong in (None, "", "1; DROP TABLE x", "abc", -1, 0, 2**63, 2**70, sqlite_source.pk + 10_000):
        with pytest.raises(NotFound):
            selectors.data_source_get_in_workspace(workspace_id=sqlite_source.workspace_id, data_source_id=wrong)
    with pytest.raises(NotFound):  # another tenant's workspace never sees it
        selectors.data_source_get_in_workspace(workspace_id=other_workspace.pk, data_source_id=sqlite_source.pk)
