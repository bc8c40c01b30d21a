"""How a canary's runs compare with the deployed version's, and the rollback that
follows when they do worse (docs/changing-safely.md, "Canary and rollback").

The two arms are the runs created while the canary ran (``Execution.canary``), split by
the arm each drew at creation (``Execution.canary_arm``). Every figure is given with the
counts it comes from; a figure is compared only when both arms have ``min_runs`` behind
it (finished runs; decided approvals for the approval rates). Reads here, the writes in
``agents.canary``.
"""

from __future__ import annotations

import logging
from typing import Literal

from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum
from pydantic import BaseModel

from agents.canary import agent_canary_roll_back
from agents.models import Agent, AgentCanary, AgentVersion
from executions.models import Execution
from governance.models import ApprovalRequest
from rivercore.errors import NotFound
from rivercore.outcome import Outcome

logger = logging.getLogger("river.executions")

# The outcomes counted as failed: the run broke or ran out of room, not a person's "no".
FAILED_OUTCOMES = frozenset({Outcome.FAILED, Outcome.TIMEOUT, Outcome.MAX_TURNS, Outcome.BUDGET})
CHECK_BATCH = 200  # running canaries one beat task compares at most
RUN_IDS_SHOWN = 50  # latest finished runs of each arm the API names


class Rate(BaseModel):
    count: int
    of: int
    rate: float | None  # count / of, None when ``of`` is 0


class Mean(BaseModel):
    total: float
    of: int
    mean: float | None


class ArmFigures(BaseModel):
    arm: Literal["canary", "current"]
    version: int
    runs: int  # created in this arm, finished or not
    finished: int
    outcomes: dict[str, int]
    answered: Rate
    failed: Rate
    no_answer: Rate
    approvals_decided: int
    rejected: Rate
    edited: Rate
    cost_usd: Mean
    turns: Mean


class Check(BaseModel):
    metric: str
    canary: float | None
    current: float | None
    compared: bool  # both arms have min_runs behind the figure
    worse: bool  # the canary is worse beyond the margin


class CanaryComparison(BaseModel):
    canary_id: int
    status: str
    percent: int
    margin: float
    min_runs: int
    canary: ArmFigures
    current: ArmFigures
    checks: list[Check]
    verdict: Literal["worse", "not_worse", "too_few_runs"]
    reason: str  # the worse checks in words, empty otherwise


def _rate(count: int, of: int) -> Rate:
    return Rate(count=count, of=of, rate=round(count / of, 4) if of else None)


def _mean(total: float, of: int) -> Mean:
    return Mean(total=round(total, 6), of=of, mean=round(total / of, 6) if of else None)


def _arm(*, arm: str, version: int, rows: list[dict], approvals: dict[str, int]) -> ArmFigures:
    outcomes: dict[str, int] = {}
    runs = finished = turns = 0
    cost = 0.0
    for row in rows:
        runs += row["n"]
        if row["outcome"] is None:
            continue
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + row["n"]
        finished += row["n"]
        cost += float(row["cost"] or 0)
        turns += row["turns"] or 0
    decided = sum(
        approvals.get(status, 0)
        for status in (ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.REJECTED, ApprovalRequest.Status.EDITED)
    )
    return ArmFigures(
        arm=arm,
        version=version,
        runs=runs,
        finished=finished,
        outcomes=dict(sorted(outcomes.items())),
        answered=_rate(outcomes.get(Outcome.ANSWERED, 0), finished),
        failed=_rate(sum(outcomes.get(o, 0) for o in FAILED_OUTCOMES), finished),
        no_answer=_rate(outcomes.get(Outcome.NO_ANSWER, 0), finished),
        approvals_decided=decided,
        rejected=_rate(approvals.get(ApprovalRequest.Status.REJECTED, 0), decided),
        edited=_rate(approvals.get(ApprovalRequest.Status.EDITED, 0), decided),
        cost_usd=_mean(cost, finished),
        turns=_mean(float(turns), finished),
    )


