"""Replay and what-if replay of finished runs (docs/replay.md): a replay makes no model
call and dispatches no tool handler; a what-if replay diffs the decisions of another
version or policy set against the recording; replays are never runs."""

from __future__ import annotations

import pytest

from agents.models import AgentVersion
from executions import services
from executions.models import Execution, ExecutionReplay, ExecutionStep
from governance.services import policy_create
from tests.executions import durable_support
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db

WRITE = durable_support.WRITE.name
NOTE = durable_support.NOTE.name


class FailingLLM:
    """A model that fails the test if a replay ever calls it."""

    def complete(self, **kwargs):
        raise AssertionError("a replay called the model")


class InstructionLLM:
    """Reacts to the agent's instructions: writes unless told to only take notes."""

    def complete(self, *, messages, tools, tier, timeout_seconds):
        text = "\n".join(str(m.get("content") or "") for m in messages)
        asked = sum(1 for m in messages if m.get("role") == "assistant")
        if asked == 0:
            return tool_reply(NOTE, {"marker": "n1"}, call_id="c1")
        if asked == 1 and "Never write" in text:
            return text_reply("Only noted.")
        if asked == 1:
            return tool_reply(WRITE, {"marker": "w1"}, call_id="c2")
        return text_reply("Written.")


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


def finished_write_run(workspace, owner) -> Execution:
    agent = make_agent(workspace=workspace, owner=owner, name="Writer", tools=[WRITE, NOTE])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Record it"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply(NOTE, {"marker": "n1"}, call_id="c1"), tool_reply(WRITE, {"marker": "w1"}, call_id="c2"),
        text_reply("Written."),
    ]))
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert durable_support.CALLS == [(NOTE, "n1"), (WRITE, "w1")]
    durable_support.CALLS.clear()
    return execution


def new_version(agent, **changes) -> AgentVersion:
    current = agent.current_version
    return AgentVersion.objects.create(
        agent=agent, version=current.version + 1, goal=current.goal,
        instructions=changes.get("instructions", current.instructions),
        action_level=changes.get("action_level", current.action_level),
        model_config=current.model_config, tools=current.tools,
        approval_rules=changes.get("approval_rules", current.approval_rules),
    )


def test_replay_of_a_finished_run_is_identical_without_model_call_or_write(workspace, owner, api_client_for,
                                                                            monkeypatch):
    execution = finished_write_run(workspace, owner)
    steps_before = ExecutionStep.objects.filter(execution=execution).count()
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda e: FailingLLM())

    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", {}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["kind"] == "replay" and body["execution"] == execution.pk
    result = body["result"]
    assert result["deterministic"] is True and result["non_determinism"] is None
    assert result["diff"]["identical"] is True
    assert [d["tool"] for d in result["diff"]["tool_calls"]["replayed"]] == [NOTE, WRITE]
    assert result["diff"]["answer"]["replayed"] == "Written."
    assert result["served_from_recording"] == 2
    assert durable_support.CALLS == []  # the write's handler never ran
    assert ExecutionStep.objects.filter(execution=execution).count() == steps_before
    assert Execution.objects.count() == 1  # a replay is not a run
    listed = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/replay").json()
    assert [r["id"] for r in listed] == [body["id"]]
    assert api_client_for(owner).get("/api/v1/executions/").json()["count"] == 1


def test_replay_reports_non_determinism_where_governance_now_differs(workspace, owner):
    execution = finished_write_run(workspace, owner)
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Writes need a person",
                  conditions={"tool": WRITE}, enforcement="require_approval")

    row = services.replay.execution_replay(execution=execution, user=owner)

    result = row.result
    assert result["deterministic"] is False
    diverged = result["non_determinism"]
    assert diverged["recorded"]["kind"] == "governance" and diverged["recorded"]["decision"] == "PROCEED"
    assert diverged["replayed"]["decision"] == "APPROVAL_REQUIRED"
    assert durable_support.CALLS == []


