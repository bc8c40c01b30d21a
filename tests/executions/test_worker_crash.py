"""Real Celery workers against the test database and Redis, killed with SIGKILL.

Each worker imports ``tests.executions.durable_support`` (``-I``), whose tools log
every call to a marker file and can be held open by the test. The model is the
router's quick-start provider (``RIVER_LLM_MODEL`` / ``RIVER_LLM_BASE_URL``)
pointed at a scripted OpenAI-compatible server in this process, so litellm's HTTP
path runs in the worker. The watchdog is the service itself, called here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.models import AgentMemory
from executions import tasks
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.services import (
    execution_start,
    executions_post_process_missed,
    executions_requeue_stale,
    person_run_request,
)
from tests.executions.durable_support import (
    TOOL_NAMES,
    ScriptServer,
    completion_text,
    completion_tool_call,
    marker_lines,
)
from tests.factories import make_agent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)
LEASE_SECONDS = 5
DEADLINE = 60.0


@pytest.fixture(autouse=True)
def _services_required():
    if not os.environ.get("REDIS_URL"):
        pytest.skip("REDIS_URL is not set: a real Celery worker needs a Redis broker")
    if connection.vendor != "postgresql":
        pytest.skip("the worker must share the test database, which needs PostgreSQL (DATABASE_URL)")


def _database_url() -> str:
    db = connection.settings_dict
    credentials = quote(db["USER"] or "", safe="")
    if db.get("PASSWORD"):
        credentials += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Workers:
    """Starts Celery workers on one private queue and stops every one it started."""

    def __init__(self, directory: Path, server: ScriptServer):
        self.directory = directory
        self.queue = f"durable-test-{uuid.uuid4().hex[:10]}"
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": _database_url(),
            "REDIS_URL": os.environ["REDIS_URL"],
            "RIVER_LEASE_SECONDS": str(LEASE_SECONDS),
            "RIVER_LLM_MODEL": "scripted-model",
            "RIVER_LLM_BASE_URL": server.base_url,
            "RIVER_LLM_API_KEY": "test-key",
            "DURABLE_MARKER_DIR": str(directory),
            "LOG_LEVEL": "INFO",
        }

    def start(self, *, wait: bool = True) -> subprocess.Popen:
        index = len(self.procs)
        log = self.directory / f"worker-{index}.log"
        celery = Path(sys.executable).parent / "celery"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(celery), "-A", "riverapp", "worker", "-P", "solo", "-c", "1", "-Q", self.queue,
                 "--without-heartbeat", "--without-mingle", "--without-gossip",
                 "-I", "tests.executions.durable_support", "-l", "info", "-n", f"durable{index}-{self.queue}@%h"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        self.logs.append(log)
        if wait:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen) -> None:
        index = self.procs.index(proc)
        wait_until(lambda: "ready." in self.log(index), f"worker {index} to be ready", self)

    def log(self, index: int) -> str:
        return self.logs[index].read_text(errors="replace")

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)

    def crashed(self) -> bool:
        return any("raised unexpected" in self.log(i) for i in range(len(self.logs)))

    def tails(self) -> str:
        return "\n".join(f"--- worker {i} ---\n{self.log(i)[-3000:]}" for i in range(len(self.logs)))


def wait_until(predicate, what: str, workers: Workers | None = None, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if workers is not None and workers.crashed():
            raise AssertionError(f"a task failed in a worker while waiting for {what}\n{workers.tails()}")
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    detail = workers.tails() if workers else ""
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{detail}")


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=list(TOOL_NAMES), action_level="automated")


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """A scripted model, marker files and a worker pool on a private queue; the
    services' ``run_segment.delay`` is routed to that queue."""

    def start(script: list[dict]):
        server = ScriptServer(script).__enter__()
        workers = Workers(tmp_path, server)
        monkeypatch.setattr(
            tasks.run_segment, "delay",
            lambda execution_id: tasks.run_segment.apply_async(args=[execution_id], queue=workers.queue),
        )
        started.append((server, workers))
        return server, workers

    started: list[tuple[ScriptServer, Workers]] = []
    yield start
    for server, workers in started:
        workers.stop_all()
        server.__exit__(None, None, None)


def _lease_expired(execution_id: int) -> bool:
    row = Execution.objects.get(pk=execution_id)
    return row.lease_expires_at is not None and row.lease_expires_at < timezone.now()


def _watchdog_requeues(execution_id: int, workers: Workers) -> None:
    wait_until(lambda: _lease_expired(execution_id), "the dead worker's lease to expire", workers,
               timeout=LEASE_SECONDS * 4)
    assert executions_requeue_stale() == [execution_id]


def _finished(execution_id: int) -> Execution | None:
    row = Execution.objects.get(pk=execution_id)
    return row if row.is_terminal else None


def _assert_steps_contiguous(execution_id: int) -> list[int]:
    numbers = list(ExecutionStep.objects.filter(execution_id=execution_id).order_by("step_number")
                   .values_list("step_number", flat=True))
    assert numbers == list(range(1, len(numbers) + 1))
    return numbers