def _checks(canary: ArmFigures, current: ArmFigures, *, margin: float, min_runs: int) -> list[Check]:
    """The comparisons: a rate is worse by more than ``margin`` points (answered: lower;
    the others: higher); a mean (cost, turns) is worse when above the deployed
    version's by more than ``margin`` of it (compared only when that mean is above 0)."""
    runs_enough = canary.finished >= min_runs and current.finished >= min_runs
    approvals_enough = canary.approvals_decided >= min_runs and current.approvals_decided >= min_runs
    checks = []
    for metric, enough, higher_is_worse in (
        ("answered", runs_enough, False),
        ("failed", runs_enough, True),
        ("no_answer", runs_enough, True),
        ("rejected", approvals_enough, True),
        ("edited", approvals_enough, True),
    ):
        a, b = getattr(canary, metric).rate, getattr(current, metric).rate
        compared = enough and a is not None and b is not None
        worse = compared and ((a - b) if higher_is_worse else (b - a)) > margin + 1e-9
        checks.append(Check(metric=f"{metric}_rate", canary=a, current=b, compared=compared, worse=worse))
    for metric in ("cost_usd", "turns"):
        a, b = getattr(canary, metric).mean, getattr(current, metric).mean
        compared = runs_enough and a is not None and b is not None and b > 0
        worse = compared and a > b * (1 + margin) + 1e-12
        checks.append(Check(metric=f"mean_{metric}", canary=a, current=b, compared=compared, worse=worse))
    return checks


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _reason(checks: list[Check], canary: ArmFigures, current: ArmFigures, margin: float) -> str:
    parts = []
    for check in checks:
        if not check.worse:
            continue
        if check.metric.endswith("_rate"):
            name = check.metric.removesuffix("_rate")
            a, b = getattr(canary, name), getattr(current, name)
            parts.append(
                f"{name.replace('_', ' ')} {_percent(a.rate)} ({a.count} of {a.of}) against "
                f"{_percent(b.rate)} ({b.count} of {b.of})"
            )
        else:
            name = check.metric.removeprefix("mean_")
            a, b = getattr(canary, name), getattr(current, name)
            parts.append(f"mean {name.replace('_', ' ')} {a.mean:g} over {a.of} runs against {b.mean:g} over {b.of}")
    if not parts:
        return ""
    return (
        f"v{canary.version} did worse than v{current.version} by more than the margin "
        f"({margin * 100:g} points, or {margin * 100:g}% for means): " + "; ".join(parts) + "."
    )


def canary_runs(*, canary: AgentCanary) -> QuerySet[Execution]:
    """The runs created while ``canary`` ran, both arms."""
    return Execution.objects.filter(canary_id=canary.pk)


def canary_compare(*, canary: AgentCanary) -> CanaryComparison:
    """The two arms' figures, the comparisons and the verdict (two queries)."""
    rows = list(
        canary_runs(canary=canary)
        .values("canary_arm", "outcome")
        .order_by()
        .annotate(n=Count("pk"), cost=Sum("cost_usd"), turns=Sum("turn_count"))
    )
    arm_of = Subquery(Execution.objects.filter(pk=OuterRef("execution_id")).values("canary_arm")[:1])
    approvals: dict[bool, dict[str, int]] = {True: {}, False: {}}
    for row in (
        ApprovalRequest.objects.filter(execution_id__in=canary_runs(canary=canary).values("pk"))
        .annotate(arm=arm_of)
        .values("arm", "status")
        .order_by()
        .annotate(n=Count("pk"))
    ):
        approvals[bool(row["arm"])][row["status"]] = row["n"]
    canary_arm = _arm(
        arm="canary",
        version=canary.version.version,
        approvals=approvals[True],
        rows=[row for row in rows if row["canary_arm"]],
    )
    current_arm = _arm(
        arm="current",
        version=canary.base_version.version,
        approvals=approvals[False],
        rows=[row for row in rows if not row["canary_arm"]],
    )
    checks = _checks(canary_arm, current_arm, margin=canary.margin, min_runs=canary.min_runs)
    if any(check.worse for check in checks):
        verdict = "worse"
    elif not any(check.compared for check in checks):
        verdict = "too_few_runs"
    else:
        verdict = "not_worse"
    return CanaryComparison(
        canary_id=canary.pk,
        status=canary.status,
        percent=canary.percent,
        margin=canary.margin,
        min_runs=canary.min_runs,
        canary=canary_arm,
        current=current_arm,
        checks=checks,
        verdict=verdict,
        reason=_reason(checks, canary_arm, current_arm, canary.margin),
    )


