"""The artifacts API: an upload answers with the table an agent queries, versions count up
per name, downloads are attachments that are never sniffed, file names never become
paths, and another workspace's artifacts are a 404 on every endpoint."""

from __future__ import annotations

import sqlite3

import pytest

from artifacts.models import Artifact
from datasources.models import DataSource
from datasources.selectors import sqlite_path_resolve
from tests.artifacts.conftest import SALES_CSV, files_under, upload

pytestmark = pytest.mark.django_db


def test_a_csv_upload_answers_with_its_data_source_and_table(api_client_for, owner, workspace, artifact_dirs):
    response = upload(api_client_for(owner), workspace, "Sales 2024.csv", SALES_CSV)
    assert response.status_code == 201, response.json()
    body = response.json()
    artifact = Artifact.objects.get()
    assert {k: body[k] for k in ("id", "name", "size", "content_type", "data_source_id", "table", "version")} == {
        "id": artifact.pk, "name": "Sales 2024.csv", "size": len(SALES_CSV), "content_type": "text/csv",
        "data_source_id": artifact.data_source_id, "table": "sales_2024", "version": 1,
    }
    assert body["kind"] == "csv" and body["session"] is None and body["created_by"] == owner.pk
    source = DataSource.objects.get(pk=body["data_source_id"])
    assert source.workspace_id == workspace.pk and source.type == "sqlite" and source.access_level == "read_only"
    assert source.schema_discovered_at is not None
    [table] = source.schema_cache
    assert table["table_name"] == "sales_2024"
    assert [(c["column_name"], c["data_type"]) for c in table["columns"]] == [
        ("region", "text"), ("amount", "real"), ("units", "integer"), ("order_date", "text")]
    path = sqlite_path_resolve(workspace_id=workspace.pk, path=source.connection_config["path"])
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT SUM(amount), SUM(units) FROM sales_2024").fetchone() == (500.0, 11)


def test_a_text_upload_has_no_table(api_client_for, owner, workspace, artifact_dirs):
    response = upload(api_client_for(owner), workspace, "notes.md", b"# Notes\nRevenue is up.\n")
    assert response.status_code == 201
    body = response.json()
    assert (body["content_type"], body["data_source_id"], body["table"], body["tables"]) == (
        "text/markdown", None, None, [])
    assert not DataSource.objects.exists()


def test_uploading_the_same_name_again_is_the_next_version(api_client_for, owner, workspace, artifact_dirs):
    client = api_client_for(owner)
    first = upload(client, workspace, "sales.csv", SALES_CSV).json()
    second = upload(client, workspace, "sales.csv", SALES_CSV + b"West,1,1,2024-03-01\n").json()
    other = upload(client, workspace, "other.csv", SALES_CSV).json()
    assert (first["version"], second["version"], other["version"]) == (1, 2, 1)
    assert first["data_source_id"] != second["data_source_id"]
    listed = client.get("/api/v1/artifacts/", {"name": "sales.csv"}).json()
    assert [item["version"] for item in listed["results"]] == [2, 1]


def test_the_session_must_be_the_uploaders_own_in_the_workspace(api_client_for, owner, editor, outsider, workspace,
                                                                 other_workspace, artifact_dirs):
    from executions.services.sessions import session_create
    from tests.factories import make_agent

    agent = make_agent(workspace=workspace, owner=owner, name="Helper")
    mine = session_create(workspace=workspace, agent=agent, user=owner)
    theirs = session_create(workspace=workspace, agent=agent, user=editor)
    elsewhere = session_create(workspace=other_workspace, agent=make_agent(workspace=other_workspace, owner=outsider),
                               user=outsider)
    client = api_client_for(owner)
    body = upload(client, workspace, "a.txt", b"hello", session=mine.pk).json()
    assert body["session"] == mine.pk and Artifact.objects.get(pk=body["id"]).session == mine
    assert [a["id"] for a in client.get("/api/v1/artifacts/", {"session": mine.pk}).json()["results"]] == [body["id"]]
    for session in ("x", theirs.pk, elsewhere.pk, mine.pk + 1000):
        refused = upload(client, workspace, "b.txt", b"hello", session=session)
        assert refused.status_code == 400 and "session" in refused.json()["error"]["details"], session
    assert Artifact.objects.count() == 1 and len(files_under(artifact_dirs[0])) == 1  # only the first file


