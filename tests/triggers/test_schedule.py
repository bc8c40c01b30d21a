"""Scheduled triggers: a beat entry per trigger kept in step with it, and a cron slot
that fires once however many beats send it, computed by the task from the trigger's
cron and zone; a slot the task reaches too late is recorded as missed."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import override_settings
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from executions.models import Execution
from executions.services.load import request_build
from triggers import tasks
from triggers.models import TriggerFiring
from triggers.schedule import TASK_NAME, periodic_task_name, schedule_slot_fire, schedule_slot_latest
from triggers.services import trigger_delete, trigger_update
from triggers.types import ScheduledConfig

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")
WEEKDAYS_8AM = {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"}
MONDAY_8AM = datetime(2026, 3, 2, 8, 0, tzinfo=BERLIN)  # 07:00 UTC (winter time)


@pytest.fixture
def scheduled(make_trigger):
    return make_trigger(name="daily-8am", trigger_type="scheduled", prompt="Morning report {{ payload.schedule.slot }}",
                        config=WEEKDAYS_8AM)


def beat_entry(trigger) -> PeriodicTask:
    return PeriodicTask.objects.select_related("crontab").get(name=periodic_task_name(trigger.pk))


def test_a_scheduled_trigger_gets_a_beat_entry_with_its_cron_and_time_zone(scheduled):
    entry = beat_entry(scheduled)
    crontab = entry.crontab
    assert entry.task == TASK_NAME and entry.enabled
    assert json.loads(entry.kwargs) == {"trigger_id": str(scheduled.pk)}
    assert (crontab.minute, crontab.hour, crontab.day_of_month, crontab.month_of_year, crontab.day_of_week) == (
        "0", "8", "*", "*", "1-5")
    assert str(crontab.timezone) == "Europe/Berlin"


def test_the_beat_entry_follows_the_trigger_through_edit_disable_and_delete(scheduled, owner):
    trigger_update(actor=owner, trigger=scheduled, config={"cron": "30 6 * * *", "timezone": "America/New_York"})
    entry = beat_entry(scheduled)
    assert (entry.crontab.minute, entry.crontab.hour, str(entry.crontab.timezone)) == ("30", "6", "America/New_York")
    assert not CrontabSchedule.objects.filter(hour="8", day_of_week="1-5").exclude(
        periodictask__isnull=True).exists()

    trigger_update(actor=owner, trigger=scheduled, enabled=False)
    assert beat_entry(scheduled).enabled is False
    trigger_update(actor=owner, trigger=scheduled, enabled=True)
    assert beat_entry(scheduled).enabled is True

    crontab_id = beat_entry(scheduled).crontab_id
    trigger_delete(trigger=scheduled)
    assert not PeriodicTask.objects.filter(name=periodic_task_name(scheduled.pk)).exists()
    assert not CrontabSchedule.objects.filter(pk=crontab_id).exists()  # no other entry used it


def test_other_trigger_types_have_no_beat_entry(make_trigger):
    trigger = make_trigger(name="by-hand")
    assert not PeriodicTask.objects.filter(name=periodic_task_name(trigger.pk)).exists()


def test_the_api_creates_the_beat_entry_and_refuses_a_bad_cron(api_client_for, owner, workspace, active_agent):
    client = api_client_for(owner)
    response = client.post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(active_agent.pk), "name": "nightly", "type": "schedule",
        "config": {"cron": "0 2 * * *", "timezone": "Asia/Tokyo"}}, format="json")
    assert response.status_code == 201, response.content
    entry = PeriodicTask.objects.get(name=periodic_task_name(response.json()["id"]))
    assert str(entry.crontab.timezone) == "Asia/Tokyo" and entry.enabled

    response = client.post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(active_agent.pk), "name": "broken", "type": "schedule",
        "config": {"cron": "0 25 * * *", "timezone": "Europe/Berlin"}}, format="json")
    assert response.status_code == 400
    assert "config.cron" in response.json()["error"]["details"]
    assert PeriodicTask.objects.filter(task=TASK_NAME).count() == 1


def test_the_slot_is_the_latest_cron_time_in_the_trigger_zone():
    config = ScheduledConfig(cron="0 8 * * 1-5", timezone="Europe/Berlin")
    assert schedule_slot_latest(config=config, now=MONDAY_8AM) == datetime(2026, 3, 2, 7, 0, tzinfo=UTC)
    assert schedule_slot_latest(config=config, now=MONDAY_8AM + timedelta(minutes=5)) == datetime(
        2026, 3, 2, 7, 0, tzinfo=UTC)
    # A second before: Friday's slot.
    assert schedule_slot_latest(config=config, now=MONDAY_8AM - timedelta(seconds=1)) == datetime(
        2026, 2, 27, 7, 0, tzinfo=UTC)
    # Summer time: 08:00 in Berlin is 06:00 UTC after the last Sunday of March.
    assert schedule_slot_latest(config=config, now=datetime(2026, 3, 30, 8, 1, tzinfo=BERLIN)) == datetime(
        2026, 3, 30, 6, 0, tzinfo=UTC)


def test_the_task_fires_the_current_slot_once_with_the_normalized_request(scheduled):
    firing = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(seconds=2))

    assert firing.outcome == "started" and firing.dedupe_key == "cron:2026-03-02T07:00:00+00:00"
    execution = Execution.objects.get(pk=firing.execution_id)
    assert (execution.trigger_type, execution.trigger_source, execution.trigger_id) == (
        "scheduled", "cron:daily-8am", scheduled.pk)
    assert execution.input_prompt == "Morning report 2026-03-02T07:00:00+00:00"
    context = request_build(execution).trigger_context
    assert context.triggered_at == datetime(2026, 3, 2, 7, 0, tzinfo=UTC)
    assert context.triggered_by == str(scheduled.run_as.user_id)
    assert context.trigger_payload == {"schedule": {"slot": "2026-03-02T07:00:00+00:00", "cron": "0 8 * * 1-5",
                                                    "timezone": "Europe/Berlin"}}


def test_a_restarted_beat_sending_the_slot_again_starts_nothing_new(scheduled):
    schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(seconds=1))
    again = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(minutes=3))

    assert (again.outcome, again.reason) == ("skipped", "duplicate")
    assert Execution.objects.filter(trigger_id=scheduled.pk).count() == 1


def test_a_beat_whose_clock_runs_a_little_ahead_fires_the_coming_slot(scheduled):
    firing = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM - timedelta(seconds=2))
    assert firing.outcome == "started" and firing.dedupe_key == "cron:2026-03-02T07:00:00+00:00"


@override_settings(RIVER_SCHEDULE_MISSED_GRACE_SECONDS=600)
def test_a_slot_reached_within_the_grace_runs_once_late(scheduled):
    firing = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(minutes=9))
    assert firing.outcome == "started"


@override_settings(RIVER_SCHEDULE_MISSED_GRACE_SECONDS=600)
def test_a_slot_missed_while_river_was_down_is_recorded_not_run_and_the_next_one_runs(scheduled):
    missed = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(hours=3))

    assert (missed.outcome, missed.reason, missed.execution_id) == ("skipped", "missed", None)
    assert missed.dedupe_key == "cron:2026-03-02T07:00:00+00:00" and "not run late" in missed.detail
    assert schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(hours=4)).reason == "duplicate"
    assert not Execution.objects.exists()

    tuesday = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(days=1, seconds=1))
    assert tuesday.outcome == "started" and tuesday.dedupe_key == "cron:2026-03-03T07:00:00+00:00"


def test_a_beat_entry_outliving_its_trigger_does_nothing(scheduled):
    trigger_id = scheduled.pk
    trigger_delete(trigger=scheduled)
    assert schedule_slot_fire(trigger_id=trigger_id) is None
    assert not TriggerFiring.objects.exists()


def test_a_disabled_scheduled_trigger_records_a_disabled_skip(scheduled, owner):
    trigger_update(actor=owner, trigger=scheduled, enabled=False)
    firing = schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM)
    assert (firing.outcome, firing.reason) == ("skipped", "disabled")


@pytest.mark.django_db(transaction=True)
def test_two_beats_sending_the_same_slot_at_once_start_one_run(make_trigger):
    """Two beat processes send the task for the same slot; four workers run it at the
    same moment (the task itself, each on its own connection)."""
    trigger = make_trigger(name="every-minute", trigger_type="scheduled", config={"cron": "* * * * *"})
    barrier = threading.Barrier(4)

    def worker():
        try:
            barrier.wait()
            tasks.schedule_fire(str(trigger.pk))
        finally:
            connection.close()

    # One clock for all four, so a minute boundary cannot fall between them.
    frozen = datetime.now(UTC).replace(second=20)
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"), \
            mock.patch("django.utils.timezone.now", return_value=frozen):
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    outcomes = sorted(f.reason or f.outcome for f in TriggerFiring.objects.filter(trigger=trigger))
    assert outcomes == ["duplicate", "duplicate", "duplicate", "started"]
    assert Execution.objects.filter(trigger_id=trigger.pk).count() == 1


@override_settings(RIVER_SCHEDULE_MISSED_GRACE_SECONDS=60)
def test_the_agent_page_and_the_firings_api_show_a_missed_slot(scheduled, active_agent, member, api_client_for):
    from django.test import Client

    schedule_slot_fire(trigger_id=scheduled.pk, now=MONDAY_8AM + timedelta(hours=1))
    client = Client()
    client.force_login(member)
    page = client.get(f"/agents/{active_agent.pk}/").content.decode()
    assert "Schedule slot missed" in page and "cron:daily-8am" in page
    body = api_client_for(member).get(f"/api/v1/triggers/{scheduled.pk}/firings/").json()
    rows = body["results"] if isinstance(body, dict) else body
    assert [(r["outcome"], r["reason"]) for r in rows] == [("skipped", "missed")]
