"""An MCP write whose outcome is unknown (issue 31 §1, docs/mcp.md "Durability").

An MCP write is not idempotent and River cannot look its effect up afterwards. When a
run resumes and finds such a call's intent journaled but not its result (the worker
died between sending it and journaling the answer), River never sends it again on its
own: the run pauses on an approval request of kind ``unknown_outcome`` and a person
says whether it happened:

- ``done``: the call's observation becomes "a person confirmed it happened"; nothing
  is sent again.
- ``not_done``: the call is sent again, once, through the gate (an approval already
  given for this call still holds; a policy that now blocks it blocks it).

These are plain values shared by the runner, the state fold and the services above.
"""

from __future__ import annotations

from typing import Any

from rivercore.contracts import ApprovalRequestPayload
from rivercore.types.governance import ResolutionStatus
from rivercore.types.toolservers import river_name_split

KIND = "unknown_outcome"
DONE = "done"
NOT_DONE = "not_done"
CHOICES = (DONE, NOT_DONE)

CARD_TITLE = "River sent this call but does not know whether it happened"


def asks_a_person(*, tool_name: str, writes: bool, idempotent: bool) -> bool:
    """Which unjournaled calls pause for a person: MCP writes. Built-in writes keep
    their OUTCOME_UNKNOWN observation (their effect can be checked with River's own
    read tools, and the model is told not to assume either way)."""
    return writes and not idempotent and river_name_split(tool_name) is not None


def payload(*, tool_name: str, arguments: dict[str, Any], reasoning_summary: str) -> ApprovalRequestPayload:
    return ApprovalRequestPayload(
        tool_name=tool_name,
        proposed_payload=arguments,
        reasoning_summary=reasoning_summary,
        risk_context=(
            f"{CARD_TITLE}: the run was interrupted after {tool_name} was sent and before its result was "
            "recorded. Check the system it writes to, then say whether the call happened. "
            "Done: River records that it happened and does not send it again. "
            "Not done: River sends it again, once."
        ),
        required_approvals=1,
        kind=KIND,
    )


def confirmation(resolution: dict[str, Any] | None) -> str | None:
    """The person's answer recorded in a resolution: ``done``, ``not_done`` or None
    (not an unknown-outcome resolution)."""
    if not resolution or resolution.get("kind") != KIND:
        return None
    choice = resolution.get("outcome")
    return choice if choice in CHOICES else None


def resolution(*, outcome: str, resolved_by: str, comment: str = "") -> dict[str, Any]:
    """The resolution a confirmation records (the approval request's ``resolution``)."""
    return {
        "status": ResolutionStatus.APPROVED.value,
        "kind": KIND,
        "outcome": outcome,
        "modified_args": None,
        "resolved_by": resolved_by,
        "resolution_comment": comment or None,
    }


def earlier_approval(steps: list[Any], call_id: str) -> bool:
    """Whether a person (or a scope, a grant, an auto-approve rule) approved this call
    before its outcome became unknown: then a retry needs no second approval."""
    for step in steps:
        output = step.output if isinstance(step.output, dict) else {}
        found = output.get("resolution") if step.call_id == call_id else None
        if (
            isinstance(found, dict)
            and found.get("kind") != KIND
            and found.get("status")
            in (
                ResolutionStatus.APPROVED.value,
                ResolutionStatus.EDITED_APPROVED.value,
            )
        ):
            return True
    return False
