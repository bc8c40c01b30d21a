"""Scripted multi-turn runs through the real litellm HTTP path: the fake
OpenAI-compatible server answers, River's router and runner do the rest."""

import uuid

import pytest

from executions.routing import router_build
from rivercore import context as ctxmod
from rivercore.contracts import StepType
from rivercore.router import ProviderConfig
from rivercore.runner import Engine, new_state, response_build
from tests.executions import engine_support as support

TIER_MODELS = {"fast": "m-fast", "balanced": "m-balanced", "reasoning": "m-reasoning", "coding": "m-coding"}


@pytest.fixture(autouse=True)
def _reset_calls():
    support.CALLS.clear()


@pytest.fixture
def model(fake_openai):
    """A scripted server and a router in front of it (unique health window per test)."""
    server = fake_openai()
    router = router_build([ProviderConfig(name=f"fake-{uuid.uuid4().hex[:8]}", models=TIER_MODELS,
                                    base_url=server.base_url, max_retries=0)])
    return server, router


def run(router, request):
    state, _ = new_state(request)
    outcome = Engine(llm=router, sleep=lambda s: None).run(state)
    return state, response_build(state, outcome)


def kinds(response):
    return [s.step_type.value for s in response.steps]


def test_plain_text_reply_is_the_final_answer(model):
    server, router = model
    server.tool_call("test_echo", {"text": "a"}).text("The answer is a.")
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "success"
    assert response.result.summary == "The answer is a."
    assert server.requests[1]["messages"][-1]["role"] == "tool"
    assert server.requests[1]["messages"][-1]["content"].startswith("[Tool Result] Tool 'test_echo' returned:")


def test_finalize_signal_is_the_final_answer(model):
    server, router = model
    server.tool_call("test_echo", {"text": "a"}).tool_call("finalize", {"answer": "Finished via finalize."})
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "success"
    assert response.result.summary == "Finished via finalize."
    assert kinds(response)[-1] == "final_answer"
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {"test_echo", "finalize"}


def test_three_stalled_turns_inject_the_nudge(model):
    server, router = model
    for i in range(3):  # tool calls that cannot run: invalid arguments each time
        server.tool_call("test_echo", {"txt": f"attempt {i}"}, call_id=f"bad{i}")
    server.text("Concluding.")
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "success"
    assert support.CALLS == []
    fourth = server.requests[3]["messages"]
    assert fourth[-1] == {"role": "system", "content": ctxmod.NUDGE}
    assert all(ctxmod.NUDGE not in str(r["messages"]) for r in server.requests[:3])


def test_turn_limit_asks_for_a_summary_and_ends_max_turns_exceeded(model):
    server, router = model
    for i in range(3):
        server.tool_call("test_echo", {"text": f"step {i}"})
    server.text("Progress: echoed three steps, nothing else done.")
    _, response = run(router, support.request_for(tools=["test_echo"], model_config={"max_turns": 3}))
    assert response.status == "max_turns_exceeded"
    assert response.result.summary == "Progress: echoed three steps, nothing else done."
    summary_request = server.requests[3]
    assert "tools" not in summary_request
    assert summary_request["messages"][-1]["content"] == ctxmod.SUMMARY_REQUEST
    assert len(support.CALLS) == 3


def test_identical_calls_three_times_end_with_infinite_tool_loop(model):
    server, router = model
    for i in range(3):
        server.tool_call("test_echo", {"text": "same"}, call_id=f"c{i}")
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "failed"
    assert response.error.code == "infinite_tool_loop"
    assert len(support.CALLS) == 2  # the third identical call never ran
    diagnostic = [s for s in response.steps if s.step_type == StepType.ERROR][0]
    assert diagnostic.output["code"] == "infinite_tool_loop" and diagnostic.output["count"] == 3


def _usage(total):
    return {"prompt_tokens": total - 50, "completion_tokens": 50, "total_tokens": total}


