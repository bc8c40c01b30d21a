"""/api/v1/data-sources/: CRUD, test, discover and schema, tenant isolation, role
permissions, write-only credentials, and no secrets in responses or logs."""

from __future__ import annotations

import json
import logging

import pytest
from django.contrib.auth import get_user_model

from common.crypto import decrypt_json
from datasources.models import DataSource
from datasources.services import data_source_discover
from tests.datasources.fixtures import *  # noqa: F403

URL = "/api/v1/data-sources/"


def detail(source, suffix=""):
    return f"{URL}{source.pk}/{suffix}" if not suffix else f"{URL}{source.pk}/{suffix}".replace("//", "/")


def _pg_body(workspace, pg, **extra):
    return {
        "workspace": workspace.pk,
        "name": "Support DB",
        "type": "postgresql",
        "connection_config": {"host": pg["host"], "port": pg["port"], "database": pg["database"]},
        "credentials": {"user": pg["user"], "password": pg["password"]},
        **extra,
    }


def test_create_returns_has_credentials_but_never_the_credentials(api_client_for, owner, workspace, pg_tables):
    response = api_client_for(owner).post(URL, _pg_body(workspace, pg_tables), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["has_credentials"] is True
    assert "credentials" not in body and "credentials_encrypted" not in body
    assert pg_tables["password"] not in response.content.decode()
    assert body["access_level"] == "read_only"
    assert body["status"] == "untested"
    listed = api_client_for(owner).get(URL).content.decode()
    assert pg_tables["password"] not in listed and "Support DB" in listed


def test_bad_input_is_a_400_naming_the_field(api_client_for, owner, workspace, pg_tables):
    client = api_client_for(owner)
    missing_host = _pg_body(workspace, pg_tables)
    missing_host["connection_config"] = {"database": "x"}
    response = client.post(URL, missing_host, format="json")
    assert response.status_code == 400
    assert "connection_config.host" in response.json()["error"]["details"]
    unknown = client.post(URL, _pg_body(workspace, pg_tables, status="connected"), format="json")
    assert unknown.status_code == 400
    assert "status" in unknown.json()["error"]["details"]
    bad_type = client.post(URL, _pg_body(workspace, pg_tables, type="oracle"), format="json")
    assert bad_type.status_code == 400 and "type" in bad_type.json()["error"]["details"]
    assert DataSource.objects.count() == 0


def test_outsider_gets_404_everywhere(api_client_for, outsider, pg_source, workspace, pg_tables):
    client = api_client_for(outsider)
    assert client.get(URL).json()["results"] == []
    assert client.get(f"{URL}{pg_source.pk}/").status_code == 404
    assert client.patch(f"{URL}{pg_source.pk}/", {"name": "x"}, format="json").status_code == 404
    assert client.delete(f"{URL}{pg_source.pk}/").status_code == 404
    assert client.post(f"{URL}{pg_source.pk}/test").status_code == 404
    assert client.post(f"{URL}{pg_source.pk}/discover").status_code == 404
    assert client.get(f"{URL}{pg_source.pk}/schema").status_code == 404
    assert client.post(URL, _pg_body(workspace, pg_tables, name="Mine now"), format="json").status_code == 404
    assert DataSource.objects.get(pk=pg_source.pk).name == "Support PG"


def test_analyst_may_read_and_test_but_not_change(api_client_for, member, pg_source, workspace, pg_tables):
    client = api_client_for(member)
    assert client.get(f"{URL}{pg_source.pk}/").status_code == 200
    assert client.post(f"{URL}{pg_source.pk}/test").json()["success"] is True
    assert client.post(URL, _pg_body(workspace, pg_tables, name="Other"), format="json").status_code == 403
    assert client.patch(f"{URL}{pg_source.pk}/", {"name": "x"}, format="json").status_code == 403
    assert client.delete(f"{URL}{pg_source.pk}/").status_code == 403
    assert DataSource.objects.filter(pk=pg_source.pk, name="Support PG").exists()


def test_editor_updates_but_only_admin_deletes(api_client_for, editor, owner, pg_source):
    assert api_client_for(editor).patch(f"{URL}{pg_source.pk}/", {"description": "d"}, format="json").status_code == 200
    assert api_client_for(editor).delete(f"{URL}{pg_source.pk}/").status_code == 403
    assert api_client_for(owner).delete(f"{URL}{pg_source.pk}/").status_code == 204
    assert not DataSource.objects.filter(pk=pg_source.pk).exists()


def test_test_discover_and_schema_endpoints(api_client_for, owner, pg_source):
    client = api_client_for(owner)
    tested = client.post(f"{URL}{pg_source.pk}/test").json()
    assert tested["success"] is True and isinstance(tested["latency_ms"], int)
    empty = client.get(f"{URL}{pg_source.pk}/schema").json()
    assert empty["discovered_at"] is None and empty["tables"] == []
    discovered = client.post(f"{URL}{pg_source.pk}/discover")
    assert discovered.status_code == 200
    assert discovered.json()["total_tables"] == 3
    schema = client.get(f"{URL}{pg_source.pk}/schema").json()
    assert schema["discovered_at"] is not None
    assert {t["table_name"] for t in schema["tables"]} == {"customers", "tickets", "charges"}
    assert client.get(f"{URL}{pg_source.pk}/").json()["table_count"] == 3


def test_connection_change_over_the_api_clears_the_schema(api_client_for, owner, pg_source):
    data_source_discover(data_source=pg_source)
    client = api_client_for(owner)
    response = client.patch(f"{URL}{pg_source.pk}/", {"connection_config": {"port": 5433}}, format="json")
    assert response.status_code == 200
    assert response.json()["schema_discovered_at"] is None
    assert client.get(f"{URL}{pg_source.pk}/schema").json()["tables"] == []


def test_unreachable_source(api_client_for, owner, pg_source):
    client = api_client_for(owner)
    client.patch(f"{URL}{pg_source.pk}/", {"connection_config": {"port": 1}}, format="json")
    tested = client.post(f"{URL}{pg_source.pk}/test")
    assert tested.status_code == 200 and tested.json()["success"] is False
    discovered = client.post(f"{URL}{pg_source.pk}/discover")
    assert discovered.status_code == 503
    assert discovered.json()["error"]["code"] == "data_source_unavailable"


def test_list_filters(api_client_for, owner, pg_source, sqlite_source):
    client = api_client_for(owner)
    assert [s["name"] for s in client.get(URL, {"type": "sqlite"}).json()["results"]] == ["Support SQLite"]
    assert [s["name"] for s in client.get(URL, {"search": "pg"}).json()["results"]] == ["Support PG"]
    assert client.get(URL, {"status": "bogus"}).status_code == 400


def test_credentials_never_reach_the_logs(api_client_for, owner, workspace, pg_tables, caplog):
    caplog.set_level(logging.DEBUG)
    client = api_client_for(owner)
    created = client.post(URL, _pg_body(workspace, pg_tables), format="json").json()
    client.post(f"{URL}{created['id']}/test")
    client.post(f"{URL}{created['id']}/discover")
    client.patch(f"{URL}{created['id']}/", {"credentials": {"password": "rotated-secret-77"}}, format="json")
    client.patch(f"{URL}{created['id']}/", {"connection_config": {"port": 1}}, format="json")
    client.post(f"{URL}{created['id']}/test")
    client.post(f"{URL}{created['id']}/discover")
    bad = _pg_body(workspace, pg_tables, name="Bad")
    bad["credentials"]["extra"] = "leak-me-please"
    client.post(URL, bad, format="json")
    assert caplog.records  # the services did log
    assert pg_tables["password"] not in caplog.text
    assert "rotated-secret-77" not in caplog.text
    assert "leak-me-please" not in caplog.text


# --- admin ----------------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root")
    client.force_login(user)
    return client


def test_admin_never_renders_credentials_and_refreshes_the_schema(admin_client, pg_source, pg_tables):
    page = admin_client.get(f"/admin/datasources/datasource/{pg_source.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert pg_tables["password"] not in html
    assert "Refresh schema" in html
    response = admin_client.post(f"/admin/datasources/datasource/{pg_source.pk}/refresh-schema/")
    assert response.status_code == 302
    assert DataSource.objects.get(pk=pg_source.pk).schema_discovered_at is not None


def test_admin_blank_credentials_keep_the_stored_ones(admin_client, pg_source, pg_tables):
    data_source_discover(data_source=pg_source)
    before = DataSource.objects.get(pk=pg_source.pk).credentials_encrypted
    data = {
        "workspace": pg_source.workspace_id,
        "name": "Renamed",
        "description": "",
        "type": "postgresql",
        "connection_config": json.dumps(
            {"host": "127.0.0.1", "port": pg_tables["port"], "database": pg_tables["database"]}
        ),
        "credentials": "",
        "access_level": "read_write",
        "classifications": "{}",
    }
    response = admin_client.post(f"/admin/datasources/datasource/{pg_source.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = DataSource.objects.get(pk=pg_source.pk)
    assert stored.name == "Renamed"
    assert stored.credentials_encrypted == before
    assert stored.schema_discovered_at is not None  # same connection settings: cache kept


def test_admin_new_credentials_replace_and_drop_the_cache(admin_client, pg_source, pg_tables):
    data_source_discover(data_source=pg_source)
    data = {
        "workspace": pg_source.workspace_id,
        "name": pg_source.name,
        "description": "",
        "type": "postgresql",
        "connection_config": json.dumps(pg_source.connection_config),
        "credentials": json.dumps({"user": pg_tables["user"], "password": "new-admin-secret"}),
        "access_level": "read_write",
        "classifications": "{}",
    }
    response = admin_client.post(f"/admin/datasources/datasource/{pg_source.pk}/change/", data)
    assert response.status_code == 302
    stored = DataSource.objects.get(pk=pg_source.pk)
    assert decrypt_json(stored.credentials_encrypted)["password"] == "new-admin-secret"
    assert stored.schema_discovered_at is None
    page = admin_client.get(f"/admin/datasources/datasource/{pg_source.pk}/change/").content.decode()
    assert "new-admin-secret" not in page


def test_admin_action_refresh_schema(admin_client, sqlite_source):
    response = admin_client.post(
        "/admin/datasources/datasource/",
        {"action": "refresh_schema", "_selected_action": [sqlite_source.pk]},
    )
    assert response.status_code == 302
    assert len(DataSource.objects.get(pk=sqlite_source.pk).schema_cache) == 3


def test_admin_add_goes_through_the_service(admin_client, workspace, sqlite_file):
    response = admin_client.post(
        "/admin/datasources/datasource/add/",
        {
            "workspace": workspace.pk,
            "name": "Added in admin",
            "description": "",
            "type": "sqlite",
            "connection_config": json.dumps({"path": sqlite_file.name}),
            "credentials": "",
            "access_level": "read_only",
            "classifications": "{}",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    source = DataSource.objects.get(name="Added in admin")
    assert source.connection_config["path"] == sqlite_file.name
    bad = admin_client.post(
        "/admin/datasources/datasource/add/",
        {
            "workspace": workspace.pk,
            "name": "Escaping",
            "type": "sqlite",
            "connection_config": json.dumps({"path": "/etc/passwd"}),
            "access_level": "read_only",
            "classifications": "{}",
        },
    )
    assert bad.status_code == 200
    assert "connection_config.path" in bad.content.decode()
    assert not DataSource.objects.filter(name="Escaping").exists()
