"""The data sources pages: the list and catalog search, adding one (the connection
tested at once; private hosts refused; the password never shown back), the schema
browser with escaped, capped sampled values."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from datasources.models import DataSource

pytestmark = pytest.mark.django_db

SCHEMA = [{"table_name": "customers", "row_estimate": 3, "columns": [
    {"column_name": "id", "data_type": "integer", "is_primary_key": True},
    {"column_name": "country", "data_type": "text", "sample_values": [
        "Brazil", "<script>alert(1)</script>", *[f"Country {i}" for i in range(20)], "x" * 200]}]},
    {"table_name": "refunds", "columns": [{"column_name": "amount", "data_type": "numeric"}]}]


@pytest.fixture
def source(workspace):
    return DataSource.objects.create(workspace=workspace, name="Sales DB", type="sqlite",
                                     connection_config={"path": "sales.sqlite3"}, schema_cache=SCHEMA,
                                     schema_discovered_at="2026-01-01T00:00:00Z")


def _pg_form(**values):
    data = {"name": "Warehouse", "description": "", "type": "postgresql", "host": "127.0.0.1", "port": "1",
            "database": "warehouse", "sslmode": "", "user": "reader", "password": "s3cret-pass", "path": "",
            "access_level": "read_only"}
    data.update(values)
    return data


def test_the_list_and_catalog_search(client_for, member, source):
    client = client_for(member)
    page = client.get("/data-sources/").content.decode()
    assert "Sales DB" in page and ">2<" in page  # two tables, counted by the database
    found = client.get("/data-sources/?q=brazil").content.decode()
    assert "customers.country" in found


def test_the_list_is_bounded(client_for, member, workspace):
    DataSource.objects.bulk_create([DataSource(workspace=workspace, name=f"S{i:03}", type="sqlite",
                                               schema_cache=SCHEMA) for i in range(60)])
    client = client_for(member)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/data-sources/?page=3")
    assert response.status_code == 200 and "S059" in response.content.decode()
    # The frame's Approvals badge reads the user's roles (it counts only requests they
    # may decide) and its Policies link their permissions: fixed costs per page, not per row.
    assert len(queries) <= 12


def test_sampled_values_are_escaped_and_capped(client_for, member, source):
    page = client_for(member).get(f"/data-sources/{source.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Country 5" in page and "Country 6" not in page and "and 15 more" in page
    assert "x" * 200 not in page
    assert "refunds" in page
    assert "refunds" not in client_for(member).get(f"/data-sources/{source.pk}/?table=coun").content.decode()


def test_adding_a_source_tests_it_and_says_why_it_failed(client_for, editor):
    response = client_for(editor).post("/data-sources/new/", _pg_form(), follow=True)
    page = response.content.decode()
    source = DataSource.objects.get(name="Warehouse")
    assert source.status == DataSource.Status.ERROR
    assert "River could not connect" in page and source.status_message in page
    assert "s3cret-pass" not in page and "never shown" in page


def test_a_private_host_is_refused_at_its_field_and_nothing_is_saved(client_for, editor):
    response = client_for(editor).post("/data-sources/new/", _pg_form(host="10.0.0.5"))
    page = response.content.decode()
    assert response.status_code == 400 and 'id="id_host_error"' in page
    assert "s3cret-pass" not in page  # the password is not filled back in
    assert not DataSource.objects.exists()


def test_a_sqlite_source_outside_its_folder_is_refused(client_for, editor):
    response = client_for(editor).post("/data-sources/new/", _pg_form(type="sqlite", host="", port="", database="",
                                                                      user="", password="", path="../../etc/passwd"))
    assert response.status_code == 400 and 'id="id_path_error"' in response.content.decode()


def test_a_sqlite_source_is_added_connected_and_its_schema_read(client_for, editor, workspace):
    client = client_for(editor)
    response = client.post("/data-sources/new/", _pg_form(type="sqlite", host="", port="", database="", user="",
                                                          password="", path="new.sqlite3", create_file="on"),
                           follow=True)
    source = DataSource.objects.get()
    assert source.status == DataSource.Status.CONNECTED and "Connection test passed" in response.content.decode()
    discovered = client.post(f"/data-sources/{source.pk}/discover", follow=True).content.decode()
    assert "Schema read: 0 tables" in discovered


def test_viewers_may_browse_but_not_add(client_for, viewer, source):
    client = client_for(viewer)
    assert client.get(f"/data-sources/{source.pk}/").status_code == 200
    assert "Add a data source" not in client.get("/data-sources/").content.decode()
    assert client.get("/data-sources/new/").status_code == 403
    assert client.post("/data-sources/new/", _pg_form()).status_code == 403


def test_outsiders_get_404(client_for, outsider, source):
    client = client_for(outsider)
    for method, url in (("get", f"/data-sources/{source.pk}/"), ("post", f"/data-sources/{source.pk}/test"),
                        ("post", f"/data-sources/{source.pk}/discover"), ("get", "/data-sources/abc/")):
        assert getattr(client, method)(url).status_code == 404
    assert "Sales DB" not in client.get("/data-sources/?q=brazil").content.decode()


def test_anonymous_visitors_are_sent_to_sign_in(client, source):
    for url in ("/data-sources/", "/data-sources/new/", f"/data-sources/{source.pk}/"):
        assert "/accounts/login/" in client.get(url)["Location"]




def _labels(page: str) -> dict[str, bool]:
    """{field name: whether its label says "(optional)"} for the form's text inputs."""
    import re
    found = {}
    for name, label in re.findall(r'<label for="id_(\w+)">(.*?)</label>', page, flags=re.S):
        found[name] = "(optional)" in label
    return found


def test_labels_say_optional_only_for_what_validation_lets_through(client_for, editor):
    from web.data import DataSourceForm

    client = client_for(editor)
    labels = _labels(client.get("/data-sources/new/").content.decode())
    # Required for their kind of database: the service refuses a PostgreSQL source without
    # them, and a SQLite one without its file.
    assert labels["host"] is labels["database"] is labels["user"] is labels["path"] is False
    assert labels["name"] is False
    assert labels["port"] is labels["sslmode"] is labels["password"] is labels["description"] is True
    form = DataSourceForm()
    for name, optional in labels.items():
        assert form.fields[name].required is not optional, name
    # What the labels promise is what validation does: each required field left empty is
    # named at its field, the optional ones are not.
    for missing in ("host", "database", "user"):
        response = client.post("/data-sources/new/", _pg_form(**{missing: ""}))
        assert response.status_code == 400 and f'id="id_{missing}_error"' in response.content.decode()
    sqlite = client.post("/data-sources/new/", _pg_form(type="sqlite", host="", database="", user="", password="",
                                                          path=""))
    page = sqlite.content.decode()
    assert sqlite.status_code == 400 and 'id="id_path_error"' in page and 'id="id_host_error"' not in page
    # Re-rendered with errors, the labels stay the same.
    assert _labels(page) == labels
    assert not DataSource.objects.exists()
