"""Conversations in Chromium against the real stack (Daphne, a Celery worker, PostgreSQL,
Redis) with the demo's agents on the offline planner, which streams its answer in pieces
when someone watches the run (here: the conversation page's session socket).

- start a conversation with the Support Analyst from /sessions/, ask, see pieces of the
  answer arrive before the complete answer, ask a follow-up answered from the first;
- attach a CSV in the composer: it is uploaded with the session, named in the message,
  and the run answers with the file's table attached;
- the L1 Support Specialist's write waits for approval: the card is inline;
- another user gets a 404; screenshots at 1280 px and 390 px."""

from __future__ import annotations

import re
import sqlite3

import pytest
from playwright.sync_api import expect

from artifacts.models import Artifact
from demo.seed import SUPPORT_ANALYST, SUPPORT_SPECIALIST, demo_database_path
from executions.models import Execution, Session, SessionMessage
from tests.browser.conftest import WAIT_MS, axe_violations, screenshot

FIRST = "How many open high-priority tickets were created in the last 24 hours?"
PHONE = {"width": 390, "height": 844}

# Records, on the page, every text the streaming bubble showed and whether the complete
# answer was already there at that moment.
WATCH_STREAM = """() => {
  window.streamSeen = [];
  new MutationObserver(() => {
    document.querySelectorAll('[data-stream-text]').forEach((node) => {
      if (node.textContent) { window.streamSeen.push(node.textContent); }
    });
  }).observe(document.getElementById('convo-live'), {subtree: true, childList: true, characterData: true});
}"""


def _count(window: str) -> int:
    with sqlite3.connect(demo_database_path()) as db:
        return db.execute(
            "SELECT COUNT(*) FROM tickets WHERE priority = 'high' AND status = 'open' "
            f"AND datetime(created_at) >= datetime('now', '{window}')").fetchone()[0]


def _start(page, agent_name: str) -> int:
    page.goto("/sessions/")
    page.get_by_label("Talk to").select_option(label=agent_name)
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/sessions/\d+/$"))
    expect(page.locator("#convo-connection")).to_have_text("Live", timeout=WAIT_MS)
    return int(re.search(r"/sessions/(\d+)/$", page.url).group(1))


def _send(page, text: str) -> None:
    page.get_by_label("Your message").fill(text)
    page.get_by_role("button", name="Send").click()


def _answers(page):
    return page.locator(".convo-agent:not(.convo-active) .convo-text, .convo-active .convo-text:not(.convo-stream)")


def test_a_conversation_streams_its_answer_and_answers_a_follow_up(demo, signed_in, page):
    admin = demo["admin"]
    signed_in(admin)
    session_id = _start(page, SUPPORT_ANALYST)
    page.evaluate(WATCH_STREAM)

    _send(page, FIRST)
    first = f"Answer: {_count('-24 hours')}."
    expect(_answers(page).first).to_contain_text(first, timeout=WAIT_MS)
    seen = page.evaluate("window.streamSeen")
    assert seen, "no streamed piece was shown before the complete answer"
    assert any(len(text) < len(seen[-1]) for text in seen), "the answer arrived in one piece, not streamed"
    assert page.locator(".convo-user").first.inner_text().endswith(FIRST)
    # The conversation is named after its first message without a reload.
    expect(page.locator("h1 #convo-name")).to_have_text(FIRST[:80])
    expect(page).to_have_title(f"{FIRST[:80]} · River")

    _send(page, "and in the last 7 days?")
    expect(_answers(page).nth(1)).to_contain_text(f"Answer: {_count('-7 days')}.", timeout=WAIT_MS)
    runs = list(Execution.objects.filter(session_id=session_id).order_by("pk"))
    assert len(runs) == 2 and all(run.status == "completed" for run in runs)

    assert axe_violations(page) == []
    screenshot(page, "conversation")
    page.set_viewport_size(PHONE)
    page.reload()
    expect(_answers(page).nth(1)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1
    assert axe_violations(page) == []
    screenshot(page, "conversation-phone")


def test_a_csv_attached_in_the_composer_is_uploaded_and_given_to_the_run(demo, signed_in, page, tmp_path):
    admin = demo["admin"]
    signed_in(admin)
    session_id = _start(page, SUPPORT_ANALYST)
    csv = tmp_path / "regions.csv"
    csv.write_text("region,amount\nNorth,120\nSouth,80\nNorth,100\n")
    page.get_by_label("Your message").fill("How many rows are in regions?")
    page.set_input_files("#convo-files", str(csv))
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".convo-files-list")).to_contain_text("regions.csv", timeout=WAIT_MS)
    expect(_answers(page).first).to_contain_text("Answer: 3.", timeout=WAIT_MS)  # counted from the file's table
    artifact = Artifact.objects.get(name="regions.csv")
    assert artifact.session_id == session_id and artifact.tables == ["regions"]
    message = SessionMessage.objects.get(session_id=session_id, role="user")
    assert message.attachments == [artifact.pk]
    run = Execution.objects.get(pk=message.execution_id)
    assert run.context["artifact_ids"] == [artifact.pk] and "regions.csv" in run.input_prompt


def test_a_bad_file_is_refused_in_the_composer_and_nothing_is_sent(demo, signed_in, page, page_errors, tmp_path):
    signed_in(demo["admin"])
    session_id = _start(page, SUPPORT_ANALYST)
    bad = tmp_path / "tool.exe"
    bad.write_bytes(b"MZ\x00\x00")
    page.get_by_label("Your message").fill("Look at this")
    page.set_input_files("#convo-files", str(bad))
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#convo-composer-error")).to_contain_text("tool.exe", timeout=WAIT_MS)
    assert not SessionMessage.objects.filter(session_id=session_id).exists()
    assert not Artifact.objects.exists()
    page_errors.clear()  # the browser reports the 400 the upload was refused with, on purpose


def test_an_approval_card_is_inline_in_the_conversation(demo, signed_in, page):
    signed_in(demo["admin"])
    _start(page, SUPPORT_SPECIALIST)
    _send(page, "Close the open high-priority tickets created in the last 24 hours")
    card = page.locator(".approval-card")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card).to_contain_text("write_back")
    expect(page.locator(".convo-active .convo-status")).to_contain_text("approval")
    assert axe_violations(page) == []


def test_another_user_gets_a_404(demo, signed_in, page, page_errors):
    session = Session.objects.create(workspace=demo["workspace"], agent=demo["agents"][SUPPORT_ANALYST],
                                     created_by=demo["admin"], title="Private")
    signed_in(demo["approver"])
    response = page.goto(f"/sessions/{session.pk}/")
    assert response.status == 404
    page_errors.clear()  # the browser reports the 404 it was sent to on purpose
    page.goto("/sessions/")
    assert "Private" not in page.content()


pytestmark = pytest.mark.usefixtures("demo")
