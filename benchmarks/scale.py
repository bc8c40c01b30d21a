"""The scale section of ``make bench``: many runs at once on real Celery workers.

Worker processes (prefork, ``-c 1``: one run host each) run against the fake model of
``tests/fakes``, which answers after ``model_seconds`` with a call of the reasoning tool
``durable_note`` (no I/O: the workers get no ``DURABLE_MARKER_DIR``) until the last turn,
chosen by how many assistant messages the conversation holds. This process creates the
runs with ``execution_start``. The bench keeps its own database, Redis database,
organization and agent, and stops its processes and deletes its runs whatever happens.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.verdict import verdict
from benchmarks.workers import Workers, process_children

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/river_bench_scale"
REDIS_URL = "redis://127.0.0.1:6379/12"  # the broker with --broker redis; the channel layer always
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"
WORKER_APP = "river-bench-scale-worker"  # the workers' application_name in pg_stat_activity
SLUG = "river-bench-scale"
TOOL = "durable_note"
BASELINE_RUNS = 5  # single runs, one after another
CREATE_CHUNK = 25  # runs per transaction when a batch is created
TARGET_IN_FLIGHT, TARGET_SESSIONS, TARGET_TURNS_PER_SECOND = 200, 20, 100.0
TARGET_QUEUE_WAIT_P50, TARGET_OVERHEAD_RATIO, TARGET_FIRST_CALL = 1.0, 3.0, 3.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _ms(values: list[float]) -> str:
    return f"p50 {_pct(values, 50) * 1000:.1f} ms, p99 {_pct(values, 99) * 1000:.1f} ms"


def _figure(name: str, shown: str, target: str, ok: bool, indent: str = "    ", *, judged: bool = False) -> str:
    """``judged``: a check of correctness, PASS or FAIL even in a smoke run."""
    return f"{indent}{name}: {shown} (target {target}) {verdict(ok, target=not judged)}"


class Model:
    """The fake model; ``first_request_at`` (``time.monotonic``) is set by the first
    request after it was cleared."""

    def __init__(self, *, seconds: float, turns: int):
        from tests.fakes.openai_server import FakeOpenAI

        self.seconds, self.turns = seconds, turns
        self.first_request_at: float | None = None
        self.server = FakeOpenAI(model="scale-bench").respond_with(self._reply)

    def _reply(self, body: dict):
        from tests.executions.durable_support import completion_text, completion_tool_call
        from tests.fakes.openai_server import Scripted

        if self.first_request_at is None:
            self.first_request_at = time.monotonic()
        turn = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        message = (completion_tool_call(TOOL, {"marker": f"turn {turn}"}, f"call_{turn}") if turn < self.turns
                   else completion_text(f"Finished after {turn} turns."))
        return Scripted(message=message, delay=self.seconds)


@dataclass
class Batch:
    """One batch's figures (seconds)."""

    runs: int
    statuses: Counter = field(default_factory=Counter)
    queue_waits: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    outside_model: list[float] = field(default_factory=list)
    turns: int = 0
    window: float = 0.0
    peak_running: int = 0
    peak_sessions: int = 0
    created_in: float = 0.0
    machine_busy: float = 0.0  # share of every core, whatever runs on them
    worker_cpu: float = 0.0  # CPU seconds of the worker processes


class Sampler(threading.Thread):
    """Every 0.1 s, on a connection of its own: the agent's runs running and finished,
    and this database's sessions named WORKER_APP: River's DATABASE_URL hands its query
    options to psycopg, so that is every connection of the worker processes, only."""

    def __init__(self, database_url: str, agent_id: int):
        super().__init__(name="scale-sampler", daemon=True)
        from executions.models import Execution

        self.url, self.agent_id, self.table, self.terminal = (database_url, agent_id, Execution._meta.db_table,
                                                              sorted(Execution.TERMINAL))
        self.running_status = Execution.Status.RUNNING.value
        self.finished = self.peak_running = self.peak_sessions = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        runs_sql = (f"SELECT count(*) FILTER (WHERE status = %s), count(*) FILTER (WHERE status = ANY(%s)) "
                    f"FROM {self.table} WHERE agent_id = %s")
        sessions_sql = ("SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = %s AND datname = current_database()")
        with psycopg.connect(self.url, application_name=f"{SLUG}-probe", autocommit=True) as conn:
            while not self.done.wait(0.1):
                running, self.finished = conn.execute(
                    runs_sql, [self.running_status, self.terminal, self.agent_id]).fetchone()
                self.peak_running = max(self.peak_running, running)
                self.peak_sessions = max(self.peak_sessions, conn.execute(sessions_sql, [WORKER_APP]).fetchone()[0])


