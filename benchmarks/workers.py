"""Celery worker processes for the benchmarks (and the fault campaign of ``scripts/``).

A worker counts as ready when it answers a ping over its broker: a worker's log
says "ready." only at River's log level INFO, and the benchmarks run workers at
WARNING, so the log is a hint, never the test. Workers start in a session of their
own, so stopping one takes its pool children with it.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class WorkersNotReady(RuntimeError):
    """A worker did not answer a ping in time (or exited); the message names its log."""


def process_children(pid: int) -> list[int]:
    """The ids of ``pid``'s child processes (Linux ``/proc``); none once it is gone."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def worker_answers(*, node: str, broker_url: str, timeout: float = 1.0) -> bool:
    """Whether the Celery worker named ``node`` answers a ping on ``broker_url``."""
    from riverapp.celery import app

    try:
        with app.connection_for_write(broker_url) as conn:
            return bool(app.control.ping(destination=[node], timeout=timeout, connection=conn))
    except Exception:  # noqa: BLE001 - a broker that is not up yet is "not ready", not an error
        return False


class Workers:
    """Prefork Celery workers of River's app, one log file each in ``directory``.

    ``env`` is their whole environment and must name the broker in ``RIVER_BROKER_URL``
    (or ``REDIS_URL``); ``imports`` are modules each worker imports at start (``-I``)."""

    def __init__(self, env: dict, directory: Path, *, concurrency: int, name: str = "worker",
                 imports: tuple[str, ...] = (), pool: str = "prefork", queues: str | None = None):
        self.env = env
        self.pool = pool  # Celery's -P: prefork (River's production shape), threads, solo
        self.queues = queues  # Celery's -Q; None: the default queue
        self.directory = directory
        self.concurrency = concurrency
        self.name = name
        self.imports = imports
        self.broker_url = env.get("RIVER_BROKER_URL") or env["REDIS_URL"]
        self.procs: list[subprocess.Popen] = []
        self.killed: Counter = Counter()
        self.answered: set[int] = set()  # workers (by index) that answered a ping

    def start(self) -> subprocess.Popen:
        index = len(self.procs)
        celery = Path(sys.executable).parent / "celery"
        imports = [arg for module in self.imports for arg in ("-I", module)]
        queues = ["-Q", self.queues] if self.queues else []
        with open(self.log(index), "wb") as log:
            proc = subprocess.Popen(  # noqa: S603 - this venv's celery, fixed arguments
                [str(celery), "-A", "riverapp", "worker", "-P", self.pool, "-c", str(self.concurrency),
                 "--without-heartbeat", "--without-mingle", "--without-gossip", *imports, *queues, "-l", "info",
                 "-n", f"{self.name}{index}@%h"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> Path:
        return self.directory / f"{self.name}-{index}.log"

    def node(self, index: int) -> str:
        return f"{self.name}{index}@{socket.gethostname()}"

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def ready(self, proc: subprocess.Popen) -> bool:
        """Whether the worker answered a ping; remembered while it lives, so a broker
        being restarted (a fault campaign's) does not make booted workers look new. A
        replacement has an index of its own and is asked afresh."""
        index = self.procs.index(proc)
        if index not in self.answered and proc.poll() is None and worker_answers(
                node=self.node(index), broker_url=self.broker_url):
            self.answered.add(index)
        return index in self.answered and proc.poll() is None

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Until every live worker answers a ping; raises ``WorkersNotReady`` naming the
        log of one that did not, or that exited."""
        deadline = time.monotonic() + timeout
        waiting = list(self.alive())
        while waiting:
            waiting = [p for p in waiting if not self.ready(p)]
            exited = [p for p in self.procs if p.poll() is not None and p in waiting]
            if exited or (waiting and time.monotonic() > deadline):
                proc = (exited or waiting)[0]
                index = self.procs.index(proc)
                tail = self.log(index).read_text(errors="replace")[-2000:]
                what = f"exited with {proc.returncode}" if exited else f"did not answer a ping in {timeout:g} s"
                raise WorkersNotReady(f"worker {self.node(index)} {what}; {self.log(index)} ends:\n{tail}")
            if waiting:
                time.sleep(0.1)

    def kill_worker(self, rng: random.Random) -> bool:
        """SIGKILL a whole worker (its children die with its session) and start another.
        Only once every worker is ready, so workers are never all booting at once."""
        if not all(self.ready(p) for p in self.alive()):
            return False
        proc = rng.choice(self.alive())
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.killed["worker"] += 1
        self.start()
        return True

    def kill_child(self, rng: random.Random) -> bool:
        """SIGKILL one prefork child; its parent replaces it."""
        children = [pid for proc in self.alive() for pid in process_children(proc.pid)]
        if not children:
            return False
        os.kill(rng.choice(children), signal.SIGKILL)
        self.killed["child"] += 1
        return True

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
