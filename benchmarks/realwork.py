"""The realwork section of ``make bench``: the demo's Support Analyst at work on real
Celery workers, and a plain one-task-per-turn Celery loop doing the same work beside it.

The production shape: Celery worker processes (prefork, ``-c 1``: one run host each),
a Redis broker and channel layer, PostgreSQL. The bench seeds the demo (``demo_seed``:
its workspace, SQLite support database, schema cache and agents) into a database of its
own, with the support database in a temporary directory the workers are given too, and
starts runs of the *Support Analyst* with ``execute_query`` against that database on
every turn but the last. The model is the fake OpenAI-compatible server of
``tests/fakes`` on 127.0.0.1, answering after ``model_seconds``: a call of
``execute_query`` with one of four analyst queries on turns 1 to ``turns - 1`` (each
run's queries carry the run's own time window and limit, so no two runs send the same
statement text and the guard parses every one), then an answer. So every turn runs
litellm's real client, the engine, the governance gate, the SQL guard, the SQLite read,
the journal, the audit entry of the governed call, the model-call record and the events.

Runs are started ``count`` at once (1: one after another), and measured from outside:

- **worker CPU per turn**: the CPU time (user + system, ``/proc``) of the worker
  processes, parents and pool children, from the first run's creation until every run
  is finished and post-processed, divided by the turns they ran. It includes
  everything the workers do: claim, load, post-processing, idle polling;
- **turns/s**: turns over the window from the first run's start to the last's end;
- **per-turn overhead**: a turn's wall time (from the stored rows, as in the scale
  section) minus the model's latency;
- the load average, before and after.

The plain loop (``benchmarks/celery_loop.py``) runs on its own workers (threads pool,
one thread per conversation in flight, its own queue) against the same model and
SQLite file, measured the same way, interleaved with River's batches.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.scale import (
    CREATE_CHUNK,
    REDIS_URL,
    Sampler,
    _cpu_ticks,
    _figure,
    _measure,
    _ms,
    _pct,
    _talking_to,
    _wait,
)
from benchmarks.scale import _worker_env as scale_worker_env
from benchmarks.workers import Workers

DEFAULT_DATABASE = "river_bench_realwork"
TURNS = 5
IN_FLIGHT = (1, 200, 1000)
SEQUENTIAL_RUNS = 5  # at 1 in flight: runs one after another
TARGET_CPU_MS, TARGET_TURNS_PER_SECOND, TARGET_OVERHEAD_P99 = 8.0, 100.0, 1.0
TARGET_AT = 200  # the in-flight count the throughput and overhead targets are set for
PROMPT = "Realwork run {index}: how is the support desk doing?"
_RUN_INDEX = re.compile(r"Realwork run (\d+):")
QUERIES = (
    "SELECT count(*) AS open_high FROM tickets WHERE status = 'open' AND priority IN ('high', 'urgent') "
    "AND created_at >= datetime('now', '-{hours} hours')",
    "SELECT c.plan, count(*) AS tickets FROM tickets AS t JOIN customers AS c ON c.id = t.customer_id "
    "WHERE t.created_at >= datetime('now', '-{days} days') GROUP BY c.plan ORDER BY tickets DESC",
    "SELECT c.company, sum(ch.amount_cents) / 100.0 AS refunded FROM charges AS ch "
    "JOIN customers AS c ON c.id = ch.customer_id WHERE ch.status = 'refunded' "
    "GROUP BY c.company ORDER BY refunded DESC LIMIT {limit}",
    "SELECT t.channel, count(*) AS solved, round(avg(julianday(t.updated_at) - julianday(t.created_at)) * 24, 1) "
    "AS hours_to_solve FROM tickets AS t WHERE t.status IN ('solved', 'closed') "
    "AND t.created_at >= datetime('now', '-{days} days') GROUP BY t.channel ORDER BY solved DESC",
)


def query_for(index: int, turn: int) -> str:
    """Run ``index``'s statement on ``turn``: its own window and limit, so no two runs share one."""
    return QUERIES[(turn - 1) % len(QUERIES)].format(hours=24 + index, days=7 + index, limit=5 + index % 10)


