"""The run page in Chromium against the real stack (Daphne, a Celery worker, PostgreSQL,
Redis), with the demo's agents on the offline planner, so every flow is deterministic:

- the L1 Support Specialist asked to close tickets proposes a ``write_back`` and waits
  for approval (the admin started it, so the approver decides: segregation of duties);
- asked something it cannot place ("hello there") it asks the user, offering
  "Count the rows of <table>" answers, and goes on with the one chosen;
- the Support Analyst asked for tickets per priority answers with a table and a chart.

One test instead runs an agent of its own on a scripted local model server, with a test
tool the worker holds open, to cancel a run while the worker is busy in it.

Runs are started where the worker sees them: the agent page's Run now form, or the API
over HTTP. Each test checks the page did not reload (a marker on ``window`` survives)."""

from __future__ import annotations

import re
import sqlite3

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from demo.seed import SUPPORT_ANALYST, SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from executions.models import Execution, ExecutionEvent
from governance.models import ApprovalRequest
from tests.browser.conftest import WAIT_MS, axe_violations, screenshot

CLOSE_TICKETS = "Close the open high-priority tickets created in the last 24 hours"
PHONE = {"width": 390, "height": 844}


def _open_high_recent(workspace_id: int) -> list[tuple[int, str]]:
    with sqlite3.connect(demo_database_path(workspace_id)) as db:
        return db.execute(
            "SELECT id, status FROM tickets WHERE priority = 'high' "
            "AND datetime(created_at) >= datetime('now', '-24 hours') ORDER BY id").fetchall()


def _start_from_agent_page(page, agent, prompt: str) -> int:
    page.goto(f"/agents/{agent.pk}/")
    page.get_by_label("Prompt").fill(prompt)
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(re.search(r"/runs/(\d+)/$", page.url).group(1))
    page.evaluate("window.riverMarker = 'same page'")
    return run_id


def _still_same_page(page) -> None:
    assert page.evaluate("window.riverMarker") == "same page", "the page reloaded"


def _feed_seqs(page) -> list[int]:
    return page.eval_on_selector_all("#run-feed > li", "items => items.map(i => Number(i.dataset.seq))")


def _feed_text(page) -> list[str]:
    return page.eval_on_selector_all(
        "#run-feed > li", "items => items.map(i => i.querySelector('.run-event-line').innerText)")


def _wait_status(run_id: int, status: str) -> None:
    import time

    deadline = time.monotonic() + WAIT_MS / 1000
    while Execution.objects.get(pk=run_id).status != status:
        assert time.monotonic() < deadline, f"run {run_id} never reached {status}"
        time.sleep(0.1)


@pytest.fixture
def demo(demo):
    """The demo, with its support data rebuilt: a write of an earlier test is undone."""
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    return demo


@pytest.fixture
def second_page(chromium_browser, river_stack):
    """Another person's browser: ``second_page(user)``; its errors fail the test too."""
    contexts, errors = [], []

    def open_as(user, viewport=None):
        context = chromium_browser.new_context(base_url=river_stack.url,
                                               viewport=viewport or {"width": 1280, "height": 800})
        context.set_default_timeout(WAIT_MS)
        client = Client()
        client.force_login(user)
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                              "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": river_stack.url}])
        contexts.append(context)
        other = context.new_page()
        other.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
        other.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        return other

    yield open_as
    for context in contexts:
        context.close()
    assert errors == [], errors


def test_approve_with_an_edit_from_the_inline_card_and_see_the_edited_write(signed_in, demo, second_page):
    page = signed_in(demo["admin"])
    specialist = demo["agents"][SUPPORT_SPECIALIST]
    before = _open_high_recent(demo["workspace"].pk)
    assert before and all(status == "open" for _, status in before[:5])
    run_id = _start_from_agent_page(page, specialist, CLOSE_TICKETS)

    # The admin's page follows the run until it waits for the approver.
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    expect(page.locator("#run-feed .run-event-approval_required")).to_be_visible()
    expect(page.locator("#run-feed .tool-badge", has_text="execute_query").first).to_be_visible()
    card = page.locator(".approval-card")
    expect(card).to_contain_text("another approver must decide")  # the starter may not approve
    screenshot(page, "run-waiting-for-approval")
    assert axe_violations(page) == []
    page.evaluate("document.getElementById('run-feed').riverReconnect()")  # resume after the last seq

    approver = second_page(demo["approver"])
    approver.goto(f"/runs/{run_id}/")
    editor = approver.get_by_label(re.compile("^Arguments"))
    approver.get_by_text("Edit the arguments, then approve").click()
    edited = editor.input_value().replace('"closed"', '"solved"')
    assert '"solved"' in edited
    editor.fill(edited)
    diff = approver.locator(".approval-diff-list li.diff-changed")
    expect(diff).to_have_count(1)
    expect(diff).to_contain_text("data.status")
    expect(diff.locator("del")).to_have_text("closed")
    expect(diff.locator("ins")).to_have_text("solved")
    approver.get_by_label("Comment (optional)").last.fill("Solved, not closed")
    approver.get_by_role("button", name="Approve with these arguments").click()
    expect(approver.locator(".approval-card")).to_contain_text("Edited and approved by approver")

    # The admin's page, never reloaded, shows the rest of the run as it happens.
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    expect(page.locator("#run-part-outcome .run-summary")).to_contain_text("status = 'solved'")
    expect(page.locator("#run-feed .run-event-run_completed")).to_be_visible()
    expect(page.locator(".approval-card")).to_contain_text("Solved, not closed")
    expect(page.locator(".approval-card .diff-changed ins")).to_have_text("solved")
    _still_same_page(page)
    seqs = _feed_seqs(page)
    assert seqs == list(range(1, len(seqs) + 1))  # no gaps, no duplicates across the reconnect
    assert seqs[-1] == ExecutionEvent.objects.filter(execution_id=run_id).count()

    written = dict(_open_high_recent(demo["workspace"].pk))
    assert {written[ticket] for ticket, status in before if status == "open"} == {"solved"}

    # The same page after the run ended reads the same from the event log.
    live_lines = _feed_text(page)
    page.reload()
    expect(page.locator("#run-feed > li")).to_have_count(len(live_lines))
    assert _feed_text(page) == live_lines
    screenshot(page, "run-completed-write")

    # Why the write happened: the approver, the comment and the policy verdict.
    write_line = page.locator("#run-feed .run-event-observation_received", has_text="write_back")
    write_line.get_by_role("button", name=re.compile("^Why")).click()
    panel = write_line.locator(".run-why")
    expect(panel).to_contain_text("approver")
    expect(panel).to_contain_text("Solved, not closed")
    expect(panel).to_contain_text("Governance")
    assert axe_violations(page) == []


def test_reject_from_the_inline_card(signed_in, demo, second_page):
    page = signed_in(demo["admin"])
    run_id = _start_from_agent_page(page, demo["agents"][SUPPORT_SPECIALIST], CLOSE_TICKETS)
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    approver = second_page(demo["approver"])
    approver.goto(f"/runs/{run_id}/")
    approver.get_by_label("Comment for the agent (optional)").fill("Not before the customer confirms")
    approver.get_by_role("button", name="Reject").click()
    expect(approver.locator(".approval-card")).to_contain_text("Rejected by approver")

    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    expect(page.locator("#run-feed .run-event-approval_resolved")).to_contain_text("rejected")
    expect(page.locator("#run-part-outcome .run-summary")).to_contain_text("Not before the customer confirms")
    _still_same_page(page)
    assert all(status == "open" for _, status in _open_high_recent(demo["workspace"].pk)[:5])
    assert ApprovalRequest.objects.get(execution_id=run_id).status == ApprovalRequest.Status.REJECTED


def test_answer_the_agents_question_and_the_run_continues(signed_in, demo):
    page = signed_in(demo["admin"])
    run_id = _start_from_agent_page(page, demo["agents"][SUPPORT_SPECIALIST], "hello there")
    question = page.locator("#run-question")
    expect(question).to_contain_text("I could not tell what to act on")
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting interaction")
    screenshot(page, "run-waiting-for-answer")
    assert axe_violations(page) == []

    page.get_by_role("radio", name="Count the rows of tickets").check()
    page.get_by_role("button", name="Send answer").click()

    expect(page.locator("#run-question")).to_have_count(0)
    expect(page.locator("#run-feed .run-event-interaction_resolved")).to_be_visible()
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    expect(page.locator("#run-part-outcome .run-summary")).to_contain_text("Answer: 540")
    _still_same_page(page)
    assert Execution.objects.get(pk=run_id).status == Execution.Status.COMPLETED


