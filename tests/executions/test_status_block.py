"""GET /api/v1/executions/{id}/ carries a merged progressive status block (seed 004):
phase, turn n of max, tokens of budget, current tool, last event sequence, and names the
agent version by its number."""

from __future__ import annotations

import pytest

from executions import services, tasks
from executions.models import ExecutionEvent
from executions.progress import status_block_merge
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def test_a_later_partial_update_keeps_the_earlier_fields():
    block = {"phase": "running", "turn": {"current": 2, "max": 15}, "current_tool": {"name": "execute_query"},
             "last_event_seq": 7}
    merged = status_block_merge(block, {"turn": {"current": 3}, "current_tool": None, "last_event_seq": 9})
    assert merged == {"phase": "running", "turn": {"current": 3, "max": 15},
                      "current_tool": {"name": "execute_query"}, "last_event_seq": 9}


@pytest.mark.django_db
def test_a_paused_run_shows_phase_turn_tokens_tool_and_last_event(workspace, owner, api_client_for, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"],
                       model_config={"max_turns": 9, "token_budget": 5000})
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write w1"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1",
                                  input_tokens=40, output_tokens=2), text_reply("wrote it")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"

    body = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/").json()

    block = body["status_detail"]
    assert body["status"] == "awaiting_approval" and block["phase"] == "awaiting_approval"
    assert block["turn"] == {"current": 1, "max": 9}
    assert block["tokens"] == {"used": 42, "budget": 5000}
    assert block["current_tool"]["name"] == "durable_write" and block["current_tool"]["state"] == "in_progress"
    last = ExecutionEvent.objects.filter(execution=execution).order_by("-seq").first()
    assert block["last_event_seq"] == last.seq
    assert body["agent_version"] == 1 and "agent_version_id" not in body  # the number, never the row id


@pytest.mark.django_db
def test_a_turn_without_a_tool_keeps_the_last_tool_in_the_block(workspace, owner, api_client_for, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="echo then answer"))
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "hi"}), text_reply("done")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    block = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/").json()["status_detail"]

    assert block["phase"] == "finished" and block["turn"]["current"] == 2
    assert block["current_tool"]["name"] == "test_echo" and block["current_tool"]["state"] == "done"
