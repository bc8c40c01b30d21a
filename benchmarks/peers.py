"""Peer durable-execution frameworks driven through River's scripted agent loop, on PostgreSQL.

Plain Python (no Django): ``peer_measure`` runs the same zero-latency loop through
LangGraph (``PostgresSaver``, and ``AsyncPostgresSaver`` under ``ainvoke``) and DBOS
(a workflow whose model and tool calls are steps), so River's benchmark can set its
own numbers beside theirs. Usage::

    python benchmarks/peers.py postgres://postgres@127.0.0.1:5432/river_peers TURNS RUNS

The loop: the state is a list of message dicts, starting with one user message.
Turn ``i`` is a model step, a pure stub with no latency that appends an assistant
message carrying one tool call ``{"name": "note", "arguments": {"text": "turn i"}}``
on turns ``1..turns-1`` and the final answer ``"done"`` on the last turn, then, unless
the answer was final, a tool step that appends ``{"role": "tool", "content":
'{"ok": true, "turn": i}'}``. Every run starts a new thread / workflow (a uuid4), and
its transcript is checked (``2 * turns`` messages ending in ``"done"``) before any of
its numbers are kept.

Per peer, after ``WARMUP_RUNS`` unrecorded runs, each measured run gives:

- its wall time, from invoking the run to holding its final result (``run_ms``);
- the SQL statements the framework sent to PostgreSQL while it ran, counted on the
  client (``statements_per_turn`` is the median over the measured runs, divided by
  ``turns``). One statement is one query the server executes: a cursor's
  ``execute``/``stream``/``copy`` counts 1, an ``executemany`` counts one per parameter
  set (psycopg pipelines them, but the server runs each). Transaction control that
  the driver issues on its own (psycopg's implicit ``BEGIN``, and ``COMMIT`` /
  ``ROLLBACK``, which are protocol-level calls rather than cursor statements) is not
  counted, as in River's own benchmark (``python -m benchmarks``). How each peer is counted:

  * LangGraph, both savers: the saver gets one psycopg connection (autocommit, the
    settings of ``PostgresSaver.from_conn_string``) whose ``cursor_factory`` is a
    counting ``Cursor``/``AsyncCursor`` subclass. Every statement the saver sends
    goes through a cursor of that connection, including ``Connection.execute``
    (which opens one) and the statements queued in its pipelines (counted when
    queued; a pipeline sync is not a statement). In autocommit mode the saver sends
    no ``BEGIN``/``COMMIT`` at all: a pipeline's statements commit at its sync.
  * DBOS: its system database engine (SQLAlchemy over psycopg, the only engine it
    has), reached through the launched instance, gets a ``before_cursor_execute``
    listener that counts the statements sent from the thread that runs the workflow
    (a synchronous workflow and its steps run inline on the caller's thread, so that
    is all of the run's own work). Left out: what DBOS's background threads send
    (queue and scheduler polling, maintenance jobs, about once a second whatever the
    load, so not the run's), the notification listener's raw connection (it only
    ``LISTEN``s), and the ``BEGIN``/``COMMIT`` around DBOS's transactions (see above).

- the WAL it generated (``wal_bytes_per_turn``): ``pg_current_wal_insert_lsn()`` is
  read on a separate connection just before and just after the run, and the
  difference (``pg_wal_lsn_diff``) divided by ``turns``; the minimum over the first
  ``WAL_RUNS`` measured runs, to shed other sessions' writes and checkpoints'
  full-page images. The reads happen outside the timed window.

A peer that cannot run (missing package, failed connection, wrong transcript, ...)
reports its error and no numbers; the other peers still run.

LangGraph's tables live in their own schema (``LANGGRAPH_SCHEMA``, put first on the
saver connection's ``search_path``) and DBOS's in its own system database
(``<dbname>_dbos_sys``), so ``peer_cleanup`` can drop both without touching anything
else in the bench database.
"""

from __future__ import annotations

import asyncio
import json
import operator
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, TypedDict

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

