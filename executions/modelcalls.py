"""Every model call of a run recorded: its exact input (messages, tools offered, tier,
timeout) and its output, redacted, de-duplicated and compressed.

The engine's observer port hands each call to ``ModelCallRecorder`` on the thread that
drives the run; it only redacts, hashes and compresses in memory and leaves the record
with the run's journal (``calls_take``), which writes it in the same statement as the
turn's steps and events (executions/journal.py). Nothing here touches the database on
the run's path.

Storage grows linearly with the run: every message is stored once per run, addressed by
the SHA-256 of its redacted JSON (``ModelCallBlob``), and a call stores how many leading
messages it shares with the previous call plus the digests of the rest."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import zlib
from collections import OrderedDict
from datetime import timedelta
from typing import Any

import orjson
from django.utils import timezone

from rivercore import observe

# What is never stored: provider keys, Authorization headers, passwords in URLs and
# River's own secrets (API tokens, trigger API keys, webhook secrets).
_SECRET_PATTERNS = [
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(bearer|basic|token)?\s*[A-Za-z0-9._~+/=-]{6,}"), r"\1[REDACTED]"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1[REDACTED]@"),
    (re.compile(r"\b(?:rvr|rtk|whsec)_[A-Za-z0-9_-]{8,}"), "[REDACTED]"),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), "[REDACTED]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED]"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[REDACTED]"),
    (re.compile(r"(?i)\b((?:api[_-]?key|secret|password|passwd|token)\"?\s*[:=]\s*\"?)[^\s\",}]{4,}"),
     r"\1[REDACTED]"),
]


# A literal every pattern above needs, at the word boundary the pattern needs before it
# (case ignored: a superset). Most of a run's messages hold none, and then the seven
# patterns are not run over them; the boundary keeps a reply's ``input_tokens`` from
# sending every reply through all seven. A pattern added above adds its literal here and
# in ``_LITERALS`` (tests/executions/test_model_calls.py compares the result on random text).
_COULD_MATCH = re.compile(
    r"(?i)\bauthorization|://|\b(?:rvr|rtk|whsec)_|\bsk-|\bakia|\baiza|\bapi[_-]?key|\bsecret|\bpassw|\btoken")
# The same literals as plain lower-case text, looked for first: a regular expression of
# alternatives that occur nowhere still tries each of them at every position of a long
# message (about 2 ms for 6 KB here), while ``in`` finds a literal in one fast pass.
_LITERALS = ("authorization", "://", "rvr_", "rtk_", "whsec_", "sk-", "akia", "aiza", "apikey", "api_key",
             "api-key", "secret", "passw", "token")
# Lower-casing is what ``(?i)`` matches, except for the four characters outside ASCII it
# also takes for an ASCII letter (tests/executions/test_model_calls.py finds them again).
# (``translate`` is slow outside ASCII, so it runs only on text holding one of them.)
_ASCII_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_FOLDED = tuple(chr(code) for code in _ASCII_FOLD)


def _could_match(text: str) -> bool:
    folds = not text.isascii() and any(character in text for character in _FOLDED)
    lowered = (text.translate(_ASCII_FOLD) if folds else text).lower()
    if not any(literal in lowered for literal in _LITERALS):
        return False
    return _COULD_MATCH.search(text) is not None


def secrets_redact(text: str) -> str:
    if not _could_match(text):
        return text
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redacted_json(value: Any) -> bytes:
    text = orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    return secrets_redact(text).encode()


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _pack(body: bytes) -> str:
    return base64.b64encode(zlib.compress(body, 6)).decode()


def body_unpack(body: bytes | memoryview) -> Any:
    return orjson.loads(zlib.decompress(bytes(body)))


class _RunBuffer:
    """What one run's calls left for its journal, and what it already sent."""

    __slots__ = ("blobs", "calls", "known", "last_digests")

    def __init__(self) -> None:
        self.blobs: list[dict] = []
        self.calls: list[dict] = []
        # digest of a message's raw JSON -> digest of its redacted JSON: a message seen
        # before is only serialised and hashed again, never redacted or compressed again.
        self.known: dict[bytes, str] = {}
        self.last_digests: list[str] = []


_buffers: dict[int, _RunBuffer] = {}
_lock = threading.Lock()


def run_open(execution_id: int) -> None:
    """The run's journal will take its calls (called by the journal; a call of a run
    without one, e.g. the stateless /execute, is not recorded)."""
    with _lock:
        _buffers.setdefault(execution_id, _RunBuffer())


def run_close(execution_id: int) -> None:
    with _lock:
        _buffers.pop(execution_id, None)


def calls_take(execution_id: int) -> tuple[list[dict], list[dict]]:
    """The blobs and calls waiting for the run's next flush (and forget them)."""
    buffer = _buffers.get(execution_id)
    if buffer is None or not buffer.calls:
        return [], []
    with _lock:
        blobs, calls = buffer.blobs, buffer.calls
        buffer.blobs, buffer.calls = [], []
    return blobs, calls


def _reply_dump(call: observe.ModelCall) -> dict:
    if call.reply is not None:
        return {"reply": call.reply.model_dump(mode="json")}
    error = call.error
    return {"error": {"kind": error.kind.value, "message": error.message, "details": error.details}} if error else {}


