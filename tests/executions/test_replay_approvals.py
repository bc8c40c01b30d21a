"""Replays apply recorded approvals by the paused call's content (docs/replay.md): the
tool, its canonical arguments and which occurrence of that pair it is in the run,
never the model's call id. The model here makes up a fresh call id on every call, in
the recorded runs and in every replay, as a live model does."""

from __future__ import annotations

import itertools
import json

import pytest
from django.utils import timezone

from agents.models import AgentVersion
from executions import services
from executions.models import Execution
from executions.services import replay
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tests.executions import durable_support
from tests.factories import make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db

WRITE = durable_support.WRITE.name
OTHER_WRITE = durable_support.IDEMPOTENT_WRITE.name
NOTE = durable_support.NOTE.name

# What the model asks for, by the run's prompt; each run's final answer quotes the last
# tool result it was shown, so a decision applied wrongly changes the answer too.
PLANS = {
    "Record alpha": [(NOTE, {"marker": "n1"}), (WRITE, {"marker": "alpha"})],
    "Record beta": [(WRITE, {"marker": "beta"})],
    "Record gamma": [(WRITE, {"marker": "gamma"})],
    "Record twice": [(WRITE, {"marker": "twice"}), (WRITE, {"marker": "twice"})],
}
QUESTION = {"interaction_type": "clarification_request", "message": "Which marker?", "options": ["m1", "m2"]}
ANSWERED = "the person's answer"  # the write's marker is what the person answered
ASKING = {"Ask first": [("ask_user", QUESTION), (WRITE, {"marker": ANSWERED})]}
# The approver's decision at each pause of the recorded run, in order.
DECISIONS = {
    "Record alpha": [("approved", None)],
    "Record beta": [("edited_approved", {"marker": "beta-edited"})],
    "Record gamma": [("rejected", None)],
    "Record twice": [("approved", None), ("rejected", None)],
}
OTHER_TOOL = "Use the other write tool."
OTHER_MARKER = "Write version two markers."


class FreshIdModel:
    """Answers from the conversation alone, with a new call id on every call."""

    ids = itertools.count(1)

    def __init__(self):
        self.call_ids: list[str] = []

    def complete(self, *, messages, tools, tier, timeout_seconds):
        said = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "user"))
        plans = {**PLANS, **ASKING}
        prompt = next(p for p in plans if p in said)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        plan = plans[prompt]
        if turn >= len(plan):
            shown = [m["content"] for m in messages if m.get("role") == "tool"]
            return text_reply(f"Done after: {shown[-1]}")
        tool, arguments = plan[turn]
        if arguments == {"marker": ANSWERED}:
            shown = [m["content"] for m in messages if m.get("role") == "tool"][-1]
            arguments = {"marker": json.loads(shown.split(" returned: ", 1)[1])["user_response"]}
        if tool == WRITE and OTHER_TOOL in said:
            tool = OTHER_WRITE
        if tool == WRITE and OTHER_MARKER in said:
            arguments = {"marker": arguments["marker"] + "-v2"}
        call_id = f"fresh-{next(self.ids)}"
        self.call_ids.append(call_id)
        return tool_reply(tool, arguments, call_id=call_id)


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Recorder", tools=[WRITE, OTHER_WRITE, NOTE],
                      action_level="act_with_approval", require_approval_for=[WRITE, OTHER_WRITE])


def recorded_run(agent, owner, approver, prompt: str) -> Execution:
    """A real run of ``prompt``, each pause resolved as ``DECISIONS`` says."""
    model = FreshIdModel()
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=prompt))
    status = services.execution_run_segment(execution_id=execution.pk, llm=model)
    for decision, edited in DECISIONS[prompt]:
        assert status == "awaiting_approval", (prompt, status)
        approval = ApprovalRequest.objects.get(execution_id=execution.pk, status="pending")
        approval_resolve(user=approver, approval_id=approval.pk, status=decision, modified_args=edited,
                         comment="not today" if decision == "rejected" else "")
        status = services.execution_run_segment(execution_id=execution.pk, llm=model)
    assert status == "success", (prompt, status)
    execution.refresh_from_db()
    return execution


