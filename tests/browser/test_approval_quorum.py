"""A two-person rule in Chromium against the real stack (issue 29 §3): the first
approver's card says "1 of 2 approvals" and who approved, the run waits; the second
approver's click resumes it and the run completes."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from agents.models import AgentVersion
from demo.seed import SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from governance.models import ApprovalRequest
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, PHONE, second_page  # noqa: F401 - a fixture


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    version = demo["agents"][SUPPORT_SPECIALIST].current_version
    rules = {**version.approval_rules, "quorum": [{"approvals": 2}],
             "escalation": [{"after_minutes": 60, "approver_roles": ["admin"]}]}
    AgentVersion.objects.filter(pk=version.pk).update(approval_rules=rules)
    casey = get_user_model().objects.create_user(username="casey", password="x", first_name="Casey")
    Membership.objects.create(workspace=demo["workspace"], user=casey, role=Role.ADMIN)
    return {**demo, "casey": casey}


def _card_checks(page, name: str) -> None:
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
        for suffix, viewport in (("1280", {"width": 1280, "height": 800}), ("390", PHONE)):
            page.set_viewport_size(viewport)
            expect(page.locator("article.approval-card")).to_be_visible()
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (scheme, suffix)
            assert axe_violations(page) == [], (scheme, suffix)
            screenshot(page, f"{name}-{scheme}-{suffix}")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})


def test_one_of_two_then_the_second_approver_resumes_the_run(signed_in, demo, second_page):  # noqa: F811
    starter = signed_in(demo["admin"])
    starter.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    starter.get_by_label("Prompt").fill(CLOSE_TICKETS)
    starter.get_by_role("button", name="Run now").click()
    starter.wait_for_url(re.compile(r"/runs/\d+/$"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    approval = ApprovalRequest.objects.get(execution_id=int(starter.url.rstrip("/").split("/")[-1]))
    assert approval.required_approvals == 2

    first = second_page(demo["approver"])
    first.goto(f"/approvals/{approval.pk}/")
    card = first.locator("article.approval-card")
    expect(card.locator(".approval-quorum-count")).to_contain_text("0 of 2 approvals")
    expect(card.locator(".approval-escalation")).to_contain_text("escalates to admin at")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card.locator(".approval-quorum-count")).to_contain_text("1 of 2 approvals")
    expect(card.locator(".approval-quorum-list")).to_contain_text("Approved by")
    expect(card.locator(".approval-quorum-mine")).to_contain_text("waits for 1 more approver")
    expect(card.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    _card_checks(first, "approval-quorum-1-of-2")

    second = second_page(demo["casey"])
    second.goto(f"/approvals/{approval.pk}/")
    other = second.locator("article.approval-card")
    expect(other.locator(".approval-quorum-count")).to_contain_text("1 of 2 approvals")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other).to_have_attribute("data-state", "approved")
    expect(other.locator(".approval-quorum-count")).to_contain_text("2 of 2 approvals")
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    _card_checks(second, "approval-quorum-2-of-2")
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by == demo["casey"]


def test_an_approval_of_an_older_preview_stops_counting(signed_in, demo, second_page, page_errors):  # noqa: F811
    """The data moves after the first approval: the second approver's click finds the
    fresh preview (nothing decided); their approval of it is 1 of 2, and the card says
    the first approval was of an older preview."""
    import sqlite3

    from tests.browser.test_run_page import _open_high_recent

    starter = second_page(demo["admin"])
    starter.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    starter.get_by_label("Prompt").fill(CLOSE_TICKETS)
    starter.get_by_role("button", name="Run now").click()
    starter.wait_for_url(re.compile(r"/runs/\d+/$"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    approval = ApprovalRequest.objects.get(execution_id=int(starter.url.rstrip("/").split("/")[-1]))

    first = second_page(demo["approver"])
    first.goto(f"/approvals/{approval.pk}/")
    card = first.locator("article.approval-card")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card.locator(".approval-quorum-count")).to_contain_text("1 of 2 approvals")

    moved = [ticket for ticket, status in _open_high_recent(demo["workspace"].pk) if status == "open"][0]
    with sqlite3.connect(demo_database_path(demo["workspace"].pk)) as db:
        db.execute("UPDATE tickets SET status = 'pending' WHERE id = ?", [moved])

    second = signed_in(demo["casey"])  # its refused click (409) is cleared from page_errors below
    second.goto(f"/approvals/{approval.pk}/")
    other = second.locator("article.approval-card")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.locator(".effect-stale")).to_contain_text("1 row has different values now")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.locator(".approval-quorum-count")).to_have_text(
        re.compile(r"1 of 2 approvals; approver's approval was of an older preview"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    page_errors.clear()  # the refused click answered 409 (the browser logs it)
    _card_checks(second, "approval-quorum-older-preview")

    # The first approver approves the fresh preview: the quorum completes and the run ends.
    first.goto(f"/approvals/{approval.pk}/")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card.locator(".approval-quorum-count")).to_contain_text("2 of 2 approvals")
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    # What was written is the fresh preview both approved (the moved row: pending → closed).
    assert dict(_open_high_recent(demo["workspace"].pk))[moved] == "closed"
