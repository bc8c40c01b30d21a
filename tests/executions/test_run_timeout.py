"""The per-agent run timeout (model_config.run_timeout_seconds) replaces the fixed
hour: validated when a version is saved, enforced by the loop, and it caps how long
a model call may take near the deadline. It counts the run's running time only (its
segments), never its waits for an approval or a person.

Time passes through the engine's injected clock, or by moving the recorded segment
times back; nothing sleeps."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pydantic
import pytest
from django.utils import timezone

from agents.models import AgentVersion
from executions import tasks
from executions.models import Execution, ExecutionSegment, ExecutionStep
from executions.routing import router_build
from executions.services import execution_run_segment, execution_start, person_run_request
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from rivercore.llm import LLMReply
from rivercore.router import ProviderConfig
from rivercore.runner import Engine, new_state, response_build
from rivercore.types.agents import ModelConfig
from tests.executions import engine_support as support
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

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
    # An earlier segment ran 90 s before its worker died (the run went back to the queue).
    now = timezone.now()
    Execution.objects.filter(pk=execution.pk).update(started_at=now - timedelta(seconds=100))
    ExecutionSegment.objects.create(execution=execution, number=1, started_at=now - timedelta(seconds=100),
                                    ended_at=now - timedelta(seconds=10), ended_as="interrupted")
    llm = ScriptedLLM([])

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "timeout"

    execution.refresh_from_db()
    assert execution.status == Execution.Status.TIMEOUT
    assert llm.requests == []
    final = ExecutionStep.objects.filter(execution=execution).order_by("step_number").last()
    assert "time limit of 60 s" in str(final.output)


class StepClock:
    """An injected wall clock (epoch seconds) that moves only when told."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


class ClockedLLM(ScriptedLLM):
    """A scripted model each of whose calls takes ``seconds`` on ``clock``."""

    def __init__(self, replies, *, clock: StepClock, seconds: float):
        super().__init__(replies)
        self.clock, self.seconds = clock, seconds

    def complete(self, **request):
        self.clock.now += self.seconds
        return super().complete(**request)


def test_a_run_running_past_its_timeout_in_this_segment_times_out():
    clock = StepClock(1_800_000_000.0)
    llm = ClockedLLM([tool_reply("test_echo", {"text": f"t{turn}"}, call_id=f"c{turn}") for turn in range(5)],
                     clock=clock, seconds=40)
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 60})
    state, _ = new_state(request)
    state.started_at_ms = int(clock.now * 1000)

    outcome = Engine(llm=llm, clock=clock, sleep=lambda s: None).run(state)

    assert outcome.status == "timeout"
    assert len(llm.requests) == 2  # 40 s, then 80 s: past 60 s before a third call


def test_time_run_in_earlier_segments_counts_against_the_timeout():
    clock = StepClock(1_800_000_000.0)
    llm = ClockedLLM([tool_reply("test_echo", {"text": "t"}, call_id="c1"), text_reply("done")],
                     clock=clock, seconds=15)
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 60})
    state, _ = new_state(request)
    state.started_at_ms, state.active_before_ms = int(clock.now * 1000), 50_000

    outcome = Engine(llm=llm, clock=clock, sleep=lambda s: None).run(state)

    assert outcome.status == "timeout"  # 50 s before, 15 s in this segment
    assert len(llm.requests) == 1


def test_a_wait_between_segments_does_not_count_against_the_timeout():
    clock = StepClock(1_800_000_000.0)
    llm = ClockedLLM([text_reply("done")], clock=clock, seconds=5)
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 60})
    # The run first started a day ago, ran 30 s, then waited; this segment starts now.
    state = started_ago(request, 86_400)
    state.started_at_ms, state.active_before_ms = int(clock.now * 1000), 30_000

    outcome = Engine(llm=llm, clock=clock, sleep=lambda s: None).run(state)

    assert outcome.status == "success"
    assert response_build(state, outcome).usage.execution_duration_ms < 60_000


def _approval_paused_run(workspace, owner, *, timeout: int = 60):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"], action_level="act_with_approval",
                       require_approval_for=["durable_write"], model_config={"run_timeout_seconds": timeout})
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("wrote w1")])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    return execution, llm


def _approve(execution, approver):
    approval_resolve(user=approver, approval_id=ApprovalRequest.objects.get(execution_id=execution.pk).pk,
                     status="approved")


@pytest.fixture
def approver(workspace, django_user_model):
    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = django_user_model.objects.create_user(username="timeout-approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.mark.django_db
def test_a_run_paused_longer_than_its_timeout_resumes_and_completes(workspace, owner, approver, queued,
                                                                    durable_tool_records):
    execution, llm = _approval_paused_run(workspace, owner, timeout=60)
    # It paused overnight: everything it recorded moves twelve hours back.
    night = timedelta(hours=12)
    Execution.objects.filter(pk=execution.pk).update(started_at=timezone.now() - night,
                                                     queued_at=timezone.now() - night)
    segment = ExecutionSegment.objects.get(execution_id=execution.pk)
    ExecutionSegment.objects.filter(pk=segment.pk).update(started_at=segment.started_at - night,
                                                          ended_at=segment.ended_at - night)
    _approve(execution, approver)

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    run = Execution.objects.get(pk=execution.pk)
    assert run.status == Execution.Status.COMPLETED
    assert run.result["summary"].endswith("wrote w1")
    assert run.usage["execution_duration_ms"] < 60_000


@pytest.mark.django_db
def test_a_run_whose_segments_ran_longer_than_its_timeout_times_out_when_resumed(workspace, owner, approver, queued,
                                                                                 durable_tool_records):
    execution, llm = _approval_paused_run(workspace, owner, timeout=60)
    # Its first segment ran 70 s (of a 60 s limit) before it paused.
    segment = ExecutionSegment.objects.get(execution_id=execution.pk)
    ExecutionSegment.objects.filter(pk=segment.pk).update(started_at=segment.ended_at - timedelta(seconds=70))
    _approve(execution, approver)
    asked = len(llm.requests)

    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "timeout"

    run = Execution.objects.get(pk=execution.pk)
    assert run.status == Execution.Status.TIMEOUT
    assert len(llm.requests) == asked  # no model call after the deadline
    final = ExecutionStep.objects.filter(execution=execution).order_by("step_number").last()
    assert "time limit of 60 s" in str(final.output)


def test_a_stateless_continuation_resumes_with_the_run_time_it_had_when_it_paused(monkeypatch):
    """The stateless contract's signed state carries the run time so far: the wait for
    the continuation (here a day) does not count against the time limit."""
    from executions import stateless

    paused_at = 1_800_000_000.0
    request = support.request_for(tools=["test_echo"], model_config={"run_timeout_seconds": 60})
    state, _ = new_state(request)
    state.started_at_ms = int((paused_at - 40) * 1000)  # it ran 40 s, then paused
    monkeypatch.setattr(stateless.time, "time", lambda: paused_at)
    token = stateless._sign(state)

    monkeypatch.setattr(stateless.time, "time", lambda: paused_at + 86_400)
    resumed, _ = stateless._unsign(token)

    assert resumed.active_before_ms == 40_000
    assert resumed.run_ms(paused_at + 86_400 + 5) == 45_000
    assert Engine(llm=RecordingLLM(), clock=lambda: paused_at + 86_400 + 5)._run_seconds_left(resumed) == 15