WARMUP_RUNS = 2
WAL_RUNS = 3
LANGGRAPH_SCHEMA = "river_peer_langgraph"
DBOS_SYS_SUFFIX = "_dbos_sys"
DBOS_APP_NAME = "river-peer-bench"
USER_MESSAGE = {"role": "user", "content": "Take a note on every turn, then say done."}


# -- the scripted loop, shared by every peer ------------------------------------------


def model_reply(turn: int, turns: int) -> dict:
    """The stub model's message on turn ``turn`` of ``turns``."""
    if turn >= turns:
        return {"role": "assistant", "content": "done"}
    call = {"name": "note", "arguments": {"text": f"turn {turn}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def tool_result(turn: int) -> dict:
    return {"role": "tool", "content": json.dumps({"ok": True, "turn": turn})}


def turns_taken(messages: list[dict]) -> int:
    return sum(1 for message in messages if message["role"] == "assistant")


def check_transcript(messages: list[dict], turns: int) -> None:
    """Raise unless ``messages`` is the complete transcript of a ``turns``-turn run."""
    if len(messages) != 2 * turns or messages[-1] != model_reply(turns, turns):
        raise RuntimeError(f"wrong transcript: {len(messages)} messages, last {messages[-1]!r}")


# -- statement counting ---------------------------------------------------------------


class Tally:
    """A statement count that several threads may add to (savers write from worker threads)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._count += n

    def take(self) -> int:
        """The count so far, and start again from zero."""
        with self._lock:
            count, self._count = self._count, 0
            return count


def _streams_counted(base: type, tally: Tally) -> type:
    """``base`` with ``stream`` and ``copy`` counted (the same for sync and async cursors:
    both return their context managers or iterators without awaiting)."""

    class Counted(base):  # type: ignore[misc, valid-type]
        def stream(self, query, params=None, **kwargs):
            tally.add()
            return super().stream(query, params, **kwargs)

        def copy(self, statement, params=None, **kwargs):
            tally.add()
            return super().copy(statement, params, **kwargs)

    return Counted


def counting_cursor(tally: Tally) -> type[psycopg.Cursor]:
    class CountingCursor(_streams_counted(psycopg.Cursor, tally)):  # type: ignore[misc]
        def execute(self, query, params=None, **kwargs):
            tally.add()
            return super().execute(query, params, **kwargs)

        def executemany(self, query, params_seq, **kwargs):
            params_seq = list(params_seq)
            tally.add(len(params_seq))
            return super().executemany(query, params_seq, **kwargs)

    return CountingCursor


def counting_async_cursor(tally: Tally) -> type[psycopg.AsyncCursor]:
    class CountingAsyncCursor(_streams_counted(psycopg.AsyncCursor, tally)):  # type: ignore[misc]
        async def execute(self, query, params=None, **kwargs):
            tally.add()
            return await super().execute(query, params, **kwargs)

        async def executemany(self, query, params_seq, **kwargs):
            params_seq = list(params_seq)
            tally.add(len(params_seq))
            return await super().executemany(query, params_seq, **kwargs)

    return CountingAsyncCursor


# -- peers ----------------------------------------------------------------------------


@dataclass
class Peer:
    """A peer ready to run: ``run()`` does one full run and returns its transcript."""

    run: Callable[[], list[dict]]
    tally: Tally
    close: Callable[[], None]


class LoopState(TypedDict):
    messages: Annotated[list[dict], operator.add]
    turns: int


def _model_node(state: LoopState) -> dict:
    return {"messages": [model_reply(turns_taken(state["messages"]) + 1, state["turns"])]}


def _tool_node(state: LoopState) -> dict:
    return {"messages": [tool_result(turns_taken(state["messages"]))]}


def _after_model(state: LoopState) -> str:
    return "tool" if state["messages"][-1].get("tool_calls") else "end"


def _langgraph_graph(checkpointer: Any) -> Any:
    """model -> tool -> model ..., to END on the final answer; checkpointed after every node."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(LoopState)
    graph.add_node("model", _model_node)
    graph.add_node("tool", _tool_node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _after_model, {"tool": "tool", "end": END})
    graph.add_edge("tool", "model")
    return graph.compile(checkpointer=checkpointer)


def _langgraph_call(turns: int) -> tuple[LoopState, dict]:
    """A run's input and config: a new thread, and two supersteps a turn with room to spare."""
    config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": max(500, 4 * turns)}
    return {"messages": [USER_MESSAGE], "turns": turns}, config


def _saver_connect_kwargs(cursor_factory: type) -> dict:
    """``PostgresSaver.from_conn_string``'s settings, the counting cursor, and our own schema."""
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "cursor_factory": cursor_factory,
        "options": f"-c search_path={LANGGRAPH_SCHEMA},public",
    }


def _ensure_langgraph_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(LANGGRAPH_SCHEMA)))


