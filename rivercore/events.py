"""The live events of a run: the one place where each event's name and fields are written.

Every path that reports a run's progress (the engine's journal, the services that end,
pause or resume a run, the WebSocket replay) builds its events here, so a field added
or renamed changes every path at once. The payload fields are the spec's WebSocket
event reference (000); ``interaction_required`` is River's addition for ``ask_user``.

Plain Python: the engine imports it and must not import Django.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, NamedTuple


class RunEventType(StrEnum):
    RUN_STARTED = "run_started"
    TURN_REASONING = "turn_reasoning"
    TOOL_CALLED = "tool_called"
    OBSERVATION_RECEIVED = "observation_received"
    TURN_COMPLETE = "turn_complete"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_RESOLVED = "approval_resolved"
    RUN_COMPLETED = "run_completed"
    INTERACTION_REQUIRED = "interaction_required"
    INTERACTION_RESOLVED = "interaction_resolved"
    # A session's run (docs/sessions.md) starts with the message or the hand-off behind it.
    USER_MESSAGE = "user_message"
    AGENT_TRANSFERRED = "agent_transferred"


class PartialEventType(StrEnum):
    """Pieces of a model reply while it is generated: sent live, never stored. The
    complete reply arrives as the stored events above (``turn_reasoning``, and
    ``run_completed`` with the answer)."""

    ANSWER_DELTA = "answer_delta"
    REASONING_DELTA = "reasoning_delta"


class RunEvent(NamedTuple):
    """An event before it has a sequence number: ``emit(*event)`` or store its two parts."""

    type: RunEventType
    payload: dict[str, Any]


def _iso(value: dt.datetime | str) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


def _number(value: int | None) -> int | None:
    return None if value is None else int(value)


def run_started_event(*, execution_id: int, agent_id: Any, trigger_type: str,
                      started_at: dt.datetime | str) -> RunEvent:
    return RunEvent(RunEventType.RUN_STARTED, {
        "execution_id": int(execution_id), "agent_id": str(agent_id), "trigger_type": str(trigger_type),
        "started_at": _iso(started_at),
    })


def turn_reasoning_event(*, turn: int, thought_summary: str, model_used: str | None,
                         step_number: int | None = None) -> RunEvent:
    """``step_number`` (River's addition) names the reasoning step, for "why" (observability)."""
    return RunEvent(RunEventType.TURN_REASONING, {
        "turn": int(turn), "thought_summary": thought_summary, "model_used": model_used,
        "step_number": _number(step_number),
    })


def tool_called_event(*, turn: int, tool_name: str, args_summary: str, call_id: str | None = None,
                      step_number: int | None = None) -> RunEvent:
    """``call_id`` and ``step_number`` (River's additions) pair the call with its
    observation and name a step of the call for "why"."""
    return RunEvent(RunEventType.TOOL_CALLED, {
        "turn": int(turn), "tool_name": tool_name, "args_summary": args_summary, "call_id": call_id,
        "step_number": _number(step_number),
    })


def observation_received_event(*, turn: int, tool_name: str, result_summary: str, duration_ms: int,
                               call_id: str | None = None, step_number: int | None = None,
                               status: str | None = None) -> RunEvent:
    """``call_id``, ``step_number`` and the step's ``status`` (completed, failed,
    blocked, ...) are River's additions."""
    return RunEvent(RunEventType.OBSERVATION_RECEIVED, {
        "turn": int(turn), "tool_name": tool_name, "result_summary": result_summary, "duration_ms": int(duration_ms),
        "call_id": call_id, "step_number": _number(step_number), "status": status,
    })


def turn_complete_event(*, turn: int, duration_ms: int) -> RunEvent:
    return RunEvent(RunEventType.TURN_COMPLETE, {"turn": int(turn), "duration_ms": int(duration_ms)})


def approval_required_event(*, approval_id: Any, tool_name: str, pending_since: dt.datetime | str) -> RunEvent:
    return RunEvent(RunEventType.APPROVAL_REQUIRED, {
        "approval_id": str(approval_id), "tool_name": tool_name, "pending_since": _iso(pending_since),
    })


def approval_resolved_event(*, approval_id: Any, resolution: str, resolved_by: Any) -> RunEvent:
    return RunEvent(RunEventType.APPROVAL_RESOLVED, {
        "approval_id": None if approval_id is None else str(approval_id), "resolution": str(resolution),
        "resolved_by": resolved_by,
    })


def run_completed_event(*, status: str, duration_ms: int, turns_used: int, final_output_summary: str,
                        outcome: str | None = None) -> RunEvent:
    """``outcome`` is whether the run did the job (rivercore.outcome); null only where no
    outcome is known (the stateless API, which keeps no run)."""
    return RunEvent(RunEventType.RUN_COMPLETED, {
        "status": str(status), "outcome": None if outcome is None else str(outcome), "duration_ms": int(duration_ms),
        "turns_used": int(turns_used),
        "final_output_summary": final_output_summary,
    })


def interaction_required_event(*, turn: int, request: dict[str, Any]) -> RunEvent:
    return RunEvent(RunEventType.INTERACTION_REQUIRED, {"turn": int(turn), **request})


def interaction_resolved_event(*, turn: int, call_id: str, resolution: str, answered_by: Any) -> RunEvent:
    """The other half of ``interaction_required``: the question was answered (or the
    run was cancelled while it waited)."""
    return RunEvent(RunEventType.INTERACTION_RESOLVED, {
        "turn": int(turn), "call_id": call_id, "resolution": str(resolution), "answered_by": answered_by,
    })


def user_message_event(*, session_id: int, message_id: int, sequence: int, content: str, attachments: list[int],
                       author_id: Any, agent_id: Any) -> RunEvent:
    """A session's message, first event of the run that answers it (``agent_id``: the
    agent the message was routed to)."""
    return RunEvent(RunEventType.USER_MESSAGE, {
        "session_id": int(session_id), "message_id": int(message_id), "sequence": int(sequence), "content": content,
        "attachments": [int(a) for a in attachments], "author_id": author_id, "agent_id": str(agent_id),
    })


def agent_transferred_event(*, session_id: int, message_id: int, from_execution_id: int, from_agent_id: Any,
                            from_agent_name: str, to_agent_id: Any, to_agent_name: str, reason: str, depth: int,
                            action_level: str) -> RunEvent:
    """A hand-off, first event of the receiving agent's run: who handed over, why, how
    deep the message's chain of hand-offs is, and the action level the receiver has."""
    return RunEvent(RunEventType.AGENT_TRANSFERRED, {
        "session_id": int(session_id), "message_id": int(message_id), "from_execution_id": int(from_execution_id),
        "from_agent_id": str(from_agent_id), "from_agent_name": from_agent_name, "to_agent_id": str(to_agent_id),
        "to_agent_name": to_agent_name, "reason": reason, "depth": int(depth), "action_level": str(action_level),
    })


MESSAGE_QUEUED = "message_queued"


def message_queued_notice(*, session_id: int, message_id: int, sequence: int, content: str,
                          attachments: list[int]) -> dict[str, Any]:
    """A session's message waiting behind the active run, as the session's WebSocket
    sends it. Not stored and without ``seq``: the message enters the event stream as its
    run's ``user_message`` once that run starts."""
    return {"type": MESSAGE_QUEUED, "session_id": int(session_id), "message_id": int(message_id),
            "sequence": int(sequence), "content": content, "attachments": [int(a) for a in attachments]}


def partial_event(*, event_type: PartialEventType, execution_id: int, turn: int, index: int,
                  text: str) -> dict[str, Any]:
    """A streamed piece as a client receives it. It has no ``seq`` (it is not in the
    run's log); ``index`` counts the pieces of one kind in one turn from 0, and a piece
    with index 0 starts that turn's text afresh (a retried model call streams again)."""
    return {"type": str(event_type), "execution_id": int(execution_id), "turn": int(turn), "index": int(index),
            "text": text, "partial": True}


def event_message(*, event_type: str, seq: int, execution_id: int, created_at: dt.datetime | str,
                  payload: dict[str, Any]) -> dict[str, Any]:
    """The one JSON shape of a stored event, wherever a client reads it: the WebSocket
    (live or replayed) and ``GET /api/v1/executions/{id}/events/``. The type, the run's
    sequence number and id, when the event was stored (ISO 8601), then the payload's
    fields. ``created_at`` is the stored row's time, so a live event and the same event
    read back later are equal."""
    return {"type": str(event_type), "seq": seq, "execution_id": execution_id, "created_at": _iso(created_at),
            **payload}
