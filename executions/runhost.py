"""Many runs in one worker process: a run host.

A Celery worker process starts one host (``worker_process_init``): an asyncio event
loop in a background thread. ``executions.run_segment`` claims a run's lease, hands
the segment to the host and returns, so the process takes the next message while the
run goes on. A hosted run that waits on its model (litellm's async client), on a tool
(the engine's bounded tool pool) or on a person (a pause ends the segment) holds no
worker process, no thread and no database connection of its own: its blocking work
(loading, the journal's statement per turn, policy checks, the segment's end) runs
on the host's I/O threads (``RIVER_RUN_HOST_IO_THREADS``, default 2, always fewer than
the pool's connections), one call at a time per run, each call borrowing a connection
from the process's pool and handing it back when it returns; a run waiting on its
model holds none.

Durability does not depend on the host: each turn's steps are committed before the
next turn (the journal), and a process that dies with runs on its host leaves their
leases to run out, after which the watchdog sends them again, as for any lost worker.
At most ``RIVER_RUNS_PER_PROCESS`` runs are hosted at once; a task that finds the host
full waits for a place, which holds that process back from taking more messages.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection
from django.utils import timezone

from executions.models import Execution
from rivercore.ports import blocking_call, blocking_executor_install
from rivercore.runner import RunInterrupted
from telemetry.faults import infra_fault_record

logger = logging.getLogger("river.executions")


def leases_release(leases: dict[int, str]) -> int:
    """Hand runs back to the queue (lease dropped, ``published_at`` cleared so the
    watchdog's next pass sends them again). A statement of theirs still on its way
    finds its lease gone and writes nothing."""
    return Execution.objects.filter(
        pk__in=list(leases), lease_token__in=list(leases.values()), status=Execution.Status.RUNNING,
    ).update(status=Execution.Status.QUEUED, lease_token="", lease_expires_at=None, published_at=None)


def leases_renew(leases: dict[int, str]) -> int:
    """Push out the lease of every run still held under its token (one statement)."""
    return Execution.objects.filter(
        pk__in=list(leases), lease_token__in=list(leases.values()), status=Execution.Status.RUNNING,
    ).update(lease_expires_at=timezone.now() + timedelta(seconds=settings.RIVER_LEASE_SECONDS))


def run_host_io_threads(wanted: int) -> int:
    """How many I/O threads a host gets. Several only with a pool to borrow from (without
    one, a single thread keeps the one connection every hosted run shares), and fewer
    than the pool holds, so the task thread and a tool call still find a connection
    rather than wait behind the host's threads for the pool's timeout."""
    pool = connection.settings_dict["OPTIONS"].get("pool")
    if not pool:
        return 1
    max_size = pool.get("max_size", wanted + 1) if isinstance(pool, dict) else wanted + 1
    return max(1, min(wanted, max_size - 1))


def _pooled(fn):
    """Run ``fn`` on an I/O thread, then hand the thread's connection back to the pool
    (only when there is one: without it, closing would end the session)."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if connection.settings_dict["OPTIONS"].get("pool") and not connection.in_atomic_block:
                connection.close()

    return call


class RunHost:
    def __init__(self, capacity: int, io_threads: int | None = None):
        self.capacity = capacity
        self.leases: dict[int, str] = {}  # hosted run -> its lease token
        self._slots = threading.BoundedSemaphore(capacity)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._segments: set[Future[Any]] = set()  # every hosted segment, claiming or running
        self._held: dict[asyncio.Task[Any], str] = {}  # a segment that claimed its run -> the lease
        self.io_threads = run_host_io_threads(io_threads or settings.RIVER_RUN_HOST_IO_THREADS)
        self.io = ThreadPoolExecutor(max_workers=self.io_threads, thread_name_prefix="river-run-io")
        blocking_executor_install(self.io, _pooled)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="river-run-host", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._heartbeat(), self.loop)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def in_flight(self) -> int:
        """Segments on the host: claiming their run, or running it."""
        with self._lock:
            return len(self._segments)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no segment is hosted (a worker shutting down; tests). False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._segments, timeout=timeout)

    def reserve(self) -> None:
        """Wait for a place on the host (call before claiming a run)."""
        self._slots.acquire()

    def release(self) -> None:
        """Give back a place reserved for a run that was not started."""
        self._slots.release()

    def start(self, segment: Coroutine[Any, Any, Any], *, execution_id: int, token: str | None = None) -> Future[Any]:
        """Host a run's segment (a place must be reserved); returns at once. ``token``: the
        run's lease, when it is claimed already; else the segment claims it and ``hold``s it."""
        if token is not None:
            self.hold(execution_id, token)

        async def hosted() -> Any:
            try:
                return await segment
            except RunInterrupted:
                logger.info("hosted segment of execution %s stopped: cancelled or lease lost", execution_id)
            except Exception:  # noqa: BLE001 - the segment handles its own errors; this is the last guard
                logger.exception("hosted segment of execution %s crashed", execution_id)
            finally:
                held = token if token is not None else self._held.pop(asyncio.current_task(), None)
                with self._lock:
                    if held is not None and self.leases.get(execution_id) == held:  # a duplicate held nothing
                        del self.leases[execution_id]
                    idle = not self.leases
                if idle and self.io_threads == 1:  # nothing hosted: the I/O thread gives its connection back
                    await asyncio.wrap_future(self.io.submit(_connection_close))
                self._slots.release()
            return None

        future = asyncio.run_coroutine_threadsafe(hosted(), self.loop)
        with self._lock:
            self._segments.add(future)
        future.add_done_callback(self._forget)
        return future

    def hold(self, execution_id: int, token: str) -> None:
        """The run's lease, claimed: renewed by the host's heartbeat from now on. Called
        by a segment that claimed its run, on the host's loop, or by ``start``."""
        with self._lock:
            self.leases[execution_id] = token
        try:
            self._held[asyncio.current_task()] = token
        except RuntimeError:  # not on the loop: ``start`` was given the token
            pass

    def post_process(self, execution_id: int) -> None:
        """Post-process a run that ended here on an I/O thread, with no broker message
        and no task; one that fails is logged and done by the watchdog's next pass over
        runs not post-processed (``executions_post_process_missed``)."""
        def run() -> None:
            try:
                _post_processor(execution_id)
            except Exception:  # noqa: BLE001 - the watchdog does it again
                logger.exception("post-processing of execution %s failed on its run host", execution_id)

        self.io.submit(_pooled(run))

    def _forget(self, done: Future[Any]) -> None:
        with self._lock:
            self._segments.discard(done)
            self._idle.notify_all()

    def shutdown(self, grace_seconds: float) -> int:
        """The worker process is stopping: let hosted runs finish for up to
        ``grace_seconds``, then hand the rest back to the queue at once (rather than
        leaving them to wait out their leases) and stop their segments. Returns how
        many were handed back. Call it with no new runs being started."""
        if self.wait_idle(timeout=grace_seconds):
            return 0
        with self._lock:
            leases = dict(self.leases)
            segments = list(self._segments)
        released = 0
        try:
            released = leases_release(leases)
        except (DatabaseError, InterfaceError) as exc:  # their leases run out instead
            infra_fault_record(component="database", operation="release hosted runs", exc=exc,
                               subject=f"{len(leases)} hosted run(s)")
        for segment in segments:
            segment.cancel()
        logger.warning("worker stopping: %d hosted run(s) handed back to the queue", released)
        return released

    async def _heartbeat(self) -> None:
        """One lease renewal for every hosted run, every third of the lease."""
        interval = max(1.0, settings.RIVER_LEASE_SECONDS / 3)
        while True:
            await asyncio.sleep(interval)
            with self._lock:
                leases = dict(self.leases)
            if not leases:
                continue
            try:
                await blocking_call(False, leases_renew, leases)
            except (DatabaseError, InterfaceError) as exc:
                # The next beat tries again; if the database stays away the leases run
                # out and the journals' lease checks stop the runs.
                infra_fault_record(component="database", operation="lease renewal", exc=exc,
                                   subject=f"{len(leases)} hosted run(s)")


def _connection_close() -> None:
    if not connection.in_atomic_block:
        connection.close()


_host: RunHost | None = None
_enabled = False


_host_lock = threading.Lock()


def _post_processor(execution_id: int) -> object:  # replaced at start (executions.apps)
    raise RuntimeError("no post-processor is set for the run host")


def run_host_post_processor_set(post_process: Callable[[int], object]) -> None:
    """What ``RunHost.post_process`` calls (``executions.apps`` sets the service at start),
    so the host depends on no service and the services may use the host."""
    global _post_processor
    _post_processor = post_process


def run_host_enable() -> None:
    """Host segments in this process (a Celery worker process, after its fork)."""
    global _enabled, _host
    _enabled = settings.RIVER_RUNS_PER_PROCESS > 1
    _host = None  # a host inherited from the parent process has no thread here


def run_host_shutdown() -> None:
    """The worker process is stopping (``worker_process_shutdown``)."""
    if _host is not None:
        _host.shutdown(grace_seconds=settings.RIVER_RUN_HOST_GRACE_SECONDS)


def run_host() -> RunHost | None:
    """This process's host, or None when segments run in the caller (not a worker
    process, or ``RIVER_RUNS_PER_PROCESS`` is 1)."""
    global _host
    if not _enabled:
        return None
    with _host_lock:
        if _host is None:
            _host = RunHost(settings.RIVER_RUNS_PER_PROCESS)
        return _host
