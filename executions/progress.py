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
        block = status_block_merge(block, {"current_tool": {
            "name": tool_step["tool_name"], "step_number": tool_step["step_number"], "turn": tool_step["turn"],
            "state": "done" if tool_step["step_type"] == ExecutionStep.StepType.OBSERVATION else "in_progress",
            "status": tool_step["status"],
        }})
    last_seq = (ExecutionEvent.objects.filter(execution_id=execution.pk).order_by("-seq")
                .values_list("seq", flat=True).first())
    return status_block_merge(block, {"last_event_seq": last_seq})
