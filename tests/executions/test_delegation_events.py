"""A delegated child's result reaches its parent's event feed (docs/delegation.md): the
observation appended when the child ends is announced with ``observation_received``,
stored in the parent's feed and sent live, like any other tool's result."""

from __future__ import annotations

import json

import pytest

from executions import services, tasks
from executions.models import Execution
from executions.services import delegation
from rivercore.llm import LLMError, LLMErrorKind
from telemetry import events as telemetry_events
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live(monkeypatch):
    """Every event handed to the channel layer; queued tasks go nowhere."""
    sent: list[dict] = []
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)
    # Every committed batch through the publisher, where it is recorded (no direct send).
    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))
    monkeypatch.setattr(telemetry_events._publisher, "submit",
                        lambda groups, events, key=None: sent.extend(json.loads(json.dumps(events))))
    return sent


@pytest.fixture
def parent_and_child(workspace, owner):
    coordinator = make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"])
    make_agent(workspace=workspace, owner=owner, name="Researcher", tools=["delegate_to_agent"])
    parent = services.execution_start(agent=coordinator, request=services.person_run_request(
        agent=coordinator, user=owner, prompt="Prepare the monthly report"))
    reply = tool_reply("delegate_to_agent", {"agent": "Researcher", "task": "Find the churn figure."}, "d1")
    assert services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([reply])) == "awaiting_child"
    return parent, Execution.objects.get(parent_execution_id=parent.pk)


def observations(execution: Execution, api_client_for, owner) -> list[dict]:
    feed = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/events/")
    assert feed.status_code == 200, feed.content
    return [e for e in feed.json() if e["type"] == "observation_received"]


def test_the_parents_feed_shows_what_the_child_returned(parent_and_child, owner, api_client_for, live):
    parent, child = parent_and_child
    assert observations(parent, api_client_for, owner) == []  # only the pending call so far

    services.execution_run_segment(execution_id=child.pk, llm=ScriptedLLM([text_reply("Churn in March was 2.1 %.")]))
    assert services.execution_post_process(execution_id=child.pk) is True

    step = parent.steps.get(step_type="observation", call_id="d1")
    [event] = observations(parent, api_client_for, owner)
    assert event["tool_name"] == "delegate_to_agent" and event["call_id"] == "d1"
    assert event["result_summary"] == "Churn in March was 2.1 %."
    assert event["status"] == "completed" and event["step_number"] == step.step_number
    assert event["turn"] == step.turn and event["duration_ms"] >= 0
    sent = [e for e in live if e.get("execution_id") == parent.pk and e.get("type") == "observation_received"]
    assert sent == [event]  # the same event went out live, after commit
    status = [e for e in live if e.get("type") == "status" and e.get("execution_id") == parent.pk]
    assert status and status[-1]["status_detail"]["run_status"] == Execution.Status.QUEUED
    assert status[-1]["status_detail"]["last_event_seq"] == event["seq"]


def test_a_failed_childs_error_reaches_the_parents_feed(parent_and_child, owner, api_client_for, live):
    parent, child = parent_and_child

    services.execution_run_segment(execution_id=child.pk, llm=ScriptedLLM([
        LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "provider down")]))
    services.execution_post_process(execution_id=child.pk)

    [event] = observations(parent, api_client_for, owner)
    assert event["status"] == "failed" and event["call_id"] == "d1"
    assert "ended failed" in event["result_summary"] and "provider down" in event["result_summary"]


def test_a_resume_that_does_nothing_adds_no_event(parent_and_child, owner, api_client_for, live):
    parent, child = parent_and_child
    services.execution_run_segment(execution_id=child.pk, llm=ScriptedLLM([text_reply("Done.")]))
    services.execution_post_process(execution_id=child.pk)

    assert delegation.delegation_resume(child_execution_id=child.pk) is False

    assert len(observations(parent, api_client_for, owner)) == 1
