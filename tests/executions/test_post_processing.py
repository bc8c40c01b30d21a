"""Post-execution processing (spec 000 step 9): once per run; memory write-back in
its own task whose failure never changes the run; health over consecutive runs,
audited on change; outcome notifications per the agent's notification config."""

from __future__ import annotations

import logging
from unittest import mock

import pytest

from agents.models import Agent, AgentMemory
from executions import services, tasks
from executions.models import Execution
from governance.models import AuditLogEntry, Notification
from rivercore.llm import LLMError, LLMErrorKind
from telemetry.faults import infra_fault_count
from tests.factories import ScriptedLLM, make_agent, text_reply

pytestmark = pytest.mark.django_db


def finish(agent, user, *, fail: bool = False) -> Execution:
    """Drive one real run to its end: the model answers, or its provider is down."""
    reply = LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "provider down") if fail else text_reply("All good.")
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=user, prompt="Check the queue"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([reply]))
    execution.refresh_from_db()
    assert execution.status == (Execution.Status.FAILED if fail else Execution.Status.COMPLETED)
    return execution


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Queue watcher")


def test_a_finished_segment_queues_post_processing_after_commit(agent, owner, django_capture_on_commit_callbacks):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Check the queue"))

    with mock.patch.object(tasks.post_process, "delay") as delay, django_capture_on_commit_callbacks(execute=True):
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("Done.")]))

    delay.assert_called_once_with(execution.pk)


def test_post_processing_runs_exactly_once(agent, owner, django_capture_on_commit_callbacks):
    execution = finish(agent, owner)

    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.post_process(execution.pk) is True
        execution.refresh_from_db()
        first_stamp = execution.post_processed_at
        assert tasks.post_process(execution.pk) is False

    assert AgentMemory.objects.filter(execution_id=execution.pk).count() == 1
    agent.refresh_from_db()
    assert agent.consecutive_failures == 0
    execution.refresh_from_db()
    assert first_stamp is not None and execution.post_processed_at == first_stamp


