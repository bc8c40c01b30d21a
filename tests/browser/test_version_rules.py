"""An agent version's auto-approve conditions with the condition builder: the builder
writes the condition, the server's check answers as it is typed (a refused one says why),
and the saved version holds it. axe passes in light and dark, at 1280 and 390 pixels."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from agents.models import AgentVersion
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}


def test_build_an_auto_approve_condition_and_save_it(signed_in, demo, page_errors):
    agent = demo["agents"]["L1 Support Specialist"]
    base = agent.current_version
    page = signed_in(demo["admin"])
    page.goto(f"/agents/{agent.pk}/versions/new/")
    tools = base.tools or []
    row = page.locator("[data-auto-approve-row]").last
    builder = row.locator("[data-condition-builder]")
    expect(builder).to_be_visible()
    condition = row.get_by_label("Approve without asking when")

    condition.fill("true")
    expect(row.locator(".expression-status")).to_contain_text("constant condition would approve every call")
    expect(condition).to_have_attribute("aria-invalid", "true")
    # The validator answers a refused draft with the API's 400, which Chromium logs.
    assert page_errors and all("status of 400" in error for error in page_errors)
    page_errors.clear()

    condition.fill("")
    builder.get_by_label("Subject").select_option(label="Model's confidence (0 to 1)")
    builder.get_by_label("Operator").select_option(">=")
    builder.locator("[data-builder=value-text]").fill("0.9")
    builder.get_by_role("button", name="Add", exact=True).click()
    expect(condition).to_have_value("confidence_score >= 0.9")
    expect(row.locator(".expression-status")).to_have_text("Valid: approves the call without asking when it holds.")

    tool = next(name for name in ("write_back", "execute_query", *tools) if name in tools)
    row.locator("select[name$='-tool']").select_option(tool)
    page.get_by_role("button", name="Save version").click()
    expect(page.get_by_text("saved. Compare it below")).to_be_visible()
    saved = AgentVersion.objects.filter(agent=agent).order_by("-version").first()
    assert {"tool": tool, "condition": "confidence_score >= 0.9"} in [
        rule.model_dump() for rule in saved.rules.auto_approve_conditions]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_version_page_passes_axe(signed_in, demo, scheme):
    agent = demo["agents"]["L1 Support Specialist"]
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    for width, viewport in (("1280", {"width": 1280, "height": 800}), ("390", PHONE)):
        page.set_viewport_size(viewport)
        page.goto(f"/agents/{agent.pk}/versions/new/")
        expect(page.locator("[data-condition-builder]").first).to_be_visible()
        assert axe_violations(page) == [], (scheme, width)
        screenshot(page, f"version-rules-{scheme}-{width}")