def test_download_is_an_attachment_with_its_recorded_type(api_client_for, owner, workspace, artifact_dirs):
    client = api_client_for(owner)
    html_like = b"<script>alert(1)</script>\n"
    artifact = upload(client, workspace, "page.txt", html_like).json()
    response = client.get(f"/api/v1/artifacts/{artifact['id']}/download")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == html_like
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="page.txt"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]


def test_a_non_ascii_name_is_encoded_in_the_disposition(api_client_for, owner, workspace, artifact_dirs):
    client = api_client_for(owner)
    artifact = upload(client, workspace, "résumé \"q\".txt", b"x").json()
    assert artifact["name"] == 'résumé "q".txt'
    response = client.get(f"/api/v1/artifacts/{artifact['id']}/download")
    assert response["Content-Disposition"].startswith("attachment; filename*=utf-8''r%C3%A9sum%C3%A9")


@pytest.mark.parametrize("raw, shown", [
    ("../../../etc/passwd.txt", "passwd.txt"),
    ("..\\..\\windows\\win.ini.txt", "win.ini.txt"),
    ("/abs/path/data.csv", "data.csv"),
    ("evil\u202etxt.csv", "eviltxt.csv"),  # a right-to-left override cannot disguise the type
    ("  spaced   out .txt ", "spaced out.txt"),
])
def test_a_file_name_is_display_text_never_a_path(api_client_for, owner, workspace, artifact_dirs, raw, shown):
    store, sqlite = artifact_dirs
    content = b"a,b\n1,2\n" if shown.endswith(".csv") else b"text"
    response = upload(api_client_for(owner), workspace, raw, content)
    assert response.status_code == 201, response.json()
    artifact = Artifact.objects.get()
    assert artifact.name == shown
    [stored] = files_under(store)
    assert stored == artifact.storage_name
    directory, _, generated = stored.partition("/")
    assert directory == str(workspace.pk) and len(generated.split(".")[0]) == 32  # a uuid, not the client's name
    assert all(path.startswith(f"{workspace.pk}/artifacts/") for path in files_under(sqlite))


def test_delete_removes_the_row_its_data_source_and_its_files(api_client_for, owner, workspace, artifact_dirs,
                                                             django_capture_on_commit_callbacks):
    store, sqlite = artifact_dirs
    client = api_client_for(owner)
    artifact = upload(client, workspace, "sales.csv", SALES_CSV).json()
    assert files_under(store) and files_under(sqlite)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.delete(f"/api/v1/artifacts/{artifact['id']}/")
    assert response.status_code == 204
    assert not Artifact.objects.exists() and not DataSource.objects.exists()
    assert files_under(store) == [] and files_under(sqlite) == []


def test_delete_is_for_the_uploader_or_a_data_source_deleter(api_client_for, owner, member, editor, workspace,
                                                            artifact_dirs):
    artifact = upload(api_client_for(member), workspace, "mine.txt", b"x").json()
    assert api_client_for(editor).delete(f"/api/v1/artifacts/{artifact['id']}/").status_code == 403
    assert api_client_for(owner).delete(f"/api/v1/artifacts/{artifact['id']}/").status_code == 204
    again = upload(api_client_for(member), workspace, "mine.txt", b"x").json()
    assert api_client_for(member).delete(f"/api/v1/artifacts/{again['id']}/").status_code == 204