def langgraph_sync_peer(dsn: str, turns: int) -> Peer:
    from langgraph.checkpoint.postgres import PostgresSaver

    _ensure_langgraph_schema(dsn)
    tally = Tally()
    conn = psycopg.Connection.connect(dsn, **_saver_connect_kwargs(counting_cursor(tally)))
    try:
        saver = PostgresSaver(conn)
        saver.setup()
        graph = _langgraph_graph(saver)
    except BaseException:
        conn.close()
        raise

    def run() -> list[dict]:
        return graph.invoke(*_langgraph_call(turns))["messages"]

    return Peer(run=run, tally=tally, close=conn.close)


def langgraph_async_peer(dsn: str, turns: int) -> Peer:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    _ensure_langgraph_schema(dsn)
    tally = Tally()
    loop = asyncio.Runner()

    async def open_saver() -> tuple[psycopg.AsyncConnection, Any]:
        conn = await psycopg.AsyncConnection.connect(dsn, **_saver_connect_kwargs(counting_async_cursor(tally)))
        saver = AsyncPostgresSaver(conn)  # binds to the running loop, so made inside it
        await saver.setup()
        return conn, saver

    def close() -> None:
        try:
            if conn is not None:
                loop.run(conn.close())
        finally:
            loop.close()

    conn = None
    try:
        conn, saver = loop.run(open_saver())
        graph = _langgraph_graph(saver)
    except BaseException:
        close()
        raise

    def run() -> list[dict]:
        return loop.run(graph.ainvoke(*_langgraph_call(turns)))["messages"]

    return Peer(run=run, tally=tally, close=close)


