"""DataSourceChanges, the typed value data_source_update takes: unknown and read-only
keys are refused at the value, "not given" differs from "set to null", the checks that
need no database name the field, and every entry point (API, admin) still answers with
those field names without writing half a change."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from datasources import services
from datasources.models import DataSource
from datasources.types import DataSourceChanges
from rivercore.errors import InvalidInput
from tests.datasources.fixtures import *  # noqa: F403

URL = "/api/v1/data-sources/"


def test_an_unknown_field_is_refused_at_the_value():
    with pytest.raises(InvalidInput) as caught:
        DataSourceChanges.model_validate({"colour": "blue", "name": "Fine"})
    assert caught.value.message == "Unknown or read-only fields: colour."
    assert caught.value.details == {"colour": ["cannot be updated"]}


@pytest.mark.parametrize(
    "field", ["status", "status_message", "credentials_encrypted", "schema_cache", "workspace", "id", "create_file"]
)
def test_a_read_only_field_is_refused_at_the_value(field):
    with pytest.raises(InvalidInput) as caught:
        DataSourceChanges.model_validate({field: "x"})
    assert caught.value.details == {field: ["cannot be updated"]}


def test_changes_that_are_not_an_object_are_refused():
    with pytest.raises(InvalidInput) as caught:
        DataSourceChanges.model_validate(["name"])
    assert "non_field_errors" in caught.value.details


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": None}, "name"),
        ({"name": 7}, "name"),
        ({"name": "n" * 201}, "name"),
        ({"description": 7}, "description"),
        ({"type": "oracle"}, "type"),
        ({"type": None}, "type"),
        ({"access_level": "owner"}, "access_level"),
        ({"classifications": ["customers"]}, "classifications"),
        ({"classifications": {"customers": 1}}, "classifications"),
        ({"connection_config": "host=evil"}, "connection_config"),
        ({"credentials": ["user"]}, "credentials"),
        ({"query_row_limit": True}, "query_row_limit"),
        ({"observation_byte_limit": 4096.0}, "observation_byte_limit"),
        ({"query_timeout_seconds": "10"}, "query_timeout_seconds"),
    ],
)
def test_a_bad_value_names_its_field(changes, field):
    with pytest.raises(InvalidInput) as caught:
        DataSourceChanges.model_validate(changes)
    assert list(caught.value.details) == [field]


def test_not_given_differs_from_null():
    assert DataSourceChanges().model_fields_set == set()
    nulled = DataSourceChanges(query_row_limit=None, description=None, classifications=None)
    assert nulled.model_fields_set == {"query_row_limit", "description", "classifications"}
    assert (nulled.description, nulled.classifications) == ("", {})
    assert DataSourceChanges(name="  Orders  ").name == "Orders"


def test_a_limit_not_given_is_kept_and_a_null_one_inherits(sqlite_source):
    services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(query_row_limit=5))
    services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(description="Orders"))
    assert DataSource.objects.get(pk=sqlite_source.pk).query_row_limit == 5
    services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges(query_row_limit=None))
    stored = DataSource.objects.get(pk=sqlite_source.pk)
    assert stored.query_row_limit is None and stored.description == "Orders"


def test_empty_changes_write_nothing(sqlite_source):
    before = DataSource.objects.get(pk=sqlite_source.pk).updated_at
    services.data_source_update(data_source=sqlite_source, changes=DataSourceChanges())
    assert DataSource.objects.get(pk=sqlite_source.pk).updated_at == before


def test_a_null_in_the_connection_patch_removes_that_key(sqlite_source):
    patch = DataSourceChanges(connection_config={"statement_timeout_ms": 5000})
    services.data_source_update(data_source=sqlite_source, changes=patch)
    assert DataSource.objects.get(pk=sqlite_source.pk).connection_config["statement_timeout_ms"] == 5000
    patch = DataSourceChanges(connection_config={"statement_timeout_ms": None})
    services.data_source_update(data_source=sqlite_source, changes=patch)
    stored = DataSource.objects.get(pk=sqlite_source.pk)
    assert stored.connection_config.get("statement_timeout_ms") is None
    assert stored.connection_config["path"] == "support.sqlite3"


def test_a_missing_sqlite_file_needs_create_file(sqlite_source, sqlite_dir, workspace):
    moved = DataSourceChanges(connection_config={"path": "fresh.sqlite3"})
    with pytest.raises(InvalidInput) as caught:
        services.data_source_update(data_source=sqlite_source, changes=moved)
    assert "connection_config.path" in caught.value.details
    assert DataSource.objects.get(pk=sqlite_source.pk).connection_config["path"] == "support.sqlite3"
    services.data_source_update(data_source=sqlite_source, changes=moved, create_file=True)
    assert (sqlite_dir / str(workspace.pk) / "fresh.sqlite3").is_file()
    assert DataSource.objects.get(pk=sqlite_source.pk).connection_config["path"] == "fresh.sqlite3"


# --- through the API --------------------------------------------------------------------------------------


def test_api_bad_classifications_are_a_400_and_nothing_is_written(api_client_for, owner, sqlite_source):
    response = api_client_for(owner).patch(
        f"{URL}{sqlite_source.pk}/", {"description": "changed", "classifications": {"tickets": 1}}, format="json"
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["details"] == {"classifications": ["must be {table: label}"]}
    assert error["message"] == "classifications must map table names to labels."
    assert DataSource.objects.get(pk=sqlite_source.pk).description == ""


def test_api_read_only_field_is_a_400_naming_it(api_client_for, owner, sqlite_source):
    response = api_client_for(owner).patch(f"{URL}{sqlite_source.pk}/", {"status": "connected"}, format="json")
    assert response.status_code == 400
    assert "status" in response.json()["error"]["details"]
    assert DataSource.objects.get(pk=sqlite_source.pk).status == DataSource.Status.UNTESTED


def test_api_create_file_reaches_the_service(api_client_for, owner, sqlite_source, sqlite_dir, workspace):
    response = api_client_for(owner).patch(
        f"{URL}{sqlite_source.pk}/",
        {"connection_config": {"path": "made.sqlite3"}, "create_file": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["connection_config"]["path"] == "made.sqlite3"
    assert (sqlite_dir / str(workspace.pk) / "made.sqlite3").is_file()


# --- through the admin -------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root")
    client.force_login(user)
    return client


def _admin_form(source, **overrides):
    return {
        "workspace": source.workspace_id,
        "name": source.name,
        "description": source.description,
        "type": source.type,
        "connection_config": json.dumps(source.connection_config),
        "credentials": "",
        "access_level": source.access_level,
        "classifications": json.dumps(source.classifications),
        **overrides,
    }


def test_admin_bad_classifications_are_a_form_error(admin_client, sqlite_source):
    page = admin_client.post(
        f"/admin/datasources/datasource/{sqlite_source.pk}/change/",
        _admin_form(sqlite_source, description="changed", classifications=json.dumps(["tickets"])),
    )
    assert page.status_code == 200
    assert "must be {table: label}" in page.content.decode()
    assert DataSource.objects.get(pk=sqlite_source.pk).description == ""


def test_admin_dropping_a_config_key_removes_it(admin_client, sqlite_source):
    DataSource.objects.filter(pk=sqlite_source.pk).update(
        connection_config={"path": "support.sqlite3", "statement_timeout_ms": 5000}
    )
    sqlite_source.refresh_from_db()
    response = admin_client.post(
        f"/admin/datasources/datasource/{sqlite_source.pk}/change/",
        _admin_form(sqlite_source, connection_config=json.dumps({"path": "support.sqlite3"}), name="Renamed"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    stored = DataSource.objects.get(pk=sqlite_source.pk)
    assert stored.connection_config.get("statement_timeout_ms") is None
    assert stored.connection_config["path"] == "support.sqlite3"
    assert stored.name == "Renamed"
