"""Steps that both drivers append from outside the loop, and the tool-result message
the model sees. Each is built here once: the durable runs (``executions.services``)
and the stateless ``/api/v1/execute/continue`` resume a paused run with the same
steps, and the runner writes every tool result with the same ``tool_message``."""

from __future__ import annotations

import json
from typing import Any

import pydantic

from rivercore.contracts import InteractionRequest, Step, StepStatus, StepType
from rivercore.errors import Conflict, InvalidInput, pydantic_details
from rivercore.tools import get_tool
from rivercore.types.governance import Decision, ResolutionStatus
from rivercore.types.runs import RunStatus

ANSWER_TOOL = "ask_user"


def tool_message(call_id: str, name: str, payload: object, *, ok: bool) -> dict[str, Any]:
    """The ``tool`` message the model reads for one call's result (or failure)."""
    verb = "returned" if ok else "failed"
    body = json.dumps(payload, default=str, sort_keys=True)
    return {"role": "tool", "tool_call_id": call_id, "content": f"[Tool Result] Tool '{name}' {verb}: {body}"}


def answer_check(interaction: InteractionRequest, answer: object) -> None:
    """Refuse an answer the question does not allow (missing, or not an offered option)."""
    empty = answer is None or (isinstance(answer, str) and not answer.strip())
    if interaction.required and empty:
        raise InvalidInput("An answer is required.", details={"user_response": ["This question needs an answer."]})
    if interaction.options and not empty:
        chosen = answer if isinstance(answer, list) else [answer]
        unknown = [c for c in chosen if c not in interaction.options]
        if unknown:
            raise InvalidInput(
                "The answer must be one of the offered options.",
                details={"user_response": [f"{u!r} is not one of {interaction.options}" for u in unknown]},
            )


def answer_step(*, step_number: int, turn: int, call_id: str, arguments: dict[str, Any], answer: object,
                answered_by: int | None = None) -> Step:
    """The observation that answers an open ``ask_user`` call."""
    body = {"user_response": answer}
    output: dict[str, Any] = {"result": body, "_dispatched": True, "summary": str(answer)[:300]}
    if answered_by is not None:
        output["answered_by"] = answered_by
    return Step(
        step_number=step_number, step_type=StepType.OBSERVATION, turn=turn, tool_name=ANSWER_TOOL,
        tool_category="interaction", call_id=call_id, input=arguments, output=output,
        messages=[tool_message(call_id, ANSWER_TOOL, body, ok=True)],
    )


CHILD_SUMMARY_CHARS = 2_000  # of a delegated run's summary, in its parent's observation
CHILD_ARTIFACTS = 10  # artifact references passed back to the parent
CHILD_ARTIFACT_KEYS = ("type", "tool_name", "call_id", "total_rows", "artifact_id", "name", "version",
                       "data_source_id", "table")


def child_result_step(*, step_number: int, turn: int, call_id: str, tool_name: str, arguments: dict[str, Any],
                      child_execution_id: int, agent_id: str, agent_name: str, status: RunStatus, summary: str,
                      error: dict[str, Any] | None, artifacts: list[dict[str, Any]]) -> Step:
    """The observation that closes a delegation call when its child run has ended: the
    child's summary and a reference to its result (its id and artifact references,
    never its data) when it completed; an error observation naming the child's status
    and error otherwise (failed, timeout, cancelled, budget or turns exhausted, approval
    expired). Either way the parent goes on reasoning."""
    summary = (summary or "")[:CHILD_SUMMARY_CHARS]
    refs = [{key: item.get(key) for key in CHILD_ARTIFACT_KEYS if key in item}
            for item in artifacts[:CHILD_ARTIFACTS] if isinstance(item, dict)]
    facts = {"child_execution_id": child_execution_id, "agent_id": agent_id, "agent_name": agent_name,
             "status": status.value, "summary": summary}
    if status == RunStatus.COMPLETED:
        result = {**facts, "result_ref": {"execution_id": child_execution_id, "artifacts": refs}}
        return Step(
            step_number=step_number, step_type=StepType.OBSERVATION, turn=turn, tool_name=tool_name,
            tool_category="execution", call_id=call_id, input=arguments, status=StepStatus.COMPLETED,
            output={"result": result, "_dispatched": True, "summary": summary[:300],
                    "child_execution_id": child_execution_id},
            messages=[tool_message(call_id, tool_name, result, ok=True)],
        )
    reason = (error or {}).get("message") or summary or "no reason given"
    message = f"The delegated run {child_execution_id} ({agent_name}) ended {status.value}: {reason}"[:1000]
    body = {"error": {"code": "DELEGATED_RUN_FAILED", "message": message,
                      "details": {**facts, "child_error_code": (error or {}).get("code")}},
            "status": "error"}
    return Step(
        step_number=step_number, step_type=StepType.OBSERVATION, turn=turn, tool_name=tool_name,
        tool_category="execution", call_id=call_id, input=arguments, status=StepStatus.FAILED, error=message,
        output={**body, "_dispatched": True, "summary": message[:300], "child_execution_id": child_execution_id},
        messages=[tool_message(call_id, tool_name, body, ok=False)],
    )


def resolution_step(*, step_number: int, turn: int, call_id: str, tool_name: str | None,
                    resolution: dict[str, Any]) -> Step:
    """The governance step that records an approver's decision on a paused call; the
    loop reads it when the run goes on (a rejection blocks the call, an approval or an
    edit lets it through)."""
    rejected = resolution["status"] == ResolutionStatus.REJECTED
    return Step(
        step_number=step_number, step_type=StepType.GOVERNANCE_CHECK, turn=turn, call_id=call_id,
        tool_name=tool_name, status=StepStatus.COMPLETED,
        governance_decision=Decision.BLOCKED if rejected else Decision.PROCEED,
        output={"resolution": resolution},
    )


def edited_arguments(tool_name: str, arguments: object, *, field: str = "modified_args") -> dict[str, Any]:
    """An approver's edited arguments, validated by the tool's input model; errors name
    ``field`` and the argument at fault."""
    tool = get_tool(tool_name)
    if tool is None:
        raise Conflict(f"Tool {tool_name!r} is no longer available; approve or reject instead.",
                       code="tool_unavailable")
    if not isinstance(arguments, dict) or not arguments:
        raise InvalidInput("modified_args is required to edit.", details={field: ["required"]})
    try:
        return tool.input_model.model_validate(arguments).model_dump(mode="json", exclude_none=True)
    except pydantic.ValidationError as exc:
        raise InvalidInput(
            "The edited arguments do not fit the tool's schema.",
            details={f"{field}.{key}": value for key, value in pydantic_details(exc).items()},
        ) from None


def observation_seen(step: Step) -> tuple[bool, Any]:
    """(ok, body) of what the model was shown for an observation step: the same pair
    ``tool_message`` was given when the step was recorded (a test holds every kind of
    observation the runner writes to this)."""
    output = step.output if isinstance(step.output, dict) else {}
    if "result" in output:  # a dispatched call's result (or the rows withheld by governance), or an answer
        return step.status == StepStatus.COMPLETED, output["result"]
    if "error" in output:  # a refused or failed call
        return False, {key: output[key] for key in ("error", "status", "attempts") if key in output}
    # Governance's own answers: rejected or blocked (not ok), recorded as a recommendation (ok).
    return bool(output.get("suggestion_recorded")), output
