"""Canaries (docs/changing-safely.md, "Canary and rollback"): a version tried on a share
of an agent's new runs beside the deployed one, then promoted, stopped or rolled back.

Which arm a run takes is decided once, when it is created (``executions.services.start``),
by ``canary_arm_draw`` of the canary's seed and the run's id: anyone can recompute it,
and a run keeps the version it drew for its whole life. The comparison of the two arms
reads runs, so it lives above, in ``executions.canary``; the writes here take its figures
as a plain dict for their audit entries.
"""

from __future__ import annotations

import hashlib
import secrets
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentCanary, AgentVersion
from agents.services import agent_version_deploy
from governance.audit import audit_record
from governance.notifications import workspace_admins_notify
from governance.selectors import approval_channels_active
from rivercore.errors import Conflict, InvalidInput
from rivercore.types.agents import ActionLevel

CANARY_ROLLED_BACK = "canary_rolled_back"  # the admins' notification kind
MIN_RUNS_MAX = 100_000
_DRAW_SCALE = 10_000  # the draw's resolution: hundredths of a percent


def canary_arm_draw(*, seed: int, key: int, percent: int) -> bool:
    """Whether the run with id ``key`` takes the canary's version: the first eight bytes of
    SHA-256 of ``"<seed>:<key>"``, read as a number, fall below ``percent`` of their
    range. Deterministic, so the split of any set of runs can be checked afterwards."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % _DRAW_SCALE < percent * (_DRAW_SCALE // 100)


def _check_settings(*, percent, margin, min_runs) -> tuple[int, float, int]:
    errors: dict = {}
    if (
        isinstance(percent, bool)
        or not isinstance(percent, int)
        or not (AgentCanary.PERCENT_MIN <= percent <= AgentCanary.PERCENT_MAX)
    ):
        errors["percent"] = [f"A whole number from {AgentCanary.PERCENT_MIN} to {AgentCanary.PERCENT_MAX}."]
    if isinstance(margin, bool) or not isinstance(margin, int | float | Decimal) or not (0 <= margin <= 1):
        errors["margin"] = ["A number from 0 to 1 (0.1 is ten points)."]
    if isinstance(min_runs, bool) or not isinstance(min_runs, int) or not (1 <= min_runs <= MIN_RUNS_MAX):
        errors["min_runs"] = [f"A whole number from 1 to {MIN_RUNS_MAX}."]
    if errors:
        raise InvalidInput("The canary's settings are invalid.", details=errors)
    return percent, float(margin), min_runs


def agent_canary_start(
    *,
    agent: Agent,
    version: AgentVersion,
    actor,
    percent: int,
    margin: float | None = None,
    min_runs: int | None = None,
    seed: int | None = None,
) -> AgentCanary:
    """Send ``percent`` of the agent's new runs to ``version`` beside the deployed one.

    The agent needs a deployed version other than ``version`` and no canary running
    (409). ``margin`` and ``min_runs`` default to ``RIVER_CANARY_MARGIN`` and
    ``RIVER_CANARY_MIN_RUNS``; ``seed`` (random when not given) decides the arms with the
    runs' ids. An active agent's act_with_approval canary needs an approval channel, as
    a deploy does. Audited (``canary_started``)."""
    if version.agent_id != agent.pk:
        raise InvalidInput("That version belongs to another agent.", details={"version": ["Not this agent's."]})
    percent, margin, min_runs = _check_settings(
        percent=percent,
        margin=settings.RIVER_CANARY_MARGIN if margin is None else margin,
        min_runs=settings.RIVER_CANARY_MIN_RUNS if min_runs is None else min_runs,
    )
    with transaction.atomic():
        locked = (
            Agent.objects.select_for_update(of=("self",))
            .select_related("workspace", "current_version")
            .get(pk=agent.pk)
        )
        if locked.status == Agent.Status.ARCHIVED:
            raise InvalidInput("This agent is archived and can no longer change.", code="agent_archived")
        if locked.current_version_id is None:
            raise InvalidInput(
                "Deploy a version before trying another one as a canary.",
                code="no_deployed_version",
                details={"version": ["No version is deployed to compare with."]},
            )
        if locked.current_version_id == version.pk:
            raise InvalidInput(
                f"Version {version.version} is already deployed.",
                code="already_deployed",
                details={"version": ["This version is the deployed one."]},
            )
        if locked.canary_id is not None:
            running = AgentCanary.objects.select_related("version").get(pk=locked.canary_id)
            raise Conflict(
                f"A canary of version {running.version.version} is running: promote or stop it first.",
                code="canary_running",
            )
        if (
            locked.status == Agent.Status.ACTIVE
            and version.action_level == ActionLevel.ACT_WITH_APPROVAL
            and not approval_channels_active(workspace_id=locked.workspace_id)
        ):
            raise InvalidInput(
                "This version acts with approval, but the workspace has no active approval notification channel.",
                code="no_approval_channel",
                details={"version": [ActionLevel.ACT_WITH_APPROVAL.value]},
            )
        canary = AgentCanary.objects.create(
            agent=locked,
            version=version,
            base_version=locked.current_version,
            percent=percent,
            margin=margin,
            min_runs=min_runs,
            seed=secrets.randbits(62) if seed is None else seed,
            started_by=actor if getattr(actor, "pk", None) else None,
        )
        locked.canary = canary
        locked.save(update_fields=["canary", "updated_at"])
        audit_record(
            organization_id=locked.workspace.organization_id,
            workspace_id=locked.workspace_id,
            event_type="canary_started",
            actor=actor,
            agent_id=locked.pk,
            details={
                "canary_id": canary.pk,
                "version": version.version,
                "base_version": locked.current_version.version,
                "percent": percent,
                "margin": margin,
                "min_runs": min_runs,
            },
        )
    return canary


def _end(*, canary: AgentCanary, status: str, actor, reason: str, figures: dict | None) -> AgentCanary | None:
    """End a running canary: a compare-and-set on its status, so of two concurrent ends
    (a person's stop and River's rollback) exactly one happens; None for the other.
    Detaches it from its agent. Caller holds a transaction."""
    now = timezone.now()
    ended_by = actor if getattr(actor, "pk", None) else None
    claimed = AgentCanary.objects.filter(pk=canary.pk, status=AgentCanary.Status.RUNNING).update(
        status=status, ended_at=now, ended_by=ended_by, end_reason=reason[:500], figures=figures
    )
    if claimed != 1:
        return None
    Agent.objects.filter(pk=canary.agent_id, canary_id=canary.pk).update(canary=None, updated_at=now)
    return AgentCanary.objects.select_related("agent__workspace", "version", "base_version").get(pk=canary.pk)


def _not_running(canary: AgentCanary) -> Conflict:
    current = AgentCanary.objects.filter(pk=canary.pk).values_list("status", flat=True).first()
    return Conflict(f"This canary is {current or 'gone'}, not running.", code="canary_not_running")


def agent_canary_stop(*, canary: AgentCanary, actor, figures: dict | None = None) -> AgentCanary:
    """A person ends the canary: new runs all take the deployed version again (runs that
    drew the canary keep it). Audited (``canary_stopped``) with the figures."""
    with transaction.atomic():
        ended = _end(canary=canary, status=AgentCanary.Status.STOPPED, actor=actor, reason="stopped", figures=figures)
        if ended is None:
            raise _not_running(canary)
        _audit(ended, "canary_stopped", actor=actor, figures=figures)
    return ended


def agent_canary_promote(*, canary: AgentCanary, actor, figures: dict | None = None,
                         override_reason: str | None = None) -> AgentCanary:
    """An admin deploys the canary's version: the canary ends ``promoted`` and the
    version is deployed through ``agent_version_deploy`` (its rules, the promotion gate
    with an admin's ``override_reason``, its audit entry), in one transaction. Audited
    (``canary_promoted``) with the figures."""
    with transaction.atomic():
        Agent.objects.select_for_update(of=("self",)).filter(pk=canary.agent_id).first()
        ended = _end(canary=canary, status=AgentCanary.Status.PROMOTED, actor=actor, reason="promoted", figures=figures)
        if ended is None:
            raise _not_running(canary)
        agent_version_deploy(agent=ended.agent, version=ended.version, actor=actor, override_reason=override_reason)
        _audit(ended, "canary_promoted", actor=actor, figures=figures)
    return ended


def agent_canary_roll_back(*, canary: AgentCanary, reason: str, figures: dict) -> AgentCanary | None:
    """River ends a canary that did worse: ``rolled_back``, audited (``canary_rolled_back``
    with the figures and the reason), and the workspace's admins are told in the app.
    None when the canary had already ended (safe to call twice)."""
    with transaction.atomic():
        ended = _end(canary=canary, status=AgentCanary.Status.ROLLED_BACK, actor=None, reason=reason, figures=figures)
        if ended is None:
            return None
        _audit(ended, "canary_rolled_back", actor=None, figures=figures, reason=reason)
        agent = ended.agent
        workspace_admins_notify(
            workspace=agent.workspace,
            kind=CANARY_ROLLED_BACK,
            title=f"{agent.name}: canary v{ended.version.version} rolled back",
            body=f"River stopped sending runs to version {ended.version.version}: {reason} "
            f"Every new run uses version {ended.base_version.version} again.",
            url=f"/agents/{agent.pk}/?canary={ended.pk}#canary",
        )
    return ended


def _audit(canary: AgentCanary, event_type: str, *, actor, figures: dict | None, reason: str = "") -> None:
    agent = canary.agent
    details = {
        "canary_id": canary.pk,
        "version": canary.version.version,
        "base_version": canary.base_version.version,
        "percent": canary.percent,
        "figures": figures,
    }
    if reason:
        details["reason"] = reason
    audit_record(
        organization_id=agent.workspace.organization_id,
        workspace_id=agent.workspace_id,
        event_type=event_type,
        actor=actor,
        agent_id=agent.pk,
        details=details,
    )


def canary_running_arms(*, canary_id: int) -> tuple[int, int, int] | None:
    """``(canary version id, percent, seed)`` of the canary if it is still running, else
    None (it ended since the agent's row was read): what a new run's draw needs."""
    return (
        AgentCanary.objects.filter(pk=canary_id, status=AgentCanary.Status.RUNNING)
        .values_list("version_id", "percent", "seed")
        .first()
    )
