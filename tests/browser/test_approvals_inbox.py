"""The approvals inbox in Chromium against the real stack: a request appears while the
approver looks at the inbox, and leaves once decided, without a reload."""

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


def test_a_request_appears_live_and_leaves_once_decided(signed_in, demo, second_page):  # noqa: F811
    inbox = signed_in(demo["approver"])
    inbox.goto("/approvals/")
    expect(inbox.get_by_text("Nothing is waiting for a decision")).to_be_visible()
    expect(inbox.locator("#approvals-list[data-live]")).to_have_count(1)
    inbox.evaluate("window.riverMarker = 'same page'")

    starter = second_page(demo["admin"])
    starter.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    starter.get_by_label("Prompt").fill(CLOSE_TICKETS)
    starter.get_by_role("button", name="Run now").click()
    starter.wait_for_url(re.compile(r"/runs/\d+/$"))

    card = inbox.locator("article.approval-card")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("Approve write_back?")
    expect(inbox.locator("#approvals-live")).to_have_text("A new request is waiting.")
    screenshot(inbox, "approvals-inbox")
    assert axe_violations(inbox) == []
    inbox.set_viewport_size(PHONE)
    screenshot(inbox, "approvals-inbox-phone")
    assert inbox.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    inbox.set_viewport_size({"width": 1280, "height": 800})

    # A filter that does not match hides it; the default view shows it again. (The
    # filter's choices are the page's: reloaded to offer the new request's tool.)
    inbox.reload()
    inbox.get_by_label("Tool").select_option("write_back")
    inbox.get_by_label("Risk mentions").fill("no such words")
    inbox.get_by_role("button", name="Filter").click()
    expect(inbox.get_by_text("No request waiting matches these filters.")).to_be_visible()
    inbox.get_by_role("link", name="Clear").click()
    # The link loads the page anew: wait for its load (htmx binds the card's buttons then;
    # a click before that is a plain form post, which lands on the request's own page).
    inbox.wait_for_url(re.compile(r"/approvals/$"), wait_until="load")
    inbox.evaluate("window.riverMarker = 'same page'")

    inbox.locator("article.approval-card").get_by_role("button", name="Approve", exact=True).click()
    expect(inbox.locator("article.approval-card")).to_have_count(0)
    expect(inbox.locator("table.approvals-resolved")).to_contain_text("Approved")
    expect(inbox.locator("#approvals-live")).to_have_text("A request was decided.")
    assert inbox.evaluate("window.riverMarker") == "same page"
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
