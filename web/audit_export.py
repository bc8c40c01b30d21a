"""The audit page's downloads: its filtered entries as CSV or JSON Lines, streamed.

The entries are read with a database cursor ``EXPORT_CHUNK`` rows at a time and written
one chunk at a time, so a download of a hundred thousand entries holds one chunk in
memory, not the trail. Under ASGI (Daphne) the response is an asynchronous iterator
that reads each chunk in the request's own sync thread, where the cursor lives: Django
would otherwise read a synchronous iterator to its end before sending a byte.

Every CSV cell that a spreadsheet would read as a formula (text starting with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return) starts with an apostrophe instead.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from itertools import islice

from asgiref.sync import sync_to_async

from agents.selectors import agent_names
from common.spreadsheet import csv_cell

EXPORT_CHUNK = 2000
COLUMNS = ("entry", "recorded_at", "action", "action_label", "actor", "workspace_id", "agent_id", "agent",
           "run", "policy_id", "approval_id", "details", "entry_hash")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}


def _record(entry, *, action_label: str, agent: str | None) -> dict:
    return {
        "entry": entry.seq, "recorded_at": entry.created_at.isoformat(), "action": entry.event_type,
        "action_label": action_label, "actor": entry.actor_label or "River", "workspace_id": entry.workspace_id,
        "agent_id": str(entry.agent_id) if entry.agent_id else None, "agent": agent,
        "run": entry.execution_id, "policy_id": str(entry.policy_id) if entry.policy_id else None,
        "approval_id": str(entry.approval_id) if entry.approval_id else None, "details": entry.details,
        "entry_hash": entry.entry_hash or None,
    }


def _csv_text(records: Iterable[dict], *, header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if header:
        writer.writerow(COLUMNS)
    for record in records:
        details = json.dumps(record["details"], ensure_ascii=False, sort_keys=True, default=str)
        writer.writerow([csv_cell(details if name == "details" else record[name]) for name in COLUMNS])
    return buffer.getvalue()


def _jsonl_text(records: Iterable[dict]) -> str:
    # U+2028 and U+2029 stay escaped: some readers split lines on them.
    return "".join(json.dumps(record, ensure_ascii=False, default=str).replace("\u2028", "\\u2028")
                   .replace("\u2029", "\\u2029") + "\n" for record in records)


def export_chunks(rows, *, organization_id: int, fmt: str, labels) -> Iterator[str]:
    """The download's text, one chunk of entries at a time (the CSV's header first).
    ``labels`` names an entry's action; agents are named per chunk, one query each."""
    if fmt == "csv":
        yield _csv_text((), header=True)
    entries = rows.iterator(chunk_size=EXPORT_CHUNK)
    while chunk := list(islice(entries, EXPORT_CHUNK)):
        names = agent_names(organization_id=organization_id, agent_ids={entry.agent_id for entry in chunk})
        records = [_record(entry, action_label=labels(entry.event_type), agent=names.get(entry.agent_id))
                   for entry in chunk]
        yield _csv_text(records, header=False) if fmt == "csv" else _jsonl_text(records)


def _next_chunk(chunks: Iterator[str]) -> str | None:
    return next(chunks, None)


async def export_chunks_async(chunks: Iterator[str]) -> AsyncIterator[str]:
    """``chunks`` for an ASGI response: each read in the request's sync thread (the one
    that holds the database cursor); the cursor is closed when the download ends or the
    browser goes away."""
    try:
        while (chunk := await sync_to_async(_next_chunk)(chunks)) is not None:
            yield chunk
    finally:
        await sync_to_async(chunks.close)()