@pytest.fixture
def runs(agent, owner, editor) -> dict[str, Execution]:
    made = {prompt: recorded_run(agent, owner, editor, prompt) for prompt in PLANS}
    assert durable_support.CALLS == [(NOTE, "n1"), (WRITE, "alpha"), (WRITE, "beta-edited"), (WRITE, "twice")]
    durable_support.CALLS.clear()
    return made


def new_version(agent, instructions: str) -> AgentVersion:
    current = agent.current_version
    return AgentVersion.objects.create(
        agent=agent, version=current.version + 1, goal=current.goal, instructions=instructions,
        action_level=current.action_level, model_config=current.model_config, tools=current.tools,
        approval_rules=current.approval_rules,
    )


def recorded_call_ids(execution: Execution) -> set[str]:
    return set(execution.steps.exclude(call_id="").values_list("call_id", flat=True))


def test_batch_against_the_runs_own_version_changes_nothing(agent, owner, runs, monkeypatch):
    model = FreshIdModel()
    monkeypatch.setattr("executions.services.replay.llm_for_execution", lambda e: model)

    row = replay.agent_replay_batch(agent=agent, user=owner, agent_version=1, last_n=10)

    assert row.summary == f"0 of {len(PLANS)} runs would change; 0 more approvals needed"
    assert [(r["changed"], r["stopped"], r["paused_on"]) for r in row.result["results"]] == \
        [(False, None, None)] * len(PLANS)
    assert model.call_ids and not set(model.call_ids) & set().union(*map(recorded_call_ids, runs.values()))
    assert durable_support.CALLS == []


@pytest.mark.parametrize("prompt, applied", [
    ("Record alpha", [{"status": "approved"}]),
    ("Record beta", [{"status": "edited_approved", "modified_args": {"marker": "beta-edited"}}]),
    ("Record gamma", [{"status": "rejected"}]),
    ("Record twice", [{"status": "approved"}, {"status": "rejected"}]),
])
def test_what_if_against_the_same_version_applies_each_recorded_decision(runs, owner, prompt, applied):
    execution = runs[prompt]

    row = replay.execution_replay(execution=execution, user=owner, agent_version=1,
                                           llm=FreshIdModel())

    result = row.result
    assert row.summary == "unchanged" and result["diff"]["identical"] is True, result["diff"]["diverged_at"]
    assert result["status"] == "success" and result["stopped"] is None and result["paused_on"] is None
    assert [d["decision"] for d in result["decisions_applied"]] == applied
    assert [d["occurrence"] for d in result["decisions_applied"]] == list(range(1, len(applied) + 1))
    assert result["diff"]["answer"]["replayed"] == execution.result["summary"]
    assert result["would_write"] == [] and durable_support.CALLS == []


def test_an_edited_write_is_replayed_with_the_edited_arguments(runs, owner):
    row = replay.execution_replay(execution=runs["Record beta"], user=owner, agent_version=1,
                                           llm=FreshIdModel())

    observed = [s for s in row.result["steps"] if s["step_type"] == "observation" and s["tool_name"] == WRITE]
    assert [(s["input"], s["output"]["result"]) for s in observed] == [
        ({"marker": "beta-edited"}, {"tool": WRITE, "marker": "beta-edited"})]
    assert "beta-edited" in row.result["diff"]["answer"]["replayed"]


def test_a_rejected_write_is_replayed_as_the_rejection(runs, owner):
    row = replay.execution_replay(execution=runs["Record gamma"], user=owner, agent_version=1,
                                           llm=FreshIdModel())

    observed = [s for s in row.result["steps"] if s["step_type"] == "observation" and s["tool_name"] == WRITE]
    assert [(s["status"], s["output"]) for s in observed] == [("blocked", {"rejected": True, "comment": "not today"})]
    assert row.result["served_from_recording"] == 0  # a rejected call was never dispatched, nor replayed


