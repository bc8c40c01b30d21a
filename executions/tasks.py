"""Celery entry points: each takes ids, calls one service, and is safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger("river.executions")


@shared_task(name="executions.run_segment", acks_late=True, reject_on_worker_lost=True)
def run_segment(execution_id: int) -> str | None:
    """In a worker process with a run host, hand the segment to it and return (the run
    goes on without holding this process); elsewhere, run it here."""
    from executions.runhost import run_host
    from executions.services import execution_run_segment
    from executions.services.segment import execution_host_segment

    host = run_host()
    if host is not None:
        return "hosted" if execution_host_segment(execution_id=execution_id, host=host) else None
    return execution_run_segment(execution_id=execution_id)


@shared_task(name="executions.watchdog")
def watchdog() -> int:
    """Periodic: re-send the runs no worker will pick up (or fail those out of
    attempts), then post-process finished runs whose task was lost."""
    from executions.services import executions_post_process_missed, executions_requeue_stale

    requeued = executions_requeue_stale()
    return len(requeued) + len(executions_post_process_missed())


@shared_task(name="executions.post_process", acks_late=True)
def post_process(execution_id: int) -> bool:
    from executions.services import execution_post_process

    return execution_post_process(execution_id=execution_id)


@shared_task(name="executions.expire_approvals")
def expire_approvals() -> int:
    """Periodic: remind approvers of requests about to expire, then expire the overdue
    ones (their runs end ``approval_expired``). Returns how many expired."""
    from django.conf import settings

    from executions.services import approvals_expire_due
    from governance.approvals import approvals_remind_due

    approvals_remind_due(before_minutes=settings.RIVER_APPROVAL_REMINDER_MINUTES)
    return approvals_expire_due()
