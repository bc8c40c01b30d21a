"""The "unknown outcome" card in Chromium (issue 31 §1): an MCP write River sent and
whose result was never recorded; the approver sees "River sent this call but does not
know whether it happened" with Done / Not done, retry, answers Done and the card shows
the answer in place (htmx). The card is checked (axe clean, no horizontal scroll at
390 px) and kept in docs/screenshots at 1280 light and 390 dark."""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import expect

from demo.seed import SUPPORT_SPECIALIST
from executions import services
from executions.models import Execution
from governance.approvals import approval_request_open
from governance.models import ApprovalRequest, AuditLogEntry
from rivercore import unknown_outcome
from tests.browser.conftest import axe_violations, screenshot

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _paused(demo) -> ApprovalRequest:
    agent = demo["agents"][SUPPORT_SPECIALIST]
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=demo["admin"], prompt="Commit the notes")
    )
    Execution.objects.filter(pk=execution.pk).update(status=Execution.Status.AWAITING_APPROVAL)
    asked = unknown_outcome.payload(
        tool_name="mcp:git/git_commit",
        arguments={"repo_path": "/srv/notes", "message": "Add the weekly notes"},
        reasoning_summary="The notes were staged; the agent commits them as asked.",
    )
    return approval_request_open(
        workspace_id=agent.workspace_id,
        execution_id=execution.pk,
        agent_id=agent.pk,
        call_id="call_commit",
        payload=asked.model_dump(mode="json"),
        approver_roles=["admin", "editor"],
        escalation_timeout_minutes=240,
        run_started_by_id=demo["admin"].pk,
    )


def test_the_unknown_outcome_card_asks_and_done_answers_it(signed_in, demo):
    approval = _paused(demo)
    page = signed_in(demo["approver"])
    page.goto(f"/approvals/{approval.pk}/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("River sent this call but does not know whether it happened")
    expect(card.get_by_role("button", name="Not done, retry")).to_be_visible()
    for file, scheme, size in (
        ("unknown-outcome-card-light-1280", "light", WIDE),
        ("unknown-outcome-card-dark-390", "dark", PHONE),
    ):
        page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
        page.set_viewport_size(size)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), file
        assert axe_violations(page) == [], file
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot(page, file), DOCS / f"{file}.png")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(WIDE)

    card.get_by_label("What you checked").fill("The commit is in the log")
    card.get_by_role("button", name="Done: it happened").click()
    expect(page.locator(f"#approval-{approval.pk}")).to_contain_text("Confirmed done by approver")
    approval.refresh_from_db()
    assert approval.resolution["outcome"] == "done"
    assert AuditLogEntry.objects.filter(event_type="unknown_outcome_confirmed", approval_id=approval.pk).exists()
