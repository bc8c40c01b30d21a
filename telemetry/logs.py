"""River's logs: one JSON line per turn, an optional JSON format for every other line, and
secret redaction on every line whichever the format.

A *turn* is one reasoning step (one model call that answered) and what it led to in the
same segment: the governance check and the dispatch of the tool call it made, or nothing
when it answered in text. The line is written when the turn's tool call settles (its
observation, an approval pause, an interaction, a block) or, failing that, when the next
turn starts; a turn that answers without a tool is written at once with ``tool_called``
null. Built from the engine's observer port (rivercore.observe): in memory only, a
``logging`` call to a handler, nothing that blocks.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from rivercore.contracts import Step, StepStatus, StepType

TURN_LOGGER = "river.turns"
SERVICE = "river"
REDACTED = "[REDACTED]"
LOG_FORMATS = ("text", "json")

turn_logger = logging.getLogger(TURN_LOGGER)
ACCESS_LOGGER = "river.access"
access_logger = logging.getLogger(ACCESS_LOGGER)

# Spec 001's per-turn log field; it shares its name with the tool_called event, which
# rivercore.events alone builds.
TOOL_CALLED_FIELD = "tool_called"
# River's addition: every tool call of the turn (a turn may make several in parallel),
# in the order the model made them; the seed's single-call fields describe the first.
TOOL_CALLS_FIELD = "tool_calls"


# --- redaction -------------------------------------------------------------------------

# Names of fields whose value is redacted (names, not secrets).
_SECRET_FIELD_NAMES = "|".join((
    "password", "passwd", "pwd", "secret", "client_secret", "api[_-]?key", "apikey", "access[_-]?token",
    "refresh[_-]?token", "token", "private[_-]?key", "x-api-key", "x-river-signature", "signature",
))
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # River tokens, trigger API keys, webhook secrets, provider keys.
    (re.compile(r"\b(rvr|rtk)_[A-Za-z0-9]+_[A-Za-z0-9_\-]+"), rf"\1_{REDACTED}"),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=_\-]+"), f"whsec_{REDACTED}"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), f"sk-{REDACTED}"),
    # user:password@ in any URL (postgres://, mysql://, redis://, https://...).
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:)[^\s@'\"]+@"), rf"\1{REDACTED}@"),
    # Authorization headers and bare bearer/basic credentials.
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token)\s+)?[^\s\"',}]+"),
     rf"\1\2 {REDACTED}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), rf"\1 {REDACTED}"),
    # key=value / "key": "value" / 'key': 'value' / key%3Dvalue, for secret-looking keys.
    (re.compile(
        rf"(?i)([\"']?\b(?:{_SECRET_FIELD_NAMES})\b[\"']?\s*(?:=|:|%3D)\s*)"
        r"(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s&;,'\"}\)\]]+)"
    ), rf"\1{REDACTED}"),
]
# Every pattern above needs one of these in the text to match (compared without case,
# so a superset): text without any of them, most of a turn line's values (names,
# statuses, numbers as text, timestamps), skips the patterns. A pattern added above adds
# its literal here (tests/telemetry/test_log_redaction.py compares the result with every
# pattern run, on random text made of these literals).
_COULD_MATCH = re.compile(rf"(?i)rvr_|rtk_|whsec_|sk-|://|authorization|bearer|basic|{_SECRET_FIELD_NAMES}")
_MIN_SECRET_LENGTH = 8


_secrets_cache: list[str] | None = None


def secrets_forget(**kwargs: Any) -> None:
    """Drop the cached secret values (connected to Django's ``setting_changed``)."""
    global _secrets_cache
    _secrets_cache = None


def _configured_secrets() -> list[str]:
    """Exact values of River's own secrets (and their common encodings), longest first;
    computed once per process (every log line reads them)."""
    global _secrets_cache
    if _secrets_cache is None:
        computed = _secrets_compute()
        try:
            from django.conf import settings

            ready = settings.configured
        except Exception:  # noqa: BLE001 - logging before Django is set up
            ready = False
        if not ready:
            return computed
        _secrets_cache = computed
    return _secrets_cache


def _secrets_compute() -> list[str]:
    try:
        from django.conf import settings

        if not settings.configured:
            return []
        values: list[str] = []
        for name in ("SECRET_KEY", "RIVER_ENCRYPTION_KEY", "RIVER_METRICS_TOKEN", "RIVER_LLM_API_KEY"):
            value = getattr(settings, name, None)
            if isinstance(value, str):
                values.append(value)
        import base64
        import os

        for key in (getattr(settings, "RIVER_AUDIT_HMAC_KEYS", None) or {}).values():
            values += [base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode()]
        # Secrets another slice may read straight from the environment.
        values += [os.environ.get(name) or "" for name in ("RIVER_METRICS_TOKEN", "RIVER_LLM_API_KEY")]
        raw_hmac = os.environ.get("RIVER_AUDIT_HMAC_KEYS") or ""
        values += [item.partition(":")[2].strip() for item in raw_hmac.split(",")]
    except Exception:  # noqa: BLE001 - redaction never stops a log line
        return []
    secrets: set[str] = set()
    for value in values:
        if value and len(value) >= _MIN_SECRET_LENGTH:
            secrets.add(value)
            secrets.add(json.dumps(value)[1:-1])  # as it appears inside JSON text
            from urllib.parse import quote

            secrets.add(quote(value, safe=""))
    return sorted(secrets, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with known secret shapes and River's configured secrets replaced.

    Runs the patterns on the text and on its URL-decoded form, so a password written
    ``p%40ss`` in a DSN is caught as well as ``p@ss``."""
    if not text:
        return text
    for secret in _configured_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "%" in text:
        decoded = unquote(text)
        if decoded != text and _redact_patterns(decoded) != decoded:
            text = decoded
    return _redact_patterns(text)


def _redact_patterns(text: str) -> str:
    if not _COULD_MATCH.search(text):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Renders a record's message and exception text redacted, on the record itself, so
    every handler and formatter after it (River's or Celery's) only sees clean text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_river_redacted", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string still logs, as text
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        record._river_redacted = True
        return True


class RedactingTextFormatter(logging.Formatter):
    """The plain format, redacted once more on output (a last line of defence for a
    handler installed without the filter)."""

    def format(self, record: logging.LogRecord) -> str:
        RedactingFilter().filter(record)
        return redact(super().format(record))


def _timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: level, service, logger, message, timestamp, any fields
    passed as ``extra={"river": {...}}`` at the top level, and the exception as text."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "river", None)
        if not isinstance(fields, dict):
            RedactingFilter().filter(record)  # the message is the line's
        elif record.exc_info and not record.exc_text:
            # The fields are the line, not the message; every value is redacted below.
            record.exc_text = self.formatException(record.exc_info)
        line: dict[str, Any] = {
            "level": record.levelname,
            "service": SERVICE,
            "logger": record.name,
            "timestamp": _timestamp(record.created),
        }
        if isinstance(fields, dict):
            line.update(fields)
        else:
            line["message"] = record.getMessage()
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(_redact_values(line), default=str, ensure_ascii=False)


def _redact_values(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redact_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_values(item) for item in value]
    return value


class TurnTextFormatter(logging.Formatter):
    """For the text format the turn line is still JSON: the fields alone, one object."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "river", None) or {"message": record.getMessage()}
        line = {"level": record.levelname, "service": SERVICE, **fields}
        return json.dumps(_redact_values(line), default=str, ensure_ascii=False)


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """The LOGGING dict for ``RIVER_LOG_FORMAT`` (validated by the caller)."""
    main = "json" if log_format == "json" else "plain"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": "telemetry.logs.RedactingFilter"}},
        "formatters": {
            "plain": {"()": "telemetry.logs.RedactingTextFormatter",
                      "format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
            "json": {"()": "telemetry.logs.JsonFormatter"},
            "turn_text": {"()": "telemetry.logs.TurnTextFormatter"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": main, "filters": ["redact"]},
            # No filter: both turn formatters redact every value of the line themselves, and
            # the filter would redact the message, which the line does not carry, once more.
            "turns": {"class": "logging.StreamHandler", "formatter": "json" if main == "json" else "turn_text"},
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            TURN_LOGGER: {"handlers": ["turns"], "level": "INFO", "propagate": False},
            # Django installs its own plain handlers on these (and routes Python warnings
            # to "py.warnings", logging.captureWarnings): they write through River's instead.
            "py.warnings": {"handlers": ["console"], "level": "WARNING", "propagate": False},
            "django": {"handlers": ["console"], "level": level, "propagate": False},
            "django.server": {"handlers": ["console"], "level": level, "propagate": False},
            # The server's access log (AccessLog): one line per request, whatever LOG_LEVEL.
            ACCESS_LOGGER: {"handlers": ["console"], "level": "INFO", "propagate": False},
            "LiteLLM": {"level": "WARNING"},
            "sqlglot": {"level": "ERROR"},
            "httpx": {"level": "WARNING"},
            "daphne": {"level": "WARNING"},
            "django.channels.server": {"level": "WARNING"},
        },
    }


# --- the server's access log and lines written outside logging ----------------------------


class AccessLog:
    """Daphne's "action logger" (what ``daphne.access.AccessLogGenerator`` is), writing
    through the ``river.access`` logger instead of a stream, so the access log takes
    ``RIVER_LOG_FORMAT`` (a JSON object per request) and redaction like every other line.
    ``stream`` is accepted for Daphne's signature and not used."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if protocol == "http" and action == "complete":
            request = f"{details.get('method')} {details.get('path')}"
            fields = {"client": details.get("client"), "method": details.get("method"), "path": details.get("path"),
                      "status": details.get("status"), "size": details.get("size")}
        elif protocol == "websocket" and action in _WEBSOCKET_ACTIONS:
            request = f"{_WEBSOCKET_ACTIONS[action]} {details.get('path')}"
            fields = {"client": details.get("client"), "method": _WEBSOCKET_ACTIONS[action],
                      "path": details.get("path"), "status": None, "size": None}
        else:
            return
        message = f'{fields["client"]} "{request}" {fields["status"] or "-"} {fields["size"] or "-"}'
        access_logger.info("%s", message, extra={"river": {"message": message, "protocol": protocol, **fields}})


_WEBSOCKET_ACTIONS = {"connecting": "WSCONNECTING", "rejected": "WSREJECT", "connected": "WSCONNECT",
                      "disconnected": "WSDISCONNECT"}


def json_line(*, logger: str, message: str, level: int = logging.INFO) -> str:
    """One line in the JSON format, for text a command prints rather than logs (so that
    with ``RIVER_LOG_FORMAT=json`` its output is JSON too)."""
    record = logging.LogRecord(logger, level, __file__, 0, "%s", (message,), None)
    return JsonFormatter().format(record)


# --- the per-turn line -----------------------------------------------------------------


def _span_ids(execution_id: int) -> tuple[str | None, str | None]:
    """The run's own turn span when River traces runs (so the line joins the run's trace,
    not the Celery task's), else the span active on this thread, else nulls."""
    try:
        from opentelemetry import trace

        from telemetry.traces import run_span_context

        context = run_span_context(execution_id=execution_id) or trace.get_current_span().get_span_context()
    except Exception:  # noqa: BLE001 - no tracing: null ids
        return None, None
    if not context.is_valid:
        return None, None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


class _Turn:
    __slots__ = ("fields", "calls", "first_call", "by_call")

    def __init__(self, fields: dict[str, Any], calls: list[str]) -> None:
        self.fields = fields  # the line; its top-level tool fields describe the turn's first call
        self.calls = calls  # call ids still to settle
        self.first_call = calls[0] if calls else None
        # Each call's entry of ``tool_calls`` (the same dicts, so filling one fills the line).
        self.by_call = dict(zip(calls, fields[TOOL_CALLS_FIELD], strict=True))


class TurnLogObserver:
    """Collects each turn's steps in memory and writes its line through ``river.turns``.

    Keyed by execution id; a run that stops mid-turn (crash, cancel) leaves at most one
    entry, and the table is bounded so such leftovers cannot grow without end."""

    MAX_OPEN = 2048

    def __init__(self) -> None:
        self._open: OrderedDict[int, _Turn] = OrderedDict()
        self._lock = threading.Lock()

    def model_called(self, state: Any, call: Any) -> None:
        return None

    def step_added(self, state: Any, step: Step) -> None:
        execution_id = state.request.execution_id
        with self._lock:
            ready = self._advance(execution_id, state, step)
        for fields in ready:
            fields["timestamp"] = _timestamp(datetime.now(tz=UTC).timestamp())
            turn_logger.info("turn %s of execution %s", fields["turn_number"], execution_id, extra={"river": fields})

    def _advance(self, execution_id: int, state: Any, step: Step) -> list[dict[str, Any]]:
        ready: list[dict[str, Any]] = []
        current = self._open.get(execution_id)
        if step.step_type == StepType.REASONING and step.model_used and step.tokens is not None:
            if current is not None:
                ready.append(self._close(execution_id))
            calls = (step.output or {}).get("tool_calls") or [] if isinstance(step.output, dict) else []
            turn = _Turn(self._fields(state, step, calls), [c.get("id") for c in calls if isinstance(c, dict)])
            if not turn.calls:
                ready.append(turn.fields)
                return ready
            self._open[execution_id] = turn
            while len(self._open) > self.MAX_OPEN:
                self._open.popitem(last=False)
            return ready
        if current is None or step.call_id not in current.calls:
            return ready
        fields = current.fields
        call = current.by_call[step.call_id]
        if step.tool_category and call["tool_category"] is None:
            call["tool_category"] = step.tool_category
        if step.step_type == StepType.GOVERNANCE_CHECK:
            call["governance_decision"] = step.governance_decision.value if step.governance_decision else None
            if step.status in (StepStatus.PENDING, StepStatus.BLOCKED):
                if call["tool_status"] is None:
                    call["tool_status"] = "awaiting_approval" if step.status == StepStatus.PENDING else "blocked"
                current.calls.remove(step.call_id)
        elif step.step_type in (StepType.OBSERVATION, StepType.INTERACTION, StepType.ERROR):
            if call["tool_status"] is None:
                call["tool_status"] = _tool_status(step)
            fields["latency_ms"] += step.duration_ms or 0
            current.calls.remove(step.call_id)
        if step.call_id == current.first_call:  # spec 001's fields describe the first call
            for key in ("tool_category", "tool_status", "governance_decision"):
                fields[key] = call[key]
        if not current.calls:
            ready.append(self._close(execution_id))
        return ready

    def _close(self, execution_id: int) -> dict[str, Any]:
        return self._open.pop(execution_id).fields

    @staticmethod
    def _fields(state: Any, step: Step, calls: list[Any]) -> dict[str, Any]:
        trace_id, span_id = _span_ids(state.request.execution_id)
        calls = [c for c in calls if isinstance(c, dict)]
        first = calls[0] if calls else {}
        return {
            "execution_id": state.request.execution_id,
            "workspace_id": state.request.user_context.workspace_id,
            "turn_number": step.turn,
            "model_used": step.model_used,
            "model_tier": step.model_tier,
            "provider": step.provider,
            TOOL_CALLED_FIELD: first.get("name"),
            "tool_category": None,
            "tool_status": None,
            "governance_decision": None,
            "tokens_in": step.tokens.input if step.tokens else 0,
            "tokens_out": step.tokens.output if step.tokens else 0,
            "latency_ms": step.duration_ms or 0,
            TOOL_CALLS_FIELD: [{"tool": c.get("name"), "tool_category": None, "tool_status": None,
                                "governance_decision": None} for c in calls],
            "trace_id": trace_id,
            "span_id": span_id,
            "timestamp": None,  # set when the line is written
        }


def _tool_status(step: Step) -> str:
    if step.step_type == StepType.INTERACTION:
        return "awaiting_interaction"
    if step.status == StepStatus.COMPLETED:
        return "success"
    if step.status == StepStatus.BLOCKED:
        return "blocked"
    return "error"


turn_log_observer = TurnLogObserver()
