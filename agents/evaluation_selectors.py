"""Reads of evaluations, the promotion gate and test sets; tenant-scoped: an id of
another workspace's row is a 404, as in ``agents.selectors``."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from agents.evaluation_models import Evaluation, EvaluationRun, PromotionGate, TestSetPin
from agents.models import Agent, AgentVersion
from rivercore.errors import NotFound
from tenancy.selectors import workspaces_for_user


def evaluation_get_for_user(*, user, evaluation_id) -> Evaluation:
    """The evaluation if it belongs to one of the user's workspaces; otherwise 404."""
    try:
        return Evaluation.objects.select_related("agent", "version", "workspace").get(
            pk=uuid.UUID(str(evaluation_id)), workspace__in=workspaces_for_user(user=user)
        )
    except (Evaluation.DoesNotExist, ValueError):
        raise NotFound("Evaluation not found.") from None


def evaluation_runs(*, evaluation: Evaluation) -> QuerySet[EvaluationRun]:
    """The evaluation's runs in order: pinned runs first (as they were replayed)."""
    return evaluation.runs.order_by("position")


def evaluation_latest(*, version: AgentVersion) -> Evaluation | None:
    """The version's latest finished evaluation (done), the one the gate reads."""
    return (
        Evaluation.objects.filter(version=version, status=Evaluation.Status.DONE)
        .order_by("-finished_at", "-created_at")
        .first()
    )


def evaluations_latest_by_version(*, agent: Agent) -> dict[int, Evaluation]:
    """For the agent page: each version's latest evaluation (any status), by version id."""
    latest: dict[int, Evaluation] = {}
    for row in Evaluation.objects.filter(agent=agent).order_by("version_id", "-created_at")[:500]:
        latest.setdefault(row.version_id, row)
    return latest


def promotion_gate_get(*, workspace_id: int) -> PromotionGate | None:
    return PromotionGate.objects.filter(workspace_id=workspace_id).first()


def test_set(*, agent: Agent) -> QuerySet[TestSetPin]:
    return TestSetPin.objects.filter(agent=agent).order_by("created_at", "id")


test_set.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, whatever its name


def test_set_pin_of_run(*, agent_id, execution_id: int) -> TestSetPin | None:
    return TestSetPin.objects.filter(agent_id=agent_id, execution_id=execution_id).first()


test_set_pin_of_run.__test__ = False  # type: ignore[attr-defined]


def evaluation_for_task(*, evaluation_id) -> Evaluation | None:
    """The evaluation a task was given, with its agent, version and workspace (tasks
    take ids; the API checked the caller when it was created)."""
    return Evaluation.objects.select_related("agent", "version", "workspace").filter(pk=evaluation_id).first()
