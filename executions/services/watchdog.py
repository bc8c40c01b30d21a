"""The watchdog's passes: re-send runs no worker will pick up, end those out of
attempts, and post-process finished runs whose task was lost."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from executions.models import Execution
from executions.services.finish import execution_post_process, gave_up_message, run_end_failed
from executions.services.queue import segment_send
from telemetry.metrics import watchdog_recovery_record

logger = logging.getLogger("river.executions")

def executions_requeue_stale(*, grace_seconds: int | None = None) -> list[int]:
    """Send the segment of every run no worker will otherwise pick up; returns their ids.

    - running with an expired lease: its worker died or lost the database;
    - queued: its message was never sent (a failed send) or is lost (Redis restarted
      without persistence, a worker was killed holding it).

    ``published_at`` is when a message was last sent and is cleared by the claim that
    consumes it, so each such run is sent once, and again only when that message is
    older than the grace without having been claimed.

    A run that already used ``RIVER_MAX_SEGMENT_ATTEMPTS`` claims is ended ``failed``
    here instead, with its ``run_completed`` event and post-processing. Sending twice
    is harmless: only the compare-and-set claim runs a segment.
    """
    grace = settings.RIVER_WATCHDOG_GRACE_SECONDS if grace_seconds is None else grace_seconds
    now = timezone.now()
    unclaimed = Q(published_at__isnull=True) | Q(published_at__lt=now - timedelta(seconds=grace))
    orphaned = Q(status=Execution.Status.RUNNING, lease_expires_at__lt=now) | Q(status=Execution.Status.QUEUED)
    candidates = list(Execution.objects.filter(orphaned & unclaimed).values_list("pk", "attempts")[:500])
    exhausted = [pk for pk, attempts in candidates if attempts >= settings.RIVER_MAX_SEGMENT_ATTEMPTS]
    for execution_id in exhausted:
        _watchdog_step("fail", execution_fail_exhausted, execution_id)
    stale = [pk for pk, attempts in candidates if attempts < settings.RIVER_MAX_SEGMENT_ATTEMPTS]
    if not stale:
        return []
    # Same conditions again: a run claimed since the select keeps published_at NULL.
    Execution.objects.filter(orphaned & unclaimed, pk__in=stale).update(published_at=now)
    sent = [execution_id for execution_id in stale if segment_send(execution_id)]
    watchdog_recovery_record(action="requeued", count=len(sent))
    logger.warning("watchdog re-sent %d of %d stale execution(s): %s", len(sent), len(stale), stale[:20])
    return stale


def _watchdog_step(what: str, service, execution_id: int) -> bool:
    """One run's step of a watchdog pass; a run that keeps failing it is logged and
    never stops the pass for the others."""
    try:
        return service(execution_id=execution_id)
    except Exception:  # noqa: BLE001 - logged with its traceback; the next pass tries again
        logger.exception("watchdog could not %s execution %s", what, execution_id)
        return False


def execution_fail_exhausted(*, execution_id: int) -> bool:
    """The watchdog ends a run that is out of segment attempts and that no worker
    holds (lease expired, or queued). Returns whether it ended it."""
    now = timezone.now()
    with transaction.atomic():
        row = Execution.objects.select_for_update().defer("context").filter(pk=execution_id).first()
        if row is None or row.attempts < settings.RIVER_MAX_SEGMENT_ATTEMPTS:
            return False
        held = row.status == Execution.Status.RUNNING and row.lease_expires_at is not None \
            and row.lease_expires_at >= now
        if row.status not in (Execution.Status.RUNNING, Execution.Status.QUEUED) or held:
            return False
        run_end_failed(row, code="INFRASTRUCTURE_ERROR", message=gave_up_message(row.attempts, row.infra_error))
    logger.warning("watchdog failed execution %s: out of segment attempts", execution_id)
    watchdog_recovery_record(action="failed_exhausted")
    return True


def executions_post_process_missed(*, grace_seconds: int | None = None, limit: int = 200) -> list[int]:
    """Post-process finished runs whose ``post_process`` message was lost (broker down
    at commit, Redis restarted, worker killed). The claim inside makes it once only."""
    grace = settings.RIVER_WATCHDOG_GRACE_SECONDS if grace_seconds is None else grace_seconds
    missed = list(
        Execution.objects.filter(
            status__in=Execution.TERMINAL, post_processed_at__isnull=True,
            finished_at__lt=timezone.now() - timedelta(seconds=grace),
        ).order_by("finished_at").values_list("pk", flat=True)[:limit]
    )
    done = [execution_id for execution_id in missed
            if _watchdog_step("post-process", execution_post_process, execution_id)]
    if done:
        logger.warning("watchdog post-processed %d finished execution(s) whose task was lost: %s",
                       len(done), done[:20])
    return done


def executions_resume_waiting_parents(*, grace_seconds: int | None = None, limit: int = 200) -> list[int]:
    """Resume runs still ``awaiting_child`` whose child ended and was post-processed more
    than the grace ago: the child's run-end handler failed (it is logged and rolled back
    to its savepoint, never blocking the child's end). Returns the resumed parents' ids;
    the compare-and-set in ``delegation_resume`` makes a resume once only."""
    from executions.services.delegation import delegation_resume

    grace = settings.RIVER_WATCHDOG_GRACE_SECONDS if grace_seconds is None else grace_seconds
    waiting = Execution.objects.filter(status=Execution.Status.AWAITING_CHILD).values("pk")
    ended = list(
        Execution.objects.filter(parent_execution_id__in=waiting, status__in=Execution.TERMINAL,
                                 post_processed_at__lt=timezone.now() - timedelta(seconds=grace))
        .exclude(parent_call_id="").values_list("pk", "parent_execution_id")[:limit]
    )
    resumed = [parent_id for child_id, parent_id in ended if _watchdog_step(
        "resume the parent of", lambda execution_id: delegation_resume(child_execution_id=execution_id), child_id)]
    if resumed:
        logger.warning("watchdog resumed %d run(s) whose delegated run had ended: %s", len(resumed), resumed[:20])
    return resumed
