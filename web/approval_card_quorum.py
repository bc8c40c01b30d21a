"""The approval card's quorum and escalation part (issue 29 §3): "1 of 2 approvals",
who approved, the arguments under vote after an edit, and where the request went when
nobody decided ("escalated to admin at 14:05; expires 16:00"). Read through
governance.quorum, the same reading the API serializes."""

from __future__ import annotations

import json
from datetime import timedelta

from common.people import person_label
from governance.models import ApprovalRequest
from governance.quorum import quorum_state


def _pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _people(votes) -> list[dict]:
    return [{"name": person_label(v.user) if v.user_id else "a deleted account", "at": v.created_at,
             "edited": v.decision == "edited_approved", "comment": v.comment} for v in votes]


def _escalation(approval: ApprovalRequest) -> dict | None:
    chain = list(approval.escalation_chain or [])
    if not chain:
        return None
    level = approval.escalation_level
    upcoming = chain[level] if level < len(chain) else None
    return {
        "level": level,
        "escalated_at": approval.escalated_at,
        "roles": list(approval.approver_roles or []),
        "next_roles": list(upcoming["approver_roles"]) if upcoming else [],
        "next_at": approval.created_at + timedelta(minutes=upcoming["after_minutes"]) if upcoming else None,
        # The rest of the chain after the next step, so the card shows all of it.
        "later": [{"roles": list(step["approver_roles"]),
                   "at": approval.created_at + timedelta(minutes=step["after_minutes"])} for step in chain[level + 1:]],
    }


def quorum_card(*, user, approval: ApprovalRequest, context: dict, submitted: dict) -> dict:
    """The card context keys this part adds or overrides (``quorum``, ``escalation``; who
    already approved gets no buttons; after an edit the editor starts from the arguments
    under vote)."""
    from web.approval_card import json_changes

    extra: dict = {"escalation": _escalation(approval)}
    state = quorum_state(approval, user=user)
    extra["quorum"] = state
    if state is None:
        return extra
    state = {**state, "missing": max(state["required"] - state["given"], 0),
             "approvers": _people(state["approvals"]), "voided": _people(state["superseded"]),
             "older_preview": _people(state["older_preview"])}
    if state["edited_args"] is not None:
        state["edited_json"] = _pretty(state["edited_args"])
        state["changes"] = json_changes(approval.proposed_payload, state["edited_args"])
        if not submitted.get("modified_args"):
            extra["editor_text"] = state["edited_json"]
    extra["quorum"] = state
    if state["you_approved"]:
        extra["can_resolve"] = False
    return extra
