"""Scheduled triggers: a cron expression in an IANA time zone, kept in django-celery-beat.

Each scheduled trigger owns one ``PeriodicTask`` (named ``trigger:<id>``, visible in
django-celery-beat's admin) on a ``CrontabSchedule`` carrying the trigger's time zone.
``schedule_sync`` keeps that row in step with the trigger (created, changed, enabled,
disabled) and ``schedule_remove`` deletes it; the trigger services call them inside
their own transaction, so the trigger and its beat entry change together.

Beat sends ``triggers.schedule_fire`` with the trigger id only. The task does not trust
beat's clock: ``schedule_slot_fire`` computes the slot itself (the latest cron slot at
or before now, in the trigger's zone, allowing ``CLOCK_SKEW_SECONDS`` for a beat whose
clock runs slightly ahead) and fires with the dedupe key ``cron:<slot in UTC, ISO>``.
The unique (trigger, dedupe_key) constraint makes a slot start at most one run, however
many beat processes sent it and however often beat restarted.

Missed slots: when the task runs later than ``RIVER_SCHEDULE_MISSED_GRACE_SECONDS`` after
the slot (River was down, the queue was stuck), that slot is not run late: it is
recorded as a ``missed`` skip (with the same dedupe key, so it is recorded once) and
the next slot runs as usual. A slot within the grace runs once, late. Slots older than
the latest one are not replayed (beat itself sends one catch-up message after a
restart, and only the latest slot is looked at).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rivercore.contracts import TriggerType
from triggers.models import Trigger, TriggerFiring
from triggers.types import ScheduledConfig

logger = logging.getLogger("river.triggers")

TASK_NAME = "triggers.schedule_fire"
CLOCK_SKEW_SECONDS = 5


def periodic_task_name(trigger_id) -> str:
    return f"trigger:{trigger_id}"


def schedule_slot_latest(*, config: ScheduledConfig, now: datetime) -> datetime:
    """The latest slot of ``config`` at or before ``now`` (to the second), in UTC."""
    zone = ZoneInfo(config.timezone)
    start = now.astimezone(zone).replace(microsecond=0) + timedelta(seconds=1)  # get_prev is strict
    return croniter(config.cron, start).get_prev(datetime).astimezone(UTC)


def schedule_slots_next(*, config: ScheduledConfig, now: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` slots of ``config`` after ``now``, as aware times in the
    trigger's zone, read by croniter as ``schedule_slot_latest`` reads them (so across a
    daylight-saving change they are the slots the task fires). Empty for an expression
    no date matches (stored before such expressions were refused)."""
    from croniter import CroniterBadDateError

    slots = croniter(config.cron, now.astimezone(ZoneInfo(config.timezone)).replace(microsecond=0))
    try:
        return [slots.get_next(datetime) for _ in range(count)]
    except CroniterBadDateError:
        return []


def schedule_sync(*, trigger: Trigger) -> None:
    """Create or update the beat entry of a scheduled trigger (enabled as the trigger is).
    Caller holds the trigger's transaction."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    if trigger.type != TriggerType.SCHEDULED:
        schedule_remove(trigger_id=trigger.pk)
        return
    config: ScheduledConfig = ScheduledConfig.model_validate(trigger.config)
    minute, hour, day_of_month, month_of_year, day_of_week = config.cron.split(" ")
    crontab, _ = CrontabSchedule.objects.get_or_create(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year,
        day_of_week=day_of_week, timezone=ZoneInfo(config.timezone),
    )
    name = periodic_task_name(trigger.pk)
    task = PeriodicTask.objects.select_for_update().filter(name=name).first() or PeriodicTask(name=name)
    task.task = TASK_NAME
    task.crontab = crontab
    task.interval = task.solar = task.clocked = None
    task.kwargs = json.dumps({"trigger_id": str(trigger.pk)})
    task.args = "[]"
    task.enabled = trigger.enabled
    task.description = f"Scheduled trigger {trigger.name} of agent {trigger.agent_id} ({config.cron} "\
                       f"{config.timezone}); managed by River, edit the trigger instead."[:1000]
    task.save()  # save() (not update()) tells every beat the schedule changed


def schedule_remove(*, trigger_id) -> None:
    """Delete the trigger's beat entry, if any, and its crontab once nothing uses it."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    for task in PeriodicTask.objects.filter(name=periodic_task_name(trigger_id)):
        crontab_id = task.crontab_id
        task.delete()
        if crontab_id and not PeriodicTask.objects.filter(crontab_id=crontab_id).exists():
            CrontabSchedule.objects.filter(pk=crontab_id).delete()


def schedule_slot_fire(*, trigger_id, now: datetime | None = None) -> TriggerFiring | None:
    """Fire the trigger for its latest slot, once. None when the trigger is gone or is
    no longer a scheduled trigger (a stale beat entry)."""
    from triggers.services import trigger_fire, trigger_firing_skip

    now = now or timezone.now()
    trigger = Trigger.objects.select_related("agent", "run_as__user").filter(pk=trigger_id).first()
    if trigger is None or trigger.type != TriggerType.SCHEDULED:
        logger.info("schedule_fire for trigger %s: no scheduled trigger any more", trigger_id)
        return None
    config: ScheduledConfig = ScheduledConfig.model_validate(trigger.config)
    slot = schedule_slot_latest(config=config, now=now + timedelta(seconds=CLOCK_SKEW_SECONDS))
    dedupe_key = f"cron:{slot.isoformat()}"
    source = f"cron:{trigger.name}"
    lateness = (now - slot).total_seconds()
    if lateness > settings.RIVER_SCHEDULE_MISSED_GRACE_SECONDS:
        with transaction.atomic():
            return trigger_firing_skip(
                trigger=trigger, source=source, reason=TriggerFiring.Reason.MISSED, dedupe_key=dedupe_key,
                detail=f"slot {slot.isoformat()} was {int(lateness)} s ago, beyond the "
                       f"{settings.RIVER_SCHEDULE_MISSED_GRACE_SECONDS} s grace; not run late",
                fired_at=now)
    payload = {"schedule": {"slot": slot.isoformat(), "cron": config.cron, "timezone": config.timezone}}
    return trigger_fire(trigger=trigger, payload=payload, source=source, dedupe_key=dedupe_key, triggered_at=slot)
