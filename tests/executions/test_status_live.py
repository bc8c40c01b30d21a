"""The progressive status block is pushed live: every batch of a run's events is
followed by a ``status`` message, and the messages merged in order (seed 004: merged,
never replaced) give the block GET /api/v1/executions/{id}/ answers."""

from __future__ import annotations

import pytest

from executions import services, tasks
from executions.progress import STATUS_MESSAGE_TYPE, status_block_merge
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from telemetry import events as telemetry_events
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def live(monkeypatch):
    """What the publisher is handed for run-scoped groups, in order (after commit)."""
    messages: list[dict] = []

    def submit(groups, events, key=None):
        if any(group.startswith("execution.") for group in groups):
            messages.extend(events)

    # Every committed batch through the publisher, where it is recorded (no direct send).

    monkeypatch.setattr(telemetry_events, "_direct_paused_until", float("inf"))

    monkeypatch.setattr(telemetry_events._publisher, "submit", submit)
    return messages


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Call a service as if its transaction committed: its after-commit callbacks run."""

    def call(service, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return service(*args, **kwargs)

    return call


def _approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def merged(messages: list[dict], execution_id: int) -> dict:
    block: dict = {}
    for message in messages:
        if message["type"] == STATUS_MESSAGE_TYPE:
            assert message["execution_id"] == execution_id and "seq" not in message
            block = status_block_merge(block, message["status_detail"])
    return block


def api_block(client, execution_id: int) -> dict:
    return client.get(f"/api/v1/executions/{execution_id}/").json()["status_detail"]


def test_status_messages_merged_are_the_api_block_through_a_pause_and_a_resume(workspace, owner, api_client_for,
                                                                               sent, live, committed):
    client = api_client_for(owner)
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_slow_read", "durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"],
                       model_config={"max_turns": 9, "token_budget": 5000})
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="read, then write"))
    llm = ScriptedLLM([
        tool_reply("durable_slow_read", {"marker": "r1"}, call_id="c1", input_tokens=30, output_tokens=3),
        tool_reply("durable_write", {"marker": "w1"}, call_id="c2", input_tokens=40, output_tokens=2),
        text_reply("wrote it", input_tokens=50, output_tokens=4),
    ])

    assert committed(services.execution_run_segment, execution_id=execution.pk, llm=llm) == "awaiting_approval"
    # Each committed batch of events ends with the run's block as of them.
    kinds = [m["type"] for m in live]
    assert kinds[-1] == STATUS_MESSAGE_TYPE and kinds.count(STATUS_MESSAGE_TYPE) >= 3
    turn_one = next(m["status_detail"] for m in live if m["type"] == STATUS_MESSAGE_TYPE
                    and m["status_detail"].get("turn", {}).get("current") == 1)
    assert turn_one["phase"] == "running" and turn_one["tokens"] == {"used": 33, "budget": 5000}
    paused = api_block(client, execution.pk)
    assert paused["phase"] == "awaiting_approval" and paused["current_tool"]["name"] == "durable_write"
    assert merged(live, execution.pk) == paused

    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    committed(approval_resolve, user=_approver(workspace), approval_id=approval.pk, status="approved")
    resumed = merged(live, execution.pk)
    assert (resumed["phase"], resumed["run_status"]) == ("queued", "queued")
    assert resumed["last_event_seq"] == api_block(client, execution.pk)["last_event_seq"]

    assert committed(services.execution_run_segment, execution_id=execution.pk, llm=llm) == "success"
    finished = api_block(client, execution.pk)
    assert finished["phase"] == "finished" and finished["run_status"] == "completed"
    assert finished["turn"] == {"current": 3, "max": 9} and finished["tokens"] == {"used": 129, "budget": 5000}
    assert merged(live, execution.pk) == finished


def test_a_pause_for_a_question_and_a_cancel_are_pushed_too(workspace, owner, api_client_for, sent, live,
                                                            committed):
    client = api_client_for(owner)
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="ask"))
    question = {"interaction_type": "clarification_request", "message": "Which?", "options": ["A", "B"]}
    assert committed(services.execution_run_segment, execution_id=execution.pk,
                     llm=ScriptedLLM([tool_reply("ask_user", question, "q1")])) == "awaiting_interaction"
    asked = api_block(client, execution.pk)
    assert asked["phase"] == "awaiting_interaction"
    assert merged(live, execution.pk) == asked

    committed(services.execution_cancel, execution=execution, user=owner)
    cancelled = merged(live, execution.pk)
    assert (cancelled["phase"], cancelled["run_status"]) == ("finished", "cancelled")
    assert cancelled == api_block(client, execution.pk)
