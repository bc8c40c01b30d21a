"""``make bench`` runs to the end: every section at smoke size reports a result.

The smoke runs ``python -m benchmarks --smoke`` as ``make bench`` does, in a child
process on this machine's PostgreSQL, Redis and (when up) RabbitMQ, in databases of its
own named after the test database's. The other test proves from inside the command that
a failing section is reported and does not stop the sections after it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from benchmarks import bench

ROOT = Path(settings.BASE_DIR)
RABBITMQ = ("127.0.0.1", 5672)
ALL_SECTIONS = ["turns", "fixed", "peers", "approvals", "startup", "search", "backtest", "cold", "web", "connections",
                "embedded"]


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _required() -> bool:
    return os.environ.get("RIVER_REQUIRE_SERVICES", "").lower() in {"1", "true", "yes"}


def _database_url(suffix: str) -> str:
    """The suite's DATABASE_URL with its database name + ``suffix``."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}{suffix}"))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_section_of_the_bench_runs_to_the_end_at_smoke_size(tmp_path):
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres") or not os.environ.get("REDIS_URL"):
        pytest.skip("the bench needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL)")
    brokers = ["redis"]
    if _reachable(*RABBITMQ):
        brokers.append("rabbitmq")
    elif _required():
        pytest.fail("RabbitMQ is not reachable on 127.0.0.1:5672 (start it: rabbitmq-server -detached)")
    env = {key: value for key, value in os.environ.items() if not key.startswith("RIVER_TEST")}
    env.update(DJANGO_SETTINGS_MODULE="riverapp.settings", DEBUG="true", LOG_LEVEL="WARNING",
               DATABASE_URL=_database_url("_bench_smoke"), REDIS_URL=os.environ["REDIS_URL"],
               RIVER_VAR_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--brokers", ",".join(brokers),
         "--scale-database", urlsplit(_database_url("_bench_smoke_scale")).path.lstrip("/"),
         "--scale-redis", os.environ["REDIS_URL"],
         "--realwork-database", urlsplit(_database_url("_bench_smoke_realwork")).path.lstrip("/")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100, stdin=subprocess.DEVNULL)
    out = done.stdout
    report = f"exit {done.returncode}\n--- stdout\n{out[-6000:]}\n--- stderr\n{done.stderr[-4000:]}"
    expected = ALL_SECTIONS + [f"scale ({broker})" for broker in brokers] + ["realwork"]
    finished = re.findall(r"^done  section (.+) in [\d.]+ s$", out, flags=re.MULTILINE)
    assert finished == expected, report
    assert not re.search(r"\bFAIL\b", out), report
    assert "did not run" not in out, report  # a peer that could not run
    assert out.count("SMOKE") >= len(expected), report  # each section printed its figures, unjudged
    assert done.returncode == 0, report


@pytest.mark.django_db(transaction=True)
def test_a_failing_section_reports_fail_the_next_still_runs_and_the_exit_is_an_error():
    if connection.vendor != "postgresql":
        pytest.skip("the bench runs on PostgreSQL")
    out = StringIO()
    broken = mock.Mock(side_effect=RuntimeError("the fixed-cost section broke"))
    with mock.patch.object(bench, "fixed_cost_bench", broken), pytest.raises(CommandError) as failed:
        call_command(bench.Command(), "--smoke", "--sections", "fixed,approvals", stdout=out)
    text = out.getvalue()
    assert "FAIL  section fixed after" in text
    assert "RuntimeError: the fixed-cost section broke" in text
    assert re.search(r"^done  section approvals in [\d.]+ s$", text, flags=re.MULTILINE), text
    assert "Sections: fixed FAIL; approvals done" in text
    assert str(failed.value) == "1 of 2 sections failed: fixed"


def test_the_bench_refuses_an_unknown_section_naming_the_option():
    with pytest.raises(CommandError, match="--sections: unknown nosuch"):
        call_command(bench.Command(), "--sections", "turns,nosuch", stdout=StringIO())


@pytest.mark.parametrize("counts", ["200,x", "0", "", "1,,2"])
def test_the_bench_refuses_bad_realwork_counts_naming_the_option(counts):
    if connection.vendor != "postgresql":
        pytest.skip("the bench runs on PostgreSQL")
    with pytest.raises(CommandError, match="--realwork-runs"):
        call_command(bench.Command(), "--sections", "realwork", "--realwork-runs", counts, stdout=StringIO())
