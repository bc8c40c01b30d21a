"""Tool dispatch rules of the engine: checks before dispatch, retries, timeouts,
intent/outcome journaling. The model here is an in-process script: these tests are
about the runner, and the model path has its own tests over HTTP."""

import pytest
from asgiref.sync import async_to_sync

from rivercore.contracts import StepType
from rivercore.runner import Engine, new_state, response_build, select_tier
from rivercore.state import RunState
from rivercore.types.agents import Tier
from tests.executions import engine_support as support
from tests.rivercore.scripted import ScriptedLLM, text_reply, tool_reply


@pytest.fixture(autouse=True)
def _reset_calls():
    support.CALLS.clear()
    support.FLAKY_FAILURES["left"] = 0


def run(request, replies):
    state, _ = new_state(request)
    llm = ScriptedLLM(replies)
    outcome = Engine(llm=llm, sleep=lambda s: None).run(state)
    return state, response_build(state, outcome), llm


def observations(response):
    return [s for s in response.steps if s.step_type == StepType.OBSERVATION]


def test_tool_calls_and_observations_in_order():
    request = support.request_for(tools=["test_echo"])
    _, response, llm = run(request, [
        tool_reply("test_echo", {"text": "one"}, "c1"), tool_reply("test_echo", {"text": "two"}, "c2"),
        text_reply("Both echoed."),
    ])
    assert response.status == "success"
    assert [c[1]["text"] for c in support.CALLS] == ["one", "two"]
    kinds = [s.step_type.value for s in response.steps]
    assert kinds == ["reasoning", "governance_check", "tool_call", "observation",
                     "reasoning", "governance_check", "tool_call", "observation", "reasoning", "final_answer"]
    last_messages = llm.requests[-1]["messages"]
    assert [m["role"] for m in last_messages[2:]] == ["assistant", "tool", "assistant", "tool"]
    assert last_messages[3]["content"].startswith("[Tool Result] Tool 'test_echo' returned:")
    assert response.result.summary == "Both echoed."


def test_tool_not_allowed_for_agent_is_refused_before_dispatch():
    request = support.request_for(tools=["test_echo"])
    _, response, _ = run(request, [tool_reply("test_write", {"text": "x"}), text_reply("ok")])
    obs = observations(response)[0]
    assert obs.status == "failed" and obs.output["error"]["code"] == "INVALID_TOOL"
    assert support.CALLS == []


def test_missing_permission_is_refused_before_dispatch():
    request = support.request_for(tools=["test_echo"], permissions=["agent:execute"])
    _, response, _ = run(request, [tool_reply("test_echo", {"text": "x"}), text_reply("ok")])
    obs = observations(response)[0]
    assert obs.output["error"]["code"] == "GOVERNANCE_BLOCKED"
    assert "data_source:view" in obs.error
    assert support.CALLS == []


def test_invalid_arguments_are_refused_with_field_details():
    request = support.request_for(tools=["test_echo"])
    _, response, _ = run(request, [tool_reply("test_echo", {"text": ""}), text_reply("ok")])
    obs = observations(response)[0]
    assert obs.output["error"]["code"] == "VALIDATION_ERROR"
    assert "text" in obs.output["error"]["details"]
    assert support.CALLS == []


def test_transient_failures_retry_with_backoff_then_succeed():
    support.FLAKY_FAILURES["left"] = 2
    request = support.request_for(tools=["test_flaky"])
    state, _ = new_state(request)
    delays = []
    engine = Engine(llm=ScriptedLLM([tool_reply("test_flaky", {"text": "x"}), text_reply("done")]),
                    sleep=delays.append)
    response = response_build(state, engine.run(state))
    assert delays == [0.1, 0.2]
    assert observations(response)[0].status == "completed"
    assert len(support.CALLS) == 3


def test_not_found_is_reported_at_once_without_retry():
    request = support.request_for(tools=["test_missing"])
    _, response, _ = run(request, [tool_reply("test_missing", {"text": "x"}), text_reply("gave up")])
    obs = observations(response)[0]
    assert obs.output["error"]["code"] == "NOT_FOUND"
    assert len(support.CALLS) == 1
    assert response.status == "success"  # a tool error is an observation, not a crash


def test_tool_timeout_is_its_own_budget():
    request = support.request_for(tools=["test_sleep"], model_config={"timeout_seconds": 1})
    _, response, _ = run(request, [tool_reply("test_sleep", {"seconds": 3}), text_reply("too slow")])
    obs = observations(response)[0]
    assert obs.output["status"] == "timeout"
    assert obs.output["error"]["code"] == "TIMEOUT"
    assert obs.output["attempts"] == 3  # idempotent: retried twice
    assert response.status == "success"


def test_write_tool_records_intent_before_dispatch_and_outcome_after():
    request = support.request_for(tools=["test_write"])
    _, response, _ = run(request, [tool_reply("test_write", {"text": "w"}, "w1"), text_reply("written")])
    intent = [s for s in response.steps if s.step_type == StepType.TOOL_CALL][0]
    assert intent.status == "pending"
    assert observations(response)[0].status == "completed"


def test_interrupted_write_is_not_repeated():
    request = support.request_for(tools=["test_write"])
    state, _ = new_state(request)
    engine = Engine(llm=ScriptedLLM([tool_reply("test_write", {"text": "w"}, "w1")]))
    # Replay up to the intent only: the crash happened after dispatch, before the outcome.
    async_to_sync(engine._reason)(state)
    call = state.open_calls[0]
    engine._add(state, StepType.TOOL_CALL, tool_name="test_write", call_id=call.id, input=call.arguments,
                status="pending")
    resumed = RunState.replay(request=state.request, base_messages=state.base_messages,
                              tool_schemas=state.tool_schemas, steps=list(state.steps))
    llm = ScriptedLLM([text_reply("I will check before retrying.")])
    response = response_build(resumed, Engine(llm=llm).run(resumed))
    obs = observations(response)[0]
    assert obs.output["error"]["code"] == "OUTCOME_UNKNOWN"
    assert support.CALLS == []
    assert "outcome of test_write is unknown" in llm.requests[0]["messages"][-1]["content"]


def test_tier_selection_follows_priority_order():
    request = support.request_for(tools=["test_echo"])
    state, _ = new_state(request)
    assert select_tier(state) == Tier.FAST
    state.turn = 1
    state.intent = "DATA_QUERY"
    assert select_tier(state) == Tier.CODING
    state.intent = "OBSERVABILITY"
    assert select_tier(state) == Tier.BALANCED
    state.last_dispatched_tool = "execute_query"
    assert select_tier(state) == Tier.CODING
    state.last_turn_failed = True
    assert select_tier(state) == Tier.REASONING
    state.last_turn_failed = False
    state.tool_error_streak["execute_query"] = 2
    assert select_tier(state) == Tier.REASONING
    state.tool_error_streak.clear()
    state.intent = None
    state.last_dispatched_tool = None
    assert select_tier(state) == Tier.BALANCED
