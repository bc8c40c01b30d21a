"""What River tells people, in Chromium against the real stack (issue 26's "done means"):

- a blocked, a rejected and an unanswered run each show their outcome on the runs list
  and on the run page, and only an answered run is green;
- an approver's bell clears, live, when another approver decides the request;
- the person who started a run hears in their bell that it waits for approval, and then
  that it finished.

The outcome runs are real runs of a scripted model, run in the test process (their rows
are committed, so the server shows them); the notification runs are the demo agent's,
run by the stack's worker and decided through the browser."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from demo.seed import SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from governance.services import policy_create
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, second_page  # noqa: F401 - a fixture
from tests.executions import durable_support  # noqa: F401 - registers the durable test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

LABELS = {"answered": "Answered", "blocked": "Blocked by a policy", "rejected": "Rejected",
          "no_answer": "No answer"}


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    return demo


@pytest.fixture
def not_sent(monkeypatch):
    """Runs of the test process are driven here, segment by segment: nothing is queued."""
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _run(agent, user, script, *, llm=None) -> Execution:
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=user, prompt="Write the marker w1"))
    services.execution_run_segment(execution_id=execution.pk, llm=llm or ScriptedLLM(list(script)))
    return Execution.objects.get(pk=execution.pk)


def _outcome_runs(demo) -> dict[str, Execution]:
    workspace, admin = demo["workspace"], demo["admin"]
    write_then_say = [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"), text_reply("Wrote w1.")]
    runs = {"answered": _run(make_agent(workspace=workspace, owner=admin, tools=["durable_write"],
                                        name="Marker writer"), admin, write_then_say)}

    gated = make_agent(workspace=workspace, owner=admin, tools=["durable_write"], name="Gated writer",
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="c1"),
                       text_reply("The approver said no, so nothing was written.")])
    paused = _run(gated, admin, [], llm=llm)
    assert paused.status == Execution.Status.AWAITING_APPROVAL
    approval_resolve(user=demo["approver"], approval_id=ApprovalRequest.objects.get(execution_id=paused.pk).pk,
                     status="rejected", comment="not today")
    services.execution_run_segment(execution_id=paused.pk, llm=llm)
    runs["rejected"] = Execution.objects.get(pk=paused.pk)

    # A policy blocks the tool from here on.
    policy_create(actor=admin, scope="workspace", workspace_id=workspace.pk, name="No marker writes",
                  conditions={"tool": "durable_write"}, enforcement="block")
    blocked_agent = make_agent(workspace=workspace, owner=admin, tools=["durable_write"], name="Blocked writer")
    runs["blocked"] = _run(blocked_agent, admin, [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"),
                                                  text_reply("A policy stopped the write.")])

    asker = make_agent(workspace=workspace, owner=admin, tools=["durable_write"], name="Puzzled writer")
    runs["no_answer"] = _run(asker, admin, [text_reply("I could not answer that.")])
    return runs


def test_blocked_rejected_and_unanswered_runs_show_their_outcome_and_only_answered_is_green(
        signed_in, demo, not_sent):
    runs = _outcome_runs(demo)
    assert {outcome: run.outcome for outcome, run in runs.items()} == {outcome: outcome for outcome in runs}
    assert all(run.status == Execution.Status.COMPLETED for run in runs.values())
    page = signed_in(demo["admin"])

    page.goto("/runs/")
    green = None
    for outcome, run in runs.items():
        row = page.locator(f"#run-row-{run.pk}")
        expect(row).to_have_attribute("data-outcome", outcome)
        expect(row.locator(".run-outcome-badge")).to_have_text(LABELS[outcome])
        expect(row.locator(".badge-ok")).to_have_count(1 if outcome == "answered" else 0)
        colour = row.locator(".run-outcome-badge").evaluate("badge => getComputedStyle(badge).backgroundColor")
        if outcome == "answered":
            green = colour
    for outcome, run in runs.items():
        if outcome != "answered":
            colour = page.locator(f"#run-row-{run.pk} .run-outcome-badge").evaluate(
                "badge => getComputedStyle(badge).backgroundColor")
            assert colour != green, f"the {outcome} run's badge is as green as an answered one"
    # The ten columns fit a laptop's width: the cost column is not cut off.
    assert page.locator(".runs-table").evaluate("table => table.parentElement.scrollWidth "
                                                "<= table.parentElement.clientWidth")
    screenshot(page, "runs-list-outcomes")
    assert axe_violations(page) == []

    # Filtered by outcome, the list shows that run only.
    page.goto("/runs/?outcome=blocked")
    expect(page.locator("tbody tr[data-run-id]")).to_have_count(1)
    expect(page.locator(f"#run-row-{runs['blocked'].pk}")).to_be_visible()

    for outcome, run in runs.items():
        page.goto(f"/runs/{run.pk}/")
        head, final = page.locator("#run-part-head"), page.locator("#run-part-outcome")
        expect(head.locator(".run-status-badge")).to_have_text("Completed")
        expect(head.locator(".run-outcome-badge")).to_have_text(LABELS[outcome])
        expect(final.locator(".run-outcome-badge")).to_have_text(LABELS[outcome])
        answered = outcome == "answered"
        # Green: the outcome badge in the head and in the outcome card, for an answered run only.
        expect(page.locator("#run-part-head .badge-ok, #run-part-outcome .badge-ok")).to_have_count(
            2 if answered else 0)
        expect(page.locator("#run-part-outcome .run-final-badge-ok")).to_have_count(1 if answered else 0)
        if outcome == "blocked":  # the activity shows the refused call and why
            refusal = page.locator(".run-event-observation_received", has_text="blocked by governance")
            expect(refusal).to_have_count(1)
            expect(refusal.locator(".badge-danger")).to_have_text("blocked")
        screenshot(page, f"run-page-outcome-{outcome}")
        assert axe_violations(page) == []
    expect(page.locator("#run-part-outcome")).to_contain_text("I could not answer that.")


def _api(stack, token: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        stack.url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - our own test server
        return json.load(answer)


@pytest.fixture
def second_approver(demo):
    user = get_user_model().objects.create_user(username="second-approver", password="pw-second",
                                                first_name="Sam", last_name="Second")
    Membership.objects.create(workspace=demo["workspace"], user=user, role=Role.EDITOR)
    return user


def test_the_bell_clears_when_another_approver_decides(signed_in, demo, river_stack, second_page,  # noqa: F811
                                                        second_approver):
    page = signed_in(demo["approver"])
    page.goto("/")
    expect(page.locator("body")).to_have_attribute("data-live-counts", "connected")
    bell_badge = page.locator("[data-live-count='notifications']")
    expect(bell_badge).to_be_hidden()

    started = _api(river_stack, token_issue(user=demo["admin"]).plaintext,
                   f"/api/v1/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/run", {"input_prompt": CLOSE_TICKETS})
    run_id = started["execution_id"]

    expect(bell_badge).to_have_text("1")
    bell = page.get_by_role("button", name=re.compile("^Notifications"))
    bell.click()
    panel = page.locator("#bell-panel")
    expect(panel.get_by_role("link", name=re.compile("Approval needed: write_back"))).to_be_visible()
    screenshot(page, "bell-approver-before-decision")
    page.evaluate("window.riverMarker = 'same page'")

    other = second_page(second_approver)
    other.goto(f"/runs/{run_id}/")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.locator("#run-part-head .run-status-badge")).to_have_text("Completed")

    # The first approver's page hears it: the count goes to 0 and the open panel empties.
    expect(bell_badge).to_be_hidden()
    expect(page.get_by_role("button", name="Notifications, 0 unread")).to_be_visible()
    expect(panel).to_contain_text("You're all caught up")
    assert page.evaluate("window.riverMarker") == "same page"
    screenshot(page, "bell-approver-after-other-decided")

    # And the server agrees; the notification stays listed, resolved, naming who decided.
    page.goto("/notifications/")
    expect(page.locator("[data-live-count='notifications']")).to_be_hidden()
    notice = page.locator("li.notice", has_text="Approval needed: write_back")
    expect(notice).to_contain_text("Resolved")
    expect(notice.locator(".notice-resolution")).to_contain_text("Sam Second")
    screenshot(page, "notifications-resolved-by-other")
    assert axe_violations(page) == []


def test_the_starter_hears_that_the_run_waits_and_then_that_it_finished(signed_in, demo, river_stack,
                                                                        second_page):  # noqa: F811
    page = signed_in(demo["admin"])
    # Every end, answered ones too (by default only runs that fail or do not answer).
    page.goto("/settings/notifications")
    page.get_by_label("Every end of a run I started, answered ones too").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_label("Every end of a run I started, answered ones too")).to_be_checked()

    page.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    expect(page.locator("body")).to_have_attribute("data-live-counts", "connected")
    page.get_by_label("Prompt").fill(CLOSE_TICKETS)
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_id = int(re.search(r"/runs/(\d+)/$", page.url).group(1))
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    bell_badge = page.locator("[data-live-count='notifications']")
    expect(bell_badge).to_have_text("1")  # the run's own pause; the starter may not decide it
    bell = page.get_by_role("button", name=re.compile("^Notifications"))
    bell.click()
    panel = page.locator("#bell-panel")
    waiting = panel.get_by_role("link", name=re.compile(rf"run {run_id} is waiting for approval of write_back"))
    expect(waiting).to_be_visible()
    expect(panel.get_by_role("link", name=re.compile("Approval needed"))).to_have_count(0)
    screenshot(page, "bell-starter-run-waiting")
    page.keyboard.press("Escape")

    approver = second_page(demo["approver"])
    approver.goto(f"/runs/{run_id}/")
    approver.get_by_role("button", name="Approve", exact=True).click()

    # Live: the run page shows it completed, the pause notice resolves, the end arrives.
    expect(page.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    finished = re.compile(rf"run {run_id} finished with an answer")
    bell.click()
    expect(panel.get_by_role("link", name=finished)).to_be_visible()
    expect(panel.get_by_role("link", name=re.compile("is waiting for approval"))).to_have_count(0)
    expect(bell_badge).to_have_text("1")
    screenshot(page, "bell-starter-run-finished")
    assert axe_violations(page) == []

    page.goto("/notifications/")
    expect(page.locator("li.notice", has_text=f"run {run_id} is waiting for approval")).to_contain_text("Resolved")
    expect(page.locator("li.notice", has_text=finished)).to_contain_text("New")
