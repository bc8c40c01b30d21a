"""Whole-run sections of ``make bench``: what a run costs around its turns, and the same
scripted runs through River, LangGraph and DBOS side by side.

Both drive River in this process, as the per-turn section does: ``execution_start``, then
the run's segment through ``execution_run_segment`` with a zero-latency stub model and a
reasoning tool with no I/O, so every figure is River's own work and its database's."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import psycopg
from django.db import connection

from agents.models import Agent, AgentMemory, AgentVersion
from benchmarks.verdict import verdict
from executions.models import Execution
from executions.services import execution_run_segment, execution_start, person_run_request
from rivercore.contracts import ResponseStatus

TARGET_FIXED_MS = 8.0
TARGET_FIXED_STATEMENTS = 6
PEER_TURNS = (3, 15, 60)
PEER_NAMES = {"langgraph_sync": "LangGraph PostgresSaver", "langgraph_async": "LangGraph AsyncPostgresSaver",
              "dbos": "DBOS"}


class _Statements:
    """Counts every statement sent for Django's connection in this thread, the journal's
    write-behind statement included (it passes the connection's execute wrappers)."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def bench_agent(*, base: Agent, turns: int, tool: str) -> Agent:
    """An agent like ``base`` allowed ``turns`` turns, with one long-term memory, as a
    working agent has (so a run reads it)."""
    name = f"Benchmark agent, {turns} turns"
    agent = Agent.objects.filter(workspace=base.workspace, name=name).first()
    if agent is None:
        agent = Agent.objects.create(workspace=base.workspace, name=name, business_function=base.business_function,
                                     domain=base.domain, owner=base.owner, status=Agent.Status.ACTIVE)
        version = AgentVersion.objects.create(
            agent=agent, version=1, goal="Take notes.", instructions="Note each step, then finish.",
            action_level="automated", model_config={"max_turns": turns}, tools=[tool],
            approval_rules={"require_approval_for": [], "approver_roles": ["admin"], "auto_approve_conditions": [],
                            "escalation_timeout_minutes": 60},
        )
        agent.current_version = version
        agent.save(update_fields=["current_version"])
        AgentMemory.objects.create(agent=agent, execution_id=-agent.current_version_id,
                                   summary="An earlier benchmark run took its notes and finished.")
    return agent


def _river_run(agent: Agent, user, model, side: psycopg.Connection | None) -> dict:
    """One run, creation to end; its time, statements, and (with ``side``) WAL bytes."""
    counter = _Statements()
    lsn = side.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0] if side else None
    with connection.execute_wrapper(counter):
        started, cpu = time.perf_counter(), time.process_time()
        execution = execution_start(agent=agent, request=person_run_request(
            agent=agent, user=user, prompt="Take the planned notes."))
        status = execution_run_segment(execution_id=execution.pk, llm=model)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if status != ResponseStatus.SUCCESS:
        raise RuntimeError(f"benchmark run {execution.pk} ended {status!r}")
    wal = None
    if side:
        wal = float(side.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", [lsn]).fetchone()[0])
    return {"seconds": elapsed, "cpu": cpu, "statements": counter.count, "wal": wal, "model": model.seconds()}


def fixed_cost_bench(*, agent: Agent, user, runs: int, stub: Callable[[int], object]) -> Iterator[str]:
    """Runs that answer at once (one turn): creation, claim and load, the one turn with its
    journal statement, and the end. The model's own time is taken out."""
    for _ in range(3):
        _river_run(agent, user, stub(1), None)
    results = [_river_run(agent, user, stub(1), None) for _ in range(runs)]
    fixed = [(r["seconds"] - r["model"]) * 1000 for r in results]
    statements = statistics.median(r["statements"] for r in results)
    p50, p99 = _pct(fixed, 50), _pct(fixed, 99)
    yield (f"Fixed cost per run ({runs} runs that answer at once: create, claim and load, the turn, the end; "
           "the stub model's time taken out):")
    most = max(r["statements"] for r in results)
    yield f"  p50 {p50:.2f} ms   p99 {p99:.2f} ms   statements {statements:g} (max {most})"
    cpu = [r["cpu"] * 1000 for r in results]
    yield (f"  CPU of this process per run (every thread: the segment, the publisher, the journal's settler; the "
           f"stub model's included): p50 {_pct(cpu, 50):.2f} ms, p99 {_pct(cpu, 99):.2f} ms; the wall time above "
           "also holds the database's and the machine's waits")
    yield f"  {verdict(p50 <= TARGET_FIXED_MS)}  fixed cost p50 <= {TARGET_FIXED_MS:g} ms: {p50:.2f} ms"
    yield (f"  {verdict(_pct(cpu, 50) <= TARGET_FIXED_MS)}  the same target in CPU (stable on a busy machine): "
           f"{_pct(cpu, 50):.2f} ms")
    yield (f"  {verdict(statements <= TARGET_FIXED_STATEMENTS)}  statements per run <= "
           f"{TARGET_FIXED_STATEMENTS}: {statements:g}")


def peers_bench(*, agents: dict[int, Agent], user, runs: int, dsn: str, stub: Callable[[int], object],
                lengths: tuple[int, ...] = PEER_TURNS) -> Iterator[str]:
    """The same scripted runs through River and its peers, on the same PostgreSQL, for
    runs of each of ``lengths`` turns (each a key of ``agents``)."""
    from benchmarks.peers import peer_cleanup, peer_measure

    yield (f"Peers: the same scripted run (a tool call a turn, a final answer on the last), {runs} timed runs of "
           "each length, zero-latency model; p50 run time, statements and WAL bytes per turn")
    yield f"  {'turns':>5}  {'system':<30} {'run ms':>9} {'stmts/turn':>10} {'WAL B/turn':>10}   River's ratio"
    verdicts = []
    with psycopg.connect(dsn, autocommit=True) as side:
        for turns in lengths:
            agent = agents[turns]
            for _ in range(2):
                _river_run(agent, user, stub(turns), None)
            river = [_river_run(agent, user, stub(turns), side) for _ in range(runs)]
            mine = {"ms": statistics.median(r["seconds"] for r in river) * 1000,
                    "stmts": statistics.median(r["statements"] for r in river) / turns,
                    "wal": min(r["wal"] for r in river) / turns}
            yield f"  {turns:>5}  {'River':<30} {mine['ms']:>9.2f} {mine['stmts']:>10.2f} {mine['wal']:>10.0f}"
            try:
                peers = peer_measure(dsn=dsn, turns=turns, runs=runs)
            finally:
                peer_cleanup(dsn=dsn)
            for key, entry in peers.items():
                line, faster = _peer_line(turns, PEER_NAMES.get(key, key), entry, mine)
                yield line
                if turns == lengths[0] and key in ("langgraph_sync", "dbos"):
                    verdicts.append((PEER_NAMES[key], faster))
    for name, faster in verdicts:
        yield (f"  {verdict(faster, target=faster is not None)}  a {lengths[0]}-turn run faster than {name}"
               + ("" if faster is not None else " (the peer did not run)"))


def _peer_line(turns: int, name: str, entry: dict, mine: dict) -> tuple[str, bool | None]:
    if entry["error"]:
        return f"  {turns:>5}  {name:<30} did not run: {entry['error']}", None
    ms = statistics.median(entry["run_ms"])
    stmts, wal = entry["statements_per_turn"], entry["wal_bytes_per_turn"]
    ratio = (f"time {mine['ms'] / ms:.2f}x, statements {mine['stmts'] / stmts:.2f}x, "
             f"WAL {mine['wal'] / wal:.2f}x" if stmts and wal else f"time {mine['ms'] / ms:.2f}x")
    return f"  {turns:>5}  {name:<30} {ms:>9.2f} {stmts:>10.2f} {wal:>10.0f}   {ratio}", mine["ms"] < ms


def runs_cleanup(agents: list[Agent]) -> None:
    Execution.objects.filter(agent__in=agents).delete()
