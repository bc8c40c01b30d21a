"""A run's progressive status block (seed 004): phase, turn n of max, tokens used of
budget, the current tool and the last event's sequence number.

Derived, not written per turn: the execution row's counters (which the journal already
updates with every turn), its latest tool step and its latest event, two indexed
queries. The sources are merged in order, oldest knowledge first, and a later source
only sets the fields it knows (``status_block_merge``): a partial update never replaces
the block, so a turn that only reasons keeps the tool of the turn before it."""

from __future__ import annotations

from typing import Any

from executions.models import Execution, ExecutionEvent, ExecutionStep

PHASES = {
    Execution.Status.QUEUED: "queued",
    Execution.Status.RUNNING: "running",
    Execution.Status.AWAITING_APPROVAL: "awaiting_approval",
    Execution.Status.AWAITING_INTERACTION: "awaiting_interaction",
    Execution.Status.AWAITING_CHILD: "awaiting_child",
}


def status_block_merge(block: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``block`` with the fields ``update`` knows (a None value is "not known")."""
    merged = dict(block)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = status_block_merge(merged[key], value)
        elif value is not None:
            merged[key] = value
    return merged


# The live message that carries the block (docs/api.md, events): not one of the run's
# stored, numbered events, so it has no ``seq`` and is never replayed.
STATUS_MESSAGE_TYPE = "status"


def status_message(*, execution_id: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": STATUS_MESSAGE_TYPE, "execution_id": execution_id, "status_detail": block}


def _tool_entry(*, name: str, step_type: str, status: str, step_number: int, turn: int) -> dict[str, Any]:
    return {"name": name, "step_number": step_number, "turn": turn,
            "state": "done" if step_type == ExecutionStep.StepType.OBSERVATION else "in_progress", "status": status}


def status_block_of_state(state: Any, *, last_event_seq: int) -> dict[str, Any]:
    """The whole block of a running segment, from its state in memory (no query): what
    the journal sends with each turn it commits."""
    model = state.request.agent_config.model_settings
    block: dict[str, Any] = {
        "phase": PHASES[Execution.Status.RUNNING], "run_status": Execution.Status.RUNNING.value,
        "turn": {"current": state.turn, "max": model.max_turns},
        "tokens": {"used": state.tokens_input + state.tokens_output, "budget": model.token_budget},
        "current_tool": None, "last_event_seq": last_event_seq,
    }
    for step in reversed(state.steps):
        if step.tool_name:
            block["current_tool"] = _tool_entry(name=step.tool_name, step_type=step.step_type.value,
                                                status=step.status.value, step_number=step.step_number,
                                                turn=step.turn)
            break
    return block


def status_update(*, status: str, last_event_seq: int | None) -> dict[str, Any]:
    """A partial block for a run whose status moved outside a segment's turn (paused,
    resumed, ended, cancelled): the fields it changes; the others are unchanged, and
    ``status_block_merge`` applies it (a missing or null field is "not known")."""
    return {"phase": PHASES.get(status, "finished"), "run_status": str(status), "last_event_seq": last_event_seq}


def execution_status_block(*, execution: Execution) -> dict[str, Any]:
    config = (execution.agent_version.model_config or {}) if execution.agent_version_id else {}
    block: dict[str, Any] = {
        "phase": PHASES.get(execution.status, "finished"),
        "run_status": execution.status,
        "turn": {"current": execution.turn_count, "max": config.get("max_turns", 15)},
        "tokens": {"used": execution.tokens_input + execution.tokens_output,
                   "budget": config.get("token_budget", 100_000)},
        "current_tool": None,
        "last_event_seq": 0,
    }
    tool_step = (ExecutionStep.objects.filter(execution_id=execution.pk).exclude(tool_name="")
                 .order_by("-step_number").values("tool_name", "step_type", "status", "step_number", "turn").first())
    if tool_step is not None:
        block = status_block_merge(block, {"current_tool": _tool_entry(
            name=tool_step["tool_name"], step_type=tool_step["step_type"], status=tool_step["status"],
            step_number=tool_step["step_number"], turn=tool_step["turn"])})
    last_seq = (ExecutionEvent.objects.filter(execution_id=execution.pk).order_by("-seq")
                .values_list("seq", flat=True).first())
    return status_block_merge(block, {"last_event_seq": last_seq})
