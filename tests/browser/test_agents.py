"""Agents in the browser: the list, an agent's page with its version diff, Run now
(bad JSON caught in the page and by the server, a good run lands on its page), a new
agent drafted from a description, reviewed and saved; another organization sees none."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from agents.models import Agent, WorkspaceMemory
from agents.services import agent_version_create
from governance.models import AuditLogEntry
from tests.browser.catalog_support import check_and_capture, other_org_admin


def test_the_list_and_the_agent_page_with_a_version_diff(signed_in, demo):
    agent = demo["agents"]["L1 Support Specialist"]
    base = agent.current_version
    agent_version_create(agent=agent, actor=demo["admin"], goal=base.goal,
                         instructions=base.instructions + "\nAlways greet the customer by name.",
                         action_level=base.action_level, tools=[t for t in base.tools if t != "ask_user"],
                         approval_rules=base.approval_rules, model_config={**base.model_config, "max_turns": 9},
                         data_source_ids=[s.pk for s in base.data_sources.all()])
    page = signed_in(demo["admin"])
    page.goto("/agents/")
    row = page.get_by_role("row", name=re.compile("L1 Support Specialist"))
    expect(row).to_contain_text("Active")
    expect(row).to_contain_text("Healthy")
    check_and_capture(page, "agents")

    row.get_by_role("link", name="L1 Support Specialist").click()
    expect(page.get_by_role("heading", name="L1 Support Specialist", level=1)).to_be_visible()
    versions = page.get_by_role("region", name=re.compile("^Versions"))
    versions.get_by_label("Compare version", exact=True).select_option("1")
    versions.get_by_label("with version").select_option("2")
    versions.get_by_role("button", name="Compare").click()
    diff = page.locator(".diff")
    expect(diff).to_contain_text("What changed from version 1 to version 2")
    expect(diff.locator(".diff-add")).to_contain_text(["Always greet the customer by name."])
    expect(diff).to_contain_text("Removed: Ask user")
    expect(diff.get_by_role("row", name=re.compile("max turns"))).to_contain_text("9")
    check_and_capture(page, "agent-page")

    page.get_by_role("button", name="Deploy version 2").click()
    expect(page.get_by_role("status").first).to_contain_text("Version 2 is deployed")


def test_run_now_checks_the_json_then_starts_a_run(signed_in, demo, page_errors):
    agent = demo["agents"]["L1 Support Specialist"]
    page = signed_in(demo["admin"])
    page.goto(f"/agents/{agent.pk}/")
    form = page.locator("form.run-now")
    form.get_by_label("Prompt").fill("How many tickets are open?")
    form.get_by_label("Payload").fill('{"ticket_id": 42,}')
    form.get_by_role("button", name="Run now").click()
    expect(form.locator("#id_payload-jsoncheck")).to_contain_text("not valid JSON")
    expect(page).to_have_url(re.compile(f"/agents/{agent.pk}/$"))  # nothing was sent

    form.get_by_label("Payload").fill('{"note": "\\u0000"}')  # valid JSON the server refuses
    form.get_by_role("button", name="Run now").click()
    expect(page.locator("#id_payload_error")).to_contain_text("NUL")
    page_errors.clear()  # the refused form answers 400, which the browser logs

    form = page.locator("form.run-now")
    form.get_by_label("Payload").fill('{"ticket_id": 42}')
    form.get_by_role("button", name="Run now").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))


def test_an_agent_drafted_from_a_description_is_reviewed_then_saved(signed_in, demo):
    page = signed_in(demo["admin"])
    page.goto("/agents/")
    page.get_by_role("link", name="Describe a new agent").click()
    page.get_by_label("Describe the agent").fill(
        "Monitor support tickets every hour and summarise the urgent ones for the support lead")
    page.get_by_role("button", name="Draft the agent").click()
    expect(page.get_by_role("heading", name="Review the drafted agent")).to_be_visible()
    expect(page.get_by_label("Business function")).to_have_value("customer_support")
    check_and_capture(page, "agent-draft")
    page.get_by_label("Name", exact=True).fill("Urgent ticket digest")
    page.get_by_role("button", name="Save agent").click()
    expect(page.get_by_role("heading", name="Urgent ticket digest", level=1)).to_be_visible()
    agent = Agent.objects.get(name="Urgent ticket digest")
    assert agent.status == Agent.Status.DRAFT and agent.current_version.version == 1


def test_another_organization_sees_none_of_it(signed_in, demo, page_errors):
    agent = demo["agents"]["L1 Support Specialist"]
    page = signed_in(other_org_admin())
    page.goto("/agents/")
    expect(page.get_by_role("heading", name="Agents")).to_be_visible()
    expect(page.get_by_text("L1 Support Specialist")).to_have_count(0)
    response = page.goto(f"/agents/{agent.pk}/")
    assert response.status == 404
    page_errors.clear()  # the 404 is what the test asked for


def test_the_workspace_memory_is_shown_and_deleted_on_the_agent_page(signed_in, demo):
    agent = demo["agents"]["L1 Support Specialist"]
    kept = WorkspaceMemory.objects.create(
        workspace_id=agent.workspace_id, agent=agent, keywords=" oslo ticket ",
        content="Question: How many open tickets does the Oslo office have?\n"
                "Answer: The Oslo office has 17 open tickets, 4 of them urgent.")
    forgotten = WorkspaceMemory.objects.create(
        workspace_id=agent.workspace_id, agent=agent, user=demo["admin"], keywords=" refund ",
        content="Question: Which refunds wait for a receipt?\nAnswer: Three refunds wait for a receipt.")
    page = signed_in(demo["admin"])
    page.goto(f"/agents/{agent.pk}/")
    memory = page.get_by_role("list", name="Remembered for the workspace")
    expect(memory.get_by_role("listitem")).to_have_count(2)
    expect(memory).to_contain_text("The Oslo office has 17 open tickets")
    item = memory.get_by_role("listitem").filter(has_text="Which refunds wait for a receipt?")
    expect(item).to_contain_text("Personal: only you")
    item.get_by_text("Delete…").click()
    check_and_capture(page, "agent-memory")
    item.get_by_role("button", name=re.compile("^Delete memory")).click()
    expect(page.get_by_role("status").first).to_contain_text("The memory is deleted")
    expect(memory.get_by_role("listitem")).to_have_count(1)
    expect(page.get_by_text("Which refunds wait for a receipt?")).to_have_count(0)
    assert list(WorkspaceMemory.objects.filter(agent=agent).values_list("pk", flat=True)) == [kept.pk]
    assert AuditLogEntry.objects.filter(event_type="memory_deleted", details__memory_id=forgotten.pk).exists()
