"""Approve at the right scope in Chromium against the real stack (web, Celery worker,
a scripted model server): "identical calls for the rest of this run" on the card lets
the run's next identical call through while a different call still asks; the grants
page revokes a standing grant."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from executions.models import LLMProvider
from governance.models import ApprovalGrant, ApprovalRequest
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import PHONE, _start_from_agent_page
from tests.executions.durable_support import marker_lines
from tests.factories import make_agent

WIDE = {"width": 1280, "height": 900}


def _both_widths(page, name: str) -> None:
    screenshot(page, f"{name}-1280")
    page.set_viewport_size(PHONE)
    screenshot(page, f"{name}-390")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.set_viewport_size(WIDE)


def test_approve_for_the_rest_of_the_run_lets_the_next_identical_call_through(signed_in, demo, river_stack,
                                                                            fake_openai):
    markers = river_stack.marker_dir
    for stale in markers.iterdir():
        stale.unlink()
    # A fake OpenAI server (it streams when a watched run asks it to): the calls in order.
    server = fake_openai()
    server.tool_call("durable_write", {"marker": "same"}, call_id="c1") \
        .tool_call("durable_write", {"marker": "same"}, call_id="c2") \
        .tool_call("durable_write", {"marker": "other"}, call_id="c3").text("Wrote them.")
    agent = make_agent(workspace=demo["workspace"], owner=demo["admin"], name="Repeating writer",
                       tools=["durable_write"], action_level="act_with_approval", approver_roles=["admin", "editor"])
    LLMProvider.objects.create(organization=demo["workspace"].organization, provider_name="scripted",
                               base_url=server.base_url, tier_models={"balanced": "scripted-model",
                                                                      "fast": "scripted-model"},
                               max_retries=0)
    starter = signed_in(demo["admin"])
    run_id = _start_from_agent_page(starter, agent, "Write it twice, then something else")
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    page = signed_in(demo["approver"])
    page.set_viewport_size(WIDE)
    page.goto(f"/runs/{run_id}/")
    card = page.locator("article.approval-card[data-state='pending']")
    expect(card).to_have_count(1)
    expect(card.get_by_role("group", name="Approve for")).to_be_visible()
    _both_widths(page, "scopes-card")
    assert axe_violations(page) == []
    page.emulate_media(color_scheme="dark")
    screenshot(page, "scopes-card-dark")
    page.emulate_media(color_scheme="light")

    card.get_by_label("Identical calls for the rest of this run").check()
    card.get_by_role("button", name="Approve", exact=True).click()

    # c1 runs on the approval, c2 (identical) without asking, c3 asks again.
    expect(page.locator("article.approval-card[data-state='pending']")).to_have_count(1)
    expect(page.locator("#run-standing")).to_contain_text("allowed by approver")
    expect(page.locator("#run-standing")).to_contain_text("for the rest of this run")
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    _both_widths(page, "scopes-run-page")
    assert axe_violations(page) == []
    assert [line.split()[1] for line in marker_lines(markers, "durable_write")] == ["same", "same"]
    assert ApprovalRequest.objects.get(execution_id=run_id, tool_call_id="c3").status == "pending"


def test_the_grants_page_revokes_a_grant(signed_in, demo):
    approver = demo["approver"]
    agent = demo["agents"][next(iter(demo["agents"]))]
    grant = ApprovalGrant.objects.create(
        workspace=demo["workspace"], agent_id=agent.pk, tool_name="write_back", data_source_id=1, target="tickets",
        condition="args.operation == 'insert'", max_rows=10, approver_roles=["admin", "editor"], granted_by=approver,
        expires_at=timezone.now() + timedelta(days=7))
    page = signed_in(approver)
    page.set_viewport_size(WIDE)
    page.goto("/approvals/grants/")
    row = page.locator(f"#grant-{grant.pk}")
    expect(row).to_contain_text("write_back on tickets")
    _both_widths(page, "scopes-grants")
    assert axe_violations(page) == []
    page.emulate_media(color_scheme="dark")
    screenshot(page, "scopes-grants-dark")
    page.emulate_media(color_scheme="light")

    row.get_by_role("button", name=f"Revoke grant #{grant.pk}").click()

    expect(page.get_by_role("status").filter(has_text="is revoked")).to_contain_text(f"Grant #{grant.pk} is revoked")
    expect(page.locator(f"#grant-{grant.pk}")).to_have_count(0)  # the default view shows active grants
    page.get_by_label("State").select_option("revoked")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(f"#grant-{grant.pk}")).to_have_attribute("data-state", "revoked")
    grant.refresh_from_db()
    assert grant.revoked_by == approver