class Model:
    """The fake model: ``execute_query`` on turns 1 to ``turns - 1``, then an answer; the
    turn is the count of assistant messages, the run's index is read from its prompt."""

    def __init__(self, *, seconds: float, turns: int):
        from tests.fakes.openai_server import FakeOpenAI

        self.seconds, self.turns, self.data_source_id = seconds, turns, 0
        self.server = FakeOpenAI(model="realwork-bench").respond_with(self._reply)
        # Hundreds of clients connect at once: the listen backlog of http.server (5) would
        # reset some of their connections (Linux takes a second listen() as the new size).
        self.server._httpd.socket.listen(1024)

    def _reply(self, body: dict):
        from tests.executions.durable_support import completion_text, completion_tool_call
        from tests.fakes.openai_server import Scripted

        messages = body.get("messages", [])
        with self.server._lock:  # the server keeps every request; thousands of turns need none of them
            self.server.requests.clear()
            self.server.paths.clear()
            self.server.headers.clear()
        turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        index = next((int(found.group(1)) for m in messages if m.get("role") == "user"
                      for found in [_RUN_INDEX.search(str(m.get("content")))] if found), 0)
        if turn < self.turns:
            message = completion_tool_call("execute_query", {"data_source_id": self.data_source_id,
                                                             "query": query_for(index, turn)}, f"call_{turn}")
        else:
            message = completion_text(f"Run {index}: the desk's figures are in the {turn - 1} results above.")
        return Scripted(message=message, delay=self.seconds)


@dataclass
class Figures:
    """One batch's figures, River's or the loop's (seconds)."""

    runs: int
    completed: int = 0
    turns: int = 0
    window: float = 0.0
    worker_cpu: float = 0.0
    overheads: list[float] = field(default_factory=list)
    queue_waits: list[float] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    others: dict = field(default_factory=dict)

    @property
    def cpu_ms_per_turn(self) -> float:
        return self.worker_cpu * 1000 / self.turns if self.turns else float("nan")

    @property
    def rate(self) -> float:
        return self.turns / self.window if self.window else 0.0


def _worker_cpu(pool: Workers) -> float:
    return _cpu_ticks(pool)[2] / os.sysconf("SC_CLK_TCK")


def _river_settled(agent) -> bool:
    from executions.models import Execution

    return not Execution.objects.filter(agent=agent).exclude(
        status__in=Execution.TERMINAL, post_processed_at__isnull=False).exists()


def _river_clear(agent) -> None:
    from agents.models import AgentMemory
    from executions.models import Execution

    AgentMemory.objects.filter(agent=agent).delete()
    Execution.objects.filter(agent=agent).delete()


def _river_batch(ctx: dict, count: int) -> Figures:
    """``count`` runs at once (1: SEQUENTIAL_RUNS one after another), until all are
    finished and post-processed; then measured and deleted."""
    from django.db import transaction

    from executions.services import execution_start, person_run_request

    agent, pool = ctx["agent"], ctx["river"]
    total = SEQUENTIAL_RUNS if count == 1 else count
    sampler = Sampler(ctx["database_url"], agent.pk)
    sampler.start()
    load_before, cpu_before, index = os.getloadavg()[0], _worker_cpu(pool), ctx["next_index"]
    ctx["next_index"] += total
    deadline = 120 + total * ctx["turns"] * ctx["model_seconds"] / min(count, 100)
    chunk = CREATE_CHUNK if count > 1 else 1
    for first in range(0, total, chunk):
        with transaction.atomic():
            for number in range(first, min(total, first + chunk)):
                execution_start(agent=agent, request=person_run_request(
                    agent=agent, user=ctx["user"], prompt=PROMPT.format(index=index + number)))
        if count == 1:
            _wait(lambda first=first: sampler.finished >= first + 1, deadline, 0.02)
    settled = _wait(lambda: sampler.finished >= total and _river_settled(agent), deadline, 0.05)
    worker_cpu = _worker_cpu(pool) - cpu_before
    sampler.done.set()
    sampler.join()
    batch = _measure(agent, total, ctx["model_seconds"])
    completed = batch.statuses.get("completed", 0)
    figures = Figures(runs=total, completed=completed, turns=batch.turns, window=batch.window,
                      worker_cpu=worker_cpu, overheads=batch.overheads, queue_waits=batch.queue_waits,
                      load=(load_before, os.getloadavg()[0]),
                      others=dict(batch.statuses - Counter(completed=completed)) | (
                          {} if settled else {"not settled in time": True}))
    _river_clear(agent)
    return figures