# Messages that every run of an agent version sends (its system prompt, its tool
# schemas) are redacted and compressed once per process, not once per run: raw digest ->
# (digest of the redacted JSON, packed body). Bounded, oldest out first.
PACKED_CACHE_SIZE = 256
_packed_cache: OrderedDict[bytes, tuple[str, str]] = OrderedDict()


def _packed(raw: bytes, message: Any) -> tuple[str, str]:
    with _lock:
        hit = _packed_cache.get(raw)
        if hit is not None:
            _packed_cache.move_to_end(raw)
            return hit
    body = _redacted_json(message)
    entry = (_digest(body), _pack(body))
    with _lock:
        _packed_cache[raw] = entry
        if len(_packed_cache) > PACKED_CACHE_SIZE:
            _packed_cache.popitem(last=False)
    return entry


class ModelCallRecorder:
    """The observer: quick, in memory, never blocking."""

    def step_added(self, state, step) -> None:
        return None

    def model_called(self, state, call: observe.ModelCall) -> None:
        buffer = _buffers.get(state.request.execution_id)
        if buffer is None:
            return
        digests = []
        blobs = []
        known = buffer.known
        for message in [*call.messages, {"__tools__": call.tools}]:
            raw = hashlib.sha256(orjson.dumps(message, default=str, option=orjson.OPT_NON_STR_KEYS)).digest()
            digest = known.get(raw)
            if digest is None:
                digest, packed = _packed(raw, message)
                known[raw] = digest
                blobs.append({"digest": digest, "body": packed})
            digests.append(digest)
        tools_digest = digests.pop()
        previous = buffer.last_digests
        shared = 0
        for mine, theirs in zip(digests, previous, strict=False):
            if mine != theirs:
                break
            shared += 1
        buffer.last_digests = digests
        reply = call.reply
        record = {
            "turn": call.turn, "tier": call.tier, "model": reply.model if reply else "",
            "provider": reply.provider if reply else "", "timeout_seconds": float(call.timeout_seconds),
            "shared_prefix": shared, "digests": digests[shared:], "tools_digest": tools_digest,
            "output": _pack(_redacted_json(_reply_dump(call))),
            "error": secrets_redact(call.error.message) if call.error else "",
            "duration_ms": call.duration_ms,
        }
        with _lock:
            buffer.blobs.extend(blobs)
            buffer.calls.append(record)


def _rows_write_orm(execution_id: int, blobs: list[dict], calls: list[dict]) -> None:
    """The ORM form of the journal's insert (non-PostgreSQL or in a transaction)."""
    from executions.models import ModelCallBlob, ModelCallRecord

    ModelCallBlob.objects.bulk_create(
        [ModelCallBlob(execution_id=execution_id, digest=b["digest"], body=base64.b64decode(b["body"]))
         for b in blobs], ignore_conflicts=True)
    ModelCallRecord.objects.bulk_create(
        [ModelCallRecord(execution_id=execution_id, **{**c, "output": base64.b64decode(c["output"])}) for c in calls])


def model_calls_for_run(*, execution_id: int, turn: int | None = None) -> list[dict]:
    """A run's calls rebuilt (oldest first; of one turn when ``turn`` is given), each with
    its full messages, tools and output. Two queries: the call rows up to that turn
    (bounded by the run's turns; their digest lists are short) and the blobs the
    returned calls reference."""
    from executions.models import ModelCallBlob, ModelCallRecord

    rows = ModelCallRecord.objects.filter(execution_id=execution_id).order_by("turn", "id")
    if turn is not None:
        rows = rows.filter(turn__lte=turn)
    chains, previous = [], []
    for row in rows:
        digests = previous[:row.shared_prefix] + list(row.digests)
        previous = digests
        if turn is None or row.turn == turn:
            chains.append((row, digests))
    wanted = {d for _, digests in chains for d in digests} | {row.tools_digest for row, _ in chains}
    bodies = {b.digest: body_unpack(b.body)
              for b in ModelCallBlob.objects.filter(execution_id=execution_id, digest__in=wanted)} if wanted else {}
    return [{
        "turn": row.turn, "tier": row.tier, "model": row.model, "provider": row.provider,
        "parameters": {"tier": row.tier, "timeout_seconds": row.timeout_seconds},
        "messages": [bodies.get(d) for d in digests],
        "tools": (bodies.get(row.tools_digest) or {}).get("__tools__", []),
        "output": body_unpack(row.output), "error": row.error, "duration_ms": row.duration_ms,
        "recorded_at": row.created_at,
    } for row, digests in chains]


def model_calls_prune(*, days: int) -> int:
    """Delete the recorded calls of runs that ended more than ``days`` ago."""
    from executions.models import Execution, ModelCallBlob, ModelCallRecord

    cutoff = timezone.now() - timedelta(days=days)
    old = Execution.objects.filter(finished_at__lt=cutoff).values("pk")
    deleted, _ = ModelCallRecord.objects.filter(execution_id__in=old).delete()
    ModelCallBlob.objects.filter(execution_id__in=old).delete()
    return deleted
