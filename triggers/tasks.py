"""Celery entry points of triggers: each takes ids, calls one service, and is safe to run twice."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="triggers.schedule_fire", acks_late=True)
def schedule_fire(trigger_id: str) -> int | None:
    """Sent by celery beat (the trigger's PeriodicTask). The slot is computed here from
    the trigger's cron and zone, so two beats or a restarted beat fire a slot once."""
    from triggers.schedule import schedule_slot_fire

    firing = schedule_slot_fire(trigger_id=trigger_id)
    return firing.execution_id if firing is not None else None


@shared_task(name="triggers.pipeline_handoff", acks_late=True)
def pipeline_handoff(handoff_id: int) -> int | None:
    from triggers.pipelines import pipeline_handoff_process

    firing = pipeline_handoff_process(handoff_id=handoff_id)
    return firing.execution_id if firing is not None else None


@shared_task(name="triggers.pipeline_handoffs_retry")
def pipeline_handoffs_retry() -> int:
    """Periodic: pending hand-offs whose task was lost or whose attempt failed."""
    from triggers.pipelines import pipeline_handoffs_retry as retry

    return retry()


@shared_task(name="triggers.metrics_prune")
def metrics_prune() -> int:
    """Periodic: metric samples older than RIVER_METRIC_RETENTION_HOURS."""
    from triggers.metrics import metrics_prune as prune

    return prune()
