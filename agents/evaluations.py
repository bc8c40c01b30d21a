"""Writes for evaluations, the promotion gate and test sets (docs/changing-safely.md).

The replay itself is done in ``executions.services.evaluation`` (runs live there); it
writes an evaluation's progress and result only through these functions.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.evaluation_models import SCORE_NAMES, Evaluation, EvaluationRun, PromotionGate, TestSetPin
from agents.evaluation_selectors import evaluation_latest, promotion_gate_get
from agents.models import Agent, AgentVersion
from governance.audit import audit_record
from rivercore.errors import Conflict, InvalidInput
from tenancy.models import Workspace
from tenancy.permissions import POLICY_CREATE
from tenancy.selectors import require_permission

EVALUATION_DEFAULT_DAYS = 14
EVALUATION_MAX_DAYS = 90
EVALUATION_MAX_RUNS = 200  # recorded runs of the window replayed by one evaluation (pinned runs come on top)
TEST_SET_MAX = 50
OVERRIDE_REASON_MAX = 1000


def _days(days: object) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= EVALUATION_MAX_DAYS:
        raise InvalidInput(
            f"days must be a whole number from 1 to {EVALUATION_MAX_DAYS}.",
            details={"days": [f"between 1 and {EVALUATION_MAX_DAYS}"]},
        )
    return days


def evaluation_create(*, agent: Agent, version: AgentVersion, actor, days: int = EVALUATION_DEFAULT_DAYS) -> Evaluation:
    """A queued evaluation of ``version``; the caller sends its task after commit."""
    if version.agent_id != agent.pk:
        raise InvalidInput("That version belongs to another agent.", details={"version": ["Not this agent's."]})
    evaluation = Evaluation.objects.create(
        workspace_id=agent.workspace_id,
        agent=agent,
        version=version,
        days=_days(days),
        requested_by=actor if getattr(actor, "pk", None) else None,
    )
    audit_record(
        organization_id=agent.workspace.organization_id,
        workspace_id=agent.workspace_id,
        event_type="version_evaluation_requested",
        actor=actor,
        agent_id=agent.pk,
        details={"evaluation": str(evaluation.pk), "version": version.version, "days": evaluation.days},
    )
    return evaluation


def evaluation_claim(*, evaluation_id, runs_total: int) -> bool:
    """Compare-and-set queued -> running; False when another worker has it or it is done."""
    return (
        Evaluation.objects.filter(pk=evaluation_id, status=Evaluation.Status.QUEUED).update(
            status=Evaluation.Status.RUNNING, runs_total=runs_total, started_at=timezone.now()
        )
        == 1
    )


def evaluation_run_record(*, evaluation_id, position: int, execution_id: int, pinned: str, row: dict) -> None:
    """Append one replayed run and count it (one row per run: the result is never rewritten)."""
    with transaction.atomic():
        EvaluationRun.objects.create(
            evaluation_id=evaluation_id, position=position, execution_id=execution_id, pinned=pinned, row=row
        )
        Evaluation.objects.filter(pk=evaluation_id, status=Evaluation.Status.RUNNING).update(
            runs_done=F("runs_done") + 1
        )


def evaluation_finish(*, evaluation_id, scores: dict, totals: dict) -> None:
    Evaluation.objects.filter(pk=evaluation_id, status=Evaluation.Status.RUNNING).update(
        status=Evaluation.Status.DONE, scores=scores, totals=totals, finished_at=timezone.now()
    )


def evaluation_fail(*, evaluation_id, error: str) -> None:
    Evaluation.objects.filter(
        pk=evaluation_id, status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING]
    ).update(status=Evaluation.Status.FAILED, error=error[:500], finished_at=timezone.now())


# --- the promotion gate ------------------------------------------------------------------


def _minimum(name: str, value: object) -> Decimal | None:
    field = f"min_{name}"
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise InvalidInput(f"{field} must be a number from 0 to 1.", details={field: ["a number from 0 to 1"]})
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise InvalidInput(
            f"{field} must be a number from 0 to 1.", details={field: ["a number from 0 to 1"]}
        ) from None
    if not number.is_finite() or not Decimal(0) <= number <= Decimal(1):
        raise InvalidInput(f"{field} must be a number from 0 to 1.", details={field: ["a number from 0 to 1"]})
    return number.quantize(Decimal("0.001"))


def promotion_gate_set(*, workspace: Workspace, actor, **minimums: object) -> PromotionGate:
    """Set the workspace's minimum scores (``min_approvals``, ``min_rejections``,
    ``min_edits``: 0 to 1, or None for not checked). Only the given ones change."""
    unknown = sorted(set(minimums) - {f"min_{name}" for name in SCORE_NAMES})
    if unknown:
        raise InvalidInput("Unknown minimum.", details={unknown[0][:100]: ["Unknown field."]})
    values = {field: _minimum(field.removeprefix("min_"), value) for field, value in minimums.items()}
    with transaction.atomic():
        gate, _ = PromotionGate.objects.select_for_update().get_or_create(workspace=workspace)
        before = gate.minimums()
        for field, value in values.items():
            setattr(gate, field, value)
        gate.updated_by = actor
        gate.updated_at = timezone.now()
        gate.save()
        audit_record(
            organization_id=workspace.organization_id,
            workspace_id=workspace.pk,
            event_type="promotion_gate_updated",
            actor=actor,
            details={"before": before, "after": gate.minimums()},
        )
    return gate


def promotion_gate_shortfalls(*, minimums: dict[str, float], scores: dict) -> dict[str, list[str]]:
    """The scores below their minimum, as ``{"scores.<name>": [message]}``. A score with
    nothing to measure (None: no such decision in the runs evaluated) is not below."""
    short: dict[str, list[str]] = {}
    for name, minimum in minimums.items():
        score = scores.get(name)
        if score is not None and float(score) < minimum:
            short[f"scores.{name}"] = [f"{float(score):.3f} is below the minimum {minimum:.3f}"]
    return short


def promotion_gate_check(*, agent: Agent, version: AgentVersion, actor, override_reason: str | None) -> None:
    """Refuse (409 ``promotion_gate``, naming the scores) a deploy of ``version`` whose
    latest evaluation is below the workspace's minimums, or that has none while a
    minimum is set; unless ``override_reason`` is given by an admin (``policy:create``),
    which is audited as ``version_deploy_override``. Called inside the deploy's
    transaction, so the audit entry commits with the deploy or not at all."""
    gate = promotion_gate_get(workspace_id=agent.workspace_id)
    minimums = gate.minimums() if gate else {}
    if not minimums:
        return
    latest = evaluation_latest(version=version)
    scores = dict(latest.scores) if latest else {}
    if latest is None:
        details = {
            "scores": [
                f"version {version.version} has no finished evaluation; the workspace requires "
                + ", ".join(f"{name} ≥ {value:.3f}" for name, value in minimums.items())
            ]
        }
        message = f"Version {version.version} has not been evaluated; the promotion gate needs an evaluation."
    else:
        details = promotion_gate_shortfalls(minimums=minimums, scores=scores)
        if not details:
            return
        message = "Version {} is below the promotion gate: {}.".format(
            version.version, "; ".join(f"{key.split('.', 1)[1]} {text[0]}" for key, text in details.items())
        )
    reason = (override_reason or "").strip()
    if not reason:
        raise Conflict(
            message,
            code="promotion_gate",
            details={**details, "minimums": minimums, "evaluation": str(latest.pk) if latest else None},
        )
    if len(reason) > OVERRIDE_REASON_MAX or "\x00" in reason:
        raise InvalidInput(
            "override_reason is too long or holds a NUL.",
            details={"override_reason": [f"At most {OVERRIDE_REASON_MAX} characters, no NUL."]},
        )
    require_permission(user=actor, workspace=agent.workspace, permission=POLICY_CREATE)
    audit_record(
        organization_id=agent.workspace.organization_id,
        workspace_id=agent.workspace_id,
        event_type="version_deploy_override",
        actor=actor,
        agent_id=agent.pk,
        details={
            "version": version.version,
            "reason": reason,
            "scores": scores,
            "minimums": minimums,
            "evaluation": str(latest.pk) if latest else None,
            "shortfalls": details if latest else {"evaluation": ["none"]},
        },
    )


# --- the test set -------------------------------------------------------------------------


def test_set_pin(*, agent: Agent, execution_id: int, label: str, note: str, actor) -> TestSetPin:
    """Pin a run of ``agent`` (the caller checked it is one, through the runs' selector)."""
    if label not in TestSetPin.Label.values:
        raise InvalidInput("label must be good or bad.", details={"label": ['"good" or "bad"']})
    with transaction.atomic():
        Agent.objects.select_for_update(of=("self",)).filter(pk=agent.pk).first()  # serialises the count
        pin = TestSetPin.objects.filter(agent=agent, execution_id=execution_id).first()
        if pin is None and TestSetPin.objects.filter(agent=agent).count() >= TEST_SET_MAX:
            raise Conflict(
                f"An agent's test set holds at most {TEST_SET_MAX} runs.",
                code="test_set_full",
                details={"execution": [f"at most {TEST_SET_MAX} pinned runs"]},
            )
        if pin is None:
            pin = TestSetPin.objects.create(
                agent=agent, execution_id=execution_id, label=label, note=note, pinned_by=actor
            )
        else:
            pin.label, pin.note = label, note
            pin.save(update_fields=["label", "note"])
        audit_record(
            organization_id=agent.workspace.organization_id,
            workspace_id=agent.workspace_id,
            event_type="test_set_pinned",
            actor=actor,
            agent_id=agent.pk,
            execution_id=execution_id,
            details={"label": label},
        )
    return pin


test_set_pin.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, whatever its name


def test_set_unpin(*, agent: Agent, execution_id: int, actor) -> bool:
    with transaction.atomic():
        deleted, _ = TestSetPin.objects.filter(agent=agent, execution_id=execution_id).delete()
        if deleted:
            audit_record(
                organization_id=agent.workspace.organization_id,
                workspace_id=agent.workspace_id,
                event_type="test_set_unpinned",
                actor=actor,
                agent_id=agent.pk,
                execution_id=execution_id,
            )
    return bool(deleted)


test_set_unpin.__test__ = False  # type: ignore[attr-defined]
