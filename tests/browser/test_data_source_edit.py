"""Editing and deleting a data source in the browser: a private host is refused at its
field before anything connects, a new password is saved but never shown, the limits
show on the source's page, and the delete confirm step names the agents that use the
source before it goes. Light and dark, 1280 and 390 pixels, axe clean."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from datasources.models import DataSource
from datasources.services import data_source_create
from tests.browser.test_api_keys_page import capture_both_themes


def test_edit_a_connection_and_replace_its_password(signed_in, demo, page_errors):
    source = data_source_create(workspace=demo["workspace"], name="Warehouse", type="postgresql",
                                connection_config={"host": "127.0.0.1", "port": 1, "database": "warehouse"},
                                credentials={"user": "reader", "password": "first-secret"})
    page = signed_in(demo["admin"])
    page.goto(f"/data-sources/{source.pk}/")
    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("heading", name="Edit Warehouse", level=1)).to_be_visible()
    expect(page.get_by_label("Password")).to_have_value("")
    assert "first-secret" not in page.content() and 'value="reader"' not in page.content()
    capture_both_themes(page, "data-source-edit")

    page.get_by_label("Host").fill("169.254.169.254")
    page.get_by_label("Password").fill("second-secret")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_host_error")).to_contain_text("169.254.169.254")
    page_errors.clear()  # the refused form answers 400
    assert "second-secret" not in page.content()
    capture_both_themes(page, "data-source-edit-refused")

    page.get_by_label("Host").fill("127.0.0.1")
    page.get_by_label("Password").fill("second-secret")
    page.get_by_label("Rows per query at most").fill("250")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("heading", name="Warehouse", level=1)).to_be_visible()
    expect(page.get_by_role("status").first).to_contain_text("Warehouse is saved. River could not connect")
    expect(page.get_by_text(re.compile(r"^250 rows"))).to_be_visible()
    assert "second-secret" not in page.content()
    source.refresh_from_db()
    assert source.query_row_limit == 250 and source.status == DataSource.Status.ERROR


def test_delete_names_the_agents_that_use_the_source(signed_in, demo):
    source = DataSource.objects.get(workspace=demo["workspace"])
    page = signed_in(demo["admin"])
    page.goto(f"/data-sources/{source.pk}/")
    page.get_by_role("link", name="Delete…").click()
    expect(page.get_by_role("heading", name=f"Delete {source.name}?")).to_be_visible()
    users = page.get_by_role("table", name=re.compile("Agents whose versions use"))
    for name in demo["agents"]:
        expect(users.get_by_role("row", name=re.compile(re.escape(name)))).to_contain_text(
            "active version")
    capture_both_themes(page, "data-source-delete")
    page.get_by_role("button", name=f"Delete {source.name}").click()
    expect(page.get_by_role("heading", name="Data sources", level=1)).to_be_visible()
    expect(page.get_by_role("status").first).to_contain_text(f"{source.name} is deleted")
    assert not DataSource.objects.filter(pk=source.pk).exists()
