"""Evaluations in the browser (docs/changing-safely.md): the agent page shows each
version's latest evaluation next to Deploy; an admin sets the promotion gate, a deploy
below it is refused with the scores, and an override with a reason deploys it (audited);
Evaluate runs on the real worker and the evaluation page follows its progress to the end."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from agents.models import Agent
from executions.selectors import agent_runs_recent
from executions.services.evaluation import evaluation_run, evaluation_start
from governance.models import AuditLogEntry
from tests.browser.catalog_support import LAPTOP, PHONE, check_and_capture
from tests.browser.conftest import WAIT_MS, screenshot
from tests.executions.evaluation_support import LEARNED, ScriptedModel, agent_for_history, history, version_with


def _agent_with_history(demo) -> Agent:
    agent = agent_for_history(workspace=demo["workspace"], owner=demo["admin"])
    history(agent=agent, owner=demo["admin"], approver=demo["approver"])
    Agent.objects.filter(pk=agent.pk).update(status=Agent.Status.PAUSED)
    agent.refresh_from_db()
    return agent


def test_the_agent_page_shows_evaluations_next_to_deploy_and_the_gate(signed_in, demo, page_errors):
    agent = _agent_with_history(demo)
    reckless = version_with(agent, "Again.")
    learned = version_with(agent, LEARNED)
    evaluation = evaluation_start(agent=agent, version=reckless, actor=demo["admin"], days=14)
    evaluation_run(evaluation_id=evaluation.pk, llm=ScriptedModel())

    page = signed_in(demo["admin"])
    page.goto(f"/agents/{agent.pk}/")
    gate = page.get_by_role("form", name="Promotion gate minimums")
    gate.get_by_label("Agreement with rejections (%)").fill("90")
    gate.get_by_role("button", name="Save the gate").click()
    expect(page.get_by_role("status").first).to_contain_text("Promotion gate saved")

    versions = page.get_by_role("region", name="Versions")
    row = versions.get_by_role("row", name=re.compile(r"^v2\b"))
    expect(row).to_contain_text("Approvals 100%")
    expect(row).to_contain_text("Rejections 0%")
    expect(row).to_contain_text("Below the gate: rejections 0.000 is below the minimum 0.900")
    expect(row.get_by_role("button", name="Deploy version 2")).to_be_visible()
    expect(row.get_by_role("link", name="details of the evaluation of version 2")).to_have_attribute(
        "href", f"/evaluations/{evaluation.pk}/")
    expect(versions.get_by_role("row", name=re.compile(r"^v3\b"))).to_contain_text("Not evaluated")
    check_and_capture(page, "agent-evaluation")
    page.emulate_media(color_scheme="dark")
    screenshot(page, "agent-evaluation-dark")
    page.set_viewport_size(PHONE)
    screenshot(page, "agent-evaluation-dark-phone")
    page.set_viewport_size(LAPTOP)
    page.emulate_media(color_scheme="light")

    row.get_by_role("button", name="Deploy version 2").click()
    expect(page.get_by_role("status").first).to_contain_text("rejections 0.000 is below the minimum 0.900")
    agent.refresh_from_db()
    assert agent.current_version.version == 1

    row = page.get_by_role("region", name="Versions").get_by_role("row", name=re.compile(r"^v2\b"))
    row.get_by_text("Deploy anyway…").click()
    row.get_by_label("Reason (audited)").fill("Hotfix agreed with support lead")
    row.get_by_role("button", name="Override and deploy version 2").click()
    expect(page.get_by_role("status").first).to_contain_text("Version 2 is deployed (gate overridden")
    override = AuditLogEntry.objects.get(event_type="version_deploy_override")
    assert override.details["reason"] == "Hotfix agreed with support lead"
    assert override.details["scores"]["rejections"] == 0.0

    # Evaluate on the real worker (the offline planner answers): the page follows it to the end.
    learned_row = page.get_by_role("region", name="Versions").get_by_role("row", name=re.compile(r"^v3\b"))
    learned_row.get_by_role("button", name=f"Evaluate version {learned.version}").click()
    expect(page).to_have_url(re.compile(r"/evaluations/[0-9a-f-]+/$"))
    expect(page.get_by_role("heading", name="Scores")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".eval-run")).to_have_count(4)


def test_the_evaluation_page_lists_runs_pinned_first(signed_in, demo):
    agent = _agent_with_history(demo)
    runs = agent_runs_recent(agent_id=agent.pk, limit=10)
    gamma = next(run for run in runs if "gamma" in run.input_prompt)
    page = signed_in(demo["admin"])
    page.goto(f"/runs/{gamma.pk}/")
    pin = page.get_by_role("region", name="Test set")
    pin.get_by_label("Bad").check()
    pin.get_by_label("Note").fill("people rejected this write")
    pin.get_by_role("button", name="Pin to the test set").click()
    expect(page.get_by_role("region", name="Test set")).to_contain_text("bad example")

    evaluation = evaluation_start(agent=agent, version=version_with(agent, "Again."), actor=demo["admin"], days=14)
    evaluation_run(evaluation_id=evaluation.pk, llm=ScriptedModel())
    page.goto(f"/evaluations/{evaluation.pk}/")
    first = page.locator(".eval-run").first
    expect(first).to_contain_text(f"Run #{gamma.pk}")
    expect(first).to_contain_text("pinned bad")
    expect(first).to_contain_text("would still propose it")
    check_and_capture(page, "evaluation")
    page.emulate_media(color_scheme="dark")
    screenshot(page, "evaluation-dark")
