"""Dead processes' counter and histogram files are merged into one aggregate file per
type when a process starts (``metrics_dir_prepare``): every series keeps its value, the
number of files drops, a live process's file is never touched, and neither a scrape nor
a second starting process running at the same moment sees a total that is not the true one.

Real processes write the files (River's own metrics module, no Django) and die, by a
normal exit or by ``os._exit`` (a crash: nobody marks them dead)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.telemetry.test_metrics_processes import samples_in, value

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import os
    import sys

    from telemetry.metrics import approval_decided_record, tool_latency_ms, webhook_refusal_record

    times, crash = int(sys.argv[1]), sys.argv[2] == "crash"
    for _ in range(times):
        webhook_refusal_record(reason="bad_signature")
        approval_decided_record(outcome="approved", seconds=7.0)
        tool_latency_ms.labels(tool_name="execute_query", category="data").observe(30)
    print("recorded", flush=True)
    if sys.argv[3:] == ["stay"]:  # alive until its stdin closes, recording one more on each line
        for line in sys.stdin:
            webhook_refusal_record(reason="bad_signature")
            print("recorded", flush=True)
    if crash:
        os._exit(0)  # no atexit: nobody marks this process dead
""")

STARTER = textwrap.dedent("""
    from telemetry.metrics import metrics_dir_prepare

    print(len(metrics_dir_prepare()), flush=True)
""")

SERIES = (
    ("river_webhook_verification_failures_total", {"reason": "bad_signature"}),
    ("river_webhook_verification_failures_total", {"reason": "replayed"}),  # created at 0
    ("river_approval_time_to_decision_seconds_count", {"outcome": "approved"}),
    ("river_approval_time_to_decision_seconds_sum", {"outcome": "approved"}),
    ("river_approval_time_to_decision_seconds_bucket", {"outcome": "approved", "le": "5.0"}),
    ("river_approval_time_to_decision_seconds_bucket", {"outcome": "approved", "le": "15.0"}),
    ("river_agent_tool_latency_ms_count", {"tool_name": "execute_query", "category": "data"}),
    ("river_agent_tool_latency_ms_bucket", {"tool_name": "execute_query", "category": "data", "le": "50.0"}),
)


def watched(samples) -> dict[str, float | None]:
    return {f"{name}{sorted(labels.items())}": value(samples, name, **labels) for name, labels in SERIES}


@pytest.fixture
def directory(tmp_path, monkeypatch):
    path = tmp_path / "metrics"
    path.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(path))
    return path


def env_for(directory: Path) -> dict[str, str]:
    return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "PYTHONPATH": str(ROOT)}


