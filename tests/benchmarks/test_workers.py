"""benchmarks.workers, which the benchmarks and the fault campaign (scripts/faults.py)
share: a worker is ready once it answered a ping, and stays ready while it lives even
when its broker is being restarted; a replacement is asked afresh. The ping goes over
the broker to another process, so it is the one thing replaced here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import workers as workers_module
from benchmarks.workers import Workers, process_children

WAIT = "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(120)"
PARENT = ("import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
          "time.sleep(120)']); sys.stdout.write(f'{child.pid}\\n'); sys.stdout.flush(); time.sleep(120)")


@pytest.fixture
def pool(tmp_path):
    made = Workers({"REDIS_URL": "redis://127.0.0.1:1/0"}, tmp_path, concurrency=1, name="t")
    yield made
    made.stop_all()


def _stand_in(code: str = WAIT) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,  # noqa: S603
                            start_new_session=True)
    proc.stdout.readline()  # it is running
    return proc


def test_a_worker_that_answered_stays_ready_while_the_broker_is_down(pool, monkeypatch):
    answers = []
    monkeypatch.setattr(workers_module, "worker_answers",
                        lambda *, node, broker_url: answers.append(node) or len(answers) == 1)
    proc = _stand_in()
    pool.procs.append(proc)
    assert pool.ready(proc)
    assert pool.ready(proc)  # the broker no longer answers; the worker still counts
    assert answers == [pool.node(0)]


def test_a_dead_worker_is_not_ready_and_a_replacement_is_asked_afresh(pool, monkeypatch):
    answers = []
    monkeypatch.setattr(workers_module, "worker_answers",
                        lambda *, node, broker_url: answers.append(node) or node == pool.node(0))
    first = _stand_in()
    pool.procs.append(first)
    assert pool.ready(first)
    first.kill()
    first.wait(timeout=10)
    assert not pool.ready(first)
    second = _stand_in()
    pool.procs.append(second)
    assert not pool.ready(second)
    assert answers == [pool.node(0), pool.node(1)]


def test_process_children_lists_a_child_and_nothing_once_the_parent_is_gone(pool):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,  # noqa: S603
                              start_new_session=True)
    pool.procs.append(parent)
    child = int(parent.stdout.readline())
    assert process_children(parent.pid) == [child]
    pool.stop_all()
    assert process_children(parent.pid) == []
