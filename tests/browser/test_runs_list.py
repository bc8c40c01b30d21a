"""The runs list in Chromium against the real stack: a row follows its run's status live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from demo.seed import SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, PHONE, second_page  # noqa: F401 - a fixture


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    return demo


def test_rows_follow_their_runs_status_live(signed_in, demo, second_page):  # noqa: F811
    page = signed_in(demo["admin"])
    page.goto("/runs/")
    expect(page.get_by_text("No runs yet.")).to_be_visible()

    starter = second_page(demo["admin"])
    starter.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    starter.get_by_label("Prompt").fill(CLOSE_TICKETS)
    starter.get_by_role("button", name="Run now").click()
    starter.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(re.search(r"/runs/(\d+)/$", starter.url).group(1))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    page.reload()
    row = page.locator(f"#run-row-{run_id}")
    expect(row).to_contain_text("Awaiting approval")
    expect(row).to_contain_text("L1 Support Specialist")
    expect(page.locator("table[data-runs-live][data-live]")).to_have_count(1)
    page.evaluate("window.riverMarker = 'same page'")
    screenshot(page, "runs-list")
    assert axe_violations(page) == []

    approver = second_page(demo["approver"])
    approver.goto(f"/runs/{run_id}/")
    approver.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(f"#run-row-{run_id} .run-row-status")).to_have_text("Completed")
    expect(page.locator("#runs-live")).to_contain_text(f"Run #{run_id} is now")
    assert page.evaluate("window.riverMarker") == "same page"

    page.goto("/runs/?status=completed&trigger_type=manual")
    expect(page.locator(f"#run-row-{run_id}")).to_be_visible()
    page.goto("/runs/?status=failed")
    expect(page.get_by_text("No runs match these filters.")).to_be_visible()
    page.set_viewport_size(PHONE)
    page.goto("/runs/")
    screenshot(page, "runs-list-phone")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []
