"""Single-process River: Daphne, a Celery worker and Celery beat in one process.

Without REDIS_URL the broker (kombu ``memory://``) and the channel layer
(``InMemoryChannelLayer``) live in this process's memory, so the worker and beat
have to run here too: as threads next to Daphne's reactor, which keeps the main
thread (it installs the SIGINT/SIGTERM handlers).

The worker hosts runs as a Celery worker process does (``executions.runhost``): its
threads hand each run's segment to one event loop and take the next message, so one
process carries hundreds of runs waiting on their model, not one per thread.

Three more details make that work:

- The worker is a bare ``celery.worker.WorkController`` (not ``celery worker``'s
  ``Worker``, which installs signal handlers and wants the main thread) with the
  ``threads`` pool and no heartbeat, mingle or gossip. It is stopped the way
  Celery's own signal handler does it: ``worker.state.should_stop`` is set and the
  worker's loop raises a warm shutdown inside its own thread.
- The in-memory channel layer keeps asyncio queues that belong to one event loop.
  A task that publishes an event runs in a worker thread with its own loop, so
  the layer is wrapped to carry every call over to the server's loop.
- SQLite runs in WAL mode with ``BEGIN IMMEDIATE`` and a busy timeout (settings),
  so the web, worker and beat threads queue for the write lock instead of
  deadlocking on a lock upgrade.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import warnings
from dataclasses import dataclass, field

# daphne.server installs Twisted's asyncio reactor on import, before anything
# else can import Twisted's default reactor.
import daphne.server
from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 20


class LoopBoundChannelLayer:
    """Runs every coroutine method of ``layer`` on ``loop``, whoever calls it.

    Only for the in-memory layer in single-process mode: its queues may only be
    touched from the loop the consumers wait on.
    """

    def __init__(self, layer, loop: asyncio.AbstractEventLoop):
        self._layer = layer
        self._loop = loop

    def __getattr__(self, name):
        attribute = getattr(self._layer, name)
        if not asyncio.iscoroutinefunction(attribute):
            return attribute

        @functools.wraps(attribute)
        async def on_server_loop(*args, **kwargs):
            if asyncio.get_running_loop() is self._loop:
                return await attribute(*args, **kwargs)
            future = asyncio.run_coroutine_threadsafe(attribute(*args, **kwargs), self._loop)
            return await asyncio.wrap_future(future)

        return on_server_loop


def bind_channel_layer_to_loop(loop: asyncio.AbstractEventLoop) -> None:
    from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer

    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        channel_layers.set("default", LoopBoundChannelLayer(layer, loop))


@dataclass
class BackgroundServices:
    """The embedded Celery worker and beat, each in its own thread."""

    concurrency: int = 4
    with_worker: bool = True
    with_beat: bool = True
    worker: object | None = None
    beat: object | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        if not (self.with_worker or self.with_beat):
            return
        from celery.beat import EmbeddedService

        from riverapp.celery import app

        app.finalize()
        app.set_current()
        app.set_default()
        if app.conf.broker_url.startswith("memory://"):
            # The in-memory transport polls; poll often so a queued run starts at once.
            app.conf.broker_transport_options = {**app.conf.broker_transport_options, "polling_interval": 0.1}
            # kombu warns that memory:// has no hostname, which is expected here.
            logging.getLogger("kombu.connection").setLevel(logging.ERROR)
        # Celery warns that DEBUG leaks memory in long-running workers; in
        # single-process mode DEBUG is the point, and the warning is noise.
        warnings.filterwarnings("ignore", message=r".*settings\.DEBUG.*", category=UserWarning)
        if self.with_worker:
            # Host runs as a worker process does (executions.runhost): the worker's
            # threads hand each segment to one event loop and take the next message, so
            # hundreds of runs waiting on their model hold no thread of their own.
            from executions.runhost import run_host_enable

            run_host_enable()
            self._start_worker(app)
        if self.with_beat:
            # Service() defaults to the shelve-file scheduler; River keeps its schedule in
            # the database (django_celery_beat), as `celery beat` does with the setting.
            self.beat = EmbeddedService(app, thread=True, scheduler_cls=app.conf.beat_scheduler)
            self.beat.name = "celery-beat"
            self.beat.start()
            self.threads.append(self.beat)

    def _start_worker(self, app) -> None:
        from celery.worker import WorkController

        ready = threading.Event()
        self.worker = WorkController(
            app=app,
            hostname="river-embedded@%h",
            pool="threads",
            concurrency=self.concurrency,
            loglevel=settings.LOGGING.get("root", {}).get("level", "INFO"),
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready_callback=lambda consumer: ready.set(),
        )
        worker_thread = threading.Thread(target=self._run_worker, name="celery-worker", daemon=True)
        worker_thread.start()
        self.threads.append(worker_thread)
        if not ready.wait(timeout=30):
            logger.warning("the embedded Celery worker did not report ready within 30 seconds")

    def _run_worker(self) -> None:
        try:
            self.worker.start()
        finally:
            connections.close_all()

    def stop(self, *, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> bool:
        """Stop beat, then warm-stop the worker. True when both threads ended in time."""
        from celery.worker import state as worker_state

        if self.beat is not None:
            self.beat.stop()
        if self.worker is not None:
            # The flag Celery's own SIGTERM handler sets: the worker's loop raises a
            # warm shutdown in its thread and lets running tasks finish.
            worker_state.should_stop = 0
        for thread in self.threads:
            thread.join(timeout=grace_seconds)
        if self.worker is not None:
            # Hosted runs get the worker's grace, then go back to the queue, where the
            # next start (or another worker) resumes them from their last turn.
            from executions.runhost import run_host_shutdown

            run_host_shutdown()
        return not any(thread.is_alive() for thread in self.threads)


class ListenFailed(Exception):
    """Daphne could not open the listening socket (address in use, bad host, ...)."""


def serve(*, host: str, port: int, worker: bool, beat: bool, concurrency: int, on_ready) -> None:
    """Serve HTTP and WebSocket on host:port until SIGINT/SIGTERM; blocks."""
    from daphne.endpoints import build_endpoint_description_strings

    from common.daphne_edge import daphne_edge_install
    from riverapp.asgi import application
    from telemetry.logs import AccessLog

    daphne_edge_install(access_log=AccessLog)  # riverapp.asgi did already; said here too, since serve() depends on it
    bind_channel_layer_to_loop(daphne.server.twisted_loop)
    services = BackgroundServices(concurrency=concurrency, with_worker=worker, with_beat=beat)
    # Static files are served by WhiteNoise's middleware, in DEBUG and production alike.
    server = daphne.server.Server(
        application=application,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        signal_handlers=True,
        ready_callable=on_ready,
        websocket_handshake_timeout=10,
    )
    try:
        services.start()
        server.run()
    finally:
        if not services.stop():
            logger.warning("background threads were still busy after %ss; exiting anyway", SHUTDOWN_GRACE_SECONDS)
        connections.close_all()
    if server.abort_start:
        raise ListenFailed(f"could not listen on {host}:{port} (see the log above)")
