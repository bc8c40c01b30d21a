"""One metrics directory shared by live processes: a starting process (a Celery worker,
``runriver``'s embedded worker) never deletes what another live process writes; a dead
process's counters stay in the sums; known series start at 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from executions import services
from tests.executions import engine_support  # noqa: F401 - registers the test_echo tool
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

ROOT = Path(__file__).resolve().parents[2]

WEB = textwrap.dedent("""
    import sys

    import django

    django.setup()  # settings point prometheus_client at PROMETHEUS_MULTIPROC_DIR
    from telemetry.metrics import approval_decided_record, trigger_firing_record, webhook_refusal_record

    webhook_refusal_record(reason="bad_signature")
    webhook_refusal_record(reason="bad_signature")
    approval_decided_record(outcome="approved", seconds=3.0)
    trigger_firing_record(trigger_type="api", outcome="started", reason="")
    print("recorded", flush=True)
    for line in sys.stdin:  # alive, holding its files open, until told to record more or to stop
        webhook_refusal_record(reason="bad_signature")
        print("recorded", flush=True)
""")

WORKER_PROCESS = textwrap.dedent("""
    import os
    import sys

    import django

    django.setup()
    from celery.signals import worker_process_shutdown

    import riverapp.celery  # noqa: F401 - its signal receivers, as in a real worker process
    from rivercore import observe
    from rivercore.runner import Engine, new_state
    from telemetry.metrics import MetricsObserver
    from tests.executions import engine_support as support
    from tests.factories import ScriptedLLM, text_reply, tool_reply

    observe.observer_install("metrics", MetricsObserver())
    for _ in range(int(sys.argv[1])):
        state, _ = new_state(support.request_for(tools=["test_echo"]))
        Engine(llm=ScriptedLLM([tool_reply("test_echo", {"text": "x"}), text_reply("ok")]),
               sleep=lambda s: None).run(state)
    # A prefork child's way out: the shutdown signal, then os._exit (no atexit).
    worker_process_shutdown.send(sender="worker", pid=os.getpid(), exitcode=0)
    os._exit(0)
""")


def samples_in(directory: Path) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def env_for(directory: Path) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "riverapp.settings", "PROMETHEUS_MULTIPROC_DIR": str(directory),
            "RIVER_METRICS_DIR": str(directory), "PYTHONPATH": str(ROOT)}


def celery_worker_started_and_stopped(env: dict[str, str]) -> None:
    """A real ``celery worker`` (its main process sends ``worker_init``) starts, reports
    ready, and is stopped warm."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "riverapp", "worker", "-P", "solo", "-l", "info",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-n", f"metrics-test-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in worker.stdout:
            if "ready." in line:
                break
        else:
            pytest.fail("the Celery worker stopped before it was ready")
    finally:
        worker.terminate()
        worker.communicate(timeout=60)


@pytest.mark.slow  # real processes, each loading Django, and a real Celery worker
def test_web_and_worker_series_survive_a_worker_restart(tmp_path):
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = env_for(directory)
    web = subprocess.Popen([sys.executable, "-c", WEB], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert web.stdout.readline().strip() == "recorded"
        celery_worker_started_and_stopped(env)  # a worker's main process starts, beside the live web process
        first = subprocess.run([sys.executable, "-c", WORKER_PROCESS, "3"], cwd=ROOT, env=env, timeout=120)
        assert first.returncode == 0
        celery_worker_started_and_stopped(env)  # the worker restarts
        second = subprocess.run([sys.executable, "-c", WORKER_PROCESS, "2"], cwd=ROOT, env=env, timeout=120)
        assert second.returncode == 0
        web.stdin.write("more\n")
        web.stdin.flush()
        assert web.stdout.readline().strip() == "recorded"  # the web process still writes to a file that counts

        samples = samples_in(directory)
        assert value(samples, "river_webhook_verification_failures_total", reason="bad_signature") == 3
        assert value(samples, "river_approval_time_to_decision_seconds_count", outcome="approved") == 1
        assert value(samples, "river_trigger_firings_total", trigger_type="api", outcome="started",
                     reason="none") == 1
        tool = {"tool_name": "test_echo", "category": "execution"}
        assert value(samples, "river_agent_tool_calls_total", status="completed", **tool) == 5
        assert value(samples, "river_agent_tool_latency_ms_count", **tool) == 5
        # Known series exist at 0 before their first event.
        assert value(samples, "river_webhook_verification_failures_total", reason="replayed") == 0
        assert value(samples, "river_watchdog_recoveries_total", action="requeued") == 0
        assert value(samples, "river_runs_total", status="completed", outcome="answered", trigger_type="manual") == 0
        assert value(samples, "river_trigger_firings_total", trigger_type="event", outcome="skipped",
                     reason="duplicate") == 0
    finally:
        web.stdin.close()
        web.wait(timeout=60)
    # The web process ended normally and its counts stay.
    assert value(samples_in(directory), "river_webhook_verification_failures_total", reason="bad_signature") == 3


def test_a_starting_process_marks_only_dead_processes_dead(tmp_path, monkeypatch):
    from telemetry.metrics import metrics_dir_prepare

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        for pid in (gone.pid, alive.pid):
            for name in (f"counter_{pid}.db", f"histogram_{pid}.db", f"gauge_livesum_{pid}.db",
                         f"gauge_liveall_{pid}.db", f"gauge_max_{pid}.db"):
                (tmp_path / name).write_bytes(b"")
        assert metrics_dir_prepare() == [gone.pid]
        left = {path.name for path in tmp_path.iterdir()}
    finally:
        alive.stdin.close()
        alive.wait(timeout=30)
    # The dead process's counters and histograms are merged into the aggregate files
    # (tests/telemetry/test_metrics_compaction.py); its other gauges stay as they are.
    assert left == {"counter_merged.db", "histogram_merged.db", "compaction.lock", f"gauge_max_{gone.pid}.db",
                    f"counter_{alive.pid}.db", f"histogram_{alive.pid}.db", f"gauge_livesum_{alive.pid}.db",
                    f"gauge_liveall_{alive.pid}.db", f"gauge_max_{alive.pid}.db"}


@pytest.mark.django_db
def test_the_embedded_worker_starting_keeps_the_tool_latency_of_a_run(workspace, owner):
    """``make run``: one process serves, then starts its embedded worker (``worker_init``),
    and runs. Tool latency recorded before and after the worker started is in the sums."""
    from celery.signals import worker_init

    from riverapp.celery import _metrics_dir_prepared
    from telemetry.metrics import metrics_dir, metrics_render

    assert _metrics_dir_prepared in [ref() for _, ref in worker_init.receivers]

    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])

    def one_run() -> None:
        execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Echo it"))
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(
            [tool_reply("test_echo", {"text": "hi"}), text_reply("Done.")]))

    def latency_count() -> float:
        for family in text_string_to_metric_families(metrics_render().decode()):
            for sample in family.samples:
                if (sample.name == "river_agent_tool_latency_ms_count"
                        and sample.labels == {"tool_name": "test_echo", "category": "execution"}):
                    return sample.value
        return 0.0

    own_files = sorted(metrics_dir().glob(f"*_{os.getpid()}.db"))
    before = latency_count()
    one_run()
    _metrics_dir_prepared()  # River's receiver of the worker_init the embedded WorkController sends
    assert own_files and all(path.exists() for path in own_files)  # nothing this live process writes went
    one_run()
    assert latency_count() == before + 2
