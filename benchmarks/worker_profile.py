"""A CPU profile of a Celery worker process, for the realwork section.

``python -m benchmarks.realwork --profile DIR`` has its River workers import this module
(``-I``). Each pool process then runs yappi with its CPU clock over every thread
(the run host's event loop, its I/O threads, the publisher, the audit sealer) from the
moment it forks, starts afresh when the bench touches ``DIR/reset`` (its warm-up is
over: imports and first calls are not the cost of a turn), and writes its figures to
``DIR/worker-<pid>.pstat`` every few seconds, in ``pstats`` format (``python -m pstats``).
A profiler that sees every thread is needed: most of a hosted run's work is on threads its loop hands blocking calls to.
The profiler slows the process down several times; its figures say where the CPU goes,
never how much a turn costs (the unprofiled section says that)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from celery.signals import worker_process_init

DIRECTORY_ENV = "RIVER_BENCH_PROFILE_DIR"
SAVE_EVERY_SECONDS = 2.0
RESET_FILE = "reset"  # touched by the bench when its warm-up is over


@worker_process_init.connect
def _profile_this_process(**kwargs) -> None:
    import yappi

    directory = Path(os.environ[DIRECTORY_ENV])
    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)

    def save() -> None:
        target, reset = directory / f"worker-{os.getpid()}.pstat", directory / RESET_FILE
        cleared_for = None
        while True:
            threading.Event().wait(SAVE_EVERY_SECONDS)
            stamp = reset.stat().st_mtime if reset.exists() else None
            if stamp != cleared_for:  # the bench's warm-up is over: profile from here on
                yappi.clear_stats()
                cleared_for = stamp
                continue
            yappi.get_func_stats().save(str(target) + ".part", type="pstat")
            os.replace(str(target) + ".part", target)

    threading.Thread(target=save, name="bench-profile", daemon=True).start()
