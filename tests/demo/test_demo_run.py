"""The demo, end to end: the seeded agents on the seeded support data, driven by the
offline planner through litellm, the engine, the tools and the approval gate."""

import sqlite3
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents.models import Agent
from demo.seed import demo_database_path, demo_seed
from executions.models import Execution
from executions.services import execution_run_segment, execution_start, person_run_request
from governance.audit import audit_seal_wait
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from rivercore.errors import PermissionDenied

QUESTION = "How many open high-priority tickets were created in the last 24 hours?"

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in worker threads


@pytest.fixture
def demo(settings, tmp_path):
    settings.RIVER_SQLITE_DATA_DIR = tmp_path / "datasources"
    settings.RIVER_ADMIN_PASSWORD = "demo-password-for-tests"
    demo_seed()
    return get_user_model().objects.get(username="admin")


def _expected_count() -> int:
    with sqlite3.connect(demo_database_path()) as db:
        return db.execute(
            "SELECT COUNT(*) FROM tickets WHERE priority = 'high' AND status = 'open' "
            "AND datetime(created_at) >= datetime('now', '-24 hours')"
        ).fetchone()[0]


def test_analyst_answers_the_question_with_a_real_query(demo):
    expected = _expected_count()
    assert expected > 0
    agent = Agent.objects.get(name="Support Analyst")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=demo, prompt=QUESTION))
    assert execution_run_segment(execution_id=execution.pk) == "success"
    execution.refresh_from_db()
    tools = list(execution.steps.filter(step_type="tool_call").values_list("tool_name", flat=True))
    assert tools == ["classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results"]
    query_step = execution.steps.get(step_type="observation", tool_name="execute_query")
    assert query_step.output["result"]["rows"] == [[expected]]
    assert f"Answer: {expected}" in execution.result["summary"]
    assert "offline planner" in execution.result["summary"]
    assert execution.steps.filter(model_used__icontains="offline").exists()
    # The model-backed tools' own calls are counted in the run's usage too.
    turn_tokens = sum(s.tokens["input"] for s in execution.steps.filter(step_type="reasoning") if s.tokens)
    tool_tokens = sum(u["input"] for s in execution.steps.filter(step_type="observation")
                      for u in (s.output or {}).get("llm_usage", []))
    assert tool_tokens > 0
    assert execution.tokens_input == turn_tokens + tool_tokens


def test_support_agent_write_back_meets_the_approval_gate_and_runs_once_approved(demo):
    expected = _expected_count()
    agent = Agent.objects.get(name="L1 Support Specialist")
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=demo, prompt="Close the open high-priority tickets created in the last 24 hours"))
    assert execution_run_segment(execution_id=execution.pk) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.tool_name == "write_back"
    assert approval.proposed_payload["operation"] == "update"
    assert _expected_count() == expected  # nothing written before approval

    # Whoever started the run may not approve it; the demo seeds a second person who may.
    with pytest.raises(PermissionDenied):
        approval_resolve(user=demo, approval_id=approval.pk, status="approved")
    approver = get_user_model().objects.get(username="approver")
    approval_resolve(user=approver, approval_id=approval.pk, status="approved", comment="go ahead")
    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED
    assert execution_run_segment(execution_id=execution.pk) == "success"
    write = execution.steps.get(step_type="observation", tool_name="write_back")
    assert write.output["result"]["rows_affected"] == expected
    assert _expected_count() == 0


def test_an_answered_question_is_classified_again_and_the_run_completes(demo):
    """A request the planner cannot place is classified as an explanation (3 turns); the
    answer to its question names the data, so it classifies again and has the turns of
    a data question to answer it."""
    agent = Agent.objects.get(name="L1 Support Specialist")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=demo, prompt="hello there"))
    assert execution_run_segment(execution_id=execution.pk) == "awaiting_interaction"
    execution.refresh_from_db()
    from executions.services import execution_respond

    execution_respond(execution=execution, user=demo, user_response="Count the rows of tickets")
    assert execution_run_segment(execution_id=execution.pk) == "success"
    execution.refresh_from_db()
    intents = [s.output["result"]["intent_type"] for s in execution.steps.filter(
        step_type="observation", tool_name="classify_intent").order_by("step_number")]
    assert intents[0] == "PLATFORM_EXPLANATION" and intents[-1] != "PLATFORM_EXPLANATION" and len(intents) == 2
    with sqlite3.connect(demo_database_path()) as db:
        tickets = db.execute("SELECT COUNT(*) FROM tickets").fetchone()[0]
    assert execution.status == Execution.Status.COMPLETED and f"Answer: {tickets}" in execution.result["summary"]


CLOSE_PROMPT = "Close the open high-priority tickets created in the last 24 hours"


def _walk_through(admin) -> tuple[Execution, ApprovalRequest]:
    """The README's approval walk-through: the admin starts the specialist, the run
    pauses on its write-back, the approver approves, the tickets are closed."""
    expected = _expected_count()
    assert expected > 0
    agent = Agent.objects.get(name="L1 Support Specialist")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=admin, prompt=CLOSE_PROMPT))
    assert execution_run_segment(execution_id=execution.pk) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approver = get_user_model().objects.get(username="approver")
    approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert execution_run_segment(execution_id=execution.pk) == "success"
    write = execution.steps.get(step_type="observation", tool_name="write_back")
    assert write.output["result"]["rows_affected"] == expected
    assert _expected_count() == 0
    return execution, approval


def test_the_approval_walk_through_pauses_again_after_a_restart(demo):
    first_run, first_approval = _walk_through(demo)
    # Without a restart there is nothing left to close: the same prompt finds no tickets.
    assert _expected_count() == 0

    demo_seed()  # what `make run` does on its next start
    assert _expected_count() >= 5
    second_run, second_approval = _walk_through(demo)
    assert second_run.pk != first_run.pk and second_approval.pk != first_approval.pk

    # The sealer thread chains entries after their commit; the trail compared is the sealed one.
    assert audit_seal_wait()
    audit = list(AuditLogEntry.objects.order_by("pk").values_list("pk", "entry_hash"))
    assert all(entry_hash for _, entry_hash in audit)
    demo_seed()
    call_command("demo_reset", stdout=StringIO())
    # History people made stays: both runs, their approvals and the audit trail.
    runs = Execution.objects.filter(pk__in=[first_run.pk, second_run.pk], status=Execution.Status.COMPLETED)
    assert runs.count() == 2
    assert list(AuditLogEntry.objects.order_by("pk").values_list("pk", "entry_hash")) == audit
    assert set(ApprovalRequest.objects.values_list("pk", "status")) == {
        (first_approval.pk, "approved"),
        (second_approval.pk, "approved"),
    }
    assert AuditLogEntry.objects.filter(execution_id=second_run.pk).exists()
    _walk_through(demo)  # and after a reset, a third time
