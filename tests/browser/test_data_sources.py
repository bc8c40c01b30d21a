"""Data sources in the browser: the list and catalog search, a source whose connection
test fails shows why, the schema browser with sampled values."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from datasources.models import DataSource
from datasources.services import data_source_discover
from tests.browser.catalog_support import check_and_capture, other_org_admin


def test_a_failing_connection_test_shows_the_reason(signed_in, demo):
    page = signed_in(demo["admin"])
    page.goto("/data-sources/new/")
    page.get_by_label("Name", exact=True).fill("Warehouse")
    page.get_by_label("PostgreSQL", exact=True).check()
    page.get_by_label("Host").fill("127.0.0.1")
    page.get_by_label("Port").fill("1")
    page.get_by_label("Database name").fill("warehouse")
    page.get_by_label("Login").fill("reader")
    page.get_by_label("Password").fill("not-shown-again")
    check_and_capture(page, "data-source-new")
    page.get_by_role("button", name="Save and test the connection").click()
    expect(page.get_by_role("heading", name="Warehouse", level=1)).to_be_visible()
    source = DataSource.objects.get(name="Warehouse")
    expect(page.get_by_role("status").first).to_contain_text("River could not connect")
    expect(page.get_by_role("status").first).to_contain_text(source.status_message)
    expect(page.get_by_text("Cannot connect")).to_be_visible()
    assert "not-shown-again" not in page.content()


def test_a_private_host_is_refused_at_its_field(signed_in, demo, page_errors):
    page = signed_in(demo["admin"])
    page.goto("/data-sources/new/")
    page.get_by_label("Name", exact=True).fill("Internal")
    page.get_by_label("Host").fill("169.254.169.254")
    page.get_by_label("Database name").fill("x")
    page.get_by_label("Login").fill("x")
    page.get_by_label("Password").fill("x")
    page.get_by_role("button", name="Save and test the connection").click()
    expect(page.locator("#id_host_error")).to_be_visible()
    page_errors.clear()  # the refused form answers 400
    assert not DataSource.objects.filter(name="Internal").exists()


def test_the_list_catalog_search_and_schema_browser(signed_in, demo):
    source = DataSource.objects.get(workspace=demo["workspace"])
    data_source_discover(data_source=source)
    page = signed_in(demo["admin"])
    page.goto("/data-sources/")
    expect(page.get_by_role("row", name=re.compile(re.escape(source.name)))).to_contain_text("Connected")
    page.get_by_label("Find tables and columns").fill("ticket priority")
    page.get_by_role("button", name="Search").click()
    matches = page.get_by_role("region", name=re.compile("Catalog matches"))
    expect(matches.get_by_role("link", name="tickets.priority")).to_be_visible()
    check_and_capture(page, "data-sources")
    matches.get_by_role("link", name="tickets.priority").click()
    table = page.locator("details.schema-table", has_text="tickets").first
    if table.get_attribute("open") is None:
        table.locator("summary").click()
    expect(table.get_by_role("row", name=re.compile("^priority"))).to_contain_text("urgent")
    check_and_capture(page, "data-source-schema")


def test_another_organization_sees_none_of_it(signed_in, demo, page_errors):
    source = DataSource.objects.get(workspace=demo["workspace"])
    page = signed_in(other_org_admin())
    page.goto("/data-sources/")
    expect(page.get_by_text(source.name)).to_have_count(0)
    assert page.goto(f"/data-sources/{source.pk}/").status == 404
    page_errors.clear()
