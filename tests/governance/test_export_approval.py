"""Approval means asking: a data export limit with enforcement require_approval pauses
the run for an approver (it used to withhold the rows silently). No row reaches the
model or the approval request before the approval; after it, the query runs again and
its result is shown; a rejection shows nothing. Also: what counts as a write comes from
the tool registry, and a writing tool is governed whatever its category."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from datasources.services import data_source_discover
from executions import services
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from governance.services import policy_create
from rivercore.runner import Engine, new_state, response_build
from rivercore.tools import Tool, ToolCategory, all_tools, get_tool, register
from tests.datasources.fixtures import *  # noqa: F403
from tests.executions import engine_support
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools

QUERY = "SELECT id, subject FROM tickets ORDER BY id"
SECRET_SUBJECT = "Cannot log in"  # a subject in the fixture rows


def _export_run(workspace, owner, source, *, action_level="automated"):
    data_source_discover(data_source=source)
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Ticket export",
                  conditions={"expression": "rows > 2"}, enforcement="require_approval",
                  policy_type="data_export_limit")
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"], action_level=action_level,
                       data_sources=[source])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="List the tickets"))
    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply("execute_query", {"data_source_id": source.pk, "query": QUERY}, call_id="q1")]))
    execution.refresh_from_db()
    return execution, outcome


def _everything_the_run_holds(execution) -> str:
    steps = [(s.input, s.output, s.messages) for s in execution.steps.all()]
    return json.dumps([steps, execution.context_snapshot, execution.result], default=str)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action_level", ["automated", "act_with_approval", "read_only"])
def test_an_export_that_needs_approval_pauses_without_showing_rows(workspace, owner, sqlite_source, action_level):
    execution, outcome = _export_run(workspace, owner, sqlite_source, action_level=action_level)

    assert outcome == "awaiting_approval"
    assert execution.status == Execution.Status.AWAITING_APPROVAL
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.tool_name == "execute_query" and approval.status == ApprovalRequest.Status.PENDING
    assert approval.proposed_payload["query"] == QUERY
    assert "Ticket export" in approval.risk_context
    assert "Data export of 6 row(s) from tickets" in approval.risk_context
    assert SECRET_SUBJECT not in _everything_the_run_holds(execution)
    assert SECRET_SUBJECT not in json.dumps(approval.proposed_payload)
    assert AuditLogEntry.objects.filter(event_type="approval_requested", approval_id=approval.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_once_approved_the_query_runs_again_and_the_rows_are_shown(workspace, owner, editor, sqlite_source):
    execution, _ = _export_run(workspace, owner, sqlite_source)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("Listed.")]))

    assert outcome == "success"
    shown = execution.steps.get(step_type="observation", tool_name="execute_query")
    assert shown.status == "completed"
    assert [SECRET_SUBJECT] == [row[1] for row in shown.output["result"]["rows"] if row[0] == 1]


@pytest.mark.django_db(transaction=True)
def test_a_rejected_export_shows_nothing(workspace, owner, editor, sqlite_source):
    execution, _ = _export_run(workspace, owner, sqlite_source)
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    approval_resolve(user=editor, approval_id=approval.pk, status="rejected",
                                        comment="not to the model")
    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("OK.")]))

    assert outcome == "success"
    execution.refresh_from_db()
    assert SECRET_SUBJECT not in _everything_the_run_holds(execution)
    observation = execution.steps.get(step_type="observation", tool_name="execute_query")
    assert observation.output == {"rejected": True, "comment": "not to the model"}


@pytest.mark.django_db(transaction=True)
def test_a_blocking_export_limit_still_withholds(workspace, owner, sqlite_source):
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="No ticket export",
                  conditions={"expression": "rows > 2"}, enforcement="block", policy_type="data_export_limit")
    data_source_discover(data_source=sqlite_source)
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"], data_sources=[sqlite_source])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="List the tickets"))

    outcome = services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply("execute_query", {"data_source_id": sqlite_source.pk, "query": QUERY}, call_id="q1"),
        text_reply("Could not.")]))

    assert outcome == "success"
    assert not ApprovalRequest.objects.filter(execution_id=execution.pk).exists()
    assert SECRET_SUBJECT not in _everything_the_run_holds(Execution.objects.get(pk=execution.pk))


# --- what writes ------------------------------------------------------------------------------

# Every tool River ships, and whether it changes anything outside the run. A new tool
# must be added here, so someone decides how it is governed.
WRITES = {"create_data_source", "update_data_source", "delete_data_source", "write_back", "apply_governance_policy",
          "save_artifact"}
READS = {"test_connection", "discover_schema", "execute_query", "get_workspace_info", "get_storage_info",
         "search_catalog", "classify_intent", "check_governance", "generate_query", "recommend_visualization",
         "explain_results", "ask_user", "load_artifact",
         "search_memory",  # reads the workspace's memory, scoped to the run's user
         "delegate_to_agent",  # starts a child run, itself governed by its own (capped) action level
         "transfer_to_agent"}  # ends the run; the receiver's run is governed at its own (capped) level


def test_every_builtin_tool_is_classified_and_the_writing_ones_say_so():
    from rivercore.types.agents import TOOL_NAMES

    builtin = {name: tool for name, tool in all_tools().items() if name in TOOL_NAMES}
    assert set(builtin) == WRITES | READS
    assert {name for name, tool in builtin.items() if tool.writes} == WRITES
    assert all(builtin[name].category == ToolCategory.EXECUTION for name in WRITES)


class _In(BaseModel):
    text: str


class _Out(BaseModel):
    echoed: str


def _reasoning_write(ctx, args):
    engine_support.CALLS.append(("gov_test_reasoning_write", args.model_dump()))
    return _Out(echoed=args.text)


if get_tool("gov_test_reasoning_write") is None:
    register(Tool(name="gov_test_reasoning_write", description="A writing tool filed under reasoning.",
                  category=ToolCategory.REASONING, input_model=_In, output_model=_Out, handler=_reasoning_write,
                  writes=True))


@pytest.mark.parametrize(("level", "runs"), [("read_only", False), ("recommend", False),
                                               ("act_with_approval", False), ("automated", True)])
def test_a_writing_tool_is_governed_whatever_its_category(level, runs):
    engine_support.CALLS.clear()
    request = engine_support.request_for(tools=["gov_test_reasoning_write"], action_level=level)
    state, _ = new_state(request)
    llm = ScriptedLLM([tool_reply("gov_test_reasoning_write", {"text": "x"}, call_id="w"), text_reply("done")])

    response = response_build(state, Engine(llm=llm, sleep=lambda s: None).run(state))

    assert (engine_support.CALLS == [("gov_test_reasoning_write", {"text": "x"})]) is runs
    checks = [s for s in response.steps if s.step_type.value == "governance_check"]
    assert checks and checks[0].tool_name == "gov_test_reasoning_write"
    if level == "act_with_approval":
        assert response.status.value == "awaiting_approval"
