"""The screenshots of docs/approvals.md, taken from the real stack in Chromium (issue 29):
a two-person rule's card with the effect preview table, "1 of 2 approvals" and the
escalation chain; the grants page; the e-mail link's confirm page; and the page controls
for a policy's approvers and an agent version's quorum and escalation chain. Each page is
checked (no horizontal scroll at 390 px, axe clean) before it is kept in docs/screenshots."""

from __future__ import annotations

import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from agents.models import AgentVersion
from demo.seed import SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from governance.email_links import approval_link_url
from governance.models import ApprovalGrant, ApprovalRequest
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, PHONE, second_page  # noqa: F401 - a fixture

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDE = {"width": 1280, "height": 900}


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    version = demo["agents"][SUPPORT_SPECIALIST].current_version
    rules = {**version.approval_rules, "quorum": [{"approvals": 2, "when": "args.operation == 'update'"}],
             "escalation": [{"after_minutes": 30, "approver_roles": ["admin"]},
                            {"after_minutes": 120, "approver_roles": ["org_admin"]}]}
    AgentVersion.objects.filter(pk=version.pk).update(approval_rules=rules)
    casey = get_user_model().objects.create_user(username="casey", password="x", first_name="Casey",
                                                 email="casey@example.com")
    Membership.objects.create(workspace=demo["workspace"], user=casey, role=Role.ADMIN)
    return {**demo, "casey": casey}


def _keep(page, name: str, *, dark: bool = False, phone: bool = False, part: str | None = None) -> None:
    """The page (or its ``part``, a CSS selector) at 1280 px light, and if asked dark and
    390 px, into docs/screenshots."""
    shots = [(f"{name}-light-1280", "light", WIDE)]
    if dark:
        shots.append((f"{name}-dark-1280", "dark", WIDE))
    if phone:
        shots.append((f"{name}-light-390", "light", PHONE))
    for file, scheme, size in shots:
        page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
        page.set_viewport_size(size)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), file
        assert axe_violations(page) == [], file
        DOCS.mkdir(parents=True, exist_ok=True)
        if part is None:
            shutil.copy(screenshot(page, file), DOCS / f"{file}.png")
        else:
            page.locator(part).screenshot(path=str(DOCS / f"{file}.png"))
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(WIDE)


def test_docs_screenshots_of_the_approval_pages(signed_in, demo, second_page):  # noqa: F811
    agent = demo["agents"][SUPPORT_SPECIALIST]
    starter = signed_in(demo["admin"])
    starter.goto(f"/agents/{agent.pk}/")
    starter.get_by_label("Prompt").fill(CLOSE_TICKETS)
    starter.get_by_role("button", name="Run now").click()
    starter.wait_for_url(re.compile(r"/runs/\d+/$"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    approval = ApprovalRequest.objects.get(execution_id=int(starter.url.rstrip("/").split("/")[-1]))
    assert approval.required_approvals == 2

    # The first approver approves: 1 of 2.
    first = second_page(demo["approver"])
    first.goto(f"/approvals/{approval.pk}/")
    card = first.locator("article.approval-card")
    expect(card.locator(".approval-quorum-count")).to_contain_text("0 of 2 approvals")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card.locator(".approval-quorum-count")).to_contain_text("1 of 2 approvals")

    # The second approver's card: the effect table, 1 of 2, the chain.
    second = second_page(demo["casey"])
    second.set_viewport_size(WIDE)
    second.goto(f"/approvals/{approval.pk}/")
    other = second.locator("article.approval-card")
    expect(other.locator(".approval-quorum-count")).to_contain_text("1 of 2 approvals")
    expect(other.locator(".approval-escalation")).to_contain_text("escalates to admin at")
    expect(other.locator("table").first).to_be_visible()  # the before/after table of the effect
    _keep(second, "approval-card-effect-quorum-escalation", dark=True, phone=True)

    # The e-mail link's confirm page (opening it decides nothing).
    second.goto(approval_link_url(approval_id=approval.pk, user_id=demo["casey"].pk, decision="approved"))
    expect(second.get_by_role("button", name=re.compile("Confirm"))).to_be_visible()
    _keep(second, "approval-email-confirm", dark=True, phone=True)
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.PENDING

    # The grants page, with a standing grant.
    ApprovalGrant.objects.create(
        workspace=demo["workspace"], agent_id=agent.pk, tool_name="write_back", data_source_id=1, target="tickets",
        condition="args.operation == 'update'", max_rows=20, approver_roles=["admin", "editor"],
        granted_by=demo["approver"], expires_at=timezone.now() + timedelta(days=7))
    first.goto("/approvals/grants/")
    expect(first.locator("[id^=grant-]").first).to_contain_text("write_back on tickets")
    _keep(first, "approval-grants-page", dark=True, phone=True)

    # The page controls: a policy's approvers, a version's quorum and chain, the agent page.
    admin = starter
    admin.goto("/policies/new/")
    admin.get_by_label("Enforcement").select_option("require_approval")
    admin.get_by_label("Approvers needed").fill("2")
    admin.get_by_label("Approve only with a preview of the effect").check()
    admin.locator("#policy-form .approval-settings").scroll_into_view_if_needed()
    _keep(admin, "policy-approval-settings", phone=True)

    admin.goto(f"/agents/{agent.pk}/versions/new/")
    expect(admin.locator("#escalation-chain")).to_be_visible()
    expect(admin.locator("[name='quorum-0-approvals']")).to_have_value("2")
    _keep(admin, "version-quorum-escalation", dark=True, phone=True, part="#approval-chain-rules")

    admin.goto(f"/agents/{agent.pk}/")
    expect(admin.locator("#escalation-read")).to_contain_text("after 30 minutes to Admin")
    _keep(admin, "agent-approval-rules", phone=True)
