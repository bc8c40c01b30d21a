"""The audit page in the browser: entries, filters and the chain's verdict."""

from __future__ import annotations

from playwright.sync_api import expect

from agents.services import agent_transition
from governance.audit import audit_seal
from tests.browser.catalog_support import check_and_capture, other_org_admin


def test_entries_filters_and_the_verdict(signed_in, demo):
    agent = demo["agents"]["Support Analyst"]
    agent_transition(agent=agent, target="paused", actor=demo["admin"])
    audit_seal(organization_id=demo["workspace"].organization_id)
    page = signed_in(demo["admin"])
    page.goto("/audit/")
    expect(page.get_by_role("heading", name="Chain intact up to entry")).to_be_visible()
    expect(page.get_by_role("cell", name="Agent activated, paused or archived").first).to_be_visible()
    check_and_capture(page, "audit")
    page.get_by_label("What").select_option("agent_health_changed")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No entry matches these filters")).to_be_visible()


def test_another_organization_sees_none_of_it(signed_in, demo):
    agent = demo["agents"]["Support Analyst"]
    agent_transition(agent=agent, target="paused", actor=demo["admin"])
    page = signed_in(other_org_admin())
    page.goto("/audit/?scope=organization")
    expect(page.get_by_role("heading", name="Nothing recorded yet")).to_be_visible()
    expect(page.get_by_text("Support Analyst")).to_have_count(0)
