"""The frame's live counts in a real browser: a run started through the HTTP API pauses
for approval on the worker, and the approver's open page shows the pending approval and
the new notification without a reload; marking it read and resolving the approval bring
the counts back down, again without a reload."""

from __future__ import annotations

import json
import re
import urllib.request

from playwright.sync_api import expect

from governance.models import ApprovalRequest
from tenancy.services import token_issue
from tests.browser.conftest import axe_violations, screenshot

PROMPT = "Close the open high-priority tickets created in the last 24 hours"


def _api(stack, token: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        stack.url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - our own test server
        return json.load(answer)


def test_approvals_count_and_bell_update_live_and_mark_read(signed_in, demo, river_stack):
    approver = demo["approver"]
    specialist = demo["agents"]["L1 Support Specialist"]
    admin_token = token_issue(user=demo["admin"]).plaintext
    approver_token = token_issue(user=approver).plaintext
    page = signed_in(approver)
    page.goto("/")
    expect(page.locator("body")).to_have_attribute("data-live-counts", "connected")
    approvals_badge = page.get_by_role("navigation", name="Main").locator("[data-live-count='approvals']")
    bell_badge = page.locator("[data-live-count='notifications']")
    expect(approvals_badge).to_be_hidden()
    expect(bell_badge).to_be_hidden()

    started = _api(river_stack, admin_token, f"/api/v1/agents/{specialist.pk}/run", {"input_prompt": PROMPT})

    # The worker runs it to the approval gate; the page hears it and shows the counts.
    expect(approvals_badge).to_be_visible()
    expect(approvals_badge).to_have_text(re.compile(r"^1\s*pending$"))
    expect(page.locator("[data-live-count-mirror='approvals']")).to_have_text("1")
    expect(bell_badge).to_have_text("1")
    expect(page.get_by_role("button", name="Notifications, 1 unread")).to_be_visible()
    expect(page.locator("#live-status")).to_contain_text("1 unread notification")
    approval = ApprovalRequest.objects.get(execution_id=started["execution_id"])
    assert page.url.endswith("/")  # never reloaded

    bell = page.get_by_role("button", name=re.compile("^Notifications"))
    bell.click()
    panel = page.locator("#bell-panel")
    expect(panel.get_by_role("link", name=re.compile("Approval needed: write_back"))).to_be_visible()
    assert axe_violations(page) == []
    screenshot(page, "bell-panel")
    panel.get_by_role("button", name=re.compile("^Mark read")).click()
    expect(panel).to_contain_text("You're all caught up")
    expect(bell_badge).to_be_hidden()
    expect(panel.get_by_role("link", name="All notifications")).to_be_focused()
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(bell).to_be_focused()

    # Decided elsewhere (the API): the count goes back to zero on this page.
    _api(river_stack, approver_token, f"/api/v1/approvals/{approval.pk}/resolve",
         {"status": "rejected", "resolution_comment": "not today"})
    expect(approvals_badge).to_be_hidden()
    expect(page.locator("[data-live-count-mirror='approvals']")).to_have_text("0")
    expect(page.locator("#live-status")).to_contain_text("0 approvals pending")
