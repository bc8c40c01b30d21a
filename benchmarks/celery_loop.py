"""The peer of the realwork section: a plain one-task-per-turn Celery loop.

What a team writes without River: each turn is one Celery task that reads the
conversation's messages from PostgreSQL, asks the model through litellm (the same
client River uses, against the same fake server), runs the SQL the model wrote on the
demo's SQLite file (read-only, no guard), appends the turn's messages as rows in one
transaction and queues the next turn's task after the commit. No lease, no events, no
governance, no audit, no system prompt beyond the question, no model-call record.

The workers import this module (``-I benchmarks.celery_loop``) and consume ``QUEUE``
only; the realwork section creates the tables (``tables_create``), the conversations
(``conversation_start``) and reads the figures back (``turn_marks``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing

from django.db import connection, transaction

from riverapp.celery import app

QUEUE = "bench-celery-loop"
CONVERSATIONS, MESSAGES = "bench_loop_conversation", "bench_loop_message"
TOOL = {
    "type": "function",
    "function": {
        "name": "execute_query",
        "description": "Run one read-only SQL SELECT on the support database.",
        "parameters": {
            "type": "object",
            "properties": {"data_source_id": {"type": "integer"}, "query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
MAX_ROWS = 100


def tables_create() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {CONVERSATIONS} (id bigserial PRIMARY KEY, database_path text NOT NULL,"
            " queued_at timestamptz NOT NULL DEFAULT clock_timestamp(), started_at timestamptz,"
            " finished_at timestamptz, turn_count integer NOT NULL DEFAULT 0)"
        )
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {MESSAGES} (id bigserial PRIMARY KEY, conversation_id bigint NOT NULL,"
            " turn integer NOT NULL, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {MESSAGES}_conv ON {MESSAGES} (conversation_id, id)")


def tables_clear() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {CONVERSATIONS}, {MESSAGES}")


def conversation_start(*, prompt: str, database_path: str) -> int:
    """Insert the conversation and its question, and queue its first turn after commit."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {CONVERSATIONS} (database_path) VALUES (%s) RETURNING id", [database_path])
        conversation_id = cursor.fetchone()[0]
        cursor.execute(f"INSERT INTO {MESSAGES} (conversation_id, turn, body) VALUES (%s, 0, %s)",
                       [conversation_id, json.dumps({"role": "user", "content": prompt})])
        transaction.on_commit(lambda: loop_turn.apply_async((conversation_id,), queue=QUEUE))
    return conversation_id


def _query(path: str, sql: str) -> dict:
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
            cursor = db.execute(sql)
            rows = cursor.fetchmany(MAX_ROWS)
            return {"columns": [c[0] for c in cursor.description or []], "rows": rows}
    except sqlite3.Error as exc:
        return {"error": str(exc)}


_pool = None


def _connection():
    """A connection from this process's pool (psycopg_pool, at most 8): the loop's
    hundreds of threads must not each hold a session of their own."""
    global _pool
    if _pool is None:
        from psycopg_pool import ConnectionPool

        _pool = ConnectionPool(os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1),
                               min_size=2, max_size=8, open=True)
    return _pool.connection()


@app.task(name="benchmarks.celery_loop.turn")
def loop_turn(conversation_id: int) -> None:
    import litellm

    with _connection() as conn:
        path, turn_count = conn.execute(
            f"UPDATE {CONVERSATIONS} SET started_at = coalesce(started_at, clock_timestamp()) "
            "WHERE id = %s RETURNING database_path, turn_count", [conversation_id]).fetchone()
        messages = [body for (body,) in conn.execute(
            f"SELECT body FROM {MESSAGES} WHERE conversation_id = %s ORDER BY id", [conversation_id])]
    response = litellm.completion(
        model=os.environ["RIVER_LLM_MODEL"], api_base=os.environ["RIVER_LLM_BASE_URL"],
        api_key=os.environ["RIVER_LLM_API_KEY"], messages=messages, tools=[TOOL], timeout=60,
        num_retries=0, max_retries=0,
    )
    message = response.choices[0].message
    calls = message.tool_calls or []
    turn = turn_count + 1
    rows = [{"role": "assistant", "content": message.content,
             **({"tool_calls": [{"id": c.id, "type": "function",
                                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                for c in calls]} if calls else {})}]
    for call in calls:
        arguments = json.loads(call.function.arguments or "{}")
        rows.append({"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps(_query(path, str(arguments.get("query", ""))), default=str)})
    with _connection() as conn, conn.transaction():
        with conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {MESSAGES} (conversation_id, turn, body) VALUES (%s, %s, %s)",
                               [[conversation_id, turn, json.dumps(row)] for row in rows])
        conn.execute(f"UPDATE {CONVERSATIONS} SET turn_count = %s, finished_at = CASE WHEN %s THEN "
                     "clock_timestamp() END WHERE id = %s", [turn, not calls, conversation_id])
    if calls:  # after the commit
        loop_turn.apply_async((conversation_id,), queue=QUEUE)


def turn_marks() -> tuple[dict[int, dict[int, object]], list[tuple]]:
    """Per conversation, when each turn's messages were stored (turn 0: its start);
    and every conversation's (queued_at, started_at, finished_at, turn_count)."""
    marks: dict[int, dict[int, object]] = {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, queued_at, started_at, finished_at, turn_count FROM {CONVERSATIONS}")
        conversations = cursor.fetchall()
        for pk, _, started, *_ in conversations:
            if started is not None:
                marks[pk] = {0: started}
        cursor.execute(f"SELECT conversation_id, turn, min(created_at) FROM {MESSAGES} WHERE turn > 0 "
                       "GROUP BY conversation_id, turn")
        for pk, turn, at in cursor.fetchall():
            marks.setdefault(pk, {})[turn] = at
    return marks, [row[1:] for row in conversations]
