"""Template helpers of the run pages: a run's status as a badge, durations, tokens, cost.

Plain words for business users: "2 min 5 s", "12,340 tokens", "$0.0120"."""

from __future__ import annotations

from decimal import Decimal

from django import template

from executions.models import Execution
from executions.selectors import execution_active_ms

register = template.Library()

S = Execution.Status
BADGES = {
    S.COMPLETED: "badge-ok",
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
