"""The per-agent run timeout (model_config.run_timeout_seconds) replaces the fixed
hour: validated when a version is saved, enforced by the loop, and it caps how long
a model call may take near the deadline."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pydantic
import pytest
from django.utils import timezone

from agents.models import AgentVersion
from executions import tasks
from executions.models import Execution, ExecutionStep
from executions.routing import router_build
from executions.services import execution_run_segment, execution_start, person_run_request
from rivercore.llm import LLMReply
from rivercore.router import ProviderConfig
from rivercore.runner import Engine, new_state, response_build
from rivercore.types.agents import ModelConfig
from tests.executions import engine_support as support
from tests.factories import ScriptedLLM, make_agent

TIER_MODELS = {"fast": "m-fast", "balanced": "m-balanced", "reasoning": "m-reasoning", "coding": "m-coding"}


class RecordingLLM:
    """An LLMClient that answers with plain text and remembers the timeouts asked for."""

    def __init__(self):
        self.timeouts: list[float] = []

    def complete(self, *, messages, tools, tier, timeout_seconds):
        self.timeouts.append(timeout_seconds)
        return LLMReply(content="Done.", tool_calls=[], model="m", provider="p", tier=tier,
                        input_tokens=10, output_tokens=2, cost_usd=0.0, latency_ms=1)


def started_ago(request, seconds: float):
    state, _ = new_state(request)
    state.started_at_ms = int((time.time() - seconds) * 1000)
    return state


def test_default_run_timeout_is_one_hour():
    assert ModelConfig().run_timeout_seconds == 3600


@pytest.mark.parametrize("value", [59, 86_401, 0, -1, True, 1.5, "an hour", 10**20])
def test_run_timeout_outside_60_to_86400_seconds_is_refused(value):
    with pytest.raises(pydantic.ValidationError) as caught:
        ModelConfig.model_validate({"run_timeout_seconds": value})
    assert caught.value.errors()[0]["loc"] == ("run_timeout_seconds",)


def test_a_run_past_its_agents_timeout_ends_timeout_without_another_model_call(fake_openai):
    server = fake_openai()
    router = router_build([ProviderConfig(name=f"fake-{uuid.uuid4().hex[:8]}", models=TIER_MODELS,
                                    base_url=server.base_url, max_retries=0)])
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 60})
    state = started_ago(request, 61)

    outcome = Engine(llm=router, sleep=lambda s: None).run(state)

    response = response_build(state, outcome)
    assert response.status == "timeout"
    assert server.calls == 0
    assert "time limit of 60 s" in response.result.summary


def test_a_longer_agent_timeout_lets_the_same_run_continue():
    llm = RecordingLLM()
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 7200})
    state = started_ago(request, 3700)  # past the old fixed hour

    outcome = Engine(llm=llm, sleep=lambda s: None).run(state)

    assert outcome.status == "success"
    assert len(llm.timeouts) == 1


def test_a_model_call_near_the_deadline_gets_only_the_time_left():
    llm = RecordingLLM()
    request = support.request_for(tools=["test_echo"],
                                  model_config={"run_timeout_seconds": 120, "llm_timeout_seconds": 60})
    state = started_ago(request, 100)

    Engine(llm=llm, sleep=lambda s: None).run(state)

    assert len(llm.timeouts) == 1
    assert 15 <= llm.timeouts[0] <= 20  # about 20 s left of the run, not the agent's 60


@pytest.mark.django_db
@pytest.mark.parametrize("value", [59, 86_401, True, "1h"])
def test_version_api_refuses_a_run_timeout_out_of_range(workspace, owner, api_client_for, value):
    agent = make_agent(workspace=workspace, owner=owner)
    before = AgentVersion.objects.count()

    response = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/",
        {"goal": "Help.", "instructions": "Be careful.", "action_level": "read_only", "tools": ["execute_query"],
         "model_config": {"run_timeout_seconds": value}},
        format="json",
    )

    assert response.status_code == 400, response.content[:300]
    assert "run_timeout_seconds" in str(response.json()["error"]["details"])
    assert AgentVersion.objects.count() == before


@pytest.mark.django_db
def test_version_api_stores_the_run_timeout(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner)

    response = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/",
        {"goal": "Help.", "instructions": "Be careful.", "action_level": "read_only", "tools": ["execute_query"],
         "model_config": {"run_timeout_seconds": 600}},
        format="json",
    )

    assert response.status_code == 201, response.content[:300]
    version = AgentVersion.objects.filter(agent=agent).latest("pk")
    assert version.model_settings.run_timeout_seconds == 600


@pytest.fixture
def queued(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.mark.django_db
def test_a_durable_run_past_its_agents_timeout_ends_timeout(workspace, owner, queued):
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"],
                       model_config={"run_timeout_seconds": 60})
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    Execution.objects.filter(pk=execution.pk).update(started_at=timezone.now() - timedelta(seconds=90))
    llm = ScriptedLLM([])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "timeout"

    execution.refresh_from_db()
    assert execution.status == Execution.Status.TIMEOUT
    assert llm.requests == []
    final = ExecutionStep.objects.filter(execution=execution).order_by("step_number").last()
    assert "time limit of 60 s" in str(final.output)
