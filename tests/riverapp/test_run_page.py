"""The run page (/runs/<id>/) and its endpoints: parts, answer, cancel. Tenant-scoped,
login required, bounded queries; the browser side is tests/browser/test_run_page.py."""

from __future__ import annotations

import json
import re
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from executions import services, tasks
from executions.models import Execution, ExecutionEvent, ExecutionStep
from tests.factories import ScriptedLLM, make_agent, tool_reply
from web.run import FEED_EMBEDDED

pytestmark = pytest.mark.django_db

QUESTION = {"interaction_type": "clarification_request", "message": "Which queue?", "options": ["Billing", "Bugs"]}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def queued_segments():
    with mock.patch.object(tasks.run_segment, "delay") as delay:
        yield delay


@pytest.fixture
def asking(workspace, owner, queued_segments):
    agent = make_agent(workspace=workspace, owner=owner, name="Asker", tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Help me"))
    assert services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply("ask_user", QUESTION, "q1")])) == "awaiting_interaction"
    execution.refresh_from_db()
    return execution


def _embedded_events(html: str) -> list[dict]:
    found = re.search(r'<script id="run-events" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def test_anonymous_visitors_are_sent_to_sign_in(asking):
    client = Client()
    for url in (f"/runs/{asking.pk}/", f"/runs/{asking.pk}/parts"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert client.post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"}).status_code == 302
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.AWAITING_INTERACTION


def test_another_workspaces_user_gets_404_everywhere(asking, outsider):
    client = signed_in(outsider)
    assert client.get(f"/runs/{asking.pk}/").status_code == 404
    assert client.get(f"/runs/{asking.pk}/parts").status_code == 404
    assert client.post(f"/runs/{asking.pk}/answer", {"answer": "Billing"}).status_code == 404
    assert client.post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"}).status_code == 404
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.AWAITING_INTERACTION


def test_the_page_embeds_the_stored_events_and_shows_the_question(asking, owner):
    html = signed_in(owner).get(f"/runs/{asking.pk}/").content.decode()
    events = _embedded_events(html)
    stored = list(ExecutionEvent.objects.filter(execution=asking).order_by("seq").values_list("seq", "event_type"))
    assert [(e["seq"], e["type"]) for e in events] == stored
    assert f'data-last-seq="{stored[-1][0]}"' in html
    assert "Which queue?" in html and 'value="Billing"' in html and "Awaiting interaction" in html
    assert "Turn 1 of 15" in html and "Started by hand" in html and "Cancel run" in html


def test_a_run_claimed_while_the_page_renders_shows_its_new_status(workspace, owner, queued_segments):
    """A worker claims the run (status ``running`` and ``run_started``, one commit)
    between the page's read of the row and its read of the events: the page must not
    show the event with the older status, since no later event would correct it."""
    from web import run as pages_run

    agent = make_agent(workspace=workspace, owner=owner, name="Claimed")
    run = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Go"))
    read_events = pages_run._events

    def claimed_meanwhile(execution):
        Execution.objects.filter(pk=execution.pk).update(status=Execution.Status.RUNNING)
        ExecutionEvent.objects.create(execution_id=execution.pk, seq=1, event_type="run_started",
                                      payload={"execution_id": execution.pk, "agent_id": str(agent.pk),
                                               "trigger_type": "manual", "started_at": "2026-01-01T10:00:00+00:00"})
        return read_events(execution)

    with mock.patch.object(pages_run, "_events", claimed_meanwhile):
        html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert [e["type"] for e in _embedded_events(html)] == ["run_started"]
    badge = re.search(r'run-status-badge">([^<]*)<', html).group(1)
    assert badge == "Running"


def test_parts_are_rendered_alone(asking, owner):
    response = signed_in(owner).get(f"/runs/{asking.pk}/parts", {"part": ["head", "cards"]})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'id="run-part-head"' in html and 'id="run-part-cards"' in html
    assert 'id="run-part-outcome"' not in html and 'id="run-part-cause"' not in html


def test_answering_the_question_continues_the_run(asking, owner, queued_segments,
                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(owner).post(f"/runs/{asking.pk}/answer", {"answer": "Bugs"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    asking.refresh_from_db()
    assert asking.status == Execution.Status.QUEUED
    answer = ExecutionStep.objects.get(execution=asking, step_type="observation", tool_name="ask_user")
    assert answer.output["result"] == {"user_response": "Bugs"}
    assert "Which queue?" not in response.content.decode()  # the card is gone: nothing is open
    queued_segments.assert_called()


@pytest.mark.parametrize(("posted", "problem"), [({"answer": "Sales"}, "Choose one of the offered answers."),
                                                 ({}, "Choose an answer.")])
def test_a_bad_answer_is_a_400_in_the_card_and_changes_nothing(asking, owner, posted, problem):
    response = signed_in(owner).post(f"/runs/{asking.pk}/answer", posted, HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and response["X-River-Card"] == "1"
    html = response.content.decode()
    assert problem in html and 'role="alert"' in html and "Which queue?" in html
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.AWAITING_INTERACTION


def test_an_answer_when_nothing_is_asked_is_a_409(asking, owner):
    signed_in(owner).post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"})
    response = signed_in(owner).post(f"/runs/{asking.pk}/answer", {"answer": "Bugs"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409 and "not waiting for an answer" in response.content.decode()


def test_cancel_needs_the_confirmation_then_cancels(asking, owner):
    client = signed_in(owner)
    response = client.post(f"/runs/{asking.pk}/cancel", follow=True)
    assert "confirm the cancellation" in response.content.decode()
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.AWAITING_INTERACTION

    response = client.post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == f"/runs/{asking.pk}/"
    assert f"Run #{asking.pk} was cancelled." in response.content.decode()
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.CANCELLED
    again = client.post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"}, follow=True).content.decode()
    assert "already ended" in again and "Cancel run" not in again


def test_get_is_not_allowed_on_the_writing_endpoints(asking, owner):
    client = signed_in(owner)
    assert client.get(f"/runs/{asking.pk}/cancel").status_code == 405
    assert client.get(f"/runs/{asking.pk}/answer").status_code == 405


def test_the_forms_carry_a_csrf_token(asking, owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    html = client.get(f"/runs/{asking.pk}/").content.decode()
    assert html.count('name="csrfmiddlewaretoken"') >= 2  # the answer and the cancel form
    assert client.post(f"/runs/{asking.pk}/cancel", {"confirm": "yes"}).status_code == 403
    assert Execution.objects.get(pk=asking.pk).status == Execution.Status.AWAITING_INTERACTION


def test_the_outcome_shows_the_result_table_and_the_recommended_chart(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Analyst")
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.versions.get(),
                                   status=Execution.Status.COMPLETED, result={"summary": "Bugs lead with 12."})
    rows = [["bug", 12], ["billing", 7], ["access", 3]]
    ExecutionStep.objects.create(execution=run, step_number=1, step_type="observation", tool_name="execute_query",
                                 output={"result": {"columns": ["topic", "tickets"], "rows": rows, "total_rows": 3}})
    ExecutionStep.objects.create(execution=run, step_number=2, step_type="observation",
                                 tool_name="recommend_visualization",
                                 output={"result": {"recommended_type": "bar", "x_axis": "topic", "y_axis": "tickets",
                                                    "title": "Tickets by topic", "config": {}}})
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "Bugs lead with 12." in html and "<td>billing</td>" in html and "Rows 1–3 of 3" in html
    # The recommended chart, drawn on the server as SVG: one bar per topic, titled as advised.
    svg = re.search(r"<svg class=\"result-chart-svg result-chart-bar\".*?</svg>", html, re.S).group(0)
    assert f'<title id="result-{run.pk}-1-chart-title">Tickets by topic</title>' in svg
    assert svg.count("<rect class=\"result-series-0\"") == 3


def test_the_page_costs_the_same_queries_with_ten_thousand_runs_and_many_events(asking, owner, workspace):
    client = signed_in(owner)
    with CaptureQueriesContext(connection) as few:
        assert client.get(f"/runs/{asking.pk}/").status_code == 200
    version = asking.agent_version
    Execution.objects.bulk_create([Execution(workspace=workspace, agent=asking.agent, agent_version=version)
                                   for _ in range(10_000)])
    start = ExecutionEvent.objects.filter(execution=asking).count() + 1
    ExecutionEvent.objects.bulk_create([ExecutionEvent(execution=asking, seq=start + i, event_type="turn_complete",
                                                       payload={"turn": 1, "duration_ms": 5})
                                        for i in range(FEED_EMBEDDED + 200)])
    with CaptureQueriesContext(connection) as many:
        html = client.get(f"/runs/{asking.pk}/").content.decode()
    assert len(_embedded_events(html)) == FEED_EMBEDDED  # the socket replays the rest
    assert len(many) == len(few) <= 30
