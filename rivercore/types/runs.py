"""The statuses of a durable run, as stored (``Execution.status``) and as named in
configuration (which outcomes notify, which outcomes start the next agent)."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INTERACTION = "awaiting_interaction"
    AWAITING_CHILD = "awaiting_child"  # a delegate_to_agent call waits for its child run
    COMPLETED = "completed"
    FAILED = "failed"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    APPROVAL_EXPIRED = "approval_expired"
