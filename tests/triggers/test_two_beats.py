"""Two real celery beat processes (database scheduler) send the same cron slot of a
scheduled trigger; a real worker runs both messages; one run starts.

The beat entry's ``last_run_at`` is set a few minutes back, so each beat sends the slot
it finds overdue at its first tick (the catch-up message beat sends after a restart)
instead of the test waiting for the next minute boundary. The worker starts once both
messages are in the queue, so the test also checks that each beat's message landed
there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from executions.models import Execution
from tests.executions.test_worker_crash import _database_url, wait_until
from triggers.models import TriggerFiring
from triggers.schedule import periodic_task_name

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)
CELERY = Path(sys.executable).parent / "celery"


def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([str(CELERY), "-A", "riverapp", *args], cwd=ROOT, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115 - closed with the process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_two_beat_processes_sending_one_slot_start_one_run(make_trigger, tmp_path):
    if not os.environ.get("REDIS_URL") or connection.vendor != "postgresql":
        pytest.skip("real beat and worker processes need Redis and the PostgreSQL test database")
    queue = f"beat-test-{uuid.uuid4().hex[:10]}"
    trigger = make_trigger(name="every-minute", trigger_type="scheduled", config={"cron": "* * * * *"})
    entry = PeriodicTask.objects.get(name=periodic_task_name(trigger.pk))
    entry.queue = queue  # a private queue: only this test's worker reads it
    entry.last_run_at = timezone.now() - timedelta(minutes=3)  # overdue: both beats send at their first tick
    entry.save()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.triggers.beat_settings", "DATABASE_URL": _database_url(),
           "LOG_LEVEL": "INFO"}
    # Leave half a minute before the next boundary, so the worker runs both messages in one slot.
    while datetime.now(UTC).second > 30:
        time.sleep(0.5)
    beats = [_start(["beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler", "-l", "info",
                     "--pidfile", str(tmp_path / f"beat{i}.pid"), "-s", str(tmp_path / f"beat{i}.db")],
                    tmp_path / f"beat{i}.log", env) for i in (1, 2)]
    worker = None
    logs = [tmp_path / "beat1.log", tmp_path / "beat2.log"]
    sent = f"Sending due task {periodic_task_name(trigger.pk)}"
    broker = redis.Redis.from_url(os.environ["REDIS_URL"])

    def tails() -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                         for log in (*logs, tmp_path / "worker.log") if log.exists())

    def sends() -> int:
        return sum(log.read_text(errors="replace").count(sent) for log in logs)

    try:
        try:
            # Beat logs a send just before it publishes: wait for the messages too, so
            # stopping a beat cannot cut a publish short.
            wait_until(lambda: all(sent in log.read_text(errors="replace") for log in logs)
                       and broker.llen(queue) >= sends(), "both beats to send the slot into the queue", timeout=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {broker.llen(queue)} queued, {broker.llen('celery')} in the default "
                                 f"queue\n{tails()}") from None
        for beat in beats:
            _stop(beat)
        sent_count = sends()
        assert sent_count >= 2
        queued = broker.llen(queue)
        assert queued == sent_count, f"{sent_count} sends but {queued} messages in {queue} " \
                                     f"({broker.llen('celery')} in the default queue)\n{tails()}"
        worker = _start(["worker", "-P", "prefork", "-c", "2", "-Q", queue, "--without-heartbeat",
                         "--without-mingle", "--without-gossip", "-l", "info", "-n", f"{queue}@%h"],
                        tmp_path / "worker.log", env)
        try:
            wait_until(lambda: TriggerFiring.objects.filter(trigger=trigger).count() >= sent_count,
                       "the worker to run every message", timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{tails()}") from None
    finally:
        for process in (*beats, worker):
            if process is not None:
                _stop(process)
        broker.delete("celery", queue)  # the runs' own unsent messages
    firings = list(TriggerFiring.objects.filter(trigger=trigger))
    started = [f for f in firings if f.outcome == "started"]
    slots = {f.dedupe_key for f in started}
    # One run per slot however many beats sent it (a slow start may let both also send the next minute).
    assert len(started) == len(slots) and all(k.startswith("cron:") for k in slots)
    assert len(started) < sent_count  # at least two messages met in one slot
    assert sum(f.reason == "duplicate" for f in firings) == sent_count - len(started)
    assert Execution.objects.filter(trigger_id=trigger.pk).count() == len(started)