def _loop_batch(ctx: dict, count: int) -> Figures:
    from benchmarks import celery_loop

    pool, path = ctx["loop"], ctx["database_path"]
    total = SEQUENTIAL_RUNS if count == 1 else count
    celery_loop.tables_clear()
    load_before, cpu_before, index = os.getloadavg()[0], _worker_cpu(pool), ctx["next_index"]
    ctx["next_index"] += total

    def finished() -> int:
        return sum(1 for *_, ended, _turns in celery_loop.turn_marks()[1] if ended is not None)

    deadline = 120 + total * ctx["turns"] * ctx["model_seconds"] / min(count, 100)
    for number in range(total):
        celery_loop.conversation_start(prompt=PROMPT.format(index=index + number), database_path=str(path))
        if count == 1:
            _wait(lambda number=number: finished() >= number + 1, deadline, 0.02)
    settled = _wait(lambda: finished() >= total, deadline, 0.1)
    worker_cpu = _worker_cpu(pool) - cpu_before
    marks, conversations = celery_loop.turn_marks()
    overheads = [(turns[turn] - turns[turn - 1]).total_seconds() - ctx["model_seconds"]
                 for turns in marks.values() for turn in sorted(turns) if turn and turn - 1 in turns]
    done = [row for row in conversations if row[1] and row[2]]
    window = (max(row[2] for row in done) - min(row[1] for row in done)).total_seconds() if done else 0.0
    return Figures(runs=total, completed=len(done), turns=sum(row[3] for row in done), window=window,
                   worker_cpu=worker_cpu, overheads=overheads,
                   queue_waits=[(started - queued).total_seconds() for queued, started, *_ in conversations
                                if started],
                   load=(load_before, os.getloadavg()[0]),
                   others={} if settled else {"not finished in time": _last_error(pool)})


def _last_error(pool: Workers) -> str:
    """The last error line of the workers' logs, to say why a batch did not finish."""
    lines = [line for index in range(len(pool.procs)) if pool.log(index).exists()
             for line in pool.log(index).read_text(errors="replace").splitlines()
             if "Error" in line or "ERROR" in line or "Exception" in line]
    return lines[-1][-300:] if lines else "no error logged"


