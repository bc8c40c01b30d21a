"""Structured views and the audit downloads in Chromium: an audit entry's details as
keys and values with the approver's edit as before/after and the raw JSON behind a
toggle; the CSV and JSON Lines downloads of the filtered entries; a run's Why panel
rendered the same way. In both themes, at 1280 and 390 pixels, axe clean."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from executions.models import Execution, ExecutionEvent, ExecutionStep
from governance.audit import audit_record, audit_seal
from governance.models import ApprovalRequest
from tests.browser.catalog_support import check_and_capture

LONG_NOTE = "The customer confirmed by phone that the issue is resolved. " * 12


@pytest.fixture
def edited_entry(demo):
    workspace = demo["workspace"]
    audit_record(organization_id=workspace.organization_id, workspace_id=workspace.pk,
                 event_type="approval_edited", actor=demo["approver"], execution_id=4242,
                 details={"tool_name": "write_back", "resolution": "edited_approved", "comment": "Solved, not closed",
                          "note": LONG_NOTE,
                          "diff": {"data": {"from": {"status": "closed", "priority": "high"},
                                            "to": {"status": "solved", "priority": "high"}}}})
    audit_record(organization_id=workspace.organization_id, workspace_id=workspace.pk,
                 event_type="governance_decision", actor_label="=cmd|' /C calc'!A0",
                 details={"decision": "BLOCK", "arguments": {"query": "DELETE FROM tickets"}})
    audit_seal(organization_id=workspace.organization_id)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_structured_audit_entry_and_its_downloads(signed_in, demo, edited_entry, scheme):
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    page.goto("/audit/")
    page.get_by_label("What").select_option("approval_edited")
    page.get_by_role("button", name="Filter").click()
    row = page.get_by_role("row").filter(has_text="Approved with edited arguments")
    expect(row).to_have_count(1)
    row.get_by_text("Show the details of entry").click()
    view = row.locator(".struct").first
    expect(view.locator("dt", has_text="Tool name")).to_be_visible()
    expect(view.locator("dd", has_text="write_back").first).to_be_visible()
    changed = view.locator(".struct-diff-table tr.struct-change-changed")
    expect(changed).to_have_count(1)  # the priority did not change
    expect(changed.locator("code")).to_have_text("data.status")
    expect(changed.locator("del")).to_have_text("closed")
    expect(changed.locator("ins")).to_have_text("solved")
    # Long text is clamped until asked for.
    note = view.locator("details.struct-long")
    expect(note.locator(".struct-text")).to_be_hidden()
    note.locator("summary").click()
    expect(note.locator(".struct-text")).to_be_visible()
    # The raw JSON, behind its toggle.
    raw = row.locator(".struct-raw-text")
    expect(raw).to_be_hidden()
    row.locator("summary", has_text="Raw JSON").click()
    expect(raw).to_contain_text('"comment": "Solved, not closed"')
    check_and_capture(page, f"audit-structured-{scheme}")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # each entry a card on a phone
    page.set_viewport_size({"width": 1280, "height": 800})

    # The downloads keep the filter: only the edited approval.
    with page.expect_download() as csv_download:
        page.get_by_role("link", name="CSV").click()
    download = csv_download.value
    assert re.fullmatch(r"river-audit-[a-z0-9-]+-\d{4}-\d{2}-\d{2}\.csv", download.suggested_filename)
    rows = list(csv.DictReader(io.StringIO(open(download.path(), encoding="utf-8").read())))
    assert [r["action"] for r in rows] == ["approval_edited"] and rows[0]["actor"] == demo["approver"].username
    assert json.loads(rows[0]["details"])["comment"] == "Solved, not closed"
    with page.expect_download() as jsonl_download:
        page.get_by_role("link", name="JSON Lines").click()
    lines = open(jsonl_download.value.path(), encoding="utf-8").read().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["approval_edited"]

    # Without the filter: every entry, the formula-like actor defused.
    page.get_by_role("link", name="Clear").click()
    with page.expect_download() as everything:
        page.get_by_role("link", name="CSV").click()
    actors = {r["action"]: r["actor"] for r in csv.DictReader(open(everything.value.path(), encoding="utf-8"))}
    assert actors["governance_decision"] == "'=cmd|' /C calc'!A0"


@pytest.fixture
def edited_run(demo):
    """A finished run of the demo's analyst whose write was approved with an edit, with
    the events its feed shows."""
    agent = demo["agents"]["Support Analyst"]
    run = Execution.objects.create(
        workspace=demo["workspace"], agent=agent, agent_version=agent.current_version,
        status=Execution.Status.COMPLETED, outcome="answered", input_prompt="Close ticket 7",
        requester=demo["admin"], requested_by=demo["admin"], finished_at=timezone.now(),
        trigger_payload={"ticket": {"id": 7, "subject": "Refund <b>now</b>"}})
    args = {"table": "tickets", "data": {"status": "solved"}, "where": {"id": 7}}
    ExecutionStep.objects.bulk_create([
        ExecutionStep(execution=run, step_number=1, turn=1, step_type="tool_call", tool_name="write_back",
                      call_id="c1", input=args),
        ExecutionStep(execution=run, step_number=2, turn=1, step_type="governance_check", tool_name="write_back",
                      call_id="c1", governance_decision="PROCEED", output={"reason": "A person approved it"}),
        ExecutionStep(execution=run, step_number=3, turn=1, step_type="observation", tool_name="write_back",
                      call_id="c1", duration_ms=40,
                      output={"result": json.dumps({"updated": 1, "ids": [7]}), "note": LONG_NOTE}),
    ])
    ExecutionEvent.objects.create(execution=run, seq=1, event_type="observation_received",
                                  payload={"step_number": 3, "turn": 1, "tool_name": "write_back",
                                           "status": "completed", "duration_ms": 40, "result_summary": "1 row"})
    now = timezone.now()
    ApprovalRequest.objects.create(
        workspace=demo["workspace"], execution_id=run.pk, agent_id=agent.pk, tool_name="write_back",
        tool_call_id="c1", proposed_payload={**args, "data": {"status": "closed"}},
        status=ApprovalRequest.Status.EDITED, resolved_by=demo["approver"], resolved_at=now,
        resolution_comment="Solved, not closed", expires_at=now + dt.timedelta(hours=1),
        resolution={"status": "edited_approved", "modified_args": args})
    return run


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_why_panel_is_structured(signed_in, demo, edited_run, scheme):
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    page.goto(f"/runs/{edited_run.pk}/")
    line = page.locator("#run-feed .run-event-observation_received")
    line.get_by_role("button", name=re.compile("^Why")).click()
    panel = line.locator(".run-why")
    expect(panel.locator(".run-why-content")).to_be_visible()
    expect(panel).to_contain_text("Solved, not closed")
    changed = panel.locator(".struct-diff-table tr.struct-change-changed")
    expect(changed.locator("del")).to_have_text("closed")
    expect(changed.locator("ins")).to_have_text("solved")
    expect(panel.locator("dt", has_text="Updated")).to_be_visible()  # the result's JSON text, opened up
    panel.locator("summary", has_text="Raw JSON").last.click()
    expect(panel.locator(".struct-raw-text").last).to_be_visible()
    check_and_capture(page, f"run-why-structured-{scheme}")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than a phone