def test_budget_at_80_percent_forces_finalisation(model):
    server, router = model
    server.tool_call("test_echo", {"text": "1"}, usage=_usage(450))
    server.tool_call("test_echo", {"text": "2"}, usage=_usage(400))  # 850 of 1000: over 80 %
    server.text("Final answer within budget.", usage=_usage(100))
    _, response = run(router, support.request_for(tools=["test_echo"], model_config={"token_budget": 1000}))
    assert response.status == "success"
    third = server.requests[2]["messages"]
    assert third[-1] == {"role": "system", "content": ctxmod.BUDGET_NOTICE}


def test_budget_at_80_percent_without_conclusion_ends_budget_exceeded(model):
    server, router = model
    server.tool_call("test_echo", {"text": "1"}, usage=_usage(850))
    server.tool_call("test_echo", {"text": "2"}, usage=_usage(100))  # 950: still under 100 %
    _, response = run(router, support.request_for(tools=["test_echo"], model_config={"token_budget": 1000}))
    assert response.status == "budget_exceeded"
    assert server.calls == 2


def test_budget_at_100_percent_ends_budget_exceeded(model):
    server, router = model
    server.tool_call("test_echo", {"text": "1"}, usage=_usage(700))
    server.tool_call("test_echo", {"text": "2"}, usage=_usage(700))
    _, response = run(router, support.request_for(tools=["test_echo"], model_config={"token_budget": 1000}))
    assert response.status == "budget_exceeded"
    assert response.usage.total_tokens == 1400
    assert server.calls == 2
    assert "Partial results" in response.result.summary


def test_llm_timeout_is_a_turn_error_then_escalates_to_reasoning(model):
    server, router = model
    server.text("too late", delay=3)
    server.text("On time.")
    request = support.request_for(tools=["test_echo"], model_config={"llm_timeout_seconds": 1})
    _, response = run(router, request)
    assert response.status == "success"
    error = [s for s in response.steps if s.step_type == StepType.ERROR][0]
    assert error.output["llm_error"] == "timeout"
    assert server.requests[-1]["model"] == "m-reasoning"


def test_empty_response_is_an_error_retried_on_the_reasoning_tier(model):
    server, router = model
    server.empty().text("Now with content.")
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "success"
    assert [r["model"] for r in server.requests] == ["m-fast", "m-reasoning"]
    error = [s for s in response.steps if s.step_type == StepType.ERROR][0]
    assert error.output["llm_error"] == "empty_response"


def test_all_providers_failing_is_provider_unavailable(model):
    server, router = model
    server.always("error", 503)
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "failed"
    assert response.error.code == "PROVIDER_UNAVAILABLE"


def test_failover_to_a_healthy_provider(fake_openai):
    broken, healthy = fake_openai(), fake_openai()
    broken.always("error", 500)
    healthy.text("Served by the healthy provider.")
    router = router_build([
        ProviderConfig(name=f"broken-{uuid.uuid4().hex[:6]}", models=TIER_MODELS, base_url=broken.base_url,
                       priority=1, max_retries=0),
        ProviderConfig(name=f"healthy-{uuid.uuid4().hex[:6]}", models=TIER_MODELS, base_url=healthy.base_url,
                       priority=2, max_retries=0),
    ])
    _, response = run(router, support.request_for(tools=["test_echo"]))
    assert response.status == "success"
    assert broken.calls >= 1 and healthy.calls == 1
    assert list(response.usage.models_used.values())[0].provider.startswith("healthy-")


def test_cost_accounting_per_model_and_unknown_prices_flagged(fake_openai):
    server = fake_openai()
    server.tool_call("test_echo", {"text": "1"}, usage=_usage(1000)).text("done", usage=_usage(1000))
    router = router_build([ProviderConfig(
        name=f"priced-{uuid.uuid4().hex[:6]}", base_url=server.base_url, max_retries=0,
        models={"fast": "gpt-4o-mini", "balanced": "made-up-model-without-price"},
    )])
    _, response = run(router, support.request_for(tools=["test_echo"]))
    usage = response.usage
    priced = usage.models_used["gpt-4o-mini"]
    unknown = usage.models_used["made-up-model-without-price"]
    assert priced.estimated_cost > 0 and priced.cost_known
    assert unknown.estimated_cost is None and not unknown.cost_known
    assert usage.cost_incomplete is True
    assert usage.cost_estimate == pytest.approx(priced.estimated_cost)
    assert priced.input_tokens == 950 and priced.turns == 1
