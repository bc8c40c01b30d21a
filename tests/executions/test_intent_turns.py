"""Spec 001's intent-to-tier table: once classify_intent has resolved the intent,
turns use the intent's tier and the run stops after the intent's max turns following
the classifying turn (or at the agent's own max_turns when that is lower)."""

from __future__ import annotations

import json
import uuid

import pytest

from executions.routing import router_build
from rivercore import context as ctxmod
from rivercore.router import ProviderConfig
from rivercore.runner import (
    INTENT_MAX_TURNS,
    INTENT_TIERS,
    Engine,
    new_state,
    response_build,
    turn_limit,
)
from tests.executions import engine_support as support

TIER_MODELS = {"fast": "m-fast", "balanced": "m-balanced", "reasoning": "m-reasoning", "coding": "m-coding"}


@pytest.fixture(autouse=True)
def _reset_calls():
    support.CALLS.clear()


@pytest.fixture
def model(fake_openai):
    server = fake_openai()
    router = router_build([ProviderConfig(name=f"fake-{uuid.uuid4().hex[:8]}", models=TIER_MODELS,
                                    base_url=server.base_url, max_retries=0)])
    return server, router


def classified(server, intent: str) -> None:
    """Turn 1 calls classify_intent; the tool's own sub-request answers ``intent``."""
    server.tool_call("classify_intent", {"user_prompt": "What changed?"})
    server.text(json.dumps({"intent_type": intent, "confidence": 0.9}))


def run(router, **config):
    request = support.request_for(tools=["classify_intent", "test_echo"], model_config=config or None)
    state, _ = new_state(request)
    outcome = Engine(llm=router, sleep=lambda s: None).run(state)
    return state, response_build(state, outcome)


def test_the_table_covers_every_intent_of_the_spec():
    assert INTENT_MAX_TURNS == {
        "PLATFORM_EXPLANATION": 3, "DATA_DISCOVERY": 4, "DATA_QUERY": 6, "DATA_SOURCE_MANAGEMENT": 5,
        "ACTION_EXECUTION": 6, "GOVERNANCE_MANAGEMENT": 4, "WORKSPACE_ADMIN": 5, "STORAGE_MANAGEMENT": 3,
        "OBSERVABILITY": 4,
    }
    assert set(INTENT_TIERS) == set(INTENT_MAX_TURNS)


def test_a_run_stops_at_its_intents_max_turns_and_uses_the_intents_tier(model):
    server, router = model
    classified(server, "GOVERNANCE_MANAGEMENT")  # balanced tier, 4 turns after the classifying one
    for i in range(4):
        server.tool_call("test_echo", {"text": f"step {i}"})
    server.always("text", "Summary: four echoes.")  # a sixth turn would end the run with it

    state, response = run(router, max_turns=15)

    assert state.intent == "GOVERNANCE_MANAGEMENT"
    assert response.status == "max_turns_exceeded"
    assert response.result.summary == "Summary: four echoes."
    assert state.turn == 5
    assert len(support.CALLS) == 4  # turns 2..5 echoed; a sixth turn was never asked for
    turn_models = [r["model"] for r in server.requests]
    assert turn_models[0] == "m-fast"  # first turn: no intent yet
    assert turn_models[2:6] == ["m-balanced"] * 4
    assert server.requests[6]["messages"][-1]["content"] == ctxmod.SUMMARY_REQUEST
    assert "tools" not in server.requests[6]


def test_the_agents_lower_max_turns_wins_over_the_intents(model):
    server, router = model
    classified(server, "DATA_QUERY")  # 6 turns after the classifying one
    for i in range(6):
        server.tool_call("test_echo", {"text": f"step {i}"})
    server.always("text", "Summary.")

    state, response = run(router, max_turns=2)

    assert response.status == "max_turns_exceeded"
    assert state.turn == 2
    assert len(support.CALLS) == 1


def test_an_intent_outside_the_table_keeps_the_agents_max_turns():
    state, _ = new_state(support.request_for(tools=["test_echo"], model_config={"max_turns": 7}))
    state.intent = "SOMETHING_ELSE"
    assert turn_limit(state) == 7
    state.intent = "STORAGE_MANAGEMENT"  # 3, and no classifying turn on record
    assert turn_limit(state) == 3
