"""Template helpers of the run pages: a run's status as a badge, durations, tokens, cost.

Plain words for business users: "2 min 5 s", "12,340 tokens", "$0.0120"."""

from __future__ import annotations

from decimal import Decimal

from django import template

from executions.models import Execution
from executions.selectors import execution_active_ms
from rivercore.outcome import Outcome

register = template.Library()

S = Execution.Status
# A completed status is not green by itself: only an answered outcome is (OUTCOME_BADGES).
BADGES = {
    S.COMPLETED: "",
    S.RUNNING: "badge-info",
    S.QUEUED: "badge-accent",
    S.AWAITING_APPROVAL: "badge-warn",
    S.AWAITING_INTERACTION: "badge-warn",
    S.AWAITING_CHILD: "badge-warn",
    S.FAILED: "badge-danger",
    S.TIMEOUT: "badge-danger",
    S.BUDGET_EXCEEDED: "badge-danger",
    S.MAX_TURNS_EXCEEDED: "badge-danger",
    S.APPROVAL_EXPIRED: "badge-danger",
    S.CANCELLED: "",
}


@register.filter
def status_badge(status: str) -> str:
    """The badge class for a run status."""
    return BADGES.get(status, "")


OUTCOME_BADGES = {
    Outcome.ANSWERED: "badge-ok",
    Outcome.PARTIAL: "badge-warn",
    Outcome.NO_ANSWER: "badge-warn",
    Outcome.BLOCKED: "badge-warn",
    Outcome.REJECTED: "badge-warn",
    Outcome.FAILED: "badge-danger",
    Outcome.TIMEOUT: "badge-danger",
    Outcome.BUDGET: "badge-danger",
    Outcome.MAX_TURNS: "badge-danger",
    Outcome.EXPIRED: "badge-danger",
    Outcome.CANCELLED: "",
}
OUTCOME_LABELS = {
    Outcome.ANSWERED: "Answered",
    Outcome.PARTIAL: "Partly done",
    Outcome.NO_ANSWER: "No answer",
    Outcome.BLOCKED: "Blocked by a policy",
    Outcome.REJECTED: "Rejected",
    Outcome.FAILED: "Failed",
    Outcome.TIMEOUT: "Timed out",
    Outcome.BUDGET: "Out of budget",
    Outcome.MAX_TURNS: "Out of turns",
    Outcome.EXPIRED: "Approval expired",
    Outcome.CANCELLED: "Cancelled",
}


@register.filter
def outcome_badge(outcome: str | None) -> str:
    """The badge class for a run's outcome: green for ``answered`` only."""
    return OUTCOME_BADGES.get(outcome or "", "")


@register.filter
def outcome_label(outcome: str | None) -> str:
    return OUTCOME_LABELS.get(outcome or "", str(outcome or "").replace("_", " "))


@register.filter
def status_label(status: str) -> str:
    try:
        return S(status).label
    except ValueError:
        return str(status).replace("_", " ")


@register.filter
def milliseconds(value) -> str:
    """A duration in milliseconds as people say it."""
    if value is None or value == "":
        return "—"
    ms = int(value)
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def run_duration(run) -> str:
    """The run's time, waits for approval, a person or a delegated run excluded (its
    segments, the running one up to now); "—" before it started."""
    if getattr(run, "started_at", None) is None:
        return "—"
    return milliseconds(execution_active_ms(run))


@register.filter
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def usd(value) -> str:
    if value is None:
        return "—"
    amount = Decimal(value)
    if amount == 0:
        return "$0"
    return f"${amount:.4f}" if amount < 1 else f"${amount:,.2f}"