def test_cancel_a_waiting_run(signed_in, demo):
    page = signed_in(demo["admin"])
    run_id = _start_from_agent_page(page, demo["agents"][SUPPORT_SPECIALIST], "hello there")
    expect(page.locator("#run-question")).to_be_visible()

    page.get_by_text("Cancel run").click()
    page.get_by_role("button", name="Yes, cancel the run").click()
    expect(page.get_by_role("status").filter(has_text=f"Run #{run_id} was cancelled.")).to_be_visible()
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Cancelled")
    expect(page.locator("#run-feed .run-event-run_completed")).to_contain_text("Cancelled")
    expect(page.get_by_text("Cancel run")).to_have_count(0)
    _wait_status(run_id, Execution.Status.CANCELLED)


def _wait_for(check, what: str):
    import time

    deadline = time.monotonic() + WAIT_MS / 1000
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def _log_since(path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def test_cancel_a_running_run(signed_in, demo, river_stack):
    """Cancel a run while the worker is busy in it: its first tool call is held open
    (the ``hold-durable_slow_read`` file), the person cancels, the call is let go. The run
    stays cancelled and the model's next request, a write, never runs: the worker finds
    the run cancelled at its next journal write and stops without writing."""
    from executions.models import ExecutionStep, LLMProvider
    from tests.executions.durable_support import ScriptServer, completion_tool_call, marker_lines
    from tests.factories import make_agent

    worker_log = river_stack.logs["worker"]
    log_start = worker_log.stat().st_size
    markers = river_stack.marker_dir
    for stale in markers.iterdir():
        stale.unlink()
    hold = markers / "hold-durable_slow_read"
    hold.touch()
    script = [completion_tool_call("durable_slow_read", {"marker": "before-cancel"}, "call_read"),
              completion_tool_call("durable_write", {"marker": "after-cancel"}, "call_write")]
    agent = make_agent(workspace=demo["workspace"], owner=demo["admin"], name="Slow reader",
                       tools=["durable_slow_read", "durable_write"], action_level="automated")
    try:
        with ScriptServer(script) as server:
            LLMProvider.objects.create(organization=demo["workspace"].organization, provider_name="scripted",
                                       base_url=server.base_url, tier_models={"balanced": "scripted-model"},
                                       max_retries=0)
            page = signed_in(demo["admin"])
            run_id = _start_from_agent_page(page, agent, "Read the slow thing")
            # The worker is inside the tool call now (the tool wrote its line, then waits).
            _wait_for(lambda: marker_lines(markers, "durable_slow_read"), "the held tool call")
            expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Running")
            assert Execution.objects.get(pk=run_id).status == Execution.Status.RUNNING

            page.get_by_text("Cancel run").click()
            page.get_by_role("button", name="Yes, cancel the run").click()
            expect(page.get_by_role("status").filter(has_text=f"Run #{run_id} was cancelled.")).to_be_visible()
            expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Cancelled")
            expect(page.locator("#run-feed .run-event-run_completed")).to_contain_text("Cancelled")
            expect(page.get_by_text("Cancel run")).to_have_count(0)
            events_at_cancel = ExecutionEvent.objects.filter(execution_id=run_id).count()
            steps_at_cancel = ExecutionStep.objects.filter(execution_id=run_id).count()

            hold.unlink()  # the tool call returns; the worker tries to write its observation
            _wait_for(lambda: f"segment of execution {run_id} stopped" in _log_since(worker_log, log_start),
                      "the worker to stop the cancelled run")
    finally:
        hold.unlink(missing_ok=True)

    run = Execution.objects.get(pk=run_id)
    assert run.status == Execution.Status.CANCELLED
    assert run.error["code"] == "CANCELLED"
    assert [line.split()[1] for line in marker_lines(markers, "durable_slow_read")] == ["before-cancel"]
    assert marker_lines(markers, "durable_write") == []  # no tool call ran after the cancel
    assert ExecutionEvent.objects.filter(execution_id=run_id).count() == events_at_cancel
    assert ExecutionStep.objects.filter(execution_id=run_id).count() == steps_at_cancel
    # The observation's write found the run cancelled; with write-behind the worker may
    # have asked the model once more, never more, and ran nothing it proposed.
    assert len(server.requests) <= 2
    assert "Traceback" not in _log_since(worker_log, log_start), river_stack.log_tail()


def test_a_chart_and_a_table_for_an_analysts_answer(signed_in, demo):
    page = signed_in(demo["admin"])
    _start_from_agent_page(page, demo["agents"][SUPPORT_ANALYST], "How many tickets are there per priority?")
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    expect(page.locator("#run-part-outcome .run-result table tbody tr")).to_have_count(4)
    expect(page.locator("#run-part-outcome .run-result svg.result-chart-svg")).to_be_visible()
    expect(page.locator("#run-part-outcome .run-result svg rect.result-series-0")).to_have_count(4)
    reasoning = page.locator("#run-feed .run-event-turn_reasoning").first
    reasoning.get_by_role("button", name=re.compile("^Why")).click()
    expect(reasoning.locator(".run-why")).to_contain_text("river-offline/planner")
    screenshot(page, "run-completed-chart")
    assert axe_violations(page) == []


@pytest.mark.parametrize("viewport", [PHONE])
def test_the_run_page_on_a_phone(signed_in, demo, viewport):
    page = signed_in(demo["admin"])
    _start_from_agent_page(page, demo["agents"][SUPPORT_SPECIALIST], CLOSE_TICKETS)
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    screenshot(page, "run-waiting-for-approval-phone")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []


def test_a_running_run_screenshot(signed_in, demo):
    """A run caught mid-turn, as the event log has it (written here, not by the worker)."""
    from executions.services import execution_start, person_run_request

    specialist = demo["agents"][SUPPORT_ANALYST]
    run = execution_start(agent=specialist, request=person_run_request(
        agent=specialist, user=demo["admin"], prompt="How many open tickets are there?"))
    Execution.objects.filter(pk=run.pk).update(status=Execution.Status.RUNNING, turn_count=2, tokens_input=2400,
                                               tokens_output=180)
    shapes = [
        ("run_started", {"execution_id": run.pk, "agent_id": str(specialist.pk), "trigger_type": "manual",
                         "started_at": "2026-01-01T10:00:00+00:00"}),
        ("turn_reasoning", {"turn": 1, "thought_summary": "First I classify what the request asks for.",
                            "model_used": "river-offline/planner", "step_number": 1}),
        ("tool_called", {"turn": 1, "tool_name": "classify_intent", "args_summary": '{"user_prompt": "How many…"}',
                         "call_id": "c1", "step_number": 2}),
        ("observation_received", {"turn": 1, "tool_name": "classify_intent", "result_summary": "DATA_QUERY (0.9)",
                                  "duration_ms": 14, "call_id": "c1", "step_number": 3, "status": "completed"}),
        ("turn_complete", {"turn": 1, "duration_ms": 40}),
        ("turn_reasoning", {"turn": 2, "thought_summary": "Looking up the tables that match the request.",
                            "model_used": "river-offline/planner", "step_number": 4}),
    ]
    ExecutionEvent.objects.bulk_create([ExecutionEvent(execution_id=run.pk, seq=i, event_type=kind, payload=payload)
                                        for i, (kind, payload) in enumerate(shapes, start=1)])
    page = signed_in(demo["admin"])
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#run-feed > li")).to_have_count(len(shapes))
    expect(page.locator("#run-part-head")).to_contain_text("Turn 2 of 15")
    expect(page.locator("#run-connection")).to_have_text("Live")
    screenshot(page, "run-running")
    page.set_viewport_size(PHONE)
    screenshot(page, "run-running-phone")
    assert axe_violations(page) == []


def test_another_organizations_user_gets_404(page, page_errors, signed_in, demo, django_user_model):
    from executions.services import execution_start, person_run_request
    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role

    run = execution_start(agent=demo["agents"][SUPPORT_ANALYST], request=person_run_request(
        agent=demo["agents"][SUPPORT_ANALYST], user=demo["admin"], prompt="x"))
    other = Workspace.objects.create(organization=Organization.objects.create(name="Globex", slug="globex"),
                                     name="Ops", slug="ops")
    stranger = django_user_model.objects.create_user(username="stranger", password="pw-stranger-123")
    Membership.objects.create(workspace=other, user=stranger, role=Role.ADMIN)
    signed_in(stranger)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/parts", f"/runs/{run.pk}/row"):
        response = page.goto(url)
        assert response.status == 404, url
    page_errors.clear()  # the browser reports each 404 it was sent to on purpose
    page.goto("/runs/")
    expect(page.locator("main")).not_to_contain_text(f"Run #{run.pk}")