def _cpu_ticks(pool) -> tuple[int, int, int]:
    """CPU ticks so far: the machine's (all, idle), and the running workers' (parents
    and pool children, user and system)."""
    machine = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    parents = [proc.pid for proc in pool.alive()]
    workers = 0
    for pid in parents + [child for parent in parents for child in process_children(parent)]:
        with contextlib.suppress(OSError):
            workers += sum(int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
    return sum(machine), machine[3] + machine[4], workers


@contextlib.contextmanager
def _talking_to(database_url: str, broker_url: str) -> Iterator[None]:
    """For the duration, this thread's default connection is on ``database_url`` (the
    database created if missing) and this process's task messages go to ``broker_url``;
    the caller's connection and broker are put back afterwards. Celery keeps the
    producer pool of the first broker it wrote to, so that (its private ``_pool`` and
    ``amqp._producer_pool``) is dropped on the way in and out."""
    import kombu.pools
    import psycopg
    from django.db import connections
    from django.db.utils import load_backend

    from riverapp.celery import app
    from riverapp.env import database_from_url

    def drop_producers() -> None:
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = app.amqp._producer_pool = None
        # kombu keeps its pools per broker URL, the closed one included: a later
        # publish to the same URL (the web section's broker) would get "Acquire on
        # closed pool", so they are forgotten too and made anew on the next publish.
        kombu.pools.reset()

    wanted = {**connections.settings["default"], **database_from_url("database_url", database_url)}
    with psycopg.connect(database_url, dbname="postgres", autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [wanted["NAME"]]).fetchone():
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(wanted["NAME"])))
    previous = connections["default"], app.conf.get("broker_write_url")
    connections["default"] = ours = load_backend(wanted["ENGINE"]).DatabaseWrapper(wanted, "default")
    app.conf.broker_write_url = broker_url
    drop_producers()
    try:
        yield
    finally:
        ours.close()
        connections["default"], app.conf.broker_write_url = previous
        drop_producers()


def _fixtures():
    from django.contrib.auth import get_user_model

    from agents.models import Agent, AgentVersion
    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role

    org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "River scale benchmark"})
    workspace, _ = Workspace.objects.get_or_create(organization=org, slug=SLUG, defaults={"name": "Scale"})
    user, _ = get_user_model().objects.get_or_create(username=SLUG)
    Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ADMIN})
    agent = Agent.objects.filter(workspace=workspace, name="Scale agent").first()
    if agent is None:
        agent = Agent.objects.create(workspace=workspace, name="Scale agent", business_function="operations",
                                     domain="Benchmark", owner=user, status=Agent.Status.ACTIVE)
        agent.current_version = AgentVersion.objects.create(
            agent=agent, version=1, goal="Take notes.", instructions="Note each step, then finish.",
            action_level="automated", model_config={"max_turns": 100}, tools=[TOOL],
            approval_rules={"require_approval_for": [], "approver_roles": ["admin"],
                            "auto_approve_conditions": [], "escalation_timeout_minutes": 60})
        agent.save(update_fields=["current_version"])
    return agent, user


def _worker_env(*, database_url: str, broker_url: str, redis_url: str, model_url: str) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k not in ("DURABLE_MARKER_DIR", "CELERY_BROKER_WRITE_URL")}
    return {
        **inherited, "DJANGO_SETTINGS_MODULE": "riverapp.settings", "DEBUG": "false",  # production: no query log
        "SECRET_KEY": secrets.token_urlsafe(50),
        "RIVER_AUDIT_HMAC_KEYS": f"scale:{base64.b64encode(secrets.token_bytes(32)).decode()}",
        "DATABASE_URL": f"{database_url}{'&' if '?' in database_url else '?'}application_name={WORKER_APP}",
        "REDIS_URL": broker_url if broker_url.startswith("redis") else redis_url,
        "RIVER_BROKER_URL": broker_url,
        "RIVER_RUNS_PER_PROCESS": os.environ.get("RIVER_RUNS_PER_PROCESS", "200"),
        "RIVER_LLM_MODEL": "openai/scale-bench", "RIVER_LLM_BASE_URL": model_url,
        "RIVER_LLM_API_KEY": "scale-bench-key", "LOG_LEVEL": "WARNING",
    }


