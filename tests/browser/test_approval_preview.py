"""The effect preview on the approval card in Chromium against the real stack (issue
29 §1): the before/after table of a paused write_back, then the data changes under
it (another connection) and approving shows what changed instead of writing; the
fresh preview is approved and written. Screenshots at 1280 and 390 px, light and dark."""

from __future__ import annotations

import re
import shutil
import sqlite3

import pytest
from playwright.sync_api import expect

from demo.seed import SUPPORT_SPECIALIST, demo_database_path
from demo.support_db import demo_database_build
from governance.models import ApprovalRequest
from tests.browser.conftest import SCREENSHOTS, axe_violations, screenshot
from tests.browser.test_run_page import CLOSE_TICKETS, PHONE, _open_high_recent, _start_from_agent_page, second_page  # noqa: F401 E501

NOTES = "/work/notes/shots/preview"


@pytest.fixture
def demo(demo):
    demo_database_build(path=demo_database_path(demo["workspace"].pk))
    return demo


def _shots(page, name: str) -> None:
    """1280 and 390 px wide, light and dark; axe has nothing serious to say in any."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
        for width, size in (("1280", {"width": 1280, "height": 800}), ("390", PHONE)):
            page.set_viewport_size(size)
            path = screenshot(page, f"{name}-{scheme}-{width}")
            _keep(path)
            assert axe_violations(page) == [], (name, scheme, width)
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (name, width)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})


def _keep(path) -> None:
    try:
        from pathlib import Path

        Path(NOTES).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, NOTES)
    except OSError:  # outside the team's machine: var/screenshots has them
        pass


def test_the_card_shows_the_effect_and_a_stale_preview_writes_nothing(signed_in, demo, second_page,  # noqa: F811
                                                                      page_errors):
    starter = second_page(demo["admin"])
    run_id = _start_from_agent_page(starter, demo["agents"][SUPPORT_SPECIALIST], CLOSE_TICKETS)
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    targets = [ticket for ticket, status in _open_high_recent(demo["workspace"].pk) if status == "open"]
    assert len(targets) >= 2
    approval = ApprovalRequest.objects.get(execution_id=run_id)

    page = signed_in(demo["approver"])
    page.goto(f"/approvals/{approval.pk}/")
    card = page.locator(".approval-card")
    effect = card.locator("section.approval-effect")
    expect(effect).to_contain_text(f"{len(targets)} rows will change in tickets: status open → closed.")
    rows = effect.locator("table.effect-table tbody tr")
    expect(rows).to_have_count(len(targets))
    expect(rows.first.locator("del")).to_have_text("open")
    expect(rows.first.locator("ins")).to_have_text("closed")
    expect(effect.locator(".effect-meta")).to_contain_text(f"{len(targets)} rows in all · fingerprint")
    _shots(page, "approval-preview")

    # Another connection changes one of the rows before the approver decides (the
    # agent's write names its tickets by id, so the row still matches, with another
    # before-value).
    moved = targets[0]
    with sqlite3.connect(demo_database_path(demo["workspace"].pk)) as db:
        db.execute("UPDATE tickets SET status = 'pending' WHERE id = ?", [moved])
    card.get_by_role("button", name="Approve", exact=True).click()
    message = "The data changed since the preview: 1 row has different values now. Review the new preview."
    expect(card.locator(".effect-stale")).to_have_text(message)
    expect(card.locator(".approval-error")).to_contain_text("Nothing was decided: the effect changed.")
    expect(card.get_by_text(message)).to_have_count(1)  # the note once, not in the error box too
    expect(effect).to_contain_text("(2 values) → closed")
    expect(rows.filter(has_text=f"id {moved}").locator("del")).to_have_text("pending")
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.PENDING
    assert dict(_open_high_recent(demo["workspace"].pk))[targets[1]] == "open"  # nothing written
    _shots(page, "approval-preview-stale")
    page_errors.clear()  # the refused approval answered 409 (the browser logs it)

    # The fresh preview is what gets approved and written.
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_contain_text(re.compile("Approved by approver"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    written = dict(_open_high_recent(demo["workspace"].pk))
    assert {written[ticket] for ticket in targets} == {"closed"}
    assert SCREENSHOTS.exists()


def test_a_change_after_the_approval_re_pauses_with_the_fresh_preview_on_the_card(
        signed_in, demo, second_page, river_stack, page_errors):  # noqa: F811
    """The data moves between the approval and the write (the worker is held while
    another connection changes a row): nothing is written, the run waits again, and the
    new request's card says what changed above the fresh table."""
    import os
    import signal
    import time

    starter = second_page(demo["admin"])
    run_id = _start_from_agent_page(starter, demo["agents"][SUPPORT_SPECIALIST], CLOSE_TICKETS)
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")
    targets = [ticket for ticket, status in _open_high_recent(demo["workspace"].pk) if status == "open"]
    first = ApprovalRequest.objects.get(execution_id=run_id)

    page = signed_in(demo["approver"])
    page.goto(f"/approvals/{first.pk}/")
    card = page.locator(".approval-card")
    worker = river_stack.processes["worker"].pid
    os.kill(worker, signal.SIGSTOP)  # the resume is queued but nobody writes yet
    try:
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(card).to_contain_text(re.compile("Approved by approver"))
        moved = targets[0]
        with sqlite3.connect(demo_database_path(demo["workspace"].pk)) as db:
            db.execute("UPDATE tickets SET status = 'pending' WHERE id = ?", [moved])
    finally:
        os.kill(worker, signal.SIGCONT)

    deadline = time.monotonic() + 60
    while not ApprovalRequest.objects.filter(execution_id=run_id, status="pending").exists():
        assert time.monotonic() < deadline, river_stack.log_tail()
        time.sleep(0.2)
    again = ApprovalRequest.objects.get(execution_id=run_id, status="pending")
    assert dict(_open_high_recent(demo["workspace"].pk))[targets[1]] == "open"  # nothing written
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Awaiting approval")

    page.goto(f"/approvals/{again.pk}/")
    effect = card.locator("section.approval-effect")
    message = "Nothing was written: the data changed since the preview: 1 row has different values now. " \
              "Review the new preview."
    expect(card.locator(".effect-stale")).to_have_text(message)
    expect(card.get_by_text(message)).to_have_count(1)
    expect(effect).to_contain_text("(2 values) → closed")
    rows = effect.locator("table.effect-table tbody tr")
    expect(rows).to_have_count(len(targets))
    expect(rows.filter(has_text=f"id {moved}").locator("del")).to_have_text("pending")
    _shots(page, "approval-preview-stale-at-write")

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_contain_text(re.compile("Approved by approver"))
    expect(starter.locator("#run-part-head .run-status-badge")).to_have_text("Completed")
    written = dict(_open_high_recent(demo["workspace"].pk))
    assert {written[ticket] for ticket in targets} == {"closed"}