def test_what_if_with_a_different_instruction_diffs_tool_calls_and_answer(workspace, owner, api_client_for,
                                                                         monkeypatch):
    execution = finished_write_run(workspace, owner)
    new_version(execution.agent, instructions="Never write. Only take notes.")
    monkeypatch.setattr("executions.services.replay.llm_for_execution", lambda e: InstructionLLM())

    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", {"agent_version": 2},
                                          format="json")

    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert response.json()["kind"] == "what_if" and result["agent_version"] == 2
    diff = result["diff"]
    assert diff["identical"] is False
    note = {"kind": "tool_call", "tool": NOTE, "arguments": {"marker": "n1"}}
    write = {"kind": "tool_call", "tool": WRITE, "arguments": {"marker": "w1"}}
    assert diff["tool_calls"] == {"changed": True, "recorded": [note, write], "replayed": [note]}
    assert diff["governance"]["changed"] is True and diff["governance"]["replayed"] == []
    assert diff["answer"] == {"changed": True, "recorded": "Written.", "replayed": "Only noted."}
    assert diff["diverged_at"]["recorded"] == write
    assert diff["diverged_at"]["replayed"] == {"kind": "answer", "answer": "Only noted."}
    assert result["stopped"] is None and result["served_from_recording"] == 1
    assert durable_support.CALLS == []


def test_what_if_with_a_stricter_policy_shows_the_write_now_needs_approval(workspace, owner, api_client_for,
                                                                          monkeypatch):
    execution = finished_write_run(workspace, owner)
    monkeypatch.setattr("executions.services.replay.llm_for_execution", lambda e: InstructionLLM())
    policy = {"name": "Writes need a person", "conditions": {"tool": WRITE}, "enforcement": "require_approval"}

    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", {"policies": [policy]},
                                          format="json")

    assert response.status_code == 200, response.content
    result = response.json()["result"]
    diff = result["diff"]
    assert diff["tool_calls"]["changed"] is False
    assert diff["governance"]["changed"] is True
    assert [g["decision"] for g in diff["governance"]["recorded"]] == ["PROCEED"]
    assert [g["decision"] for g in diff["governance"]["replayed"]] == ["APPROVAL_REQUIRED"]
    assert diff["approvals_needed"] == {"recorded": 0, "replayed": 1}
    assert result["stopped"] == "the run would wait for an approval"
    assert durable_support.CALLS == []


def test_what_if_blocking_policy_blocks_the_write_without_dispatch(workspace, owner, monkeypatch):
    execution = finished_write_run(workspace, owner)
    policy = {"name": "No writes", "conditions": {"tool": WRITE}, "enforcement": "block"}

    row = services.replay.execution_replay(execution=execution, user=owner, policies=[policy],
                                           llm=InstructionLLM())

    governance = row.result["diff"]["governance"]["replayed"]
    assert [g["decision"] for g in governance] == ["BLOCKED"]
    assert durable_support.CALLS == []


def test_what_if_write_not_in_the_recording_is_reported_as_would_write(workspace, owner):
    execution = finished_write_run(workspace, owner)
    llm = ScriptedLLM([tool_reply(NOTE, {"marker": "n1"}, call_id="c1"),
                       tool_reply(WRITE, {"marker": "other"}, call_id="c9"), text_reply("Done.")])

    row = services.replay.execution_replay(execution=execution, user=owner, agent_version=1, llm=llm)

    assert row.result["would_write"] == [{"tool": WRITE, "arguments": {"marker": "other"}}]
    assert row.result["diff"]["tool_calls"]["changed"] is True
    assert durable_support.CALLS == []


def test_invalid_inline_policy_is_a_400_naming_the_field(workspace, owner, api_client_for):
    execution = finished_write_run(workspace, owner)
    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", {
        "policies": [{"name": "x", "conditions": {"tool": WRITE}, "enforcement": "explode"}]}, format="json")
    assert response.status_code == 400
    assert "policies[0].enforcement" in str(response.json())
    assert ExecutionReplay.objects.count() == 0


def test_unknown_version_is_404_and_unfinished_run_is_409(workspace, owner, api_client_for):
    execution = finished_write_run(workspace, owner)
    client = api_client_for(owner)
    assert client.post(f"/api/v1/executions/{execution.pk}/replay", {"agent_version": 9},
                       format="json").status_code == 404
    agent = make_agent(workspace=workspace, owner=owner, name="Queued")
    queued = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Wait"))
    response = client.post(f"/api/v1/executions/{queued.pk}/replay", {}, format="json")
    assert response.status_code == 409


