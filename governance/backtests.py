"""Backtests: what a policy change, or an agent version's auto-approve conditions, would
have decided over a window of the workspace's recorded history (docs/changing-safely.md).

Governance owns the row (``PolicyBacktest``): creating it after the same checks as a
policy write, the compare-and-set claim, progress, the result. Re-deciding recorded tool
calls needs the runs' steps, which live above governance, so that part runs in
``executions.backtest``; the auto-approve backtest reads only approval requests and
runs here. Neither touches a data source nor calls a model.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pydantic
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from governance import checker, expressions
from governance.audit import audit_record
from governance.backtest_models import PolicyBacktest
from governance.models import ApprovalRequest
from governance.selectors import active_policies, approval_median_wait, policy_get_for_user
from governance.services import policy_fields_validate, policy_write_authorize
from rivercore.errors import InvalidInput, NotFound
from rivercore.types.agents import AutoApproveCondition
from rivercore.types.governance import GovernancePolicySpec, PolicyScope
from tenancy.models import Workspace
from tenancy.permissions import AGENT_CREATE, POLICY_CREATE
from tenancy.selectors import require_permission, workspace_get_for_user, workspaces_for_user

logger = logging.getLogger("river.governance")

DEFAULT_DAYS = 14
MAX_DAYS = 90
MAX_EXAMPLES = 20
# Minutes a decision is assumed to take when the workspace has no decided approval in
# the window to measure (docs/changing-safely.md).
FALLBACK_DECISION_MINUTES = 5.0
# The policy id the proposed (new) policy carries while it is evaluated, so its matches
# can be told from the others'.
PROPOSED_ID = "proposed"
LEASE = dt.timedelta(minutes=10)
# The Celery task that runs a backtest (executions.tasks.policy_backtest), sent by name:
# it reads runs' steps, which live above governance.
BACKTEST_TASK = "executions.policy_backtest"
BACKTEST_REQUESTED = "policy_backtest_requested"


class PolicyProposal(pydantic.BaseModel):
    """What a policy backtest tries: ``spec`` replaces the policy ``replaces`` (None: a
    new policy is added); a disabled proposal removes it from the set."""

    replaces: str | None = None
    spec: GovernancePolicySpec
    enabled: bool = True
    # Compare with the set *without* the policy (what the policy itself decides), not
    # with the set as it is: the admin's "Backtest" action on saved policies.
    baseline_without: bool = False


class AutoApproveProposal(pydantic.BaseModel):
    agent_version: int | None = None
    auto_approve_conditions: list[AutoApproveCondition]


def days_validate(value, *, field: str = "days") -> int:
    if value is None:
        return DEFAULT_DAYS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DAYS:
        raise InvalidInput("days is invalid.", details={field: [f"Must be a whole number from 1 to {MAX_DAYS}."]})
    return value


def _prefixed(exc: InvalidInput, prefix: str) -> InvalidInput:
    details = exc.details if isinstance(exc.details, dict) else {}
    named = {f"{prefix}{key}": value for key, value in details.items() if key not in ("position", "reason")}
    return InvalidInput(exc.message, details=named or {prefix.rstrip("."): [exc.message]})


def _audit_requested(*, backtest: PolicyBacktest, actor) -> None:
    audit_record(organization_id=backtest.workspace.organization_id, workspace_id=backtest.workspace_id,
                 event_type=BACKTEST_REQUESTED, actor=actor, policy_id=backtest.policy_id,
                 agent_id=backtest.agent_id,
                 details={"backtest_id": backtest.pk, "kind": backtest.kind, "days": backtest.days})


def policy_backtest_create(
    *, actor, days: int | None = None, workspace_id: int | None = None, policy: dict | None = None,
    policy_id=None, changes: dict | None = None, baseline_without: bool = False,
) -> PolicyBacktest:
    """A queued backtest of a new policy (``policy``: the fields of ``POST /policies/``)
    or of changed fields of an existing one (``policy_id`` + ``changes``), checked as a
    policy write is: the same validation (errors name ``policy.<field>`` or the changed
    field) and the same authority. The caller queues it after commit."""
    days = days_validate(days)
    if (policy is None) == (policy_id is None):
        raise InvalidInput("Give either policy or policy_id.", details={"policy": ["Give either policy or policy_id."]})
    if policy is not None:
        if not isinstance(policy, dict):
            raise InvalidInput("policy must be an object.", details={"policy": ["must be an object"]})
        workspace = _backtest_workspace(actor=actor, workspace_id=workspace_id or policy.get("workspace_id"),
                                        organization_id=policy.get("organization_id"))
        try:
            scope = PolicyScope(policy.get("scope") or PolicyScope.WORKSPACE.value)
        except ValueError:
            raise InvalidInput("Invalid scope.", details={"policy.scope": ["workspace or organization"]}) from None
        _backtest_authorize(actor=actor, workspace=workspace, scope=scope)
        fields = policy_fields_validate_prefixed(policy, prefix="policy.")
        replaces = None
        enabled = bool(policy.get("enabled", True))
    else:
        existing = policy_get_for_user(user=actor, policy_id=policy_id)
        workspace = _backtest_workspace(actor=actor, workspace_id=workspace_id or existing.workspace_id,
                                        organization_id=existing.organization_id)
        scope = PolicyScope(existing.scope)
        _backtest_authorize(actor=actor, workspace=workspace, scope=scope)
        current = {"name": existing.name, "enforcement": existing.enforcement, "conditions": existing.conditions,
                   "policy_type": existing.policy_type, "required_approvals": existing.required_approvals}
        changes = dict(changes or {})
        if "conditions" in changes and "policy_type" not in changes:
            current["policy_type"] = None  # a new condition re-infers the type, as a PATCH does
        fields = policy_fields_validate_prefixed({**current, **changes}, prefix="")
        replaces = str(existing.pk)
        enabled = bool(changes.get("enabled", existing.enabled))
    spec = GovernancePolicySpec(
        policy_id=replaces or PROPOSED_ID, name=fields["name"], scope=scope.value,
        policy_type=fields["policy_type"].value, conditions=fields["conditions"],
        enforcement=fields["enforcement"].value, required_approvals=fields["required_approvals"],
    )
    proposal = PolicyProposal(replaces=replaces, spec=spec, enabled=enabled,
                              baseline_without=baseline_without and replaces is not None)
    with transaction.atomic():
        backtest = PolicyBacktest.objects.create(
            workspace=workspace, kind=PolicyBacktest.Kind.POLICY, days=days, policy_id=replaces,
            proposal=proposal.model_dump(mode="json"), requested_by=actor if getattr(actor, "pk", None) else None,
        )
        _audit_requested(backtest=backtest, actor=actor)
    return backtest


def _backtest_workspace(*, actor, workspace_id, organization_id) -> Workspace:
    """The workspace whose runs are tried (404 outside the actor's workspaces)."""
    if workspace_id is None:
        raise InvalidInput("Which workspace's runs?", details={"workspace_id": ["required"]})
    workspace = workspace_get_for_user(user=actor, workspace_id=workspace_id)
    if organization_id is not None and int(organization_id) != workspace.organization_id:
        raise InvalidInput("The workspace is not in the policy's organization.",
                           details={"workspace_id": ["not in the policy's organization"]})
    return workspace


def _backtest_authorize(*, actor, workspace: Workspace, scope: PolicyScope) -> None:
    """Who may backtest a change is who may make it: ``policy:create`` in the workspace,
    and an organization admin for an organization-wide policy."""
    require_permission(user=actor, workspace=workspace, permission=POLICY_CREATE)
    if scope == PolicyScope.ORGANIZATION:
        policy_write_authorize(actor=actor, scope=scope, organization_id=workspace.organization_id, workspace=None)


def policy_fields_validate_prefixed(fields: dict, *, prefix: str) -> dict:
    if not isinstance(fields, dict):
        raise InvalidInput("policy must be an object.", details={prefix.rstrip(".") or "policy": ["must be an object"]})
    try:
        return policy_fields_validate(
            name=fields.get("name"), enforcement=fields.get("enforcement"), conditions=fields.get("conditions"),
            policy_type=fields.get("policy_type") or None, required_approvals=fields.get("required_approvals", 1))
    except InvalidInput as exc:
        raise _prefixed(exc, prefix) if prefix else exc from None


def auto_approve_conditions_validate(conditions, *, tools: list[str],
                                     field: str = "auto_approve_conditions") -> list[dict]:
    """Each condition checked as a version's are when it is saved (its tool among the
    version's ``tools``, the condition looks at the call); errors name the item."""
    if not isinstance(conditions, list) or not conditions:
        raise InvalidInput("Give the auto-approve conditions to try.", details={field: ["a non-empty list"]})
    if len(conditions) > 50:
        raise InvalidInput("Too many conditions.", details={field: ["at most 50"]})
    checked = []
    for index, raw in enumerate(conditions):
        try:
            rule = AutoApproveCondition.model_validate(raw)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InvalidInput("Invalid auto-approve condition.",
                               details={f"{field}.{index}" + (f".{where}" if where else ""): [first["msg"]]}) from None
        if rule.tool not in tools:
            raise InvalidInput("Invalid auto-approve condition.",
                               details={f"{field}.{index}.tool": [f"{rule.tool} is not among the version's tools."]})
        try:
            checker.auto_approve_condition_validate(rule.condition)
        except expressions.ExpressionError as exc:
            raise InvalidInput("Invalid auto-approve condition.",
                               details={f"{field}.{index}.condition": [str(exc)]}) from None
        checked.append(rule.model_dump(mode="json"))
    return checked


def auto_approve_backtest_create(
    *, actor, workspace: Workspace, agent_id, agent_version: int | None, tools: list[str], conditions,
    days: int | None = None,
) -> PolicyBacktest:
    """A queued backtest of auto-approve conditions for an agent version the caller
    resolved in ``workspace`` (``agent:create`` there, as writing a version needs)."""
    require_permission(user=actor, workspace=workspace, permission=AGENT_CREATE)
    days = days_validate(days)
    proposal = AutoApproveProposal(agent_version=agent_version,
                                   auto_approve_conditions=auto_approve_conditions_validate(conditions, tools=tools))
    with transaction.atomic():
        backtest = PolicyBacktest.objects.create(
            workspace=workspace, kind=PolicyBacktest.Kind.AUTO_APPROVE, days=days, agent_id=agent_id,
            proposal=proposal.model_dump(mode="json"), requested_by=actor if getattr(actor, "pk", None) else None,
        )
        _audit_requested(backtest=backtest, actor=actor)
    return backtest


def backtest_queue(*, backtest: PolicyBacktest) -> None:
    """Send the backtest's task once the row is committed. A broker that cannot be
    reached leaves the row queued (the GET shows it) and is logged, never raised."""
    from celery import current_app

    backtest_id = backtest.pk

    def send() -> None:
        try:
            current_app.send_task(BACKTEST_TASK, args=[backtest_id])
        except Exception:  # the broker is down: the row stays queued
            logger.exception("could not queue backtest %s", backtest_id)

    transaction.on_commit(send)


# --- reading ---------------------------------------------------------------------------


def backtest_get_for_user(*, user, backtest_id) -> PolicyBacktest:
    """The backtest (404 outside the user's workspaces), 403 unless they may make the
    change it tries: ``policy:create`` for a policy, ``agent:create`` for auto-approve."""
    try:
        pk = int(backtest_id)
    except (TypeError, ValueError):
        raise NotFound("Backtest not found.") from None
    backtest = (PolicyBacktest.objects.filter(pk=pk, workspace__in=workspaces_for_user(user=user))
                .select_related("workspace").first())
    if backtest is None:
        raise NotFound("Backtest not found.")
    permission = POLICY_CREATE if backtest.kind == PolicyBacktest.Kind.POLICY else AGENT_CREATE
    require_permission(user=user, workspace=backtest.workspace, permission=permission)
    return backtest


def backtests_recent(*, workspace: Workspace, kind: str, limit: int = 10, agent_id=None):
    rows = PolicyBacktest.objects.filter(workspace=workspace, kind=kind)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return list(rows.order_by("-created_at", "-pk")[:limit])


def backtest_window(backtest: PolicyBacktest) -> tuple[dt.datetime, dt.datetime]:
    return backtest.window_end - dt.timedelta(days=backtest.days), backtest.window_end


def backtest_policy_sets(*, backtest: PolicyBacktest) -> tuple[list[GovernancePolicySpec], list[GovernancePolicySpec]]:
    """The workspace's active policies now, and the same set with the proposal applied."""
    proposal = PolicyProposal.model_validate(backtest.proposal)
    before = active_policies(org_id=backtest.workspace.organization_id, workspace_id=backtest.workspace_id)
    after = [spec for spec in before if spec.policy_id != proposal.replaces]
    if proposal.baseline_without:
        before = list(after)
    if proposal.enabled:
        after.append(proposal.spec)
    return before, after


def decision_minutes(*, workspace: Workspace, since: dt.datetime) -> dict[str, Any]:
    """The workspace's median minutes from an approval request to a person's decision over
    the requests decided since ``since``, or the fallback when none was decided."""
    median, decided = approval_median_wait(workspace=workspace, since=since)
    if median is None:
        return {"minutes": FALLBACK_DECISION_MINUTES, "source": "fallback", "decisions": 0}
    return {"minutes": round(median.total_seconds() / 60, 2), "source": "measured", "decisions": decided}


# --- the row's life --------------------------------------------------------------------


def backtest_claim(*, backtest_id: int) -> PolicyBacktest | None:
    """Claim a queued backtest (or one whose worker's lease ran out) for this worker:
    one conditional UPDATE, so two deliveries of the task never both run it."""
    now = timezone.now()
    claimable = Q(status=PolicyBacktest.Status.QUEUED) | Q(status=PolicyBacktest.Status.RUNNING,
                                                            lease_expires_at__lt=now)
    claimed = PolicyBacktest.objects.filter(claimable, pk=backtest_id).update(
        status=PolicyBacktest.Status.RUNNING, started_at=now, lease_expires_at=now + LEASE, progress=0)
    if claimed != 1:
        return None
    return PolicyBacktest.objects.select_related("workspace").get(pk=backtest_id)


def backtest_progress(*, backtest: PolicyBacktest, progress: int) -> None:
    """Record progress (percent) and extend the lease; only while this claim holds it."""
    PolicyBacktest.objects.filter(pk=backtest.pk, status=PolicyBacktest.Status.RUNNING,
                                  started_at=backtest.started_at).update(
        progress=max(0, min(99, progress)), lease_expires_at=timezone.now() + LEASE)


def backtest_finish(*, backtest: PolicyBacktest, result: dict) -> bool:
    return PolicyBacktest.objects.filter(pk=backtest.pk, status=PolicyBacktest.Status.RUNNING,
                                         started_at=backtest.started_at).update(
        status=PolicyBacktest.Status.DONE, progress=100, result=result, finished_at=timezone.now(),
        lease_expires_at=None) == 1


def backtest_fail(*, backtest: PolicyBacktest, error: str) -> None:
    PolicyBacktest.objects.filter(pk=backtest.pk, status=PolicyBacktest.Status.RUNNING,
                                  started_at=backtest.started_at).update(
        status=PolicyBacktest.Status.FAILED, error=error[:500], finished_at=timezone.now(), lease_expires_at=None)


# --- the auto-approve backtest -----------------------------------------------------------

DECIDED = (ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.EDITED, ApprovalRequest.Status.REJECTED)
BATCH = 500


def auto_approve_backtest_compute(*, backtest: PolicyBacktest) -> dict:
    """Which of the agent's requests people decided in the window the conditions would
    have approved unseen: the proposed call (tool, arguments, reported confidence) against
    each condition for its tool, decided by the checker the gate uses."""
    proposal = AutoApproveProposal.model_validate(backtest.proposal)
    since, until = backtest_window(backtest)
    rows = ApprovalRequest.objects.filter(workspace_id=backtest.workspace_id, agent_id=backtest.agent_id,
                                          status__in=DECIDED, resolved_at__gte=since, resolved_at__lt=until)
    total = rows.count()
    counts = {status.value: {"decided": 0, "auto_approved": 0} for status in DECIDED}
    examples: list[dict] = []
    seen = 0
    last = None
    while True:
        batch = rows.order_by("resolved_at", "pk")
        if last is not None:
            batch = batch.filter(Q(resolved_at__gt=last[0]) | Q(resolved_at=last[0], pk__gt=last[1]))
        batch = list(batch.values_list("pk", "resolved_at", "execution_id", "tool_name", "proposed_payload",
                                       "confidence_score", "status")[:BATCH])
        if not batch:
            break
        for pk, _resolved_at, execution_id, tool_name, payload, confidence, status in batch:
            facts = {"confidence_score": confidence, "tool": {"name": tool_name},
                     "args": payload if isinstance(payload, dict) else {}}
            condition = next((rule.condition for rule in proposal.auto_approve_conditions
                              if rule.tool == tool_name
                              and checker.auto_approve_matches(condition=rule.condition, facts=facts)), None)
            counts[status]["decided"] += 1
            if condition is not None:
                counts[status]["auto_approved"] += 1
                if len(examples) < MAX_EXAMPLES and status != ApprovalRequest.Status.APPROVED:
                    examples.append({"execution_id": execution_id, "approval_id": str(pk), "tool": tool_name,
                                     "decision": status, "condition": condition})
        seen += len(batch)
        last = (batch[-1][1], batch[-1][0])
        backtest_progress(backtest=backtest, progress=seen * 100 // max(total, 1))
    approved = ApprovalRequest.Status.APPROVED
    edited = ApprovalRequest.Status.EDITED
    rejected = ApprovalRequest.Status.REJECTED
    minutes = decision_minutes(workspace=backtest.workspace, since=since)
    saved = counts[approved]["auto_approved"] + counts[edited]["auto_approved"] + counts[rejected]["auto_approved"]
    return {
        "decisions_considered": seen,
        "approved": counts[approved]["decided"],
        "approved_auto": counts[approved]["auto_approved"],
        "edited": counts[edited]["decided"],
        "edited_auto": counts[edited]["auto_approved"],
        "rejected": counts[rejected]["decided"],
        "rejected_auto": counts[rejected]["auto_approved"],
        "approvals_saved": saved,
        "approver_minutes_saved": round(saved * minutes["minutes"], 1),
        "decision_minutes": minutes,
        # Edited and rejected calls the conditions would have let through unseen: the risk.
        "examples": examples,
    }


def auto_approve_backtest_run(*, backtest: PolicyBacktest) -> None:
    """Run a claimed auto-approve backtest to its end (done, or failed with the error)."""
    try:
        result = auto_approve_backtest_compute(backtest=backtest)
    except Exception as exc:  # a backtest that cannot finish says so on its row
        logger.exception("auto-approve backtest %s failed", backtest.pk)
        backtest_fail(backtest=backtest, error=f"{type(exc).__name__}: {exc}")
        return
    backtest_finish(backtest=backtest, result=result)
