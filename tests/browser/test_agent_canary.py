"""The canary panel in the browser: an admin starts a canary from the agent's page; the
figures update live (htmx polling) as runs finish; when River rolls the canary back the
panel says so with the figures that condemned it. Screenshots at 1280 and on a phone,
light and dark."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from agents.models import AgentCanary
from agents.services import agent_version_create
from executions.canary import canary_check
from executions.models import Execution
from tests.browser.catalog_support import LAPTOP, PHONE, check_and_capture
from tests.browser.conftest import SCREENSHOTS, WAIT_MS


def _finished_runs(canary, *, arm: bool, outcome: str, count: int) -> None:
    for _ in range(count):
        Execution.objects.create(
            workspace_id=canary.agent.workspace_id,
            agent=canary.agent,
            canary=canary,
            canary_arm=arm,
            agent_version=canary.version if arm else canary.base_version,
            status="failed" if outcome == "failed" else "completed",
            outcome=outcome,
            turn_count=2,
        )


def _capture_panel(page, name: str) -> None:
    """The panel alone, at 1280 and on a phone (docs/changing-safely.md shows them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for suffix, size in (("", LAPTOP), ("-phone", PHONE)):
        page.set_viewport_size(size)
        page.locator("#canary").screenshot(path=str(SCREENSHOTS / f"{name}{suffix}.png"))
    page.set_viewport_size(LAPTOP)


def test_start_a_canary_watch_its_figures_and_see_it_rolled_back(signed_in, demo):
    agent = demo["agents"]["L1 Support Specialist"]
    base = agent.current_version
    agent_version_create(
        agent=agent,
        actor=demo["admin"],
        goal=base.goal,
        instructions=base.instructions + "\nAnswer in one sentence.",
        action_level=base.action_level,
        tools=list(base.tools),
        approval_rules=base.approval_rules,
        model_config=base.model_config,
        data_source_ids=[s.pk for s in base.data_sources.all()],
    )
    page = signed_in(demo["admin"])
    page.goto(f"/agents/{agent.pk}/")
    panel = page.locator("#canary")
    expect(panel).to_contain_text("No canary yet")
    form = panel.get_by_role("form", name="Start a canary")
    form.get_by_label("Version to try").select_option("2")
    form.get_by_label("Share of new runs (%)").fill("20")
    form.get_by_label("Margin (points)").fill("10")
    form.get_by_label("Runs before judging").fill("3")
    form.get_by_role("button", name="Start the canary").click()
    expect(page.get_by_role("status").first).to_contain_text("Version 2 now takes 20% of new runs")
    expect(panel).to_contain_text("Version v2 takes 20% of new runs")
    expect(panel.locator(".canary-verdict")).to_contain_text("Too few runs")

    canary = AgentCanary.objects.select_related("agent", "version", "base_version").get(agent=agent)
    _finished_runs(canary, arm=True, outcome="answered", count=2)
    _finished_runs(canary, arm=True, outcome="failed", count=1)
    _finished_runs(canary, arm=False, outcome="answered", count=5)
    # No reload: the panel's figures come in on their own.
    failed = panel.get_by_role("row", name=re.compile("^Failed"))
    expect(failed).to_contain_text("33.3% (1 of 3)", timeout=WAIT_MS)
    expect(failed).to_contain_text("0.0% (0 of 5)")
    expect(failed).to_contain_text("worse")
    check_and_capture(page, "agent-canary")
    _capture_panel(page, "agent-canary-panel")
    page.emulate_media(color_scheme="dark")
    check_and_capture(page, "agent-canary-dark")
    _capture_panel(page, "agent-canary-panel-dark")
    page.emulate_media(color_scheme="light")

    # River's beat task may get there first; either way it happens once.
    assert canary_check(canary_id=canary.pk) in {"rolled_back", "not_running"}
    canary.refresh_from_db()
    assert canary.status == AgentCanary.Status.ROLLED_BACK
    expect(panel.locator(".canary-verdict")).to_contain_text("did worse than v1", timeout=WAIT_MS)
    page.reload()
    expect(panel).to_contain_text("rolled back")
    expect(panel.locator(".canary-reason")).to_contain_text("failed 33.3% (1 of 3) against 0.0% (0 of 5)")
    expect(panel.get_by_role("button", name="Start the canary")).to_be_visible()
