"""Many runs in one worker process (executions.runhost): runs waiting on their model
hold no thread and no database connection of their own, and all complete, with their
steps committed, once the model answers. Synchronised with events, never with sleeps."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from executions import tasks
from executions.models import Execution
from executions.runhost import RunHost, leases_renew
from executions.services import execution_run_segment, execution_start, person_run_request
from executions.services.segment import execution_host_segment
from rivercore.contracts import StepType
from tests.factories import ScriptedLLM, make_agent, text_reply

RUNS = 50
pytestmark = pytest.mark.django_db(transaction=True)


class GatedModel:
    """An async model port: every call waits on one gate, opened by the test."""

    def __init__(self, expected: int):
        self.expected = expected
        self.waiting = 0
        self.all_waiting = threading.Event()
        self.lock = threading.Lock()
        self.gate: asyncio.Event | None = None

    async def acomplete(self, **request):
        if self.gate is None:
            self.gate = asyncio.Event()  # created on the host's loop, where it is awaited
        with self.lock:
            self.waiting += 1
            if self.waiting == self.expected:
                self.all_waiting.set()
        await self.gate.wait()
        return text_reply("Done.")

    def complete(self, **request):  # the engine prefers acomplete; this must never be used
        raise AssertionError("a hosted run called the blocking model port")


def _backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


@pytest.fixture
def quiet_broker(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda execution_id: None)


def test_fifty_waiting_runs_share_one_process_without_threads_or_connections(
    workspace, owner, quiet_broker, monkeypatch
):
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL backends")
    agent = make_agent(workspace=workspace, owner=owner)
    model = GatedModel(RUNS)
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda execution: model)
    runs = [execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt=f"question {i}")) for i in range(RUNS)]
    host = RunHost(capacity=RUNS)
    threads_before = threading.active_count()
    backends_before = _backends()

    for run in runs:
        assert execution_host_segment(execution_id=run.pk, host=host) is True
    assert model.all_waiting.wait(timeout=120), f"only {model.waiting} of {RUNS} runs reached their model call"

    # All fifty are in flight on one loop, each parked on its model call.
    assert host.in_flight == RUNS
    assert Execution.objects.filter(pk__in=[r.pk for r in runs], status=Execution.Status.RUNNING).count() == RUNS
    # No thread per run: the host's loop thread and its one I/O thread (asgiref's).
    assert threading.active_count() - threads_before <= 3
    # No connection per run: the host's I/O thread holds one for all of them.
    assert _backends() - backends_before <= 2
    # One statement renews every hosted lease.
    assert leases_renew(dict(host.leases)) == RUNS

    host.loop.call_soon_threadsafe(model.gate.set)
    assert host.wait_idle(timeout=120)
    finished = Execution.objects.filter(pk__in=[r.pk for r in runs])
    assert {e.status for e in finished} == {Execution.Status.COMPLETED}
    for execution in finished:
        kinds = list(execution.steps.order_by("step_number").values_list("step_type", flat=True))
        assert kinds == [StepType.REASONING, StepType.FINAL_ANSWER]
        assert execution.result["summary"] == "Done."


def test_a_full_host_makes_the_next_task_wait_for_a_place(workspace, owner, quiet_broker, monkeypatch):
    agent = make_agent(workspace=workspace, owner=owner)
    model = GatedModel(1)
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda execution: model)
    first, second = (execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt=p)) for p in ("one", "two"))
    host = RunHost(capacity=1)
    assert execution_host_segment(execution_id=first.pk, host=host) is True
    assert model.all_waiting.wait(timeout=60)

    handed = threading.Event()
    waiter = threading.Thread(target=lambda: (execution_host_segment(execution_id=second.pk, host=host),
                                              handed.set()))
    waiter.start()
    assert not handed.wait(timeout=0.5)  # the host is full: the task is held back
    assert Execution.objects.get(pk=second.pk).status == Execution.Status.QUEUED  # and claimed nothing

    host.loop.call_soon_threadsafe(model.gate.set)
    assert handed.wait(timeout=60)  # the first run finished, so the second got its place
    waiter.join(timeout=60)
    assert host.wait_idle(timeout=60)
    assert Execution.objects.get(pk=second.pk).status == Execution.Status.COMPLETED


def test_a_claimed_run_is_not_hosted_twice(workspace, owner, quiet_broker, monkeypatch):
    agent = make_agent(workspace=workspace, owner=owner)
    model = GatedModel(1)
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda execution: model)
    run = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="once"))
    host = RunHost(capacity=4)
    assert execution_host_segment(execution_id=run.pk, host=host) is True
    assert model.all_waiting.wait(timeout=60)
    # A second delivery is handed over too, claims nothing (the lease is held) and ends.
    assert execution_host_segment(execution_id=run.pk, host=host) is True
    deadline = time.monotonic() + 60
    while host.in_flight != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert host.in_flight == 1 and list(host.leases) == [run.pk]  # the first still holds it
    assert model.waiting == 1  # the duplicate never asked the model
    host.loop.call_soon_threadsafe(model.gate.set)
    assert host.wait_idle(timeout=60)
    assert Execution.objects.get(pk=run.pk).status == Execution.Status.COMPLETED


def test_a_stopping_worker_hands_its_unfinished_runs_back_to_the_queue(workspace, owner, quiet_broker, monkeypatch):
    agent = make_agent(workspace=workspace, owner=owner)
    model = GatedModel(2)
    monkeypatch.setattr("executions.services.segment.llm_for_execution", lambda execution: model)
    runs = [execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt=p)) for p in ("one", "two")]
    host = RunHost(capacity=4)
    for run in runs:
        assert execution_host_segment(execution_id=run.pk, host=host) is True
    assert model.all_waiting.wait(timeout=60)

    assert host.shutdown(grace_seconds=0) == 2
    assert host.wait_idle(timeout=60)  # their segments stopped; the gate never opened
    for run in Execution.objects.filter(pk__in=[r.pk for r in runs]):
        assert (run.status, run.lease_token, run.published_at) == (Execution.Status.QUEUED, "", None)
        assert not run.steps.exists()  # nothing half-written

    # Any worker picks them up again and finishes them.
    monkeypatch.setattr("executions.services.segment.llm_for_execution",
                        lambda execution: ScriptedLLM([text_reply("Done after the restart.")]))
    for run in runs:
        assert execution_run_segment(execution_id=run.pk) == "success"
        run.refresh_from_db()
        assert run.result["summary"] == "Done after the restart."
