"""Editing and deleting a data source from its pages: the API's update service and its
checks (the host policy before any connection, errors next to their field), credentials
replaced but never rendered, limits, permissions checked on every POST, outsiders 404,
and a delete that names the agents whose versions bind the source and then does what
``DELETE /api/v1/data-sources/{id}/`` does."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import AgentVersion
from common.crypto import decrypt_json
from datasources import connectors
from datasources.models import DataSource
from datasources.services import data_source_discover
from governance.models import AuditLogEntry
from tests.datasources.fixtures import *  # noqa: F403
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _pg_form(source: DataSource, **overrides) -> dict:
    config = source.connection_config
    data = {"name": source.name, "description": source.description or "", "access_level": source.access_level,
            "host": config["host"], "port": config.get("port") or "", "database": config["database"],
            "sslmode": config.get("sslmode") or "", "user": "", "password": "",
            "query_row_limit": "", "observation_byte_limit": "", "query_timeout_seconds": ""}
    data.update(overrides)
    return data


@pytest.fixture
def connects(monkeypatch):
    """Every connector River builds from now on, recorded (the real one is still built)."""
    built = []
    real = connectors.connector_for

    def recording(spec):
        built.append(spec.config.host)
        return real(spec)

    monkeypatch.setattr(connectors, "connector_for", recording)
    return built


def test_edit_page_shows_settings_but_never_the_credentials(owner, pg_source, pg_tables):
    response = _client(owner).get(f"/data-sources/{pg_source.pk}/edit")
    assert response.status_code == 200
    body = response.content.decode()
    assert f'value="{pg_tables["database"]}"' in body
    assert pg_tables["password"] not in body
    assert f'value="{pg_tables["user"]}"' not in body
    assert "Empty: keep the stored password" in body
    assert 'name="path"' not in body  # a PostgreSQL source is not offered SQLite's settings


def test_a_new_password_replaces_the_stored_one_and_an_empty_one_keeps_it(owner, pg_source, pg_tables):
    client = _client(owner)
    response = client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, description="Tickets"))
    assert response.status_code == 302
    pg_source.refresh_from_db()
    assert decrypt_json(pg_source.credentials_encrypted) == {"user": pg_tables["user"],
                                                            "password": pg_tables["password"]}
    assert pg_source.description == "Tickets"

    response = client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, password="s3cret-new"))
    assert response.status_code == 302
    pg_source.refresh_from_db()
    assert decrypt_json(pg_source.credentials_encrypted) == {"user": pg_tables["user"], "password": "s3cret-new"}
    page = client.get(f"/data-sources/{pg_source.pk}/edit").content.decode()
    assert "s3cret-new" not in page
    assert "s3cret-new" not in client.get(f"/data-sources/{pg_source.pk}/").content.decode()


def test_a_changed_connection_is_tested_after_saving(owner, pg_source, connects):
    assert pg_source.status == DataSource.Status.UNTESTED
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, password="another"),
                                   follow=True)
    assert response.status_code == 200
    pg_source.refresh_from_db()
    assert pg_source.status == DataSource.Status.CONNECTED and connects == [pg_source.connection_config["host"]]
    assert "is saved. Connection test passed" in response.content.decode()


@pytest.mark.parametrize("host", ["10.0.0.5", "169.254.169.254", "192.168.1.1", "metadata.google.internal"])
def test_a_refused_host_is_named_at_its_field_before_any_connection(owner, pg_source, connects, host):
    pg_source.refresh_from_db()
    before = (pg_source.connection_config, pg_source.credentials_encrypted, pg_source.name)
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/edit",
                                   _pg_form(pg_source, host=host, name="Renamed", password="x"))
    assert response.status_code == 400
    assert 'id="id_host_error"' in response.content.decode()
    assert connects == []
    pg_source.refresh_from_db()
    assert (pg_source.connection_config, pg_source.credentials_encrypted, pg_source.name) == before


def test_limits_are_saved_and_empty_inherits_the_workspaces(owner, pg_source):
    data_source_discover(data_source=pg_source)
    client = _client(owner)
    response = client.post(f"/data-sources/{pg_source.pk}/edit",
                           _pg_form(pg_source, query_row_limit="50", observation_byte_limit="2048",
                                    query_timeout_seconds="5"))
    assert response.status_code == 302
    pg_source.refresh_from_db()
    assert (pg_source.query_row_limit, pg_source.observation_byte_limit, pg_source.query_timeout_seconds) == (
        50, 2048, 5)
    # The connection did not change: the schema River read is kept, nothing is retested.
    assert pg_source.status == DataSource.Status.CONNECTED and pg_source.schema_discovered_at is not None
    client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source))
    pg_source.refresh_from_db()
    assert pg_source.query_row_limit is None and pg_source.effective_row_limit == pg_source.workspace.query_row_limit


@pytest.mark.parametrize(("field", "value"), [
    ("name", ""), ("name", "n" * 201), ("description", "d" * 2001), ("access_level", "owner"),
    ("port", "0"), ("port", "70000"), ("port", "abc"), ("database", ""), ("host", ""), ("sslmode", "sometimes"),
    ("query_row_limit", "0"), ("query_row_limit", "100001"), ("observation_byte_limit", "1023"),
    ("query_timeout_seconds", "301"), ("query_timeout_seconds", "1.5"),
])
def test_a_bad_value_is_refused_at_its_field(owner, pg_source, field, value):
    before = DataSource.objects.values().get(pk=pg_source.pk)
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, **{field: value}))
    assert response.status_code == 400
    assert f'id="id_{field}_error"' in response.content.decode()
    assert DataSource.objects.values().get(pk=pg_source.pk) == before


def test_a_database_setting_that_is_a_connection_string_is_refused_with_the_services_reason(owner, pg_source):
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/edit",
                                   _pg_form(pg_source, database="x host=10.0.0.1"))
    assert response.status_code == 400
    assert "must be a database name (no connection strings)" in response.content.decode()


def test_hostile_text_is_escaped_and_nul_refused(owner, pg_source):
    client = _client(owner)
    response = client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, name="<script>x</script>"))
    assert response.status_code == 302
    body = client.get(f"/data-sources/{pg_source.pk}/edit").content.decode()
    assert "<script>x</script>" not in body and "&lt;script&gt;x&lt;/script&gt;" in body
    response = client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, description="a\x00b"))
    assert response.status_code == 400
    pg_source.refresh_from_db()
    assert "\x00" not in pg_source.description


def test_a_taken_name_is_refused_at_the_name(owner, workspace, pg_source, sqlite_source):
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, name=sqlite_source.name))
    assert response.status_code == 400
    assert 'id="id_name_error"' in response.content.decode()


def test_a_sqlite_source_stays_in_its_workspaces_folder(owner, sqlite_source):
    client = _client(owner)
    form = {"name": sqlite_source.name, "description": "", "access_level": "read_only",
            "path": "../../etc/passwd", "query_row_limit": "", "observation_byte_limit": "",
            "query_timeout_seconds": ""}
    response = client.post(f"/data-sources/{sqlite_source.pk}/edit", form)
    assert response.status_code == 400
    assert 'id="id_path_error"' in response.content.decode()
    response = client.post(f"/data-sources/{sqlite_source.pk}/edit", {**form, "path": "fresh.sqlite3",
                                                                       "create_file": "on"})
    assert response.status_code == 302
    sqlite_source.refresh_from_db()
    assert sqlite_source.connection_config["path"] == "fresh.sqlite3"
    assert sqlite_source.access_level == "read_only"


def test_an_analyst_may_not_edit_and_an_editor_may_not_delete(member, editor, pg_source):
    assert _client(member).get(f"/data-sources/{pg_source.pk}/edit").status_code == 403
    assert _client(member).post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, name="Mine")
                                ).status_code == 403
    assert _client(editor).get(f"/data-sources/{pg_source.pk}/edit").status_code == 200
    assert _client(editor).get(f"/data-sources/{pg_source.pk}/delete").status_code == 403
    assert _client(editor).post(f"/data-sources/{pg_source.pk}/delete").status_code == 403
    page = _client(editor).get(f"/data-sources/{pg_source.pk}/").content.decode()
    assert f"/data-sources/{pg_source.pk}/edit" in page and f"/data-sources/{pg_source.pk}/delete" not in page
    pg_source.refresh_from_db()
    assert pg_source.name == "Support PG"


@pytest.mark.parametrize("suffix", ["edit", "delete"])
def test_outsider_gets_404(outsider, pg_source, suffix):
    client = _client(outsider)
    assert client.get(f"/data-sources/{pg_source.pk}/{suffix}").status_code == 404
    assert client.post(f"/data-sources/{pg_source.pk}/{suffix}", _pg_form(pg_source, name="Stolen")).status_code == 404
    assert client.get("/data-sources/not-a-number/edit").status_code == 404
    assert DataSource.objects.filter(pk=pg_source.pk, name="Support PG").exists()


def test_delete_confirm_names_the_agents_and_their_active_versions(owner, workspace, pg_source):
    uses = make_agent(workspace=workspace, owner=owner, name="Ticket triage", data_sources=[pg_source])
    make_agent(workspace=workspace, owner=owner, name="Unrelated")
    body = _client(owner).get(f"/data-sources/{pg_source.pk}/delete").content.decode()
    assert "1 agent uses it" in body
    assert "Ticket triage" in body and "Unrelated" not in body
    assert 'badge-warn">active version<' in body
    assert AgentVersion.objects.get(agent=uses).data_sources.filter(pk=pg_source.pk).exists()


def test_delete_takes_the_source_from_the_versions_as_the_api_does(owner, workspace, pg_source):
    agent = make_agent(workspace=workspace, owner=owner, name="Ticket triage", data_sources=[pg_source])
    response = _client(owner).post(f"/data-sources/{pg_source.pk}/delete")
    assert response.status_code == 302 and response["Location"] == "/data-sources/"
    assert not DataSource.objects.filter(pk=pg_source.pk).exists()
    version = AgentVersion.objects.get(agent=agent)
    assert list(version.data_sources.all()) == []


def test_a_get_never_deletes(owner, pg_source):
    assert _client(owner).get(f"/data-sources/{pg_source.pk}/delete").status_code == 200
    assert DataSource.objects.filter(pk=pg_source.pk).exists()


def test_without_csrf_token_nothing_changes(owner, pg_source):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, name="X")).status_code == 403
    assert client.post(f"/data-sources/{pg_source.pk}/delete").status_code == 403
    assert DataSource.objects.filter(pk=pg_source.pk, name="Support PG").exists()


def test_the_page_writes_the_audit_trail_the_api_writes(owner, pg_source, api_client_for):
    """The data source API writes no audit entry for an update or a delete (datasources
    sits below governance); the pages go through the same services and add none."""
    _client(owner).post(f"/data-sources/{pg_source.pk}/edit", _pg_form(pg_source, description="Via page"))
    api = api_client_for(owner)
    assert api.patch(f"/api/v1/data-sources/{pg_source.pk}/", {"description": "Via API"},
                     format="json").status_code == 200
    assert AuditLogEntry.objects.count() == 0
