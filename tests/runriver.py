"""Start ``manage.py runriver`` (River in one process) on a free 127.0.0.1 port for a test,
wait until it answers ``/health``, and stop it afterwards."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def runriver_running(*, env: dict, log_path: Path, deadline_seconds: float) -> Iterator[int]:
    """The port of a ``runriver`` started with ``env`` whose output goes to ``log_path``;
    fails the test with that output when it exits early or never answers ``/health``."""
    port = free_port()
    with log_path.open("w+") as log:
        process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
            [sys.executable, "manage.py", "runriver", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + deadline_seconds
            while True:
                assert process.poll() is None, f"runriver exited early:\n{log_path.read_text()}"
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, f"no /health in {deadline_seconds:.0f}s:\n{log_path.read_text()}"
                time.sleep(0.2)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
