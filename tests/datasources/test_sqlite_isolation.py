"""Each workspace's SQLite files live in its own directory; no path reaches another's."""

from __future__ import annotations

import os
import sqlite3

import pytest

from datasources import services
from datasources.models import DataSource
from datasources.relocation import sqlite_sources_relocate
from tests.datasources.fixtures import *  # noqa: F403

URL = "/api/v1/data-sources/"


@pytest.fixture
def theirs(sqlite_dir, other_workspace):
    """Another workspace's database, with a secret in it."""
    path = sqlite_dir / str(other_workspace.pk) / "secrets.sqlite3"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE secrets (value TEXT)")
        db.execute("INSERT INTO secrets VALUES ('their-secret')")
    return path


def _create(client, workspace, path, **extra):
    body = {"workspace": workspace.pk, "name": "Mine", "type": "sqlite", "connection_config": {"path": path}, **extra}
    return client.post(URL, body, format="json")


def _refused(response):
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert "connection_config.path" in details, details
    return details["connection_config.path"]


def _escapes(sqlite_dir, workspace, other_workspace, theirs):
    mine = sqlite_dir / str(workspace.pk)
    mine.mkdir(exist_ok=True)
    (mine / "link.sqlite3").symlink_to(theirs)
    (mine / "dirlink").symlink_to(theirs.parent, target_is_directory=True)
    return [
        f"../{other_workspace.pk}/secrets.sqlite3",
        f"sub/../../{other_workspace.pk}/secrets.sqlite3",
        str(theirs),  # absolute
        str(sqlite_dir / str(other_workspace.pk) / "." / "secrets.sqlite3"),
        "link.sqlite3",  # symlink to their file
        "dirlink/secrets.sqlite3",  # symlinked directory
        "../../../../../../etc/passwd",
        "/etc/passwd",
        "..",
        ".",
    ]


def test_no_path_reaches_another_workspaces_file(api_client_for, owner, workspace, other_workspace, sqlite_dir,
                                                  theirs):
    client = api_client_for(owner)
    for path in _escapes(sqlite_dir, workspace, other_workspace, theirs):
        _refused(_create(client, workspace, path))
        _refused(_create(client, workspace, path, create_file=True))
    assert DataSource.objects.count() == 0


@pytest.mark.parametrize(
    "path",
    ["secrets.sqlite3\\u0000.txt", "\\u0000", "a\\nb.sqlite3", "a\\ud800.sqlite3", "%00.sqlite3"],
    ids=["nul_suffix", "nul", "newline", "lone_surrogate", "percent_nul"],
)
def test_control_characters_in_the_path_are_a_400_naming_it(api_client_for, owner, workspace, sqlite_dir, path):
    # Sent as raw JSON text: the escapes arrive as the characters they stand for.
    body = (
        f'{{"workspace": {workspace.pk}, "name": "Mine", "type": "sqlite", "create_file": true, '
        f'"connection_config": {{"path": "{path}"}}}}'
    )
    response = api_client_for(owner).post(URL, data=body, content_type="application/json")
    if path.startswith("%"):  # percent-encoding is not decoded: a literal, harmless file name
        assert response.status_code == 201, response.content
        return
    assert response.status_code == 400, response.content
    assert any(key.startswith("connection_config") for key in response.json()["error"]["details"])
    assert DataSource.objects.count() == 0


def test_url_encoding_is_taken_literally_and_stays_inside(api_client_for, owner, workspace, other_workspace,
                                                           sqlite_dir, theirs):
    client = api_client_for(owner)
    encoded = f"..%2f{other_workspace.pk}%2fsecrets.sqlite3"
    problems = _refused(_create(client, workspace, encoded))
    assert "does not exist" in problems[0]
    response = _create(client, workspace, encoded, create_file=True)
    assert response.status_code == 201, response.content
    created = sqlite_dir / str(workspace.pk) / encoded
    assert created.is_file() and created.stat().st_size == 0
    assert theirs.read_bytes().startswith(b"SQLite format 3")  # untouched