def canary_arm_run_ids(*, canary: AgentCanary, limit: int = RUN_IDS_SHOWN) -> dict[str, list[int]]:
    """The latest finished runs of each arm, by id: the runs the figures come from."""
    finished = canary_runs(canary=canary).filter(outcome__isnull=False).order_by("-pk")
    return {
        "canary": list(finished.filter(canary_arm=True).values_list("pk", flat=True)[:limit]),
        "current": list(finished.filter(canary_arm=False).values_list("pk", flat=True)[:limit]),
    }


def _with_versions(rows: QuerySet[AgentCanary]) -> QuerySet[AgentCanary]:
    return rows.select_related("agent__workspace", "version", "base_version", "started_by", "ended_by")


def canary_latest(*, agent: Agent) -> AgentCanary | None:
    """The agent's running canary, else its latest ended one, else None. The caller has
    the agent through a tenant-scoped selector."""
    rows = _with_versions(AgentCanary.objects.filter(agent_id=agent.pk))
    if agent.canary_id is not None:
        running = rows.filter(pk=agent.canary_id).first()
        if running is not None:
            return running
    return rows.order_by("-started_at", "-pk").first()


def canary_of_version(*, agent: Agent, version: AgentVersion, running: bool = False) -> AgentCanary:
    """The latest canary of the agent's ``version`` (its running one with ``running``);
    404 when there is none. The caller has the agent and version through tenant-scoped
    selectors."""
    rows = _with_versions(AgentCanary.objects.filter(agent_id=agent.pk, version_id=version.pk))
    if running:
        rows = rows.filter(status=AgentCanary.Status.RUNNING)
    found = rows.order_by("-started_at", "-pk").first()
    if found is None:
        raise NotFound(f"No {'running ' if running else ''}canary of version {version.version}.", code="no_canary")
    return found


def canary_check(*, canary_id: int) -> str:
    """Compare a running canary's arms and roll it back when it does worse beyond its
    margin on enough runs. Safe to run twice and beside a person's stop or promotion:
    the rollback is a compare-and-set on the canary's status. Returns what happened:
    ``rolled_back``, ``kept`` (not worse, or too few runs) or ``not_running``."""
    canary = _with_versions(AgentCanary.objects.filter(pk=canary_id, status=AgentCanary.Status.RUNNING)).first()
    if canary is None:
        return "not_running"
    comparison = canary_compare(canary=canary)
    if comparison.verdict != "worse":
        return "kept"
    ended = agent_canary_roll_back(
        canary=canary, reason=comparison.reason, figures=comparison.model_dump(mode="json") | {"status": "rolled_back"}
    )
    if ended is None:
        return "not_running"
    logger.warning("canary %s of agent %s rolled back: %s", canary.pk, canary.agent_id, comparison.reason)
    return "rolled_back"


def canaries_check() -> dict[str, int]:
    """``canary_check`` of every running canary (at most CHECK_BATCH, oldest first): the
    beat task's work. A canary whose check raises is logged and the others go on."""
    counts: dict[str, int] = {}
    ids = list(
        AgentCanary.objects.filter(status=AgentCanary.Status.RUNNING)
        .order_by("started_at", "pk")
        .values_list("pk", flat=True)[:CHECK_BATCH]
    )
    for canary_id in ids:
        try:
            result = canary_check(canary_id=canary_id)
        except Exception:
            logger.exception("canary %s could not be checked", canary_id)
            result = "error"
        counts[result] = counts.get(result, 0) + 1
    return counts


__all__ = [
    "CanaryComparison",
    "canaries_check",
    "canary_arm_run_ids",
    "canary_check",
    "canary_compare",
    "canary_latest",
    "canary_of_version",
    "canary_runs",
]