@pytest.mark.parametrize("prompt", list(PLANS))
def test_plain_replay_of_a_run_with_approvals_is_deterministic(runs, owner, monkeypatch, prompt):
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda e: pytest.fail("model called"))

    row = replay.execution_replay(execution=runs[prompt], user=owner)

    assert row.result["deterministic"] is True, row.result["non_determinism"]
    assert len(row.result["decisions_applied"]) == len(DECISIONS[prompt])
    assert durable_support.CALLS == []


def test_what_if_whose_write_has_other_arguments_shows_exactly_that(agent, runs, owner):
    new_version(agent, OTHER_MARKER)

    row = replay.execution_replay(execution=runs["Record alpha"], user=owner, agent_version=2,
                                           llm=FreshIdModel())

    result = row.result
    assert row.summary == "changed" and result["stopped"] == "the run would wait for an approval"
    assert result["paused_on"] == {
        "kind": "approval", "as_recorded": False, "changed": ["arguments"],
        "replayed": {"tool": WRITE, "arguments": {"marker": "alpha-v2"}, "occurrence": 1},
        "recorded": {"tool": WRITE, "arguments": {"marker": "alpha"}, "occurrence": 1, "paused": True,
                     "decision": {"status": "approved"}},
    }
    assert result["diff"]["diverged_at"]["recorded"] == {"kind": "tool_call", "tool": WRITE,
                                                         "arguments": {"marker": "alpha"}}
    assert result["diff"]["diverged_at"]["replayed"] == {"kind": "tool_call", "tool": WRITE,
                                                         "arguments": {"marker": "alpha-v2"}}
    assert result["decisions_applied"] == [] and durable_support.CALLS == []


def test_what_if_calling_another_tool_shows_the_tool_changed(agent, runs, owner):
    new_version(agent, OTHER_TOOL)

    row = replay.execution_replay(execution=runs["Record gamma"], user=owner, agent_version=2,
                                           llm=FreshIdModel())

    paused = row.result["paused_on"]
    assert paused["changed"] == ["tool"]
    assert paused["replayed"]["tool"] == OTHER_WRITE and paused["recorded"]["tool"] == WRITE
    assert paused["recorded"]["decision"] == {"status": "rejected"}
    assert row.result["stopped"] == "the run would wait for an approval"


def test_a_second_identical_call_gets_the_second_decision_not_the_first(runs, owner):
    """Same tool, same arguments: the occurrence tells the two pauses apart."""
    row = replay.execution_replay(execution=runs["Record twice"], user=owner, agent_version=1,
                                           llm=FreshIdModel())

    writes = [s for s in row.result["steps"] if s["step_type"] == "observation" and s["tool_name"] == WRITE]
    assert [s["status"] for s in writes] == ["completed", "blocked"]
    assert row.result["served_from_recording"] == 1


