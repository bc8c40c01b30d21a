"""Counters behind rate and budget policies: atomic under concurrency."""

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections

from governance import counters
from governance.checker import check_tool_call
from rivercore.types.governance import Decision
from tests.governance.policy_support import facts, policy

NOON = datetime(2024, 6, 3, 12, 0, tzinfo=UTC)
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrency test needs PostgreSQL")


def _run_concurrently(n: int, work):
    barrier = threading.Barrier(n)
    results, errors = [], []
    lock = threading.Lock()

    def worker():
        try:
            barrier.wait(timeout=30)
            value = work()
            with lock:
                results.append(value)
        except Exception as exc:  # surfaced by the assertion below
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(results) == n
    return results


def test_hit_counts_and_windows(db):
    key = f"k-{uuid.uuid4()}"
    assert counters.counter_hit(key=key, window=3600, now=NOON) == 1
    assert counters.counter_hit(key=key, window=3600, amount=4, now=NOON + timedelta(minutes=59)) == 5
    # The next hour is a new window.
    assert counters.counter_hit(key=key, window=3600, now=NOON + timedelta(hours=1)) == 1
    assert counters.counter_hit(key=key, window=3600, amount=-1, now=NOON) == 4
    assert counters.counter_value(key=key, window=3600, now=NOON) == 4
    assert counters.counter_value(key="never-used", window=3600, now=NOON) == 0


def test_try_consume_stops_at_the_limit(db):
    key = f"k-{uuid.uuid4()}"
    assert counters.counter_try_consume(key=key, window=3600, limit=3, amount=2, now=NOON) == (True, 2)
    assert counters.counter_try_consume(key=key, window=3600, limit=3, amount=2, now=NOON) == (False, 2)
    assert counters.counter_try_consume(key=key, window=3600, limit=3, now=NOON) == (True, 3)
    assert counters.counter_try_consume(key=key, window=3600, limit=3, now=NOON) == (False, 3)
    assert counters.counter_try_consume(key=f"{key}-x", window=3600, limit=3, amount=4, now=NOON) == (False, 0)


def test_prune_drops_old_windows(db):
    key = f"k-{uuid.uuid4()}"
    counters.counter_hit(key=key, window=3600, now=NOON - timedelta(days=3))
    counters.counter_hit(key=key, window=3600, now=NOON)
    assert counters.counter_prune(older_than=timedelta(days=2), now=NOON) == 1
    assert counters.counter_value(key=key, window=3600, now=NOON) == 1


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_hits_get_distinct_values():
    key = f"k-{uuid.uuid4()}"
    values = _run_concurrently(50, lambda: counters.counter_hit(key=key, window=3600, now=NOON))
    assert sorted(values) == list(range(1, 51))
    assert counters.counter_value(key=key, window=3600, now=NOON) == 50


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_consumers_never_pass_the_limit():
    key = f"k-{uuid.uuid4()}"
    results = _run_concurrently(
        50, lambda: counters.counter_try_consume(key=key, window=3600, limit=20, now=NOON)
    )
    allowed = [value for ok, value in results if ok]
    assert len(allowed) == 20
    assert sorted(allowed) == list(range(1, 21))
    assert counters.counter_value(key=key, window=3600, now=NOON) == 20


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_tool_calls_against_a_rate_limit():
    spec = policy("agent.tool_calls_this_hour > 20", "block", "rate_limit", "20 per hour")
    call = facts(policies=[spec])
    decisions = _run_concurrently(50, lambda: check_tool_call(call, now=NOON).decision)
    assert decisions.count(Decision.PROCEED) == 20
    assert decisions.count(Decision.BLOCKED) == 30
    # Blocked calls gave their slots back: the window holds exactly the calls that ran.
    key = f"agent:{call.agent_id}:tool_calls"
    assert counters.counter_value(key=key, window=3600, now=NOON) == 20


def test_dry_run_does_not_consume(db):
    spec = policy("agent.tool_calls_this_hour > 1", "block", "rate_limit")
    call = facts(policies=[spec])
    for _ in range(3):
        assert check_tool_call(call, now=NOON, count=False).decision == Decision.PROCEED
    assert check_tool_call(call, now=NOON).decision == Decision.PROCEED
    assert check_tool_call(call, now=NOON).decision == Decision.BLOCKED
