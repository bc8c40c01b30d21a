"""An ``ask_user`` question is answered once, decided on the server: two answers sent at
the same moment (two tabs, two people) resume the run once, with one answer; the other
gets a 409 that says who answered. Both requests are held at the run's row lock until
both are in flight, so the test covers the overlap instead of hoping for it."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.test import Client

from executions import services, tasks
from executions.models import Execution, ExecutionEvent, ExecutionStep
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = {"interaction_type": "clarification_request", "message": "Which queue?", "options": ["Billing", "Bugs"]}
LOCK_WAIT_SECONDS = 30


@pytest.fixture
def segments_queued(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(tasks.run_segment, "delay", lambda execution_id, *args: sent.append(execution_id))
    monkeypatch.setattr(tasks.post_process, "delay", lambda *args: None)
    return sent


@pytest.fixture
def second_admin(workspace, django_user_model):
    user = django_user_model.objects.create_user(username="bea", password="pw-bea", first_name="Bea",
                                                 last_name="Second")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def asking(workspace, owner, segments_queued):
    agent = make_agent(workspace=workspace, owner=owner, name="Asker", tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Help me"))
    assert services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply("ask_user", QUESTION, "q1")])) == "awaiting_interaction"
    segments_queued.clear()
    return Execution.objects.get(pk=execution.pk)


def _sessions_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        # Statistics views are read once per transaction unless the snapshot is dropped.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


def test_two_answers_at_once_resume_the_run_once_and_the_other_is_a_409(asking, owner, second_admin,
                                                                        api_client_for, segments_queued):
    answers = {owner.username: "Billing", second_admin.username: "Bugs"}
    clients = {user.username: api_client_for(user) for user in (owner, second_admin)}
    responses = {}

    def answer(username: str) -> None:
        try:
            responses[username] = clients[username].post(f"/api/v1/executions/{asking.pk}/respond",
                                                         {"user_response": answers[username]}, format="json")
        finally:
            connection.close()

    threads = [threading.Thread(target=answer, args=(name,)) for name in answers]
    with transaction.atomic():
        Execution.objects.select_for_update().get(pk=asking.pk)  # hold the row: both answers queue behind it
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while _sessions_waiting_on_a_lock() < 2:
            assert all(thread.is_alive() for thread in threads), "an answer finished without waiting for the row"
            assert time.monotonic() < deadline, "the two answers never both waited for the run's row"
            time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=LOCK_WAIT_SECONDS)

    codes = sorted(response.status_code for response in responses.values())
    assert codes == [202, 409], {name: response.content[:300] for name, response in responses.items()}
    winner = next(name for name, response in responses.items() if response.status_code == 202)
    loser = next(name for name in responses if name != winner)
    refusal = responses[loser].json()["error"]
    winner_name = {"owner": owner, "bea": second_admin}[winner]
    assert refusal["code"] == "already_answered"
    assert (winner_name.get_full_name() or winner_name.get_username()) in refusal["message"]

    recorded = ExecutionStep.objects.filter(execution=asking, step_type="observation", tool_name="ask_user")
    assert [step.output["result"] for step in recorded] == [{"user_response": answers[winner]}]
    resolved = ExecutionEvent.objects.filter(execution=asking, event_type="interaction_resolved")
    assert resolved.count() == 1 and resolved.get().payload["answered_by"] == winner_name.pk
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.QUEUED
    assert segments_queued == [asking.pk]  # resumed once


def test_the_question_card_says_who_answered_first(asking, owner, second_admin):
    first, second = Client(), Client()
    first.force_login(second_admin)
    second.force_login(owner)

    assert first.post(f"/runs/{asking.pk}/answer", {"answer": "Bugs"}, HTTP_HX_REQUEST="true").status_code == 200
    late = second.post(f"/runs/{asking.pk}/answer", {"answer": "Billing"}, HTTP_HX_REQUEST="true")

    assert late.status_code == 409 and late["X-River-Card"] == "1"
    assert "already answered by Bea Second" in late.content.decode()
    step = ExecutionStep.objects.get(execution=asking, step_type="observation", tool_name="ask_user")
    assert step.output["result"] == {"user_response": "Bugs"}


def test_an_answer_to_a_cancelled_run_is_still_a_409_saying_it_is_not_waiting(asking, owner, api_client_for):
    services.execution_cancel(execution=asking, user=owner)
    response = api_client_for(owner).post(f"/api/v1/executions/{asking.pk}/respond", {"user_response": "Bugs"},
                                          format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"
    assert "not waiting for an answer" in response.json()["error"]["message"]