def test_a_viewer_may_read_but_not_upload(api_client_for, owner, viewer, workspace, artifact_dirs):
    artifact = upload(api_client_for(owner), workspace, "a.txt", b"x").json()
    client = api_client_for(viewer)
    assert client.get(f"/api/v1/artifacts/{artifact['id']}/").status_code == 200
    refused = upload(client, workspace, "b.txt", b"y")
    assert refused.status_code == 403
    assert Artifact.objects.count() == 1


def test_an_outsider_gets_404_on_every_endpoint(api_client_for, owner, outsider, workspace, artifact_dirs):
    artifact = upload(api_client_for(owner), workspace, "sales.csv", SALES_CSV).json()
    client = api_client_for(outsider)
    for method, url in (("get", f"/api/v1/artifacts/{artifact['id']}/"),
                        ("get", f"/api/v1/artifacts/{artifact['id']}/download"),
                        ("delete", f"/api/v1/artifacts/{artifact['id']}/")):
        response = getattr(client, method)(url)
        assert response.status_code == 404, (method, url)
        assert response.json()["error"]["code"] == "not_found"
    assert client.get("/api/v1/artifacts/").json()["results"] == []
    assert client.get("/api/v1/artifacts/", {"workspace": workspace.pk}).json()["results"] == []
    refused = upload(client, workspace, "x.txt", b"mine now")
    assert refused.status_code == 404
    assert Artifact.objects.count() == 1
    # and the data source the upload made is as private as any other
    assert client.get(f"/api/v1/data-sources/{artifact['data_source_id']}/").status_code == 404


def test_anonymous_requests_are_refused(api_client_for, owner, workspace, artifact_dirs):
    artifact = upload(api_client_for(owner), workspace, "a.txt", b"x").json()
    anonymous = api_client_for(None)
    assert anonymous.get("/api/v1/artifacts/").status_code == 401
    assert anonymous.get(f"/api/v1/artifacts/{artifact['id']}/download").status_code == 401
    assert upload(anonymous, workspace, "b.txt", b"x").status_code == 401


@pytest.mark.parametrize("artifact_id", ["abc", "99999999999999999999999", "-1", "1.5"])
def test_odd_ids_are_404(api_client_for, owner, artifact_dirs, artifact_id):
    assert api_client_for(owner).get(f"/api/v1/artifacts/{artifact_id}/").status_code == 404


def test_unknown_fields_and_bad_filters_are_400(api_client_for, owner, workspace, artifact_dirs):
    client = api_client_for(owner)
    response = upload(client, workspace, "a.txt", b"x", path="../../x")
    assert response.status_code == 400 and "path" in response.json()["error"]["details"]
    assert client.get("/api/v1/artifacts/", {"workspace": "x"}).status_code == 400
    assert client.get("/api/v1/artifacts/", {"kind": "exe"}).status_code == 400
    missing = client.post("/api/v1/artifacts/", {"workspace": workspace.pk}, format="multipart")
    assert missing.status_code == 400 and "file" in missing.json()["error"]["details"]
    as_json = client.post("/api/v1/artifacts/", {"workspace": workspace.pk, "file": "x"}, format="json")
    assert as_json.status_code == 415
    assert not Artifact.objects.exists()


def test_storage_info_counts_artifact_files_and_their_tables(api_client_for, owner, workspace, artifact_dirs):
    from executions.tools.data import storage_usage

    client = api_client_for(owner)
    before = storage_usage(workspace_id=workspace.pk)
    upload(client, workspace, "notes.txt", b"x" * 1000)
    upload(client, workspace, "sales.csv", SALES_CSV)
    after = storage_usage(workspace_id=workspace.pk)
    _, sqlite = artifact_dirs
    [table_file] = [p for p in sqlite.rglob("*.sqlite3")]
    assert after.file_count - before.file_count == 3  # two stored files and one table file
    assert after.total_size_bytes - before.total_size_bytes == 1000 + len(SALES_CSV) + table_file.stat().st_size
