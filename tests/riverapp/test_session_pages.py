"""Conversation pages (/sessions/, /sessions/<id>/): a user's own sessions of the current
workspace with an agent filter, a new conversation with an agent, the conversation as a
chat with queued messages, attachments by name, hand-offs and the active run's cards;
rename, archive and the no-JavaScript composer. A session is its creator's: anyone
else gets 404 on every URL. Bounded queries however long the list or the conversation."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from executions import tasks
from executions.models import Execution, Session, SessionMessage
from executions.services import sessions
from tests.factories import make_agent
from tests.riverapp.test_runs_list import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quiet_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Support Analyst")


@pytest.fixture
def session(workspace, agent, owner):
    return sessions.session_create(workspace=workspace, agent=agent, user=owner, title="Ticket questions")


def test_anonymous_visitors_are_sent_to_sign_in(session):
    for url in ("/sessions/", f"/sessions/{session.pk}/", f"/sessions/{session.pk}/conversation"):
        response = Client().get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url


def test_the_list_shows_my_sessions_of_the_workspace_with_an_agent_filter(session, workspace, owner, editor, agent):
    other_agent = make_agent(workspace=workspace, owner=owner, name="Billing")
    sessions.session_create(workspace=workspace, agent=other_agent, user=owner, title="Invoices")
    sessions.session_create(workspace=workspace, agent=agent, user=editor, title="Not mine")
    html = signed_in(owner, workspace).get("/sessions/").content.decode()
    assert "Ticket questions" in html and "Invoices" in html and "Not mine" not in html
    assert "New conversation" in html and 'name="agent"' in html
    filtered = signed_in(owner, workspace).get("/sessions/", {"agent": str(other_agent.pk)}).content.decode()
    assert "Invoices" in filtered and "Ticket questions" not in filtered


def test_an_unknown_agent_filter_is_a_400_naming_the_field(owner, workspace, other_workspace, outsider):
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Elsewhere")
    response = signed_in(owner, workspace).get("/sessions/", {"agent": str(theirs.pk)})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_agent-error"' in html and 'aria-invalid="true"' in html


def test_a_new_conversation_opens_with_the_chosen_agent(agent, owner, workspace):
    client = signed_in(owner, workspace)
    response = client.post("/sessions/new", {"agent": str(agent.pk)})
    session = Session.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/sessions/{session.pk}/"
    assert session.agent_id == agent.pk and session.created_by_id == owner.pk


def test_a_new_conversation_refuses_another_workspaces_or_a_paused_agent(agent, owner, workspace, other_workspace,
                                                                           outsider):
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Elsewhere")
    paused = make_agent(workspace=workspace, owner=owner, name="Paused")
    paused.status = "paused"
    paused.save(update_fields=["status"])
    for bad in (str(theirs.pk), str(paused.pk), "", "not-an-id"):
        response = signed_in(owner, workspace).post("/sessions/new", {"agent": bad})
        assert response.status_code == 400, bad
        assert 'id="new-id_agent-error"' in response.content.decode()
    assert not Session.objects.exists()


def test_the_conversation_shows_messages_files_queue_and_hand_offs(session, owner, workspace, agent):
    _first, run = sessions.session_message_send(session=session, user=owner, content="How many open tickets?")
    sessions.session_message_send(session=session, user=owner, content="And last month?")
    SessionMessage.objects.filter(session=session, sequence=1).update(
        references={"attachments": [{"artifact_id": 1, "name": "tickets.csv", "placeholder": "[...]"}]})
    SessionMessage.objects.create(session=session, sequence=99, role="agent", state="answered", content="Handed.",
                                  agent=agent, references={"handoff": {"to_agent_name": "Billing specialist",
                                                                       "reason": "an invoice question"}})
    response = signed_in(owner, workspace).get(f"/sessions/{session.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "How many open tickets?" in html and "tickets.csv" in html
    assert "Queued" in html and "And last month?" in html
    assert "Handed to Billing specialist: an invoice question" in html
    assert f'data-stream-for="{run.pk}"' in html  # where the answer's pieces stream
    assert 'aria-live="polite"' in html and 'for="convo-message"' in html and 'for="convo-files"' in html
    assert 'src="/static/session.js"' in html or "session.js" in html


def test_the_active_runs_question_card_is_inline(session, owner, workspace):
    _first, run = sessions.session_message_send(session=session, user=owner, content="Close ticket 4")
    from executions.models import ExecutionStep

    Execution.objects.filter(pk=run.pk).update(status=Execution.Status.AWAITING_INTERACTION)
    ExecutionStep.objects.create(execution=run, step_number=1, turn=1, step_type="interaction", status="pending",
                                 input={"message": "Which office?", "options": ["Oslo", "Bergen"],
                                        "interaction_type": "clarification_request", "required": True})
    html = signed_in(owner, workspace).get(f"/sessions/{session.pk}/conversation").content.decode()
    assert "The agent asks you" in html and "Which office?" in html and f"/runs/{run.pk}/answer" in html


def test_someone_elses_session_is_a_404_everywhere(session, editor, outsider, workspace, other_workspace):
    for user, ws in ((editor, workspace), (outsider, other_workspace)):
        client = signed_in(user, ws)
        for url in (f"/sessions/{session.pk}/", f"/sessions/{session.pk}/conversation"):
            assert client.get(url).status_code == 404, url
        for url, data in ((f"/sessions/{session.pk}/send", {"content": "hi"}),
                          (f"/sessions/{session.pk}/rename", {"title": "mine"}),
                          (f"/sessions/{session.pk}/archive", {"archived": "1"})):
            assert client.post(url, data).status_code == 404, url
    session.refresh_from_db()
    assert session.title == "Ticket questions" and not session.archived
    assert not SessionMessage.objects.filter(session=session).exists()


def test_rename_archive_and_send_without_javascript(session, owner, workspace):
    client = signed_in(owner, workspace)
    assert client.post(f"/sessions/{session.pk}/rename", {"title": "Oslo tickets"}).status_code == 302
    too_long = client.post(f"/sessions/{session.pk}/rename", {"title": "x" * 300})
    assert too_long.status_code == 400 and 'id="convo-title-error"' in too_long.content.decode()
    assert client.post(f"/sessions/{session.pk}/send", {"content": "Hello there"}).status_code == 302
    assert SessionMessage.objects.get(session=session).content == "Hello there"
    assert client.post(f"/sessions/{session.pk}/archive", {"archived": "1"}).status_code == 302
    session.refresh_from_db()
    assert session.title == "Oslo tickets" and session.archived
    assert client.post(f"/sessions/{session.pk}/send", {"content": "Again"}).status_code == 302
    assert SessionMessage.objects.filter(session=session).count() == 1  # archived: refused
    html = client.get(f"/sessions/{session.pk}/").content.decode()
    assert "Open again" in html and 'id="convo-composer"' not in html


def test_posts_need_the_csrf_token(session, owner):

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(f"/sessions/{session.pk}/send", {"content": "hi"}).status_code == 403
    assert client.post("/sessions/new", {"agent": "x"}).status_code == 403


def test_list_and_conversation_cost_the_same_queries_at_any_size(session, owner, workspace, agent):
    client = signed_in(owner, workspace)
    with CaptureQueriesContext(connection) as few_list:
        client.get("/sessions/")
    with CaptureQueriesContext(connection) as few_page:
        client.get(f"/sessions/{session.pk}/")
    now = timezone.now()
    Session.objects.bulk_create([Session(workspace=workspace, agent=agent, created_by=owner, title=f"s{i}",
                                         created_at=now, updated_at=now) for i in range(3000)])
    SessionMessage.objects.bulk_create([
        SessionMessage(session=session, sequence=i + 1, role="user" if i % 2 == 0 else "agent", state="answered",
                       content=f"message {i}", agent=None if i % 2 == 0 else agent) for i in range(2000)])
    with CaptureQueriesContext(connection) as many_list:
        assert client.get("/sessions/").status_code == 200
    with CaptureQueriesContext(connection) as many_page:
        html = client.get(f"/sessions/{session.pk}/").content.decode()
    assert len(many_list) == len(few_list) and len(many_page) == len(few_page)
    assert "message 1999" in html and "message 1800" not in html and "Older messages" in html


def test_the_agent_page_links_to_its_conversations(agent, owner, workspace):
    html = signed_in(owner, workspace).get(f"/agents/{agent.pk}/").content.decode()
    assert f'href="/sessions/?agent={agent.pk}"' in html
    listed = signed_in(owner, workspace).get("/sessions/", {"agent": str(agent.pk)}).content.decode()
    assert f'<option value="{agent.pk}" selected>' in listed  # the new conversation form has it chosen