def test_a_paused_run_is_not_post_processed(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Check the queue"))

    assert services.execution_post_process(execution_id=execution.pk) is False
    execution.refresh_from_db()
    assert execution.post_processed_at is None


def test_memory_write_back_stores_a_summary(agent, owner):
    execution = finish(agent, owner)

    assert services.execution_post_process(execution_id=execution.pk) is True

    memory = AgentMemory.objects.get(execution_id=execution.pk)
    assert memory.agent_id == agent.pk and memory.summary == "All good."


def test_memory_write_back_failure_leaves_the_run_completed_and_is_logged(
    agent, owner, caplog, django_capture_on_commit_callbacks
):
    execution = finish(agent, owner)
    for _ in range(2):  # two failures in a row before the success below
        services.execution_post_process(execution_id=finish(agent, owner, fail=True).pk)
    caplog.set_level(logging.ERROR, logger="river.executions")

    with mock.patch("executions.services.finish.memory_write", side_effect=RuntimeError("memory store unavailable")), \
            django_capture_on_commit_callbacks(execute=True):
        assert tasks.post_process(execution.pk) is True

    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.post_processed_at is not None
    assert not AgentMemory.objects.filter(execution_id=execution.pk).exists()
    agent.refresh_from_db()
    assert agent.consecutive_failures == 0  # the health update in the same transaction stood
    assert any("memory write-back failed" in r.getMessage() and str(execution.pk) in r.getMessage()
               for r in caplog.records)


def test_health_degrades_after_three_failures_goes_critical_at_five_and_one_success_resets(agent, owner):
    seen = []
    for _ in range(5):
        services.execution_post_process(execution_id=finish(agent, owner, fail=True).pk)
        agent.refresh_from_db()
        seen.append((agent.health, agent.consecutive_failures))

    assert seen == [
        (Agent.Health.HEALTHY, 1), (Agent.Health.HEALTHY, 2), (Agent.Health.DEGRADED, 3),
        (Agent.Health.DEGRADED, 4), (Agent.Health.CRITICAL, 5),
    ]

    services.execution_post_process(execution_id=finish(agent, owner).pk)
    agent.refresh_from_db()
    assert (agent.health, agent.consecutive_failures) == (Agent.Health.HEALTHY, 0)

    changes = AuditLogEntry.objects.filter(event_type="agent_health_changed", agent_id=agent.pk).order_by("id")
    assert [(e.details["from"], e.details["to"]) for e in changes] == [
        ("healthy", "degraded"), ("degraded", "critical"), ("critical", "healthy"),
    ]
    assert all(e.execution_id for e in changes)


def test_a_success_of_a_healthy_agent_locks_nothing(agent, owner):
    """The common case of a busy agent: its runs' post-processing never queues on its row."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    execution = finish(agent, owner)

    with CaptureQueriesContext(connection) as queries:
        assert services.execution_post_process(execution_id=execution.pk) is True

    agent_statements = [q["sql"] for q in queries if '"agents_agent"' in q["sql"]]
    assert agent_statements and not any("FOR UPDATE" in sql or sql.startswith("UPDATE") for sql in agent_statements)
    agent.refresh_from_db()
    assert (agent.health, agent.consecutive_failures) == (Agent.Health.HEALTHY, 0)


def test_cancelled_runs_do_not_count_towards_health(agent, owner):
    for _ in range(2):
        services.execution_post_process(execution_id=finish(agent, owner, fail=True).pk)
    cancelled = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Check the queue"))
    services.execution_cancel(execution=cancelled, user=owner)

    assert services.execution_post_process(execution_id=cancelled.pk) is True
    agent.refresh_from_db()
    assert (agent.health, agent.consecutive_failures) == (Agent.Health.HEALTHY, 2)
    services.execution_post_process(execution_id=finish(agent, owner, fail=True).pk)
    agent.refresh_from_db()
    assert agent.health == Agent.Health.DEGRADED


def test_outcome_notification_follows_the_agents_notification_config(
    workspace, owner, django_capture_on_commit_callbacks
):
    agent = make_agent(workspace=workspace, owner=owner, name="Noisy",
                       notification_config={"channels": ["in_app"], "notify_on": ["failed"]})
    failed = finish(agent, owner, fail=True)
    completed = finish(agent, owner)

    with django_capture_on_commit_callbacks(execute=True):
        services.execution_post_process(execution_id=failed.pk)
        services.execution_post_process(execution_id=completed.pk)

    notes = Notification.objects.filter(user=owner)
    assert [n.url for n in notes] == [f"/runs/{failed.pk}/"]
    assert "failed" in notes[0].title


def test_a_failing_outcome_notification_never_breaks_post_processing(
    workspace, owner, caplog, django_capture_on_commit_callbacks
):
    agent = make_agent(workspace=workspace, owner=owner, notification_config={"channels": ["in_app"]})
    failed = finish(agent, owner, fail=True)
    faults_before = infra_fault_count(component="notifications", operation="run outcome")

    with mock.patch("governance.notifications.notify_run_outcome", side_effect=RuntimeError("smtp down")), \
            django_capture_on_commit_callbacks(execute=True):
        assert services.execution_post_process(execution_id=failed.pk) is True

    failed.refresh_from_db()
    assert failed.status == Execution.Status.FAILED
    agent.refresh_from_db()
    assert agent.consecutive_failures == 1
    # Recorded as every after-commit failure is (telemetry.aftercommit): counted as a fault.
    assert infra_fault_count(component="notifications", operation="run outcome") == faults_before + 1


def _memory_write_queries(execution, steps: int) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from executions.models import ExecutionStep
    from executions.services.finish import memory_write

    first = 1 + max(ExecutionStep.objects.filter(execution=execution).values_list("step_number", flat=True))
    ExecutionStep.objects.bulk_create([
        ExecutionStep(execution=execution, step_number=first + n, step_type=kind, tool_name="execute_query",
                      status="failed" if kind == "observation" else "completed", error="timed out")
        for n in range(steps) for kind in ["observation", "governance_check"][n % 2:n % 2 + 1]])
    with CaptureQueriesContext(connection) as queries:
        memory = memory_write(execution_id=execution.pk)
    assert memory.learnings  # the failed observations were read
    return len(queries)


def test_memory_write_back_reads_the_steps_in_one_query_however_many(agent, owner, workspace):
    few = _memory_write_queries(finish(agent, owner), 2)
    # Another agent: the first one's memory of the same summary would be refreshed instead.
    many = _memory_write_queries(finish(make_agent(workspace=workspace, owner=owner, name="Other"), owner), 12)

    assert many == few