def _lines(name: str, count: int, figures: Figures, *, judge: bool) -> Iterator[str]:
    shown = f"{count} at once" if count > 1 else f"1 at a time ({figures.runs} runs one after another)"
    yield (f"  {name}, {shown}: {figures.turns} turns over {figures.window:.1f} s; load average "
           f"{figures.load[0]:.2f} before, {figures.load[1]:.2f} after")
    yield _figure("completed", f"{figures.completed}/{figures.runs}" + (f", not: {figures.others}"
                                                                       if figures.others else ""),
                  "all", figures.completed == figures.runs and not figures.others, judged=True)
    cpu = f"{figures.cpu_ms_per_turn:.2f} ms ({figures.worker_cpu:.2f} s of CPU)"
    overhead = f"p50 {_pct(figures.overheads, 50) * 1000:.1f} ms, p99 {_pct(figures.overheads, 99) * 1000:.1f} ms"
    if judge:
        yield _figure("worker CPU per turn", cpu, f"<= {TARGET_CPU_MS:g} ms", figures.cpu_ms_per_turn <= TARGET_CPU_MS)
        yield _figure("throughput", f"{figures.rate:.1f} turns/s", f">= {TARGET_TURNS_PER_SECOND:g}",
                      figures.rate >= TARGET_TURNS_PER_SECOND)
        yield _figure("per-turn overhead (wall time minus the model's)", overhead,
                      f"p99 <= {TARGET_OVERHEAD_P99:g} s", _pct(figures.overheads, 99) <= TARGET_OVERHEAD_P99)
    else:
        yield f"    worker CPU per turn: {cpu}"
        yield f"    throughput: {figures.rate:.1f} turns/s"
        yield f"    per-turn overhead (wall time minus the model's): {overhead}"
    yield f"    queue wait (created to started): {_ms(figures.queue_waits)}"


def _report(ctx: dict, counts: list[int]) -> Iterator[str]:
    river, loop = ctx["river"], ctx["loop"]
    yield (f"realwork: the demo's Support Analyst, {ctx['turns']} turns a run ({ctx['turns'] - 1} x execute_query "
           f"through the SQL guard on the demo's SQLite file, then an answer), model {ctx['model_seconds']:g} s a "
           f"reply; {len(river.procs)} River worker processes (prefork, -c 1, RIVER_RUNS_PER_PROCESS="
           f"{river.env['RIVER_RUNS_PER_PROCESS']}); the plain Celery loop on {len(loop.procs)} processes "
           f"(threads, -c {loop.concurrency}); broker {ctx['broker']}; {os.cpu_count()} cores")
    _river_batch(ctx, min(10, max(counts)))  # warm-up: every process has loaded litellm and the run path
    _loop_batch(ctx, min(10, max(counts)))
    if ctx["profile_dir"] is not None:
        (ctx["profile_dir"] / "reset").touch()  # benchmarks.worker_profile: profile from here on
        time.sleep(3)  # a save period of the profiler (fixed: nothing to poll for)
    for count in counts:
        mine = _river_batch(ctx, count)
        theirs = _loop_batch(ctx, count)  # interleaved: the same minutes on the machine
        # The targets are set for TARGET_AT in flight; a smoke run shows them on its largest batch.
        judge = count == TARGET_AT or (count == max(counts) and TARGET_AT not in counts)
        yield from _lines("River", count, mine, judge=judge)
        yield from _lines("plain Celery loop", count, theirs, judge=False)
        ratio = mine.cpu_ms_per_turn / theirs.cpu_ms_per_turn if theirs.turns else float("nan")
        yield (f"    River ÷ plain loop: CPU per turn {ratio:.2f}x, turns/s "
               f"{mine.rate / theirs.rate if theirs.rate else float('nan'):.2f}x")


def _fixtures(data_dir: Path):
    from django.test.utils import override_settings

    from agents.models import Agent
    from datasources.models import DataSource
    from demo.seed import ADMIN_USERNAME, DATA_SOURCE_NAME, SUPPORT_ANALYST, demo_database_path, demo_seed

    with override_settings(RIVER_SQLITE_DATA_DIR=data_dir):
        demo_seed()
        agent = Agent.objects.select_related("workspace").get(name=SUPPORT_ANALYST, workspace__slug="support",
                                                                workspace__organization__slug="demo-org")
        path = demo_database_path(agent.workspace_id)
    source = DataSource.objects.get(workspace=agent.workspace, name=DATA_SOURCE_NAME)
    user = agent.workspace.memberships.select_related("user").get(user__username=ADMIN_USERNAME).user
    return agent, user, source, path


