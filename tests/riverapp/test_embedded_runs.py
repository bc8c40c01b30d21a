"""``make run``'s single process hosts runs as a worker process does: one event loop,
many runs. ``manage.py runriver`` on a fresh SQLite file (the in-memory broker and
channel layer) gets runs created over HTTP at once whose model waits a second each
turn (the fake model of ``tests/fakes``); all complete, and they were all in flight
together, not four at a time (one per worker thread, as before)."""

from __future__ import annotations

import pytest

from benchmarks.embedded import embedded_runs

RUNS = 60


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_runriver_carries_many_waiting_runs_at_once_and_completes_them_all():
    result = embedded_runs(runs=RUNS, model_seconds=1.0, turns=2)

    assert result.statuses == {"completed": RUNS}, result
    assert result.turns == 2 * RUNS
    # The worker has 4 threads; with a thread per running run no more than 4 would run.
    assert result.peak_running >= RUNS // 2, result
