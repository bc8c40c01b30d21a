"""An e-mail's Approve link in Chromium against the real stack: the link opens a confirm
page (nothing decided yet), the approver confirms, the request is approved through the
e-mail channel; the used link then says so. Light and dark, 1280 and 390 pixels, axe."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from executions.models import Execution
from governance.email_links import approval_link_url
from governance.models import ApprovalRequest, AuditLogEntry
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


@pytest.fixture
def waiting(demo):
    """A run of the demo's admin waiting at the gate, and its request (the approver decides)."""
    agent = demo["agents"]["Support Analyst"]
    run = Execution.objects.create(workspace=demo["workspace"], agent=agent, agent_version=agent.current_version,
                                   status=Execution.Status.AWAITING_APPROVAL, queued_at=timezone.now(),
                                   cost_usd=Decimal("0"), input_prompt="Close the duplicate tickets",
                                   requester=demo["admin"], requested_by=demo["admin"])
    return ApprovalRequest.objects.create(
        workspace=demo["workspace"], execution_id=run.pk, agent_id=agent.pk, tool_name="write_back",
        tool_call_id="call_close", approver_roles=["admin", "editor"], run_started_by=demo["admin"],
        reasoning_summary="Tickets 41 and 42 duplicate ticket 40.", risk_context="Writes to tickets.",
        proposed_payload={"table_name": "tickets", "operation": "update", "data": {"status": "closed"}},
        expires_at=timezone.now() + dt.timedelta(hours=2))


def _looks(page, name: str) -> None:
    for width, viewport in (("1280", DESKTOP), ("390", PHONE)):
        page.set_viewport_size(viewport)
        expect(page.locator("h1").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (name, width)
        assert axe_violations(page) == [], (name, width)
        screenshot(page, f"{name}-{width}")
    page.set_viewport_size(DESKTOP)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_email_link_to_confirm_page_to_approved(signed_in, demo, waiting, page_errors, scheme):
    url = approval_link_url(approval_id=waiting.pk, user_id=demo["approver"].pk, decision="approved")
    page = signed_in(demo["approver"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")

    page.goto(url)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Approve write_back?")
    expect(page.get_by_text("Nothing is decided until you confirm.")).to_be_visible()
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalRequest.Status.PENDING  # GET decided nothing
    _looks(page, f"approval-link-confirm-{scheme}")

    page.get_by_label("Comment (optional)").fill("Duplicates, checked.")
    page.get_by_role("button", name="Confirm: approve").click()
    expect(page.locator(".link-outcome")).to_contain_text("Approved by you")
    _looks(page, f"approval-link-done-{scheme}")
    decided = ApprovalRequest.objects.get(pk=waiting.pk)
    assert decided.status == ApprovalRequest.Status.APPROVED and decided.resolved_by == demo["approver"]
    entry = AuditLogEntry.objects.get(approval_id=waiting.pk, event_type="approval_approved")
    assert entry.details["channel"] == "email" and entry.details["comment"] == "Duplicates, checked."

    # The same link again: used, a clear page, a 4xx.
    response = page.goto(url)
    assert response.status == 410
    expect(page.get_by_role("heading", level=1)).to_have_text("This link was already used")
    _looks(page, f"approval-link-used-{scheme}")
    page_errors[:] = [error for error in page_errors if "410" not in error]  # the browser logs the 410 itself