def test_outsider_gets_404_for_run_and_agent_replay(workspace, owner, outsider, api_client_for):
    execution = finished_write_run(workspace, owner)
    client = api_client_for(outsider)
    assert client.get(f"/api/v1/executions/{execution.pk}/replay").status_code == 404
    assert client.post(f"/api/v1/executions/{execution.pk}/replay", {}, format="json").status_code == 404
    assert client.post(f"/api/v1/agents/{execution.agent_id}/replay", {"agent_version": 1},
                       format="json").status_code == 404
    assert ExecutionReplay.objects.count() == 0


def test_batch_replay_summarises_changes_and_shows_on_the_agent_page(workspace, owner, api_client_for, monkeypatch,
                                                                     client):
    execution = finished_write_run(workspace, owner)
    agent = execution.agent
    second = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Again"))
    services.execution_run_segment(execution_id=second.pk, llm=ScriptedLLM([text_reply("Nothing to do.")]))
    new_version(agent, action_level="act_with_approval")  # every write now waits for a person
    replies = {"Record it": [tool_reply(NOTE, {"marker": "n1"}, call_id="c1"),
                             tool_reply(WRITE, {"marker": "w1"}, call_id="c2"), text_reply("Written.")],
               "Again": [text_reply("Nothing to do.")]}

    class ByPrompt:
        def complete(self, *, messages, tools, tier, timeout_seconds):
            text = "\n".join(str(m.get("content") or "") for m in messages)
            key = "Record it" if "Record it" in text else "Again"
            return replies[key].pop(0)

    monkeypatch.setattr("executions.services.replay.llm_for_execution", lambda e: ByPrompt())

    response = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/replay", {"agent_version": 2, "last_n": 5},
                                          format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["kind"] == "batch"
    assert body["summary"] == "1 of 2 runs would change; 1 more approval needed"
    assert body["result"]["changed"] == 1 and body["result"]["approvals_added"] == 1
    assert durable_support.CALLS == []
    assert Execution.objects.filter(agent=agent).count() == 2
    client.force_login(owner)
    page = client.get(f"/agents/{agent.pk}/")
    assert "1 of 2 runs would change; 1 more approval needed" in page.content.decode()


def test_batch_last_n_over_the_cap_is_a_400(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner)
    response = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/replay", {"agent_version": 1, "last_n": 51},
                                          format="json")
    assert response.status_code == 400 and "last_n" in response.json()["error"]["details"]


def test_a_replay_reaches_no_observer(workspace, owner):
    from rivercore import observe

    execution = finished_write_run(workspace, owner)
    seen: list[str] = []

    class Recorder:
        def step_added(self, state, step):
            seen.append("step")

        def model_called(self, state, call):
            seen.append("model")

    observe.observer_install("replay-test", Recorder())
    try:
        services.replay.execution_replay(execution=execution, user=owner)
        services.replay.execution_replay(execution=execution, user=owner, agent_version=1,
                                         llm=InstructionLLM())
    finally:
        observe.observer_remove("replay-test")
    assert seen == []


@pytest.mark.parametrize("policies, field", [
    ([{"name": "x", "conditions": {"expression": "tool.name =="}, "enforcement": "block"}], "policies[0]"),
    ([["not", "a", "policy"]], "policies[0]"),
    ([{"conditions": {"tool": WRITE}, "enforcement": "block"}], "policies[0].name"),
])
def test_bad_policy_items_are_400s_naming_the_item(workspace, owner, api_client_for, policies, field):
    execution = finished_write_run(workspace, owner)
    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", {"policies": policies},
                                          format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]


def test_unknown_policy_id_is_404(workspace, owner, api_client_for):
    execution = finished_write_run(workspace, owner)
    for policy_id in ["not-a-uuid", "00000000-0000-0000-0000-000000000000", 12345]:
        response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay",
                                              {"policies": [policy_id]}, format="json")
        assert response.status_code == 404, (policy_id, response.content)