def _database_url(dsn: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(dsn).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


def _dbos_sys_database(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"]) + DBOS_SYS_SUFFIX


def _ensure_database(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@cache
def _dbos_loop() -> Callable[[int], list[dict]]:
    """The DBOS workflow, registered once per process (DBOS keeps a global registry)."""
    from dbos import DBOS

    @DBOS.step(name="river_peer_model")
    def model_step(messages: list[dict], turn: int, turns: int) -> dict:
        return model_reply(turn, turns)

    @DBOS.step(name="river_peer_tool")
    def tool_step(turn: int) -> dict:
        return tool_result(turn)

    @DBOS.workflow(name="river_peer_loop")
    def agent_loop(turns: int) -> list[dict]:
        messages = [USER_MESSAGE]
        for turn in range(1, turns + 1):
            messages.append(model_step(messages, turn, turns))
            if turn == turns:
                break
            messages.append(tool_step(turn))
        return messages

    return agent_loop


def _count_engine(engine: Any, tally: Tally, thread: int) -> None:
    """Count what ``thread`` (the one running the workflows) sends through ``engine``."""
    from sqlalchemy import event

    def before_cursor_execute(conn, cursor, statement, parameters, context, executemany):
        if threading.get_ident() == thread:
            tally.add(len(parameters) if executemany else 1)

    event.listen(engine, "before_cursor_execute", before_cursor_execute)


def dbos_peer(dsn: str, turns: int) -> Peer:
    from dbos import DBOS, SetWorkflowID

    sys_database = _dbos_sys_database(dsn)
    _ensure_database(dsn, sys_database)
    agent_loop = _dbos_loop()
    tally = Tally()
    config = {"name": DBOS_APP_NAME, "system_database_url": _database_url(dsn, sys_database), "log_level": "WARNING"}
    try:
        dbos = DBOS(config=config)
        DBOS.launch()
        # The engine DBOS built for its system database (private attribute; the
        # base engine, whose listeners also fire for DBOS's execution_options copy).
        _count_engine(dbos._sys_db.engine.engine, tally, threading.get_ident())
    except BaseException:
        DBOS.destroy()
        raise

    def run() -> list[dict]:
        with SetWorkflowID(str(uuid.uuid4())):
            return agent_loop(turns)

    return Peer(run=run, tally=tally, close=DBOS.destroy)


PEERS: dict[str, Callable[[str, int], Peer]] = {
    "langgraph_sync": langgraph_sync_peer,
    "langgraph_async": langgraph_async_peer,
    "dbos": dbos_peer,
}


# -- measuring ------------------------------------------------------------------------


def _wal_lsn(side: psycopg.Connection) -> str:
    return side.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]


def _wal_since(side: psycopg.Connection, lsn: str) -> int:
    return int(side.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (lsn,)).fetchone()[0])


def _one_run(peer: Peer, turns: int, side: psycopg.Connection) -> tuple[float, int, int]:
    """One measured run: its milliseconds, statements and WAL bytes."""
    lsn = _wal_lsn(side)
    peer.tally.take()
    started = time.perf_counter()
    messages = peer.run()
    elapsed_ms = (time.perf_counter() - started) * 1000
    statements = peer.tally.take()
    wal = _wal_since(side, lsn)
    check_transcript(messages, turns)
    return elapsed_ms, statements, wal


def _measure(peer: Peer, turns: int, runs: int, side: psycopg.Connection) -> dict:
    for _ in range(WARMUP_RUNS):
        check_transcript(peer.run(), turns)
    samples = [_one_run(peer, turns, side) for _ in range(max(runs, WAL_RUNS))]
    return {
        "run_ms": [ms for ms, _, _ in samples[:runs]],
        "statements_per_turn": statistics.median(n for _, n, _ in samples[:runs]) / turns,
        "wal_bytes_per_turn": min(wal for _, _, wal in samples[:WAL_RUNS]) / turns,
        "error": None,
    }


def _measure_peer(make: Callable[[str, int], Peer], dsn: str, turns: int, runs: int, side: psycopg.Connection) -> dict:
    try:
        peer = make(dsn, turns)
        try:
            return _measure(peer, turns, runs, side)
        finally:
            peer.close()
    except Exception as exc:  # noqa: BLE001 - one peer failing must not stop the others
        error = f"{type(exc).__name__}: {exc}"
        return {"run_ms": [], "statements_per_turn": None, "wal_bytes_per_turn": None, "error": error}


def peer_measure(*, dsn: str, turns: int, runs: int) -> dict[str, dict]:
    """Run the scripted loop through every peer; see the module docstring for what each number is."""
    if turns < 1 or runs < 1:
        raise ValueError("turns and runs must be at least 1")
    with psycopg.connect(dsn, autocommit=True) as side:
        return {name: _measure_peer(make, dsn, turns, runs, side) for name, make in PEERS.items()}


def peer_cleanup(*, dsn: str) -> None:
    """Drop what the peers left behind: LangGraph's schema and DBOS's system database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(LANGGRAPH_SCHEMA)))
        sys_database = sql.Identifier(_dbos_sys_database(dsn))
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sys_database))


def _table(results: dict[str, dict], turns: int, runs: int) -> str:
    lines = [
        f"{turns} turns, {runs} timed runs",
        f"{'peer':<16} {'p50 run ms':>11} {'stmts/turn':>11} {'WAL B/turn':>11}",
    ]
    for name, entry in results.items():
        if entry["error"]:
            lines.append(f"{name:<16} error: {entry['error']}")
            continue
        p50 = statistics.median(entry["run_ms"])
        lines.append(
            f"{name:<16} {p50:>11.2f} {entry['statements_per_turn']:>11.2f} {entry['wal_bytes_per_turn']:>11.0f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    _dsn, _turns, _runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(_table(peer_measure(dsn=_dsn, turns=_turns, runs=_runs), _turns, _runs))