def test_killed_workers_resume_without_repeating_a_write(agent, owner, run_env, tmp_path):
    server, workers = run_env([
        completion_tool_call("durable_slow_read", {"marker": "r1"}, "call_r1"),
        completion_tool_call("durable_write", {"marker": "w1"}, "call_w1"),
        completion_text("Done: read r1 and wrote w1."),
    ])
    (tmp_path / "hold-durable_slow_read").touch()
    (tmp_path / "hold-durable_write").touch()

    first = workers.start()
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="read, then write"))

    # Kill 1: during the read (nothing about turn 1 is committed yet).
    wait_until(lambda: marker_lines(tmp_path, "durable_slow_read"), "the read to start", workers)
    workers.kill(first)
    (tmp_path / "hold-durable_slow_read").unlink()
    second = workers.start(wait=False)  # starts while the dead worker's lease runs out
    _watchdog_requeues(execution.pk, workers)

    # Kill 2: during the write, after its intent was committed.
    wait_until(lambda: marker_lines(tmp_path, "durable_write"), "the write to start", workers)
    intent = ExecutionStep.objects.get(execution=execution, call_id="call_w1", step_type="tool_call")
    assert intent.status == "pending"
    workers.kill(second)
    (tmp_path / "hold-durable_write").unlink()
    workers.start(wait=False)
    _watchdog_requeues(execution.pk, workers)

    finished = wait_until(lambda: _finished(execution.pk), "the run to finish", workers)
    assert finished.status == Execution.Status.COMPLETED, workers.tails()
    assert finished.attempts == 3

    reads = marker_lines(tmp_path, "durable_slow_read")
    writes = marker_lines(tmp_path, "durable_write")
    assert len(reads) == 2  # the read was re-run by the second worker
    assert {line.split()[2] for line in reads} == {str(first.pid), str(second.pid)}
    assert writes == [f"durable_write w1 {second.pid}"]  # the write's side effect happened once

    _assert_steps_contiguous(execution.pk)
    steps = ExecutionStep.objects.filter(execution=execution)
    assert steps.filter(call_id="call_r1", step_type="observation").count() == 1
    assert steps.filter(call_id="call_w1", step_type="tool_call").count() == 1
    unknown = steps.get(call_id="call_w1", step_type="observation")
    assert unknown.output["error"]["code"] == "OUTCOME_UNKNOWN"
    assert any("outcome of durable_write is unknown" in m for m in server.tool_messages_seen())
    assert steps.get(step_type="final_answer").output["answer"] == "Done: read r1 and wrote w1."
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1

    # The run ended on the last worker's run host, which post-processes it there (no
    # message to a queue): once, so the watchdog finds nothing left to do.
    wait_until(lambda: Execution.objects.filter(pk=execution.pk, post_processed_at__isnull=False).exists(),
               "the run host to post-process the run", workers)
    assert executions_post_process_missed(grace_seconds=0) == []
    # The write's outcome is unknown and nothing else was written: the run did not surely
    # do the job (rivercore.outcome), so it leaves no memory.
    assert finished.outcome == "no_answer"
    assert AgentMemory.objects.filter(execution_id=execution.pk).count() == 0


def test_two_workers_given_the_same_execution_run_it_once(agent, owner, run_env, tmp_path):
    _server, workers = run_env([
        completion_tool_call("durable_slow_read", {"marker": "r1"}, "call_r1"),
        completion_text("Done."),
    ])
    (tmp_path / "hold-durable_slow_read").touch()
    pair = [workers.start(wait=False), workers.start(wait=False)]
    for proc in pair:
        workers.wait_ready(proc)

    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="read once"))
    wait_until(lambda: marker_lines(tmp_path, "durable_slow_read"), "the read to start", workers)
    holder_pid = marker_lines(tmp_path, "durable_slow_read")[0].split()[2]
    duplicate = tasks.run_segment.apply_async(args=[execution.pk], queue=workers.queue)
    done_line = f"executions.run_segment[{duplicate.id}] succeeded"

    def taker() -> int | None:
        return next((i for i in range(len(workers.procs)) if done_line in workers.log(i)), None)

    # Either worker may take it: the holder's process is free too once its task has
    # handed the run to its run host (Redis serves whichever worker asks first).
    wait_until(lambda: taker() is not None, "a worker to take the duplicate", workers)
    index = taker()
    assert holder_pid in {str(proc.pid) for proc in workers.procs}
    returned = workers.log(index).split(done_line, 1)[1].splitlines()[0]
    # Handed to that worker's run host, whose claim found the lease held: it ran nothing
    # (the read ran once, and the run was claimed once: attempts 1, below).
    assert returned.endswith(": 'hosted'"), returned
    (tmp_path / "hold-durable_slow_read").unlink()

    finished = wait_until(lambda: _finished(execution.pk), "the run to finish", workers)
    assert finished.status == Execution.Status.COMPLETED, workers.tails()
    assert finished.attempts == 1
    assert len(marker_lines(tmp_path, "durable_slow_read")) == 1
    _assert_steps_contiguous(execution.pk)
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1