def realwork_bench(*, database_url: str, broker_url: str = REDIS_URL, workers: int = 2,
                   counts: tuple[int, ...] | list[int] = IN_FLIGHT, model_seconds: float = 1.0,
                   turns: int = TURNS, profile_dir: Path | None = None) -> Iterator[str]:
    """Report lines (module docstring). The caller must not patch ``run_segment.delay``:
    runs go through the broker. ``broker_url`` is a Redis URL: broker, channel layer, cache.
    ``profile_dir``: River's workers write CPU profiles there (``benchmarks.worker_profile``)."""
    from django.core.management import call_command

    from benchmarks import celery_loop

    logs = Path(tempfile.mkdtemp(prefix="river-bench-realwork-"))
    data_dir = logs / "datasources"
    model = Model(seconds=model_seconds, turns=turns)
    env = scale_worker_env(database_url=database_url, broker_url=broker_url, redis_url=broker_url,
                           model_url=model.server.base_url)
    (logs / "metrics").mkdir()
    # The workers' metric files stay in the bench's directory, not the checkout's var/metrics,
    # where a test or a running River would count the bench's runs as its own.
    env.update({"RIVER_SQLITE_DATA_DIR": str(data_dir), "RIVER_LLM_MODEL": "openai/realwork-bench",
                "PROMETHEUS_MULTIPROC_DIR": str(logs / "metrics"),
                "RIVER_RUNS_PER_PROCESS": str(max(200, math.ceil(max(counts) / workers)))})
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        (profile_dir / "reset").unlink(missing_ok=True)
    river = Workers({**env, "RIVER_BENCH_PROFILE_DIR": str(profile_dir)} if profile_dir else env, logs,
                    concurrency=1, name="realwork", imports=("benchmarks.worker_profile",) if profile_dir else ())
    loop = Workers(env, logs, concurrency=min(500, max(1, math.ceil(max(counts) / workers))), name="loop",
                   imports=("benchmarks.celery_loop",), pool="threads", queues=celery_loop.QUEUE)
    try:
        with _talking_to(database_url, broker_url):
            call_command("migrate", verbosity=0, interactive=False)
            agent, user, source, path = _fixtures(data_dir)
            model.data_source_id = source.pk
            _river_clear(agent)  # left by an interrupted bench
            celery_loop.tables_create()
            for _ in range(workers):
                river.start()
                loop.start()
            river.wait_ready()
            loop.wait_ready()
            ctx = {"agent": agent, "user": user, "database_url": database_url, "database_path": path,
                   "broker": broker_url.split(":")[0], "model_seconds": model_seconds, "turns": turns,
                   "river": river, "loop": loop, "next_index": 0, "profile_dir": profile_dir}
            try:
                yield from _report(ctx, list(counts))
            finally:
                river.stop_all()
                loop.stop_all()
                with contextlib.suppress(Exception):
                    _river_clear(agent)
                    celery_loop.tables_clear()
    finally:
        model.server.stop()
        shutil.rmtree(logs, ignore_errors=True)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes of each kind (default 2)")
    parser.add_argument("--runs", default=",".join(map(str, IN_FLIGHT)), help="runs in flight, comma-separated")
    parser.add_argument("--model-seconds", type=float, default=1.0, help="the fake model's latency a reply")
    parser.add_argument("--turns", type=int, default=TURNS, help="turns a run: queries, then an answer")
    parser.add_argument("--database-url", default=os.environ.get(
        "BENCH_REALWORK_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{DEFAULT_DATABASE}"))
    parser.add_argument("--redis-url", default=REDIS_URL, help="broker, channel layer and cache")
    parser.add_argument("--profile", type=Path, help="River's workers write CPU profiles (yappi) to this directory")
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    import django

    django.setup()
    for line in realwork_bench(database_url=args.database_url, broker_url=args.redis_url, workers=args.workers,
                               counts=[int(n) for n in args.runs.split(",")], model_seconds=args.model_seconds,
                               turns=args.turns, profile_dir=args.profile):
        print(line, flush=True)


if __name__ == "__main__":
    main()
