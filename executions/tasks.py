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
    attempts), post-process finished runs whose task was lost, and resume runs whose
    delegated run ended without resuming them."""
    from executions.services import (
        executions_post_process_missed,
        executions_requeue_stale,
        executions_resume_waiting_parents,
    )

    requeued = executions_requeue_stale()
    return len(requeued) + len(executions_post_process_missed()) + len(executions_resume_waiting_parents())


@shared_task(name="executions.post_process", acks_late=True)
def post_process(execution_id: int) -> bool:
    from executions.services import execution_post_process

    return execution_post_process(execution_id=execution_id)




@shared_task(name="executions.model_calls_prune")
def model_calls_prune() -> int:
    """Periodic: forget the recorded model calls of runs older than the retention."""
    from django.conf import settings

    from executions.modelcalls import model_calls_prune as prune

    return prune(days=settings.RIVER_MODEL_CALL_RETENTION_DAYS)


@shared_task(name="executions.policy_backtest", acks_late=True)
def policy_backtest(backtest_id: int) -> str | None:
    """Run a policy or auto-approve backtest (docs/changing-safely.md); claimed with a
    compare-and-set, so a second delivery returns None."""
    from executions.backtest import backtest_run

    return backtest_run(backtest_id=backtest_id)


@shared_task(name="executions.evaluate_version", acks_late=True)
def evaluate_version(evaluation_id: str) -> str | None:
    """Replay an agent version over its test set and recent runs (docs/changing-safely.md);
    only the worker that claims the queued evaluation does the work."""
    from executions.services.evaluation import evaluation_run

    return evaluation_run(evaluation_id=evaluation_id)
@shared_task(name="executions.canaries_check")
def canaries_check() -> dict:
    """Periodic: compare every running canary with its agent's deployed version and roll
    back those that do worse beyond their margin (docs/changing-safely.md)."""
    from executions.canary import canaries_check as check

    return check()
