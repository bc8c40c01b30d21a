"""The overview's figures for one workspace, aggregated in the database.

A fixed number of queries whatever the number of runs: one grouped query over the last
14 days of runs (per day and status: count, tokens, cost) feeds the headline numbers and
both charts; one grouped query counts agents by status and health; the median time to
approval is a count and a fetch of the middle row(s); the average run time is one
aggregate over the week's segments (``executions_average_active_ms``: waits excluded). Replays are never ``Execution``
rows (executions.models.ExecutionReplay), so no figure here can include one.

Days are the server's local days (settings.TIME_ZONE): "today" begins at local midnight.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from django.utils import timezone

from agents.models import Agent
from agents.selectors import agent_status_health_counts
from executions.models import Execution
from executions.selectors import (
    SUCCESS_RATE_COUNTED,
    execution_daily_totals,
    success_rate,
    workspace_average_active_ms,
)
from governance.selectors import approval_median_wait
from rivercore.outcome import Outcome

CHART_DAYS = 14
WEEK_DAYS = 7
APPROVAL_WINDOW_DAYS = 30

# How each run status is drawn and grouped in words: the chart's colours follow the
# badge colours of the lists (ok, danger, warn, muted, info).
STATUS_TONE = {
    Execution.Status.COMPLETED: "ok",
    Execution.Status.FAILED: "danger",
    Execution.Status.TIMEOUT: "danger",
    Execution.Status.MAX_TURNS_EXCEEDED: "warn",
    Execution.Status.BUDGET_EXCEEDED: "warn",
    Execution.Status.APPROVAL_EXPIRED: "warn",
    Execution.Status.CANCELLED: "muted",
    Execution.Status.QUEUED: "info",
    Execution.Status.RUNNING: "info",
    Execution.Status.AWAITING_APPROVAL: "accent",
    Execution.Status.AWAITING_INTERACTION: "accent",
    Execution.Status.AWAITING_CHILD: "accent",
}
STATUS_ORDER = list(STATUS_TONE)


@dataclass
class DayRow:
    day: dt.date
    by_status: dict[str, int] = field(default_factory=dict)
    cost: Decimal = Decimal(0)

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


@dataclass
class Overview:
    today: dt.date
    week_start: dt.date
    chart_start: dt.date
    runs_today: int
    runs_week: int
    finished_week: int  # every terminal status but cancelled (executions.selectors.success_rate)
    answered_week: int
    failed_week: int
    tokens_week: int
    cost_week: Decimal
    cost_unknown_week: int
    days: list[DayRow]
    statuses: list[str]  # the statuses present in the chart window, in STATUS_ORDER
    agents_by_status: dict[str, int]
    agents_by_health: dict[str, int]
    median_approval: dt.timedelta | None
    approvals_decided: int
    # The average run time of the week's finished runs, in milliseconds, waits excluded.
    average_run_ms_week: int | None = None

    @property
    def success_rate(self) -> float | None:
        return success_rate(answered=self.answered_week, finished=self.finished_week)

    @property
    def unanswered_week(self) -> int:
        return self.finished_week - self.answered_week

    @property
    def agents_total(self) -> int:
        return sum(self.agents_by_status.values())

    def chart_data(self) -> dict:
        """What static/overview.js draws: labels, one series per status, cost per day."""
        labels = {status: Execution.Status(status).label for status in self.statuses}
        return {
            "days": [day.day.isoformat() for day in self.days],
            "runs": [
                {"status": status, "label": labels[status], "tone": STATUS_TONE[status],
                 "counts": [day.by_status.get(status, 0) for day in self.days]}
                for status in self.statuses
            ],
            "cost": [float(day.cost) for day in self.days],
        }


def _local_midnight(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def overview_for_workspace(*, workspace, now: dt.datetime | None = None) -> Overview:
    """The figures of ``workspace``; the caller has checked the user belongs to it."""
    today = timezone.localdate(now or timezone.now())
    chart_start = today - dt.timedelta(days=CHART_DAYS - 1)
    week_start = today - dt.timedelta(days=WEEK_DAYS - 1)

    rows = execution_daily_totals(workspace=workspace, since=_local_midnight(chart_start))
    window = [chart_start + dt.timedelta(days=n) for n in range(CHART_DAYS)]
    days = {day: DayRow(day=day) for day in window}
    present: set[str] = set()
    runs_today = runs_week = finished = answered = failed = tokens = unknown = 0
    cost_week = Decimal(0)
    for row in rows:
        day = days.get(row["day"])
        if day is None:  # a run queued "tomorrow" by a clock ahead of ours: not drawn
            continue
        status, count = row["status"], row["runs"]
        present.add(status)
        day.by_status[status] = day.by_status.get(status, 0) + count
        day.cost += row["cost"] or 0
        if row["day"] == today:
            runs_today += count
        if row["day"] >= week_start:
            runs_week += count
            tokens += row["tokens"] or 0
            cost_week += row["cost"] or 0
            unknown += row["cost_unknown"]
            if status in SUCCESS_RATE_COUNTED:
                finished += count
                answered += count if row["outcome"] == Outcome.ANSWERED else 0
            failed += count if status == Execution.Status.FAILED else 0

    agents_by_status: dict[str, int] = {}
    agents_by_health: dict[str, int] = {}
    for row in agent_status_health_counts(workspace=workspace):
        agents_by_status[row["status"]] = agents_by_status.get(row["status"], 0) + row["n"]
        if row["status"] != Agent.Status.ARCHIVED:  # an archived agent's health no longer matters
            agents_by_health[row["health"]] = agents_by_health.get(row["health"], 0) + row["n"]

    median, decided = approval_median_wait(workspace=workspace, since=_local_midnight(
        today - dt.timedelta(days=APPROVAL_WINDOW_DAYS - 1)))
    return Overview(
        today=today, week_start=week_start, chart_start=chart_start,
        runs_today=runs_today, runs_week=runs_week, finished_week=finished, answered_week=answered,
        failed_week=failed, tokens_week=tokens, cost_week=cost_week, cost_unknown_week=unknown,
        days=list(days.values()), statuses=[s for s in STATUS_ORDER if s in present],
        agents_by_status=agents_by_status, agents_by_health=agents_by_health,
        median_approval=median, approvals_decided=decided,
        average_run_ms_week=workspace_average_active_ms(workspace=workspace, since=_local_midnight(week_start)),
    )