@pytest.fixture
def unpaused_run(workspace, owner) -> Execution:
    """A run of an agent whose writes need nobody: it wrote ``beta`` without a pause."""
    free = make_agent(workspace=workspace, owner=owner, name="Free", tools=[WRITE, OTHER_WRITE, NOTE],
                      action_level="automated")
    execution = services.execution_start(agent=free, request=services.person_run_request(
        agent=free, user=owner, prompt="Record beta"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=FreshIdModel()) == "success"
    execution.refresh_from_db()
    durable_support.CALLS.clear()
    return execution


WRITES_NEED_A_PERSON = {"name": "Writes need a person", "conditions": {"tool": WRITE},
                        "enforcement": "require_approval"}


def test_a_call_the_recording_made_without_pausing_is_a_new_pause(unpaused_run, owner):
    row = replay.execution_replay(execution=unpaused_run, user=owner, policies=[WRITES_NEED_A_PERSON],
                                  llm=FreshIdModel())

    assert row.result["stopped"] == "the run would wait for an approval"
    assert row.result["paused_on"] == {
        "kind": "approval", "as_recorded": False, "changed": ["new_pause"],
        "replayed": {"tool": WRITE, "arguments": {"marker": "beta"}, "occurrence": 1},
        "recorded": {"tool": WRITE, "arguments": {"marker": "beta"}, "occurrence": 1, "paused": False,
                     "decision": None},
    }
    assert row.result["diff"]["tool_calls"]["changed"] is False
    assert row.result["diff"]["approvals_needed"] == {"recorded": 0, "replayed": 1}
    assert row.result["decisions_applied"] == [] and durable_support.CALLS == []


def test_a_new_call_where_the_recording_had_no_pause_left_is_a_new_call(unpaused_run, owner):
    new_version(unpaused_run.agent, OTHER_MARKER)

    row = replay.execution_replay(execution=unpaused_run, user=owner, agent_version=2,
                                  policies=[WRITES_NEED_A_PERSON], llm=FreshIdModel())

    assert row.result["paused_on"] == {
        "kind": "approval", "as_recorded": False, "changed": ["new_call"], "recorded": None,
        "replayed": {"tool": WRITE, "arguments": {"marker": "beta-v2"}, "occurrence": 1},
    }
    assert row.result["diff"]["approvals_needed"] == {"recorded": 0, "replayed": 1}
    assert durable_support.CALLS == []


def test_the_batch_against_a_version_whose_write_changed_counts_every_run_that_wrote(agent, owner, runs,
                                                                                     monkeypatch):
    new_version(agent, OTHER_MARKER)
    monkeypatch.setattr("executions.services.replay.llm_for_execution", lambda e: FreshIdModel())

    row = replay.agent_replay_batch(agent=agent, user=owner, agent_version=2, last_n=10)

    assert row.summary.startswith(f"{len(PLANS)} of {len(PLANS)} runs would change")
    changed = {json.dumps(r["paused_on"]["replayed"]["arguments"]) for r in row.result["results"]}
    assert changed == {json.dumps({"marker": m + "-v2"}) for m in ("alpha", "beta", "gamma", "twice")}
    assert durable_support.CALLS == []


def test_a_recorded_answer_is_applied_by_the_questions_content(workspace, owner):
    asker = make_agent(workspace=workspace, owner=owner, name="Asker", tools=["ask_user", WRITE],
                       action_level="automated")
    execution = services.execution_start(agent=asker, request=services.person_run_request(
        agent=asker, user=owner, prompt="Ask first"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=FreshIdModel()) == "awaiting_interaction"
    services.execution_respond(execution=execution, user=owner, user_response="m2")
    assert services.execution_run_segment(execution_id=execution.pk, llm=FreshIdModel()) == "success"
    execution.refresh_from_db()
    assert durable_support.CALLS == [(WRITE, "m2")]
    durable_support.CALLS.clear()

    row = replay.execution_replay(execution=execution, user=owner, agent_version=1, llm=FreshIdModel())

    assert row.result["diff"]["identical"] is True and row.result["stopped"] is None
    assert row.result["decisions_applied"] == [{"kind": "interaction", "tool": "ask_user", "arguments": QUESTION,
                                                "occurrence": 1, "decision": {"answer": "m2"}}]
    assert row.result["served_from_recording"] == 1  # the write of "m2", from the recording
    assert durable_support.CALLS == []


def test_a_run_whose_approval_expired_replays_to_the_same_wait(agent, owner):
    from governance.resolution import approvals_expire_due

    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Record gamma"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=FreshIdModel()) == "awaiting_approval"
    ApprovalRequest.objects.filter(execution_id=execution.pk).update(expires_at=timezone.now())
    assert approvals_expire_due() == 1
    execution.refresh_from_db()
    assert execution.status == Execution.Status.APPROVAL_EXPIRED

    plain = replay.execution_replay(execution=execution, user=owner)
    what_if = replay.execution_replay(execution=execution, user=owner, agent_version=1, llm=FreshIdModel())

    assert plain.result["deterministic"] is True, plain.result["non_determinism"]
    for row in (plain, what_if):
        assert row.result["diff"]["identical"] is True
        assert row.result["stopped"] == "the run would wait for an approval"
        assert row.result["paused_on"]["as_recorded"] is True and row.result["paused_on"]["changed"] == []
    assert what_if.summary == "unchanged"