def test_a_missing_file_is_a_400_unless_creation_is_asked_for(api_client_for, owner, workspace, sqlite_dir):
    client = api_client_for(owner)
    problems = _refused(_create(client, workspace, "new/sales.sqlite3"))
    assert "create_file" in problems[0]
    assert not (sqlite_dir / str(workspace.pk) / "new").exists()

    response = _create(client, workspace, "new/sales.sqlite3", create_file=True)
    assert response.status_code == 201, response.content
    assert response.json()["connection_config"]["path"] == "new/sales.sqlite3"
    assert (sqlite_dir / str(workspace.pk) / "new" / "sales.sqlite3").is_file()
    source = DataSource.objects.get()
    assert services.data_source_test(data_source=source).success is True


def test_a_relative_path_is_stored_relative_to_the_workspace(api_client_for, owner, workspace, sqlite_file):
    response = _create(api_client_for(owner), workspace, str(sqlite_file))  # absolute, but inside
    assert response.status_code == 201, response.content
    assert response.json()["connection_config"]["path"] == "support.sqlite3"


def test_an_update_cannot_point_at_another_workspaces_file(api_client_for, owner, sqlite_source, other_workspace,
                                                           sqlite_dir, theirs):
    client = api_client_for(owner)
    for path in (f"../{other_workspace.pk}/secrets.sqlite3", str(theirs)):
        response = client.patch(f"{URL}{sqlite_source.pk}/", {"connection_config": {"path": path}}, format="json")
        _refused(response)
    sqlite_source.refresh_from_db()
    assert sqlite_source.connection_config["path"] == "support.sqlite3"


def test_a_symlink_swapped_in_after_creation_is_refused_at_connect(sqlite_source, sqlite_file, theirs):
    os.replace(sqlite_file, sqlite_file.with_suffix(".bak"))
    sqlite_file.symlink_to(theirs)
    result = services.data_source_test(data_source=sqlite_source)
    assert result.success is False
    assert "inside this workspace" in result.message


def test_legacy_files_are_moved_into_their_workspace(workspace, other_workspace, sqlite_dir):
    def legacy(name: str):
        path = sqlite_dir / "legacy" / name
        path.parent.mkdir(exist_ok=True)
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE t (v TEXT)")
            db.execute("INSERT INTO t VALUES (?)", (name,))
        return path

    own, shared = legacy("own.sqlite3"), legacy("shared.sqlite3")
    rows = [
        DataSource.objects.create(workspace=workspace, name="own", type="sqlite",
                                  connection_config={"path": "legacy/own.sqlite3", "statement_timeout_ms": 10_000}),
        DataSource.objects.create(workspace=workspace, name="shared", type="sqlite",
                                  connection_config={"path": str(shared)}),
        DataSource.objects.create(workspace=other_workspace, name="shared", type="sqlite",
                                  connection_config={"path": "legacy/shared.sqlite3"}),
    ]
    changes = sqlite_sources_relocate(data_source_model=DataSource)
    assert changes
    for row in rows:
        row.refresh_from_db()
        assert row.connection_config["path"] == f"legacy/{row.name}.sqlite3"
        moved = sqlite_dir / str(row.workspace_id) / row.connection_config["path"]
        with sqlite3.connect(moved) as db:
            assert db.execute("SELECT v FROM t").fetchone() == (f"{row.name}.sqlite3",)
        assert services.data_source_test(data_source=row).success is True
    assert rows[0].connection_config.get("statement_timeout_ms") is None  # the old default is dropped
    assert not own.exists()  # one workspace used it: moved
    assert shared.exists()  # shared: copied to each, original left for the operator
    assert sqlite_sources_relocate(data_source_model=DataSource) == []  # a second run changes nothing


def test_the_relocation_command_reports_what_it_moved(workspace, sqlite_dir):
    from io import StringIO

    from django.core.management import call_command

    legacy = sqlite_dir / "old.sqlite3"
    sqlite3.connect(legacy).close()
    DataSource.objects.create(workspace=workspace, name="old", type="sqlite", connection_config={"path": "old.sqlite3"})
    out = StringIO()
    call_command("sqlite_sources_relocate", stdout=out)
    assert "old.sqlite3 ->" in out.getvalue()
    assert (sqlite_dir / str(workspace.pk) / "old.sqlite3").is_file()
    out = StringIO()
    call_command("sqlite_sources_relocate", stdout=out)
    assert out.getvalue().strip() == "0 change(s)."
