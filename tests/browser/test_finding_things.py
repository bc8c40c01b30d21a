"""Finding things in Chromium against the real stack (issue 28, part 2): the search box
finds a run by a word of its answer; the runs list shows a new run without a reload and
sorts by a column; the approvals inbox is worked with the keyboard alone."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from demo.seed import SUPPORT_ANALYST, SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from executions.models import Execution
from governance.models import ApprovalRequest
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, PHONE, second_page  # noqa: F401 - a fixture

WIDE = {"width": 1280, "height": 800}


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    return demo


def _finished_run(demo, *, prompt: str, answer: str) -> Execution:
    agent = demo["agents"][SUPPORT_ANALYST]
    return Execution.objects.create(workspace=demo["workspace"], agent=agent, agent_version=agent.current_version,
                                    requester=demo["admin"], input_prompt=prompt, status=Execution.Status.COMPLETED,
                                    outcome="answered", result={"summary": answer})


def _start(page, demo, prompt: str) -> int:
    page.goto(f"/agents/{demo['agents'][SUPPORT_SPECIALIST].pk}/")
    page.get_by_label("Prompt").fill(prompt)
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return int(re.search(r"/runs/(\d+)/$", page.url).group(1))


def test_search_finds_a_run_by_a_word_of_its_answer(signed_in, demo):
    run = _finished_run(demo, prompt="How did refunds go last week?",
                        answer="Refunds rose 12 percent, mostly from the Lisbon warehouse.")
    _finished_run(demo, prompt="Open tickets?", answer="Seven tickets are open.")
    page = signed_in(demo["admin"])
    page.goto("/runs/")
    page.keyboard.press("/")
    expect(page.locator("#topbar-q")).to_be_focused()
    page.keyboard.type("lisbon")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/search/\?q=lisbon$"))
    runs = page.locator("#search-runs + .search-list > li")
    expect(runs).to_have_count(1)
    expect(runs).to_contain_text(f"Run #{run.pk}")
    expect(runs).to_contain_text("Lisbon warehouse")
    screenshot(page, "search-results")
    assert axe_violations(page) == []
    page.set_viewport_size(PHONE)
    screenshot(page, "search-results-phone")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert axe_violations(page) == []
    page.set_viewport_size(WIDE)
    # "/" typed in a field is a character, not a jump to the search box.
    page.locator("#search-page-q").fill("")
    page.locator("#search-page-q").press("/")
    expect(page.locator("#search-page-q")).to_have_value("/")
    page.get_by_role("link", name=f"Run #{run.pk}").click()
    page.wait_for_url(f"**/runs/{run.pk}/")


def test_the_runs_list_shows_a_new_run_without_a_reload(signed_in, demo, second_page):  # noqa: F811
    older = _finished_run(demo, prompt="An older question", answer="An older answer.")
    page = signed_in(demo["admin"])
    page.goto("/runs/")
    expect(page.locator(f"#run-row-{older.pk}")).to_be_visible()
    expect(page.locator("table[data-runs-live][data-live]")).to_have_count(1)
    page.evaluate("window.riverMarker = 'same page'")

    run_id = _start(second_page(demo["admin"]), demo, CLOSE_TICKETS)
    row = page.locator(f"#run-row-{run_id}")
    expect(row).to_be_visible()
    expect(page.locator("tbody tr[data-run-id]").first).to_have_attribute("data-run-id", str(run_id))
    expect(row.locator(".run-row-status")).to_have_text("Awaiting approval")
    assert page.evaluate("window.riverMarker") == "same page"

    # Sorting by a column keeps the filters in the URL and says which way it sorts.
    page.goto("/runs/?outcome=answered")
    page.get_by_role("link", name="Turns").click()
    page.wait_for_url(re.compile(r"/runs/\?outcome=answered&sort=turns$"))
    expect(page.locator("th[aria-sort='ascending']")).to_contain_text("Turns")
    screenshot(page, "runs-list-sorted")
    assert axe_violations(page) == []
    page.set_viewport_size(PHONE)
    screenshot(page, "runs-list-sorted-phone")
    assert axe_violations(page) == []


def test_the_approvals_inbox_works_from_the_keyboard_alone(signed_in, demo, second_page):  # noqa: F811
    starter = second_page(demo["admin"])
    first = _start(starter, demo, CLOSE_TICKETS)
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    second = _start(starter, demo, CLOSE_TICKETS)
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    inbox = signed_in(demo["approver"])
    inbox.goto("/approvals/")
    expect(inbox.locator("#approvals-keys")).to_contain_text("Keyboard")
    expect(inbox.locator("article.approval-card")).to_have_count(2)
    inbox.keyboard.press("j")
    current = inbox.locator("article.approval-card.kbd-current")
    expect(current).to_be_focused()
    screenshot(inbox, "approvals-keyboard")
    assert axe_violations(inbox) == []
    inbox.set_viewport_size(PHONE)
    screenshot(inbox, "approvals-keyboard-phone")
    inbox.set_viewport_size(WIDE)

    rejected_run = int(re.search(r"Run #(\d+)", current.locator(".approval-links").inner_text()).group(1))
    inbox.keyboard.press("r")
    expect(current.locator(".approval-reject textarea")).to_be_focused()
    inbox.keyboard.type("Not these tickets: ask the team lead first.")
    inbox.keyboard.press("Control+Enter")
    expect(inbox.locator("article.approval-card[data-state='pending']")).to_have_count(1)

    inbox.keyboard.press("j")
    expect(inbox.locator("article.approval-card.kbd-current")).to_be_focused()
    inbox.keyboard.press("a")
    expect(inbox.locator("article.approval-card[data-state='pending']")).to_have_count(0)

    approved_run = ({first, second} - {rejected_run}).pop()
    starter.goto(f"/runs/{approved_run}/")
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    decision = ApprovalRequest.objects.get(execution_id=rejected_run)
    assert (decision.status, decision.resolution_comment) == ("rejected",
                                                              "Not these tickets: ask the team lead first.")
