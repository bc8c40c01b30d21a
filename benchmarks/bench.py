"""``python -m benchmarks`` (``make bench``): what River costs, section by section, on PostgreSQL.

Every section runs even if one before it fails: a failing section prints ``FAIL`` with
its reason and the command exits non-zero at the end. ``--smoke`` runs every section at
a tiny size (seconds each) and prints ``SMOKE`` instead of judging figures against their
targets, so CI can prove that each section still runs to the end.

The ``turns`` section (this module):

Runs durable executions of 15 turns through ``execution_run_segment`` with a
zero-latency in-process model (a cheap tool call on turns 1-14, a final answer on
turn 15) and a trivial reasoning tool, and measures in the same process:

- per-turn orchestration overhead: the wall time of a turn minus the time spent
  inside the model and inside the tool handler (so it holds the step bookkeeping,
  the thread hop to the tool, the journal (its flush and, with write-behind, the
  wait for the previous turn's commit; the last turn includes the wait for its own),
  event publishing and prompt assembly), against one raw ``INSERT ... COMMIT`` of a
  step-sized row made with psycopg on a scratch table in the same database. It is
  measured twice, interleaved: with the journal's write-behind (River's default)
  and with ``RIVER_JOURNAL_WRITE_BEHIND`` off, where every turn waits for its commit;
- SQL statements per turn, counted with ``connection.execute_wrapper`` (BEGIN is
  implicit in psycopg and COMMIT is a protocol call, so neither passes the wrapper;
  the write-behind statement passes it when it is sent), and transactions per turn:
  an explicit COMMIT, or a statement run in autocommit mode, which commits by itself;
- bytes written per turn: the WAL generated between the first statement of a
  turn's transaction and its end (``pg_current_wal_insert_lsn()`` read on a second
  connection), plus the on-disk size of the step rows of that turn. These runs wait
  for each commit (the same statement; write-behind only changes who waits), so
  the LSN read after the statement brackets its commit.

The raw baseline is taken literally: ``INSERT`` then ``COMMIT`` on a psycopg
connection that is not in autocommit mode (so psycopg sends ``BEGIN`` first, as
any transaction does). For reference the report also gives a single autocommit
``INSERT``, one round trip, and the overhead's ratio to it.

Timing runs and WAL runs are separate, so the LSN probes never inflate the times.
The bench creates its database if needed (the one DATABASE_URL names), migrates
it, keeps its own organization and agent, and deletes its runs when done.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
import traceback
from contextlib import ExitStack, contextmanager
from unittest import mock

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import override_settings
from pydantic import BaseModel, ConfigDict

from agents.models import Agent, AgentVersion
from benchmarks.backtest import RUNS as BACKTEST_RUNS
from benchmarks.backtest import SMOKE_RUNS as BACKTEST_SMOKE
from benchmarks.backtest import backtest_bench
from benchmarks.cold import cold_bench
from benchmarks.connections import SMOKE as CONNECTIONS_SMOKE
from benchmarks.connections import ConnSize, connections_bench
from benchmarks.embedded import embedded_bench
from benchmarks.realwork import DEFAULT_DATABASE as REALWORK_DATABASE
from benchmarks.realwork import IN_FLIGHT as REALWORK_IN_FLIGHT
from benchmarks.realwork import realwork_bench
from benchmarks.runs import PEER_TURNS, bench_agent, fixed_cost_bench, peers_bench, runs_cleanup
from benchmarks.scale import BASELINE_RUNS as SCALE_BASELINE_RUNS
from benchmarks.scale import RABBITMQ_URL as SCALE_RABBITMQ_URL
from benchmarks.scale import REDIS_URL as SCALE_REDIS_URL
from benchmarks.scale import scale_bench
from benchmarks.search import RUNS as SEARCH_RUNS
from benchmarks.search import SMOKE_RUNS as SEARCH_SMOKE
from benchmarks.search import search_bench
from benchmarks.startup import startup_bench
from benchmarks.verdict import targets_judge, verdict
from benchmarks.web import SMOKE as WEB_SMOKE
from benchmarks.web import WebSize, web_bench
from executions import tasks
from executions.journal import DbJournal
from executions.models import Execution, ExecutionStep
from executions.services import execution_run_segment, execution_start, person_run_request
from rivercore.contracts import ResponseStatus
from rivercore.llm import LLMReply, LLMToolCall
from rivercore.tools import Tool, ToolCategory, get_tool, register
from tenancy.models import Membership, Organization, Workspace
from tenancy.permissions import Role

TURNS = 15
TOOL_NAME = "bench_note"
SLUG = "river-bench"
TARGET_OVERHEAD_RATIO = 2.5
TARGET_TAIL_RATIO = 2.0  # p99 / p50 of the per-turn overhead, one run at a time
TARGET_STATEMENTS = 5
TARGET_GROWTH = 1.2
SECTIONS = ("turns", "fixed", "peers", "approvals", "startup", "search", "backtest", "cold", "web", "connections",
            "embedded", "scale", "realwork")
SCALE_DATABASE = "river_bench_scale"
EMBEDDED_DATABASE = "river_bench_embedded"


def _dsn(params: dict) -> str:
    auth = params["user"] + (f":{params['password']}" if params.get("password") else "")
    return f"postgresql://{auth}@{params['host']}:{params['port']}/{params['dbname']}"


class NoteInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str


class NoteOutput(BaseModel):
    note: str


TOOL_SPANS: list[tuple[float, float]] = []


def _note(ctx, args: NoteInput) -> NoteOutput:
    started = time.perf_counter()
    out = NoteOutput(note=args.note)
    TOOL_SPANS.append((started, time.perf_counter()))
    return out


def _tool() -> Tool:
    return get_tool(TOOL_NAME) or register(Tool(
        name=TOOL_NAME, description="Benchmark tool: echoes a note (no I/O).", category=ToolCategory.REASONING,
        input_model=NoteInput, output_model=NoteOutput, handler=_note, permission=None,
    ))


class StubModel:
    """Zero-latency LLMClient: one tool call per turn, a final answer on the last."""

    def __init__(self, turns: int):
        self.turns = turns
        self.spans: list[tuple[float, float]] = []

    def complete(self, *, messages, tools, tier, timeout_seconds) -> LLMReply:
        started = time.perf_counter()
        turn = len(self.spans) + 1
        if turn < self.turns:
            reply = LLMReply(tool_calls=[LLMToolCall(id=f"call_{turn}", name=TOOL_NAME,
                                                     arguments={"note": f"turn {turn}"})],
                             model="bench-stub", provider="bench", tier=tier, input_tokens=60, output_tokens=12,
                             cost_usd=0.0)
        else:
            reply = LLMReply(content="Finished after the planned turns.", model="bench-stub", provider="bench",
                             tier=tier, input_tokens=60, output_tokens=12, cost_usd=0.0)
        self.spans.append((started, time.perf_counter()))
        return reply

    def seconds(self) -> float:
        """Time spent inside the model, in all."""
        return sum(end - began for began, end in self.spans)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


class Probe:
    """Watches the segment's connection: statements with their times, and every
    transaction's end (an explicit COMMIT, or a statement run in autocommit mode,
    which commits by itself), with its span and, with ``side``, its WAL bytes."""

    def __init__(self, side: psycopg.Connection | None):
        self.side = side
        self.statements: list[tuple[float, str]] = []
        self.statement_ends: list[float] = []
        self.commits: list[float] = []  # transaction ends
        self.explicit_commits: list[float] = []
        self.transactions: list[tuple[float, int]] = []  # (end time, WAL bytes)
        self.spans: list[tuple[float, float]] = []  # (first statement, transaction end)
        self._lsn_before: int | None = None
        self._began: float | None = None

    def _wal_now(self) -> int:
        return _lsn(self.side.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])

    def __call__(self, execute, sql, params, many, context):
        autocommit = context["connection"].get_autocommit()
        if self._began is None:
            if self.side is not None:
                self._lsn_before = self._wal_now()
            self._began = time.perf_counter()
        self.statements.append((time.perf_counter(), sql))
        try:
            return execute(sql, params, many, context)
        finally:
            now = time.perf_counter()
            self.statement_ends.append(now)
            if autocommit:
                self._ended(now)

    def _ended(self, now: float) -> None:
        self.commits.append(now)
        if self.side is not None and self._lsn_before is not None:
            self.transactions.append((now, self._wal_now() - self._lsn_before))
        if self._began is not None:
            self.spans.append((self._began, now))
        self._lsn_before = self._began = None

    @contextmanager
    def watching(self):
        real_commit = connection.commit

        def commit():
            real_commit()
            now = time.perf_counter()
            self.explicit_commits.append(now)
            self._ended(now)

        connection.commit = commit
        try:
            with connection.execute_wrapper(self):
                yield self
        finally:
            del connection.commit


class JournalTimer:
    """Times the journal as the run sees it: each outermost ``DbJournal.flush`` or
    ``settle`` call (a flush settles the previous one first), and, for write-behind
    statements, their latency from send to acknowledged commit."""

    def __init__(self):
        self.spans: list[tuple[float, float]] = []
        self.latencies: list[float] = []
        self._depth = 0

    def _timed(self, real):
        timer = self

        def call(journal, *args, **kwargs):
            pending = journal._pending if real is self._real_settle else None
            timer._depth += 1
            started = time.perf_counter()
            try:
                return real(journal, *args, **kwargs)
            finally:
                timer._depth -= 1
                if timer._depth == 0:
                    timer.spans.append((started, time.perf_counter()))
                if pending is not None and pending.settled_at is not None:
                    timer.latencies.append(pending.settled_at - pending.sent_at)

        return call

    @contextmanager
    def watching(self):
        self._real_settle = DbJournal.settle
        with mock.patch.object(DbJournal, "flush", self._timed(DbJournal.flush)), \
                mock.patch.object(DbJournal, "settle", self._timed(DbJournal.settle)):
            yield self


def _verb(sql: str) -> str:
    """``INSERT executions_executionstep`` for a statement, for the report."""
    words = [w.strip('"') for w in sql.split()]
    upper = [w.upper() for w in words]
    verb = upper[0] if upper else "?"
    for keyword in {"INSERT": "INTO", "SELECT": "FROM", "DELETE": "FROM"}.get(verb, ""), "UPDATE":
        if keyword and keyword in upper[: len(upper) - 1]:
            return f"{verb} {words[upper.index(keyword) + 1]}"
    return verb


class Command(BaseCommand):
    help = ("River's benchmark on PostgreSQL: per-turn and per-run cost, peers, approvals, startup, web and "
            "runs at scale; every section runs, and the exit status is non-zero if any failed.")
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, default=40, help="timed runs (after 3 warm-up runs)")
        parser.add_argument("--wal-runs", type=int, default=15, help="runs that measure WAL bytes")
        parser.add_argument("--raw-commits", type=int, default=600,
                            help="raw INSERT ... COMMIT samples, taken between the timed runs")
        parser.add_argument("--approvals", type=int, default=200,
                            help="approval storm: paused runs, each resolved by --racers concurrent requests (0: skip)")
        parser.add_argument("--racers", type=int, default=8, help="concurrent requests per approval (default 8)")
        parser.add_argument("--only-approvals", action="store_true", help="same as --sections approvals")
        parser.add_argument("--sections", default=",".join(SECTIONS),
                            help=f"comma-separated sections to run, of {', '.join(SECTIONS)} (default: all)")
        parser.add_argument("--fixed-runs", type=int, default=40, help="runs for the fixed cost per run (default 40)")
        parser.add_argument("--peer-runs", type=int, default=10,
                            help="timed runs per length for River and each peer (default 10)")
        parser.add_argument("--scale-workers", type=int, default=2, help="Celery worker processes (default 2)")
        parser.add_argument("--scale-runs", default="200,1000", help="runs at once, comma-separated (default 200,1000)")
        parser.add_argument("--brokers", default="redis,rabbitmq",
                            help="brokers the scale section runs on: redis, rabbitmq or both (default both)")
        parser.add_argument("--scale-database", default=SCALE_DATABASE,
                            help=f"the scale section's database, on the same server (default {SCALE_DATABASE})")
        parser.add_argument("--scale-redis", default=SCALE_REDIS_URL,
                            help=f"the scale section's Redis: its broker with redis, its channel layer always "
                                 f"(default {SCALE_REDIS_URL})")
        parser.add_argument("--realwork-runs", default=",".join(map(str, REALWORK_IN_FLIGHT)),
                            help="realwork: analyst runs in flight, comma-separated (default %(default)s); "
                                 "its workers and Redis are --scale-workers and --scale-redis")
        parser.add_argument("--realwork-database", default=REALWORK_DATABASE,
                            help=f"the realwork section's database, on the same server (default {REALWORK_DATABASE})")
        parser.add_argument("--smoke", action="store_true",
                            help="every chosen section at a tiny size (seconds each), figures not judged: proves "
                                 "the sections run to the end; overrides the size options")

    def handle(self, *args, runs, wal_runs, raw_commits, approvals, racers, only_approvals, sections, fixed_runs,
               peer_runs, scale_workers, scale_runs, brokers, scale_database, scale_redis, smoke, **options):
        if approvals < 0 or racers < 1:
            raise CommandError("--approvals must be 0 or more and --racers at least 1.")
        chosen = ["approvals"] if only_approvals else [name.strip() for name in sections.split(",") if name.strip()]
        unknown = sorted(set(chosen) - set(SECTIONS))
        if unknown or not chosen:
            raise CommandError(f"--sections: unknown {', '.join(unknown) or '(none given)'}; "
                               f"choose from {', '.join(SECTIONS)}.")
        if min(runs, fixed_runs, peer_runs, scale_workers) < 1:
            raise CommandError("--runs, --fixed-runs, --peer-runs and --scale-workers must be at least 1.")
        try:
            scale_counts = [int(n) for n in scale_runs.split(",") if n.strip()]
        except ValueError:
            raise CommandError(f"--scale-runs must be whole numbers separated by commas, got {scale_runs!r}.") from None
        broker_names = [b.strip() for b in brokers.split(",") if b.strip()]
        if not scale_counts or min(scale_counts) < 1 or not broker_names or \
                set(broker_names) - {"redis", "rabbitmq"}:
            raise CommandError("--scale-runs needs counts of at least 1 and --brokers a choice of redis, rabbitmq.")
        if connection.vendor != "postgresql":
            raise CommandError("The benchmark needs PostgreSQL: set DATABASE_URL to a postgres:// URL.")
        scale_model_seconds, scale_turns, scale_baseline = 1.0, 3, SCALE_BASELINE_RUNS
        realwork_runs = options["realwork_runs"]
        if not re.fullmatch(r"\s*[1-9]\d*\s*(,\s*[1-9]\d*\s*)*", realwork_runs):
            raise CommandError(f"--realwork-runs must be counts of at least 1, comma-separated: {realwork_runs!r}.")
        realwork = {"counts": [int(n) for n in realwork_runs.split(",")], "model_seconds": 1.0, "turns": 5}
        web_size, peer_lengths, conn_size = WebSize(), PEER_TURNS, ConnSize()
        embedded_size = {"runs": 200, "model_seconds": 1.0, "turns": 3}
        if smoke:
            runs, wal_runs, raw_commits, fixed_runs, peer_runs = 2, 1, 20, 2, 1
            approvals, racers = (min(approvals, 4), min(racers, 2))
            scale_workers, scale_counts, scale_model_seconds, scale_turns, scale_baseline = 1, [3], 0.05, 2, 1
            web_size, peer_lengths, conn_size = WEB_SMOKE, PEER_TURNS[:1], CONNECTIONS_SMOKE
            embedded_size = {"runs": 5, "model_seconds": 0.05, "turns": 2}
            realwork = {"counts": [1, 3], "model_seconds": 0.05, "turns": 3}
            self.stdout.write(f"Smoke run: every section at a tiny size; figures are not judged (SMOKE). "
                              f"Sections: {', '.join(chosen)}")
        targets_judge(judging=not smoke)
        self._ensure_database()
        call_command("migrate", verbosity=0, interactive=False)
        agent, user = self._fixtures()
        outcomes: dict[str, str] = {}
        with ExitStack() as stack:
            # This process drives the segments itself; nothing is handed to workers.
            for task in (tasks.run_segment, tasks.post_process):
                stack.enter_context(mock.patch.object(task, "delay", lambda *a, **k: None))
            stack.enter_context(override_settings(DEBUG=False))  # no query log in the timings
            agents = {turns: bench_agent(base=agent, turns=turns, tool=TOOL_NAME) for turns in PEER_TURNS}
            try:
                in_process = {
                    "turns": lambda: self._report(agent, user, runs=runs, wal_runs=wal_runs, raw_commits=raw_commits),
                    "fixed": lambda: self._lines(fixed_cost_bench(agent=agents[PEER_TURNS[0]], user=user,
                                                                  runs=fixed_runs, stub=StubModel)),
                    "peers": lambda: self._lines(peers_bench(agents=agents, user=user, runs=peer_runs, stub=StubModel,
                                                             dsn=_dsn(self._params()), lengths=peer_lengths)),
                    "approvals": lambda: self._approval_storm(agent.workspace, user, count=approvals, racers=racers),
                    "startup": lambda: self._lines(startup_bench()),
                    "search": lambda: self._lines(search_bench(agent=agent, user=user, runs=SEARCH_SMOKE if smoke
                                                               else SEARCH_RUNS)),
                    "backtest": lambda: self._lines(backtest_bench(agent=agent, user=user, runs=BACKTEST_SMOKE
                                                                   if smoke else BACKTEST_RUNS)),
                }
                for name, body in in_process.items():
                    if name in chosen:
                        skipped = name == "approvals" and not approvals
                        outcomes[name] = "skipped (--approvals 0)" if skipped else self._section(name, body)
            finally:
                Execution.objects.filter(agent=agent).delete()
                runs_cleanup(list(agents.values()))
        # These go through real servers and workers, with nothing patched.
        if "cold" in chosen:
            outcomes["cold"] = self._section("cold", lambda: self._lines(cold_bench()))
        if "web" in chosen:
            outcomes["web"] = self._section("web", lambda: self._lines(web_bench(web_size)))
        if "connections" in chosen:
            outcomes["connections"] = self._section("connections",
                                                    lambda: self._lines(connections_bench(conn_size)))
        if "embedded" in chosen:
            # On a fresh SQLite file, then on a PostgreSQL database of its own (this server).
            outcomes["embedded"] = self._section("embedded", lambda: self._lines(embedded_bench(
                **embedded_size, database_url=_dsn(self._params(EMBEDDED_DATABASE)))))
        for broker in broker_names if "scale" in chosen else []:
            name, broker_url = f"scale ({broker})", SCALE_RABBITMQ_URL if broker == "rabbitmq" else scale_redis
            outcomes[name] = self._section(name, lambda broker_url=broker_url: self._lines(scale_bench(
                database_url=_dsn(self._params(scale_database)), broker_url=broker_url, redis_url=scale_redis,
                workers=scale_workers, runs=scale_counts, model_seconds=scale_model_seconds, turns=scale_turns,
                baseline_runs=scale_baseline)))
        if "realwork" in chosen:
            outcomes["realwork"] = self._section("realwork", lambda: self._lines(realwork_bench(
                database_url=_dsn(self._params(options["realwork_database"])), broker_url=scale_redis,
                workers=scale_workers, **realwork)))
        self.stdout.write("")
        self.stdout.write("Sections: " + "; ".join(f"{name} {outcome}" for name, outcome in outcomes.items()))
        failed = [name for name, outcome in outcomes.items() if outcome.startswith("FAIL")]
        if failed:
            raise CommandError(f"{len(failed)} of {len(outcomes)} sections failed: {', '.join(failed)}")

    def _section(self, name: str, body) -> str:
        """Run one section; its failure is reported (reason here, traceback on stderr) and
        returned, never raised, so the sections after it still run."""
        self.stdout.write("")
        self.stdout.write(f"== {name}")
        started = time.monotonic()
        try:
            body()
        except Exception as exc:  # noqa: BLE001 - one section failing must not stop the others
            traceback.print_exc(file=sys.stderr)
            reason = f"{type(exc).__name__}: {exc}".strip().splitlines()
            self.stdout.write(f"FAIL  section {name} after {time.monotonic() - started:.1f} s: "
                              + (" ".join(reason[:1] + reason[-1:]) if len(reason) > 1 else reason[0]))
            return "FAIL"
        self.stdout.write(f"done  section {name} in {time.monotonic() - started:.1f} s")
        return "done"

    def _lines(self, lines) -> None:
        self.stdout.write("")
        for line in lines:
            self.stdout.write(line)

    # --- setup -------------------------------------------------------------------
    def _params(self, dbname: str | None = None) -> dict:
        db = connection.settings_dict
        params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
                  "dbname": dbname or db["NAME"]}
        if db.get("PASSWORD"):
            params["password"] = db["PASSWORD"]
        return params

    def _ensure_database(self) -> None:
        name = connection.settings_dict["NAME"]
        with psycopg.connect(**self._params("postgres"), autocommit=True) as admin:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
                self.stdout.write(f"created database {name}")

    def _fixtures(self) -> tuple[Agent, object]:
        _tool()
        org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "River benchmark"})
        workspace, _ = Workspace.objects.get_or_create(organization=org, slug=SLUG, defaults={"name": "Benchmark"})
        user, _ = get_user_model().objects.get_or_create(username="river-bench")
        Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ADMIN})
        agent = Agent.objects.filter(workspace=workspace, name="Benchmark agent").first()
        if agent is None:
            agent = Agent.objects.create(workspace=workspace, name="Benchmark agent", business_function="operations",
                                         domain="Benchmark", owner=user, status=Agent.Status.ACTIVE)
            version = AgentVersion.objects.create(
                agent=agent, version=1, goal="Take notes.", instructions="Note each step, then finish.",
                action_level="automated", model_config={"max_turns": TURNS}, tools=[TOOL_NAME],
                approval_rules={"require_approval_for": [], "approver_roles": ["admin"],
                                "auto_approve_conditions": [], "escalation_timeout_minutes": 60},
            )
            agent.current_version = version
            agent.save(update_fields=["current_version"])
        return agent, user

    def _approval_storm(self, workspace, starter, *, count: int, racers: int) -> None:
        from benchmarks.approval_storm import storm_bench

        approvers = []
        for number in range(racers):
            approver, _ = get_user_model().objects.get_or_create(username=f"river-bench-approver-{number}")
            Membership.objects.get_or_create(workspace=workspace, user=approver, defaults={"role": Role.ADMIN})
            approvers.append(approver)
        self.stdout.write("")
        for line in storm_bench(workspace=workspace, starter=starter, approvers=approvers, count=count,
                                data_dir=settings.RIVER_SQLITE_DATA_DIR):
            self.stdout.write(line)

    # --- one run ---------------------------------------------------------------------
    def _one_run(self, agent, user, side: psycopg.Connection | None, *, write_behind: bool) -> dict:
        execution = execution_start(agent=agent, request=person_run_request(
            agent=agent, user=user, prompt="Take fifteen notes."))
        model = StubModel(TURNS)
        TOOL_SPANS.clear()
        probe, timer = Probe(side), JournalTimer()
        with override_settings(RIVER_JOURNAL_WRITE_BEHIND=write_behind), probe.watching(), timer.watching():
            started, cpu = time.perf_counter(), time.process_time()
            status = execution_run_segment(execution_id=execution.pk, llm=model)
            ended, cpu = time.perf_counter(), time.process_time() - cpu
        if status != ResponseStatus.SUCCESS or len(model.spans) != TURNS or len(TOOL_SPANS) != TURNS - 1:
            raise CommandError(f"benchmark run {execution.pk} ended {status!r} after {len(model.spans)} turns")
        starts = [s for s, _ in model.spans]
        # The last turn ends when its journal write has committed (the segment waits
        # for it before it records the run's end, which is reported on its own).
        last_end = max(end for began, end in timer.spans if began >= starts[-1])
        bounds = [*starts, last_end]
        turns = []
        for index in range(TURNS):
            low, high = bounds[index], bounds[index + 1]
            closed = index == TURNS - 1  # the last window includes its end

            def inside(at: float, low=low, high=high, closed=closed) -> bool:
                return low <= at <= high if closed else low <= at < high

            model_time = model.spans[index][1] - model.spans[index][0]
            tool_time = TOOL_SPANS[index][1] - TOOL_SPANS[index][0] if index < TURNS - 1 else 0.0
            first = next(((at, i) for i, (at, _) in enumerate(probe.statements) if inside(at)), None)
            idle = first[0] - probe.statement_ends[first[1] - 1] if first and first[1] > 0 else None
            turns.append({
                "overhead": (high - low) - model_time - tool_time,
                "statements": [sql for at, sql in probe.statements if inside(at)],
                "commits": sum(1 for at in probe.commits if inside(at)),
                "explicit_commits": sum(1 for at in probe.explicit_commits if inside(at)),
                "wal": sum(size for at, size in probe.transactions if inside(at)),
                "journal": sum(end - began for began, end in timer.spans if inside(end)),
                "idle": idle,  # the connection's idle time before the turn's first statement
            })
        latencies = timer.latencies if write_behind else [end - began for began, end in probe.spans]
        return {"turns": turns, "start": starts[0] - started, "end": ended - last_end, "cpu": cpu,
                "row_bytes": self._row_bytes(execution.pk), "latencies": latencies}

    @staticmethod
    def _row_bytes(execution_id: int) -> dict[int, int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT turn, sum(pg_column_size(s.*)) FROM executions_executionstep s "
                "WHERE execution_id = %s GROUP BY turn", [execution_id],
            )
            return {turn: int(size) for turn, size in cursor.fetchall()}

    # --- raw commit ------------------------------------------------------------------
    @contextmanager
    def _raw_committer(self, payload: str):
        """``sample(n, idle)`` times n raw ``INSERT`` + ``COMMIT``s of a step-sized row
        on a scratch table shaped like the step table (primary key + unique pair)
        issued back to back, n single autocommit ``INSERT``s of the same row, and n
        ``INSERT`` + ``COMMIT``s each issued after the connection sat idle for
        ``idle`` seconds; returns the three lists."""
        with psycopg.connect(**self._params()) as raw, psycopg.connect(**self._params(), autocommit=True) as auto:
            raw.execute(
                "CREATE TABLE IF NOT EXISTS bench_raw_commit (id bigserial PRIMARY KEY, execution_id bigint NOT NULL,"
                " step_number integer NOT NULL, step_type varchar(30) NOT NULL, payload jsonb,"
                " created_at timestamptz NOT NULL DEFAULT now(), UNIQUE (execution_id, step_number))"
            )
            raw.execute("TRUNCATE bench_raw_commit")
            raw.commit()
            numbers = iter(range(1, 10**9))
            insert = ("INSERT INTO bench_raw_commit (execution_id, step_number, step_type, payload)"
                      " VALUES (%s, %s, %s, %s)")

            def sample(count: int, idle: float) -> tuple[list[float], list[float], list[float]]:
                committed, single, after_idle = [], [], []
                for _ in range(count):
                    started = time.perf_counter()
                    raw.execute(insert, [1, next(numbers), "observation", payload])
                    raw.commit()
                    committed.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    auto.execute(insert, [1, next(numbers), "observation", payload])
                    single.append(time.perf_counter() - started)
                    time.sleep(idle)
                    started = time.perf_counter()
                    raw.execute(insert, [1, next(numbers), "observation", payload])
                    raw.commit()
                    after_idle.append(time.perf_counter() - started)
                return committed, single, after_idle

            try:
                yield sample
            finally:
                raw.rollback()
                raw.execute("DROP TABLE IF EXISTS bench_raw_commit")
                raw.commit()

    # --- report ----------------------------------------------------------------------
    def _report(self, agent, user, *, runs: int, wal_runs: int, raw_commits: int) -> None:
        primary = bool(settings.RIVER_JOURNAL_WRITE_BEHIND)  # what River is configured to do
        modes = {"write-behind": True, "waiting for each commit": False}
        name = next(label for label, value in modes.items() if value == primary)
        other = next(label for label in modes if label != name)
        warm = {label: [self._one_run(agent, user, None, write_behind=value) for _ in range(3)]
                for label, value in modes.items()}
        sample = ExecutionStep.objects.filter(execution__agent=agent, step_type="observation").first()
        step_payload = json.dumps({"input": sample.input, "output": sample.output, "messages": sample.messages})
        per_run = max(1, raw_commits // max(runs, 1))
        idle = statistics.median(t["idle"] for run in warm["waiting for each commit"] for t in run["turns"]
                                 if t["idle"] is not None)
        timed: dict[str, list[dict]] = {label: [] for label in modes}
        raw, single, after_idle = [], [], []
        with self._raw_committer(step_payload) as committer:
            committer(20, idle)  # warm-up
            for _ in range(runs):  # interleaved, so all see the same load on the server
                for label, value in modes.items():
                    timed[label].append(self._one_run(agent, user, None, write_behind=value))
                committed, autocommitted, idled = committer(per_run, idle)
                raw += committed
                single += autocommitted
                after_idle += idled
        with psycopg.connect(**self._params(), autocommit=True) as side:
            walled = [self._one_run(agent, user, side, write_behind=False) for _ in range(wal_runs)]

        def overhead(label: str, q: float, turns=slice(None)) -> float:
            return _pct([t["overhead"] for run in timed[label] for t in run["turns"][turns]], q)

        runs_main = timed[name]
        raw_p50, raw_p99 = _pct(raw, 50), _pct(raw, 99)
        over_p50, over_p99 = overhead(name, 50), overhead(name, 99)
        statements = [len(t["statements"]) for run in runs_main for t in run["turns"]]
        commits = [t["commits"] for run in runs_main for t in run["turns"]]
        explicit = [t["explicit_commits"] for run in runs_main for t in run["turns"]]
        shapes = sorted({" + ".join(_verb(s) for s in t["statements"]) for run in runs_main for t in run["turns"]})
        wal_by_turn = {n: statistics.median(run["turns"][n - 1]["wal"] for run in walled) for n in (1, 14, 15)}
        wal_min = {n: min(run["turns"][n - 1]["wal"] for run in walled) for n in (1, 14, 15)}
        rows_by_turn = {n: statistics.median(run["row_bytes"].get(n, 0) for run in walled) for n in (1, 14, 15)}

        ms = 1000.0
        out = self.stdout.write
        out(f"River durable-run benchmark: {runs} timed runs x {TURNS} turns in each journal mode, {wal_runs} WAL "
            f"runs, PostgreSQL {connection.pg_version // 10000} database {connection.settings_dict['NAME']!r}, "
            f"events through {settings.CHANNEL_LAYERS['default']['BACKEND'].rsplit('.', 1)[-1]}")
        out("")
        out(f"Per-turn orchestration overhead (turn wall time minus model and tool time), journal {name} "
            "(as configured):")
        out(f"  all turns      p50 {over_p50 * ms:7.3f} ms   p99 {over_p99 * ms:7.3f} ms")
        out(f"  tool turns     p50 {overhead(name, 50, slice(-1)) * ms:7.3f} ms   "
            f"p99 {overhead(name, 99, slice(-1)) * ms:7.3f} ms")
        journal_p50 = _pct([t["journal"] for run in runs_main for t in run["turns"]], 50)
        out(f"  of which the journal (flush, and waiting for commits): p50 {journal_p50 * ms:.3f} ms; the rest "
            f"(step bookkeeping, tool thread hop, event hand-off, prompt) p50 "
            f"{_pct([t['overhead'] - t['journal'] for run in runs_main for t in run['turns']], 50) * ms:.3f} ms")
        out(f"  journal statement from send to commit: p50 "
            f"{_pct([x for run in runs_main for x in run['latencies']], 50) * ms:.3f} ms")
        out(f"  turn 1         p50 {_pct([r['turns'][0]['overhead'] for r in runs_main], 50) * ms:7.3f} ms   "
            f"turn 15 p50 {_pct([r['turns'][-1]['overhead'] for r in runs_main], 50) * ms:7.3f} ms")
        cpu_per_turn = [run["cpu"] / TURNS for run in runs_main]
        out(f"  CPU of this process per turn (every thread; a segment's start and end spread over its "
            f"{TURNS} turns; the probes' own work included): p50 {_pct(cpu_per_turn, 50) * ms:.3f} ms. The wall-time "
            "ratio below compares waits as much as work: when the raw commit is slow (a busy disk), it hides CPU")
        out(f"  segment start (claim + replay) p50 {_pct([r['start'] for r in runs_main], 50) * ms:.3f} ms; "
            f"segment end (final status) p50 {_pct([r['end'] for r in runs_main], 50) * ms:.3f} ms "
            "(once per segment)")
        other_p50 = overhead(other, 50)
        other_journal = _pct([t["journal"] for run in timed[other] for t in run["turns"]], 50)
        out(f"For comparison, journal {other}: p50 {other_p50 * ms:.3f} ms   p99 {overhead(other, 99) * ms:.3f} ms "
            f"(journal p50 {other_journal * ms:.3f} ms), ratio p50 {other_p50 / raw_p50:.2f}x")
        out(f"Raw INSERT ... COMMIT of a step-sized row ({len(step_payload)} bytes of JSON), psycopg:")
        out(f"                 p50 {raw_p50 * ms:7.3f} ms   p99 {raw_p99 * ms:7.3f} ms")
        out(f"  ratio          p50 {over_p50 / raw_p50:5.2f}x      p99 {over_p99 / raw_p99:5.2f}x")
        single_p50, idle_p50 = _pct(single, 50), _pct(after_idle, 50)
        out(f"For reference, one autocommit INSERT (a single round trip): p50 {single_p50 * ms:.3f} ms; "
            f"overhead ratio to it p50 {over_p50 / single_p50:.2f}x")
        out(f"And the same INSERT ... COMMIT issued after the connection sat idle as long as it does before a "
            f"turn's statement when waiting for each commit ({idle * ms:.2f} ms, from the warm-up runs):")
        out(f"                 p50 {idle_p50 * ms:7.3f} ms   ratio p50 {over_p50 / idle_p50:5.2f}x "
            f"({other}: {other_p50 / idle_p50:.2f}x)")
        out("SQL statements per turn on the run's connection (BEGIN/COMMIT not included):")
        out(f"  max {max(statements)}, median {statistics.median(statements):g}; transactions per turn: max "
            f"{max(commits)}, of which ended by an explicit COMMIT: max {max(explicit)} (the others are statements "
            "run in autocommit mode, which commit by themselves)")
        for shape in shapes:
            out(f"  - {shape or '(none)'}")
        out("Bytes written per turn: WAL of the turn's transaction, min over the WAL runs (other sessions on the")
        out("cluster can only add to an LSN difference; median in brackets), and the size of the turn's step rows:")
        for n in (1, 14, 15):
            out(f"  turn {n:2d}: WAL {wal_min[n]:6.0f} B [{wal_by_turn[n]:.0f}]   step rows {rows_by_turn[n]:6.0f} B")
        out("")
        growth = wal_min[15] / wal_min[1] if wal_min[1] else float("inf")
        growth_tool = wal_min[14] / wal_min[1] if wal_min[1] else float("inf")
        checks = [
            (f"overhead p50 <= {TARGET_OVERHEAD_RATIO:g}x raw commit", over_p50 / raw_p50 <= TARGET_OVERHEAD_RATIO,
             f"{over_p50 / raw_p50:.2f}x"),
            (f"overhead p99 <= {TARGET_TAIL_RATIO:g}x its p50, one run at a time",
             over_p99 / over_p50 <= TARGET_TAIL_RATIO, f"{over_p99 / over_p50:.2f}x"),
            (f"statements per turn <= {TARGET_STATEMENTS}", max(statements) <= TARGET_STATEMENTS,
             f"{max(statements)} (+{max(explicit)} COMMIT)"),
            (f"turn-15 bytes <= {TARGET_GROWTH:g}x turn-1 bytes", growth <= TARGET_GROWTH,
             f"{growth:.2f}x (turn 14, same shape as turn 1: {growth_tool:.2f}x)"),
        ]
        out("Targets:")
        for label, ok, figure in checks:
            out(f"  {verdict(ok)}  {label}: {figure}")
