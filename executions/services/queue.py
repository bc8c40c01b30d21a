"""Sending a committed run's task messages (``telemetry.aftercommit``). A broker that is
down never fails the caller: the row is the record, and the watchdog sends the message
again (a failed publish must not turn a committed start into a 500)."""

from __future__ import annotations

import logging

from celery import current_app
from django.db import DatabaseError, InterfaceError, transaction
from django.utils import timezone

from executions.journal import step_row
from executions.models import Execution, ExecutionStep
from executions.runhost import run_host
from rivercore.contracts import Step
from rivercore.errors import Conflict
from telemetry.aftercommit import task_send, task_send_on_commit
from telemetry.faults import infra_fault_record

logger = logging.getLogger("river.executions")

# The tasks these services send (``executions.tasks``, registered when the app is ready).
# They are found by name, so the services never import the module that calls them.
RUN_SEGMENT_TASK = "executions.run_segment"
POST_PROCESS_TASK = "executions.post_process"


def _task(name: str):
    return current_app.tasks[name]


def segment_send(execution_id: int) -> bool:
    """Send the run's segment now (the watchdog's re-send); False when the broker
    refused it (counted and logged, never raised)."""
    return task_send(_task(RUN_SEGMENT_TASK), execution_id, subject=f"execution {execution_id}")


def segment_queue_on_commit(execution_id: int) -> None:
    """After commit, send the run's segment. The caller set ``published_at`` in the
    same transaction; if the send fails it is cleared, so the watchdog's next pass
    sends it again instead of waiting out the grace period."""
    def unpublished() -> None:
        try:
            Execution.objects.filter(pk=execution_id, status=Execution.Status.QUEUED).update(published_at=None)
        except (DatabaseError, InterfaceError) as exc:  # the grace period covers it
            infra_fault_record(component="database", operation="mark unpublished", exc=exc,
                               subject=f"execution {execution_id}")

    task_send_on_commit(_task(RUN_SEGMENT_TASK), execution_id, subject=f"execution {execution_id}",
                        on_failure=unpublished)


def post_process_queue_on_commit(execution_id: int) -> None:
    """After commit, post-process the run: on this process's run host when it has one
    (a run that ended in a worker process, with no broker round trip), else by sending
    ``post_process``. If either is lost (the broker down, the process killed), the
    watchdog's ``executions_post_process_missed`` does it after the grace period."""
    host = run_host()
    if host is not None:
        transaction.on_commit(lambda: host.post_process(execution_id))
    else:
        task_send_on_commit(_task(POST_PROCESS_TASK), execution_id, subject=f"execution {execution_id}")


def steps_append_and_requeue(*, execution: Execution, expected_status: str, new_steps: list[Step]) -> None:
    """Caller holds the execution row lock (select_for_update)."""
    if execution.status != expected_status:
        raise Conflict(f"Execution is {execution.status}, not {expected_status}.", code="invalid_state")
    ExecutionStep.objects.bulk_create([step_row(execution.pk, s) for s in new_steps])
    execution.status = Execution.Status.QUEUED
    # ``queued_at`` is when the run was first queued and never moves (the runs list and
    # "runs today" count from it); the watchdog's lost-message rule counts from ``published_at``.
    execution.published_at = timezone.now()
    execution.save(update_fields=["status", "published_at"])
    segment_queue_on_commit(execution.pk)