def write_and_die(directory: Path, times: int, *, crash: bool) -> None:
    done = subprocess.run([sys.executable, "-c", WRITER, str(times), "crash" if crash else "exit"], cwd=ROOT,
                          env=env_for(directory), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "recorded", done.stderr


def db_files(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("*.db")}


@pytest.mark.slow  # several real processes
def test_dead_processes_files_merge_and_every_series_keeps_its_value(directory):
    from telemetry.metrics import metrics_render

    env = env_for(directory)
    live = subprocess.Popen([sys.executable, "-c", WRITER, "1", "exit", "stay"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "recorded"
        for times, crash in ((2, True), (3, False), (4, True)):
            write_and_die(directory, times, crash=crash)
        before = watched(samples_in(directory))
        assert before[f"river_webhook_verification_failures_total{sorted({'reason': 'bad_signature'}.items())}"] == 10
        files_before = db_files(directory)
        live_files = {name for name in files_before if name.endswith(f"_{live.pid}.db")}
        live_bytes = {name: (directory / name).read_bytes() for name in live_files}

        # Two processes start at the same moment while scrapes keep coming.
        starters = [subprocess.Popen([sys.executable, "-c", STARTER], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     text=True) for _ in range(2)]
        scrapes = 0
        while any(starter.poll() is None for starter in starters) or scrapes == 0:
            from prometheus_client.parser import text_string_to_metric_families

            rendered = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                        for family in text_string_to_metric_families(metrics_render().decode())
                        for sample in family.samples}
            assert watched(rendered) == before  # never a dead process's samples twice, never none
            scrapes += 1
        marked = sorted(int(starter.communicate(timeout=60)[0]) for starter in starters)
        assert all(starter.returncode == 0 for starter in starters)
        assert marked[1] == 3  # one start found the three dead processes (the other, maybe none left)

        # Each starting process has files of its own (its series created at 0), dead now:
        # the next start merges them.
        after = {name for name in db_files(directory)
                 if not any(name.endswith(f"_{starter.pid}.db") for starter in starters)}
        assert watched(samples_in(directory)) == before
        assert after == live_files | {"counter_merged.db", "histogram_merged.db"}
        assert len(after) < len(files_before)
        assert {name: (directory / name).read_bytes() for name in live_files} == live_bytes  # never touched

        # The live process goes on counting into its own file.
        live.stdin.write("more\n")
        live.stdin.flush()
        assert live.stdout.readline().strip() == "recorded"
    finally:
        live.stdin.close()
        live.wait(timeout=60)

    # It exits, one more process dies, a process starts: everything is in the aggregate.
    write_and_die(directory, 5, crash=True)
    # The live one, the new one and the starters (one may have merged the other's already).
    dead = {name.rpartition("_")[2] for name in db_files(directory) if "merged" not in name}
    assert len(dead) >= 3
    last = subprocess.Popen([sys.executable, "-c", STARTER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert int(last.communicate(timeout=120)[0]) == len(dead)
    final = samples_in(directory)
    assert db_files(directory) == {"counter_merged.db", "histogram_merged.db",
                                   f"counter_{last.pid}.db", f"histogram_{last.pid}.db"}
    assert value(final, "river_webhook_verification_failures_total", reason="bad_signature") == 10 + 1 + 5
    assert value(final, "river_approval_time_to_decision_seconds_count", outcome="approved") == 15
    assert value(final, "river_approval_time_to_decision_seconds_sum", outcome="approved") == 15 * 7.0
    assert value(final, "river_approval_time_to_decision_seconds_bucket", outcome="approved", le="5.0") == 0
    assert value(final, "river_approval_time_to_decision_seconds_bucket", outcome="approved", le="15.0") == 15
    assert value(final, "river_agent_tool_latency_ms_count", tool_name="execute_query", category="data") == 15
    assert value(final, "river_webhook_verification_failures_total", reason="replayed") == 0


@pytest.mark.slow
@pytest.mark.parametrize("dies_at", ["before the swap", "after the swap"])
def test_a_compaction_that_dies_part_way_is_finished_by_the_next_one(directory, monkeypatch, dies_at):
    """A compaction stopped between writing the aggregate and deleting what it merged
    (power loss, a kill) never leaves a total counted twice or lost once the next runs."""
    from telemetry import metrics

    write_and_die(directory, 2, crash=True)
    write_and_die(directory, 3, crash=True)
    before = watched(samples_in(directory))

    class Died(Exception):
        pass

    real_replace, real_unlink = os.replace, Path.unlink

    def replace(source, target):
        if dies_at == "before the swap" and str(target).endswith("_merged.db"):
            raise Died
        return real_replace(source, target)

    def unlink(path, missing_ok=False):
        if dies_at == "after the swap" and path.name.endswith(".db") and "merged" not in path.name:
            raise Died
        return real_unlink(path, missing_ok=missing_ok)

    with monkeypatch.context() as patched:
        patched.setattr(metrics.os, "replace", replace)
        patched.setattr(Path, "unlink", unlink)
        with pytest.raises(Died):
            metrics.metrics_dir_compact()

    assert metrics.metrics_dir_compact() >= 1
    assert watched(samples_in(directory)) == before
    assert db_files(directory) <= {"counter_merged.db", "histogram_merged.db"}
    assert not list(directory.glob("*.pending")) and not list(directory.glob(".*.tmp"))