def _wait(predicate, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def _settle_and_delete(agent, timeout: float) -> None:
    """Wait up to ``timeout`` for the agent's runs to be finished and post-processed (the
    workers idle again), then delete them and their memories."""
    from agents.models import AgentMemory
    from executions.models import Execution

    runs = Execution.objects.filter(agent=agent)
    _wait(lambda: not runs.exclude(status__in=Execution.TERMINAL, post_processed_at__isnull=False).exists(),
          timeout, 0.5)
    AgentMemory.objects.filter(agent=agent).delete()
    runs.delete()


def _batch(ctx: dict, runs: int) -> Batch:
    """Start ``runs`` runs at once, CREATE_CHUNK to a transaction (a chunk's messages
    leave as it commits, so a queue wait holds at most its chunk's inserts), wait for
    all to finish, measure, delete them."""
    from django.db import transaction

    from executions.services import execution_start, person_run_request

    sampler, agent = Sampler(ctx["database_url"], ctx["agent"].pk), ctx["agent"]
    sampler.start()
    ticks, started = _cpu_ticks(ctx["pool"]), time.monotonic()
    for first in range(0, runs, CREATE_CHUNK):
        with transaction.atomic():
            for index in range(first, min(runs, first + CREATE_CHUNK)):
                execution_start(agent=agent, request=person_run_request(
                    agent=agent, user=ctx["user"], prompt=f"Scale bench run {index}"))
    created_in = time.monotonic() - started
    _wait(lambda: sampler.finished >= runs, 120 + runs * ctx["turns"] * ctx["model_seconds"] / 10)
    sampler.done.set()
    sampler.join()
    used = [now - before for now, before in zip(_cpu_ticks(ctx["pool"]), ticks, strict=True)]
    batch = _measure(agent, runs, ctx["model_seconds"])
    batch.machine_busy, batch.worker_cpu = 1 - used[1] / max(1, used[0]), used[2] / os.sysconf("SC_CLK_TCK")
    batch.peak_running, batch.peak_sessions, batch.created_in = sampler.peak_running, sampler.peak_sessions, created_in
    _settle_and_delete(agent, 60)
    return batch


def _measure(agent, runs: int, model_seconds: float) -> Batch:
    """From the committed rows. A hosted run writes each turn as one self-committing
    statement (``executions.journal``) that stamps its steps and events with its own
    ``now()``: the first holds only ``run_started``, the one of turn k the steps of turn
    k (the model's reply, then the tool call and observation, or the final answer). A
    turn's wall time runs from the statement before it to its own, so it holds the
    model call, the tool, the policy gate, prompt assembly, the event hand-off, every
    wait for the host's loop and I/O thread, and the statement. Its overhead is that
    wall time minus ``model_seconds`` (litellm's client and the fake server's handling
    count as overhead); "outside the model call" subtracts the reasoning step's
    ``duration_ms``, the engine's own timing of the call, instead."""
    from executions.models import Execution, ExecutionEvent, ExecutionStep
    from rivercore.contracts import StepType
    from rivercore.events import RunEventType

    rows = list(Execution.objects.filter(agent=agent).values_list(
        "pk", "status", "queued_at", "started_at", "finished_at", "turn_count"))
    marks: dict[int, dict] = {pk: {0: at} for pk, at in ExecutionEvent.objects.filter(
        execution__agent=agent, event_type=RunEventType.RUN_STARTED).values_list("execution_id", "created_at")}
    model_ms: dict[tuple[int, int], int] = {}
    for pk, turn, kind, at, ms in ExecutionStep.objects.filter(execution__agent=agent).values_list(
            "execution_id", "turn", "step_type", "created_at", "duration_ms"):
        marks.setdefault(pk, {}).setdefault(turn, at)
        if kind == StepType.REASONING:
            model_ms[pk, turn] = ms
    batch = Batch(runs=runs, statuses=Counter(row[1] for row in rows))
    batch.queue_waits = [(started - queued).total_seconds() for _, _, queued, started, *_ in rows if started]
    for pk, turns in marks.items():
        for turn in sorted(t for t in turns if t and t - 1 in turns):
            wall = (turns[turn] - turns[turn - 1]).total_seconds()
            batch.overheads.append(wall - model_seconds)
            batch.outside_model.append(wall - model_ms.get((pk, turn), 0) / 1000)
    done = [row for row in rows if row[3] and row[4]]
    if done:
        batch.window = (max(row[4] for row in done) - min(row[3] for row in done)).total_seconds()
    batch.turns = sum(row[5] for row in done)
    return batch


def _first_model_call(ctx: dict, model: Model) -> float | None:
    """Seconds from starting a worker (no other running: the ``celery worker`` command, a
    cold interpreter that imports Django, River and litellm before it forks its pool) to
    the model's first request, for a run sent as the worker starts."""
    from executions.services import execution_start, person_run_request

    model.first_request_at, started = None, time.monotonic()
    ctx["pool"].start()
    execution_start(agent=ctx["agent"], request=person_run_request(
        agent=ctx["agent"], user=ctx["user"], prompt="Scale bench: the first call"))
    if not _wait(lambda: model.first_request_at is not None, 120):
        return None
    return model.first_request_at - started


def _fresh_process_first_call(ctx: dict, model: Model) -> float | None:
    """Seconds from the loss of the only worker's pool process (SIGKILLed) to the first
    model request of a run sent at that moment: the fresh process Celery forks in its
    place starts with everything its parent loaded (nothing is imported on first use)."""
    from executions.services import execution_start, person_run_request

    parent = ctx["pool"].procs[0].pid
    old = process_children(parent)
    if not _wait(lambda: bool(process_children(parent)), 30) or not old:
        return None
    model.first_request_at, started = None, time.monotonic()
    os.kill(next(iter(old)), signal.SIGKILL)
    execution_start(agent=ctx["agent"], request=person_run_request(
        agent=ctx["agent"], user=ctx["user"], prompt="Scale bench: a fresh process"))
    if not _wait(lambda: model.first_request_at is not None, 120):
        return None
    return model.first_request_at - started


def _batch_lines(batch: Batch, baseline_p99: float) -> Iterator[str]:
    completed = batch.statuses.get("completed", 0)
    others = dict(batch.statuses - Counter(completed=completed), missing=batch.runs - sum(batch.statuses.values()))
    rate = batch.turns / batch.window if batch.window else 0.0
    wait_p50 = _pct(batch.queue_waits, 50)
    ratio = _pct(batch.overheads, 99) / baseline_p99 if baseline_p99 else float("nan")
    yield f"  {batch.runs} runs at once (created in {batch.created_in:.1f} s), in flight over {batch.window:.1f} s:"
    yield _figure("completed", f"{completed}/{batch.runs}" + (f", not: {others}" if completed < batch.runs else ""),
                  "all", completed == batch.runs, judged=True)
    yield _figure("runs in flight at once", f"peak {batch.peak_running}", f">= {TARGET_IN_FLIGHT}",
                  batch.peak_running >= TARGET_IN_FLIGHT)
    yield _figure("PostgreSQL sessions of all workers", f"peak {batch.peak_sessions}", f"<= {TARGET_SESSIONS}",
                  batch.peak_sessions <= TARGET_SESSIONS)
    yield _figure("throughput", f"{rate:.1f} turns/s ({batch.turns} turns)", f">= {TARGET_TURNS_PER_SECOND:g}",
                  rate >= TARGET_TURNS_PER_SECOND)
    yield _figure("queue wait", f"p50 {wait_p50:.2f} s, p99 {_pct(batch.queue_waits, 99):.2f} s",
                  f"p50 <= {TARGET_QUEUE_WAIT_P50:g} s", wait_p50 <= TARGET_QUEUE_WAIT_P50)
    yield _figure("per-turn overhead", f"{_ms(batch.overheads)}, p99 {ratio:.1f}x the single run's",
                  f"<= {TARGET_OVERHEAD_RATIO:g}x", ratio <= TARGET_OVERHEAD_RATIO)
    yield f"      outside the model call: {_ms(batch.outside_model)}"
    yield (f"    CPU: the machine {batch.machine_busy:.0%} busy ({os.cpu_count()} cores, whatever runs on them); "
           f"the workers {batch.worker_cpu * 1000 / max(1, batch.turns):.1f} ms a turn")


def _report(ctx: dict, model: Model, *, workers: int, runs: list[int], baseline_runs: int) -> Iterator[str]:
    pool, agent = ctx["pool"], ctx["agent"]
    yield (f"scale: {workers} Celery worker processes (prefork, -c 1, RIVER_RUNS_PER_PROCESS="
           f"{pool.env['RIVER_RUNS_PER_PROCESS']}), broker {ctx['broker']}, model {ctx['model_seconds']:g} s a "
           f"reply, {ctx['turns']} turns a run ({TOOL}, no I/O)")
    first = _first_model_call(ctx, model)
    yield _figure("cold worker (celery worker started) to first model call",
                  f"{first:.2f} s" if first else "none in 120 s",
                  f"<= {TARGET_FIRST_CALL:g} s", first is not None and first <= TARGET_FIRST_CALL, "  ")
    _settle_and_delete(agent, 120)
    fresh = _fresh_process_first_call(ctx, model)
    yield _figure("fresh worker process (forked in place of a killed one) to first model call",
                  f"{fresh:.2f} s" if fresh else "none in 120 s",
                  f"<= {TARGET_FIRST_CALL:g} s", fresh is not None and fresh <= TARGET_FIRST_CALL, "  ")
    _settle_and_delete(agent, 120)
    for _ in range(workers - 1):
        pool.start()
    pool.wait_ready()
    _batch(ctx, 10 * workers)  # warm-up: every process has loaded litellm and the run path
    baseline = [_batch(ctx, 1) for _ in range(baseline_runs)]
    overheads = [o for b in baseline for o in b.overheads]
    yield (f"  baseline, {baseline_runs} runs one at a time: per-turn overhead {_ms(overheads)} (outside the "
           f"model call: {_ms([o for b in baseline for o in b.outside_model])}); completed "
           f"{sum(b.statuses.get('completed', 0) for b in baseline)}/{baseline_runs}")
    for count in runs:
        yield from _batch_lines(_batch(ctx, count), _pct(overheads, 99))


def scale_bench(*, database_url: str, broker_url: str, workers: int, runs: list[int], model_seconds: float,
                turns: int, redis_url: str = REDIS_URL, baseline_runs: int = BASELINE_RUNS,
                stdout_lines=None) -> Iterator[str]:
    """Report lines (module docstring); ``stdout_lines``, if given, is called with each
    as it comes. ``redis_url`` is the workers' Redis (channel layer, cache) when the
    broker is RabbitMQ. The caller must not patch ``run_segment.delay``: runs go through the
    broker. The targets for throughput, queue wait and overhead are set for 200 in flight."""
    from django.core.management import call_command

    from tests.executions import durable_support  # noqa: F401 - registers durable_note here too

    logs, model = Path(tempfile.mkdtemp(prefix=f"{SLUG}-")), Model(seconds=model_seconds, turns=turns)
    pool = Workers(_worker_env(database_url=database_url, broker_url=broker_url, redis_url=redis_url,
                               model_url=model.server.base_url),
                   logs, concurrency=1, name="scale", imports=("tests.executions.durable_support",))
    try:
        with _talking_to(database_url, broker_url):
            call_command("migrate", verbosity=0, interactive=False)
            agent, user = _fixtures()
            _settle_and_delete(agent, 0)  # left by an interrupted bench
            ctx = {"agent": agent, "user": user, "database_url": database_url, "broker": broker_url.split(":")[0],
                   "model_seconds": model_seconds, "turns": turns, "pool": pool}
            try:
                for line in _report(ctx, model, workers=workers, runs=runs, baseline_runs=baseline_runs):
                    if stdout_lines is not None:
                        stdout_lines(line)
                    yield line
            finally:
                pool.stop_all()
                _settle_and_delete(agent, 0)
    finally:
        model.server.stop()
        shutil.rmtree(logs, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (-c 1 each)")
    parser.add_argument("--runs", action="append", help="runs at once; repeat or comma-separate (default 200,1000)")
    parser.add_argument("--model-seconds", type=float, default=1.0, help="the fake model's latency a reply")
    parser.add_argument("--turns", type=int, default=3, help="turns a run: tool calls, then an answer")
    parser.add_argument("--broker", choices=["redis", "rabbitmq"], default="redis")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_SCALE_DATABASE_URL", DEFAULT_DATABASE_URL))
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    import django

    django.setup()
    for _ in scale_bench(database_url=args.database_url, broker_url=REDIS_URL if args.broker == "redis"
                         else RABBITMQ_URL, workers=args.workers, model_seconds=args.model_seconds, turns=args.turns,
                         runs=[int(n) for v in args.runs or ["200,1000"] for n in v.split(",") if n.strip()],
                         stdout_lines=print):
        pass


if __name__ == "__main__":
    main()
