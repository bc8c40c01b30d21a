"""GET /api/v1/executions/{id}/steps/{n}/why: for a governed write that needed approval,
one call answers why the agent did it: the model input and output of the turn, the
governance verdict and policy, the approval with approver, edits and comment, the tool's
input and result, and the step's place in the run. Tenant-scoped."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions import services, tasks
from executions.models import ExecutionStep
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def governed_run(workspace, owner, org_admin, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write the marker w1"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("wrote it")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)
    approval_resolve(user=org_admin, approval_id=approval.pk, status="edited_approved",
                     modified_args={"marker": "w2"}, comment="use w2, not w1")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    return execution, llm


@pytest.mark.django_db
def test_why_of_an_approved_write_names_model_call_verdict_approval_and_result(
    governed_run, owner, org_admin, api_client_for
):
    execution, llm = governed_run
    observation = ExecutionStep.objects.get(execution=execution, step_type="observation", tool_name="durable_write")

    response = api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/steps/{observation.step_number}/why")

    assert response.status_code == 200
    why = response.json()
    assert why["step"]["step_number"] == observation.step_number and why["step"]["step_type"] == "observation"
    # The model call that produced the write: its exact input and its output.
    call = why["model_call"]
    assert call["turn"] == observation.turn
    assert call["messages"] == llm.requests[0]["messages"]
    assert [t["function"]["name"] for t in call["tools"]] == [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert call["parameters"]["tier"] == llm.requests[0]["tier"].value and call["parameters"]["timeout_seconds"] > 0
    assert call["output"]["reply"]["tool_calls"][0]["arguments"] == {"marker": "w1"}
    assert why["reasoning_step"] is not None
    # The governance verdict and the approval: approver, edits and comment.
    verdicts = [g["decision"] for g in why["governance"]]
    assert verdicts == ["APPROVAL_REQUIRED", "PROCEED"]
    assert "needs human approval" in why["governance"][0]["reason"]
    assert why["governance"][1]["resolution"]["status"] == "edited_approved"
    approval = why["approval"]
    assert approval["status"] == "edited" and approval["proposed_payload"] == {"marker": "w1"}
    assert approval["approver"] == {"id": org_admin.pk, "username": org_admin.get_username()}
    assert approval["edits"] == {"marker": "w2"} and approval["comment"] == "use w2, not w1"
    # The tool's input and result, and the step's place in the run.
    tool = why["tool"]
    assert tool["name"] == "durable_write" and tool["input"] == {"marker": "w2"} and tool["status"] == "completed"
    assert tool["result"]["result"] == {"tool": "durable_write", "marker": "w2"}
    assert why["place"]["previous_step"] == observation.step_number - 1
    assert why["place"]["next_step"] == observation.step_number + 1
    assert observation.step_number in why["place"]["steps_in_turn"]


@pytest.mark.django_db
def test_why_of_every_step_answers_in_a_bounded_number_of_queries(governed_run, owner, api_client_for):
    execution, _ = governed_run
    client = api_client_for(owner)
    counts = []
    for number in ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/api/v1/executions/{execution.pk}/steps/{number}/why").status_code == 200
        counts.append(len(queries))
    assert max(counts) <= 12


@pytest.mark.django_db
def test_why_for_an_outsider_or_a_missing_step_is_404(governed_run, owner, outsider, api_client_for):
    execution, _ = governed_run
    assert api_client_for(outsider).get(f"/api/v1/executions/{execution.pk}/steps/1/why").status_code == 404
    assert api_client_for(owner).get(f"/api/v1/executions/{execution.pk}/steps/999/why").status_code == 404
