"""Delegation (docs/delegation.md): ``delegate_to_agent`` starts a child run, the parent
pauses holding no worker, and the child's end, through post-processing's run-end
handler, resumes the parent exactly once with the child's result as its observation.

Real segments on PostgreSQL with a scripted model; the tool's handler runs in the
engine's tool threads, so these tests commit (``transaction=True``)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions import services
from executions.models import Execution
from executions.services import delegation
from executions.services import segment as segment_module
from executions.services.load import execution_for_segment, request_build
from executions.tools.delegation import DELEGATE_TO_AGENT, DelegateInput
from executions.types import DelegationOrigin, RunRequest
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.tools import ToolContext, ToolError, ToolErrorKind
from rivercore.types.agents import ActionLevel, action_level_at_most
from tests.executions.durable_support import WRITE
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

Status = Execution.Status


@pytest.fixture
def coordinator(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"])


@pytest.fixture
def researcher(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Researcher", tools=["delegate_to_agent"])


def delegate(agent: str, task: str = "Find the churn figure for March.", call_id: str = "d1", **extra):
    return tool_reply("delegate_to_agent", {"agent": agent, "task": task, **extra}, call_id)


def run(execution: Execution, *replies) -> str | None:
    return services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(replies)))


def started(agent, user, prompt: str = "Prepare the monthly report") -> Execution:
    return services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=user, prompt=prompt))


def observation(execution: Execution, call_id: str = "d1"):
    return execution.steps.get(step_type="observation", call_id=call_id)


def paused_parent(coordinator, researcher, owner) -> tuple[Execution, Execution]:
    parent = started(coordinator, owner)
    assert run(parent, delegate("Researcher", payload={"month": "2026-03"})) == Status.AWAITING_CHILD
    parent.refresh_from_db()
    return parent, Execution.objects.get(parent_execution_id=parent.pk)


def test_parent_pauses_holding_no_worker_and_resumes_with_the_childs_summary(coordinator, researcher, owner):
    parent, child = paused_parent(coordinator, researcher, owner)

    assert parent.status == Status.AWAITING_CHILD
    assert parent.lease_token == "" and parent.lease_expires_at is None
    call = parent.steps.get(step_type="tool_call", call_id="d1")
    assert call.status == "pending" and call.output["child_execution_id"] == child.pk
    assert child.status == Status.QUEUED and child.agent_id == researcher.pk
    assert child.trigger_type == "workflow" and child.trigger_source == f"delegation:{parent.pk}"
    assert child.requested_by_id == owner.pk and child.parent_call_id == "d1"
    assert child.input_prompt == "Find the churn figure for March."
    assert child.trigger_payload == {"month": "2026-03"}

    assert run(child, text_reply("Churn in March was 2.1 %.")) == "success"
    parent.refresh_from_db()
    assert parent.status == Status.AWAITING_CHILD  # the child's end reaches it through post-processing
    assert services.execution_post_process(execution_id=child.pk) is True

    parent.refresh_from_db()
    assert parent.status == Status.QUEUED
    seen = observation(parent)
    assert seen.status == "completed" and seen.output["child_execution_id"] == child.pk
    assert seen.output["result"]["summary"] == "Churn in March was 2.1 %."
    assert seen.output["result"]["result_ref"]["execution_id"] == child.pk

    model = ScriptedLLM([text_reply("The report: churn 2.1 %.")])
    assert services.execution_run_segment(execution_id=parent.pk, llm=model) == "success"
    told = model.requests[0]["messages"][-1]
    assert told["role"] == "tool" and told["tool_call_id"] == "d1" and "Churn in March was 2.1 %." in told["content"]
    parent.refresh_from_db()
    assert parent.status == Status.COMPLETED and parent.result["summary"] == "The report: churn 2.1 %."


def test_a_child_failure_is_an_error_observation_and_the_parent_goes_on(coordinator, researcher, owner):
    parent, child = paused_parent(coordinator, researcher, owner)

    assert run(child, LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "provider down")) == "failed"
    services.execution_post_process(execution_id=child.pk)

    parent.refresh_from_db()
    assert parent.status == Status.QUEUED
    seen = observation(parent)
    assert seen.status == "failed"
    assert seen.output["error"]["code"] == "DELEGATED_RUN_FAILED"
    assert seen.output["error"]["details"]["status"] == "failed"
    assert seen.output["error"]["details"]["child_error_code"] == "PROVIDER_UNAVAILABLE"
    assert "provider down" in seen.error

    model = ScriptedLLM([text_reply("The researcher could not answer; no figure today.")])
    assert services.execution_run_segment(execution_id=parent.pk, llm=model) == "success"
    assert "failed" in model.requests[0]["messages"][-1]["content"]


def test_a_cancelled_child_is_an_error_observation_too(coordinator, researcher, owner):
    parent, child = paused_parent(coordinator, researcher, owner)

    services.execution_cancel(execution=child, user=owner)
    services.execution_post_process(execution_id=child.pk)

    parent.refresh_from_db()
    assert parent.status == Status.QUEUED
    assert observation(parent).output["error"]["details"]["status"] == "cancelled"


def test_resume_happens_exactly_once(coordinator, researcher, owner):
    parent, child = paused_parent(coordinator, researcher, owner)
    run(child, text_reply("Done."))

    assert services.execution_post_process(execution_id=child.pk) is True
    assert services.execution_post_process(execution_id=child.pk) is False
    # The handler itself, called again (a redelivered or replayed run end), does nothing.
    assert delegation.delegation_resume(child_execution_id=child.pk) is False

    assert parent.steps.filter(step_type="observation", call_id="d1").count() == 1
    parent.refresh_from_db()
    assert parent.status == Status.QUEUED


def test_the_watchdog_resumes_a_parent_whose_childs_handler_failed(coordinator, researcher, owner, monkeypatch,
                                                                    caplog):
    parent, child = paused_parent(coordinator, researcher, owner)
    run(child, text_reply("Done."))

    def broken(**kwargs):
        raise RuntimeError("handler crashed")

    with monkeypatch.context() as patched:
        patched.setattr(delegation, "_resume_locked", broken)
        assert services.execution_post_process(execution_id=child.pk) is True  # the child's end is not blocked
    assert "run-end handler delegation failed" in caplog.text
    parent.refresh_from_db()
    assert parent.status == Status.AWAITING_CHILD

    assert services.executions_resume_waiting_parents(grace_seconds=0) == [parent.pk]
    assert services.executions_resume_waiting_parents(grace_seconds=0) == []

    parent.refresh_from_db()
    assert parent.status == Status.QUEUED
    assert observation(parent).output["result"]["summary"] == "Done."


def test_a_child_that_ends_before_its_parent_pauses_still_resumes_it(coordinator, researcher, owner, monkeypatch):
    """The child is queued when the tool's transaction commits, so it can end (and be
    post-processed, finding its parent still running) before the parent's segment
    records its pause. The pause then finds the child ended and resumes at once."""
    real_end = segment_module.execution_segment_end
    handler_saw: list[bool] = []

    def child_finishes_first(*, execution, **kwargs):
        if execution.parent_execution_id is not None:  # the child's own segment
            return real_end(execution=execution, **kwargs)
        child = Execution.objects.get(parent_execution_id=execution.pk)

        def finish_child():
            run(child, text_reply("Quick answer."))
            handler_saw.append(delegation.delegation_resume(child_execution_id=child.pk))
            connection.close()

        worker = threading.Thread(target=finish_child)
        worker.start()
        worker.join()
        return real_end(execution=execution, **kwargs)

    monkeypatch.setattr(segment_module, "execution_segment_end", child_finishes_first)
    parent = started(coordinator, owner)

    assert run(parent, delegate("Researcher")) == Status.AWAITING_CHILD  # the engine's outcome

    assert handler_saw == [False]  # the parent was still running when the child ended
    parent.refresh_from_db()
    assert parent.status == Status.QUEUED
    assert observation(parent).output["result"]["summary"] == "Quick answer."


class AsyncScript:
    """An async model port for hosted runs: the replies, in order."""

    def __init__(self, *replies):
        self.replies = list(replies)

    async def acomplete(self, **request):
        return self.replies.pop(0)

    def complete(self, **request):
        raise AssertionError("a hosted run called the blocking model port")


def test_hosted_parent_and_child_delegate_pause_and_resume_on_a_run_host(coordinator, researcher, owner,
                                                                         monkeypatch):
    from executions import tasks
    from executions.runhost import RunHost
    from executions.services.segment import execution_host_segment

    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda execution_id: None)
    scripts = {coordinator.pk: AsyncScript(delegate("Researcher"), text_reply("Report: 42.")),
               researcher.pk: AsyncScript(text_reply("42."))}
    monkeypatch.setattr(segment_module, "llm_for_execution", lambda execution: scripts[execution.agent_id])
    host = RunHost(capacity=4)
    parent = started(coordinator, owner)

    execution_host_segment(execution_id=parent.pk, host=host)
    assert host.wait_idle(timeout=60)
    parent.refresh_from_db()
    assert parent.status == Status.AWAITING_CHILD and parent.lease_token == ""
    child = Execution.objects.get(parent_execution_id=parent.pk)

    execution_host_segment(execution_id=child.pk, host=host)
    assert host.wait_idle(timeout=60)
    assert services.execution_post_process(execution_id=child.pk) is True
    execution_host_segment(execution_id=parent.pk, host=host)
    assert host.wait_idle(timeout=60)

    parent.refresh_from_db()
    assert parent.status == Status.COMPLETED and parent.result["summary"] == "Report: 42."
    assert observation(parent).output["result"]["summary"] == "42."


def test_a_childs_approval_pause_keeps_the_parent_waiting(coordinator, workspace, owner):
    make_agent(workspace=workspace, owner=owner, name="Writer", tools=[WRITE.name],
               action_level="act_with_approval")
    parent = started(coordinator, owner)
    assert run(parent, delegate("Writer")) == Status.AWAITING_CHILD
    child = Execution.objects.get(parent_execution_id=parent.pk)

    assert run(child, tool_reply(WRITE.name, {"marker": "m1"}, "w1")) == Status.AWAITING_APPROVAL

    assert services.execution_post_process(execution_id=child.pk) is False  # not ended
    assert delegation.delegation_resume(child_execution_id=child.pk) is False
    parent.refresh_from_db()
    assert parent.status == Status.AWAITING_CHILD


def test_cancelling_a_parent_cancels_its_running_children_and_theirs(coordinator, researcher, workspace, owner):
    make_agent(workspace=workspace, owner=owner, name="Archivist")
    parent, child = paused_parent(coordinator, researcher, owner)
    assert run(child, delegate("Archivist", call_id="g1")) == Status.AWAITING_CHILD
    grandchild = Execution.objects.get(parent_execution_id=child.pk)

    services.execution_cancel(execution=parent, user=owner)

    for row in (parent, child, grandchild):
        row.refresh_from_db()
        assert row.status == Status.CANCELLED
    assert f"parent run {parent.pk} cancelled" in child.error["message"]
    # The children's ends reach a parent that is no longer waiting: nothing is appended.
    assert services.execution_post_process(execution_id=child.pk) is True
    assert not parent.steps.filter(step_type="observation").exists()


def refusal(execution: Execution, call_id: str = "d1") -> dict:
    seen = observation(execution, call_id)
    assert seen.status == "failed"
    return seen.output["error"]


def test_an_agent_of_another_workspace_is_not_found_and_starts_nothing(coordinator, other_workspace, outsider,
                                                                      owner):
    spy = make_agent(workspace=other_workspace, owner=outsider, name="Spy")
    parent = started(coordinator, owner)

    assert run(parent, delegate(str(spy.pk)), delegate("Spy", call_id="d2"),
               delegate(str(uuid.uuid4()), call_id="d3"), text_reply("Nobody to ask.")) == "success"

    by_id, by_name, unknown = (refusal(parent, c) for c in ("d1", "d2", "d3"))
    assert by_id["code"] == by_name["code"] == unknown["code"] == "NOT_FOUND"
    assert by_id["message"] == f"No agent '{spy.pk}' in this workspace."  # the same words as an unknown id
    assert "Elsewhere" not in json.dumps([by_id, by_name]) and "Spy" not in by_id["message"]
    assert not Execution.objects.filter(parent_execution_id=parent.pk).exists()
    assert not Execution.objects.filter(agent=spy).exists()


def test_an_agent_without_the_tool_in_its_version_cannot_delegate(workspace, owner, researcher):
    loner = make_agent(workspace=workspace, owner=owner, name="Loner", tools=[])
    parent = started(loner, owner)

    assert run(parent, delegate("Researcher"), text_reply("Alone.")) == "success"

    assert refusal(parent)["code"] == "INVALID_TOOL"
    assert not Execution.objects.filter(parent_execution_id=parent.pk).exists()


def test_an_agent_cannot_delegate_to_itself(coordinator, owner):
    parent = started(coordinator, owner)

    assert run(parent, delegate("Coordinator"), text_reply("I will do it myself.")) == "success"

    assert refusal(parent)["details"]["code"] == "self_delegation"
    assert not Execution.objects.filter(parent_execution_id=parent.pk).exists()


def test_an_inactive_agent_takes_no_task(coordinator, workspace, owner):
    make_agent(workspace=workspace, owner=owner, name="Sleeper", status="paused")
    parent = started(coordinator, owner)

    assert run(parent, delegate("Sleeper"), text_reply("Sleeper is paused.")) == "success"

    assert refusal(parent)["details"]["code"] == "agent_not_active"
    assert not Execution.objects.filter(parent_execution_id=parent.pk).exists()


def test_the_depth_limit_refuses_a_delegation_beyond_it(coordinator, researcher, workspace, owner, settings):
    settings.RIVER_MAX_DELEGATION_DEPTH = 1
    make_agent(workspace=workspace, owner=owner, name="Archivist")
    parent, child = paused_parent(coordinator, researcher, owner)  # depth 1: allowed

    assert run(child, delegate("Archivist", call_id="g1"), text_reply("Could not pass it on.")) == "success"

    error = refusal(child, "g1")
    assert error["details"]["code"] == "delegation_depth_exceeded" and "limit is 1" in error["message"]
    assert not Execution.objects.filter(parent_execution_id=child.pk).exists()


def test_a_run_delegates_at_most_the_configured_number_of_tasks(coordinator, researcher, owner, settings):
    settings.RIVER_MAX_DELEGATIONS_PER_RUN = 1
    parent, child = paused_parent(coordinator, researcher, owner)
    run(child, text_reply("One answer."))
    services.execution_post_process(execution_id=child.pk)

    assert run(parent, delegate("Researcher", task="Another one", call_id="d2"), text_reply("Enough.")) == "success"

    assert refusal(parent, "d2")["details"]["code"] == "delegation_limit_reached"
    assert Execution.objects.filter(parent_execution_id=parent.pk).count() == 1


def test_a_child_never_runs_above_its_parents_action_level(workspace, owner):
    """The escalation rule: a read_only agent cannot get writes done by delegating to an
    automated one; the child runs at the lower of the two levels."""
    reader = make_agent(workspace=workspace, owner=owner, name="Reader", tools=["delegate_to_agent"],
                        action_level="read_only")
    make_agent(workspace=workspace, owner=owner, name="Doer", tools=[WRITE.name], action_level="automated")
    parent = started(reader, owner)

    assert run(parent, delegate("Doer")) == Status.AWAITING_CHILD  # delegating itself writes nothing
    child = Execution.objects.get(parent_execution_id=parent.pk)
    assert request_build(execution_for_segment(child.pk)).agent_config.action_level == ActionLevel.READ_ONLY

    assert run(child, tool_reply(WRITE.name, {"marker": "escalate"}, "w1"), text_reply("Blocked.")) == "success"
    write = child.steps.get(step_type="observation", call_id="w1")
    assert write.status == "blocked"


def test_the_action_level_cap_keeps_a_stricter_childs_own_level():
    assert action_level_at_most(ActionLevel.AUTOMATED, ActionLevel.ACT_WITH_APPROVAL) == \
        ActionLevel.ACT_WITH_APPROVAL
    assert action_level_at_most(ActionLevel.RECOMMEND, ActionLevel.READ_ONLY) == ActionLevel.RECOMMEND
    assert action_level_at_most(ActionLevel.READ_ONLY, ActionLevel.AUTOMATED) == ActionLevel.READ_ONLY


def test_a_recommend_agent_only_records_the_delegation_as_a_suggestion(workspace, owner, researcher):
    advisor = make_agent(workspace=workspace, owner=owner, name="Advisor", tools=["delegate_to_agent"],
                         action_level="recommend")
    parent = started(advisor, owner)

    assert run(parent, delegate("Researcher"), text_reply("Suggested.")) == "success"

    assert observation(parent).output["suggestion_recorded"] is True
    assert not Execution.objects.filter(parent_execution_id=parent.pk).exists()


def test_a_stateless_run_cannot_delegate(coordinator, owner):
    ctx = ToolContext(execution_id=1, user=None, agent=None, data_sources=[], extras={"call_id": "c"})

    with pytest.raises(ToolError) as refused:
        DELEGATE_TO_AGENT.handler(ctx, DelegateInput(agent="Researcher", task="x"))

    assert refused.value.kind == ToolErrorKind.FAILED and "durable" in refused.value.message


def test_an_oversized_payload_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="payload"):
        DelegateInput(agent="Researcher", task="x", payload={"blob": "x" * 20_000})


# --- the API and the run page ---------------------------------------------------------------


def test_the_api_links_parent_and_children(coordinator, researcher, owner, api_client_for):
    parent, child = paused_parent(coordinator, researcher, owner)
    client = api_client_for(owner)

    body = client.get(f"/api/v1/executions/{parent.pk}/").json()
    assert body["parent_execution"] is None and body["status"] == "awaiting_child"
    assert body["child_executions"] == [
        {"id": child.pk, "agent": str(researcher.pk), "status": "queued", "call_id": "d1"}]
    assert body["pending"]["kind"] == "child" and body["pending"]["child_execution_id"] == child.pk
    tool_call = next(s for s in body["steps"] if s["step_type"] == "tool_call")
    assert tool_call["output"]["child_execution_id"] == child.pk

    child_body = client.get(f"/api/v1/executions/{child.pk}/").json()
    assert child_body["parent_execution"] == parent.pk and child_body["child_executions"] == []

    listed = client.get("/api/v1/executions/", {"status": "awaiting_child"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [parent.pk]


def test_listing_children_costs_the_same_queries_for_one_or_many(coordinator, researcher, owner, api_client_for):
    parent, _child = paused_parent(coordinator, researcher, owner)
    client = api_client_for(owner)
    client.get(f"/api/v1/executions/{parent.pk}/")  # warm-up: the token's first use is recorded once
    with CaptureQueriesContext(connection) as one:
        assert client.get(f"/api/v1/executions/{parent.pk}/").status_code == 200
    for number in (2, 3, 4):
        services.execution_start(agent=researcher, request=RunRequest(
            agent_id=researcher.pk, prompt="more", origin=DelegationOrigin(
                user_id=owner.pk, parent_execution_id=parent.pk, parent_call_id=f"extra{number}", depth=1,
                action_level_cap=ActionLevel.AUTOMATED)))

    with CaptureQueriesContext(connection) as many:
        body = client.get(f"/api/v1/executions/{parent.pk}/").json()

    assert len(body["child_executions"]) == 4
    assert len(many.captured_queries) == len(one.captured_queries)


def test_an_unknown_status_filter_is_a_400_naming_the_field(owner, api_client_for):
    response = api_client_for(owner).get("/api/v1/executions/", {"status": "sleeping"})

    assert response.status_code == 400
    assert "status" in response.json()["error"]["details"]


def test_an_outsider_sees_neither_the_parent_nor_its_child(coordinator, researcher, owner, outsider,
                                                          api_client_for):
    parent, child = paused_parent(coordinator, researcher, owner)
    client = api_client_for(outsider)

    assert client.get(f"/api/v1/executions/{parent.pk}/").status_code == 404
    assert client.get(f"/api/v1/executions/{child.pk}/").status_code == 404
    assert client.post(f"/api/v1/executions/{child.pk}/cancel").status_code == 404
    listed = client.get("/api/v1/executions/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert rows == []
    child.refresh_from_db()
    assert child.status == Status.QUEUED


def test_the_run_page_links_parent_and_children(coordinator, researcher, owner, client):
    parent, child = paused_parent(coordinator, researcher, owner)
    client.force_login(owner)

    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert f'href="/runs/{child.pk}/"' in page and "Awaiting delegated run" in page
    child_page = client.get(f"/runs/{child.pk}/").content.decode()
    assert f'href="/runs/{parent.pk}/"' in child_page and "Delegated by" in child_page
