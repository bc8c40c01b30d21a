"""Evaluations of agent versions, the promotion gate and test sets over REST
(docs/changing-safely.md). Role rules: evaluating and pinning need ``agent:create``
(as deploying does); reading needs membership; the gate's minimums need
``policy:create`` (workspace admins)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import evaluations as agent_evaluations
from agents.evaluation_models import Evaluation, PromotionGate, TestSetPin
from agents.evaluation_selectors import evaluation_get_for_user, evaluation_runs, promotion_gate_get, test_set
from agents.selectors import agent_get_with_permissions, agent_version_get
from common.api import StrictInput
from common.ids import id_query_param
from executions.selectors import execution_get_for_user
from executions.services.evaluation import evaluation_start
from rivercore.errors import InvalidInput
from tenancy.permissions import AGENT_CREATE, POLICY_CREATE
from tenancy.selectors import require_granted, require_permission, workspace_get_for_user


class EvaluateInput(StrictInput):
    days = serializers.IntegerField(
        min_value=1,
        max_value=agent_evaluations.EVALUATION_MAX_DAYS,
        default=agent_evaluations.EVALUATION_DEFAULT_DAYS,
        help_text="The window of finished runs replayed (pinned runs always are).",
    )


class EvaluationStarted(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Evaluation.Status.choices)


def evaluation_body(evaluation: Evaluation, *, with_runs: bool = True) -> dict:
    body = {
        "id": str(evaluation.pk),
        "agent": str(evaluation.agent_id),
        "version": evaluation.version.version,
        "days": evaluation.days,
        "status": evaluation.status,
        "progress": {"runs_done": evaluation.runs_done, "runs_total": evaluation.runs_total},
        "scores": evaluation.scores or None,
        "totals": evaluation.totals or None,
        "error": evaluation.error or None,
        "created_at": evaluation.created_at,
        "started_at": evaluation.started_at,
        "finished_at": evaluation.finished_at,
    }
    if with_runs:
        body["runs"] = [{**run.row, "pinned": run.pinned or None} for run in evaluation_runs(evaluation=evaluation)]
    return body


class VersionEvaluateView(APIView):
    @extend_schema(request=EvaluateInput, responses={202: EvaluationStarted})
    def post(self, request, agent_id, version):
        """Evaluate a version against what people decided; poll GET /evaluations/{id}."""
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        require_granted(granted=granted, permission=AGENT_CREATE)
        agent_version = agent_version_get(agent=agent, version=version)
        body = EvaluateInput(data=request.data)
        body.is_valid(raise_exception=True)
        evaluation = evaluation_start(
            agent=agent, version=agent_version, actor=request.user, days=body.validated_data["days"]
        )
        return Response({"id": str(evaluation.pk), "status": evaluation.status}, status=status.HTTP_202_ACCEPTED)


class EvaluationDetailView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request, evaluation_id):
        """Progress while it runs; then the scores, totals and each run (pinned runs first)."""
        return Response(evaluation_body(evaluation_get_for_user(user=request.user, evaluation_id=evaluation_id)))


class PinInput(StrictInput):
    execution = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    label = serializers.ChoiceField(choices=TestSetPin.Label.choices, default=TestSetPin.Label.GOOD)
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class UnpinInput(StrictInput):
    execution = serializers.IntegerField(min_value=1, max_value=2**63 - 1)


class PinSerializer(serializers.ModelSerializer):
    execution = serializers.IntegerField(source="execution_id", read_only=True)

    class Meta:
        model = TestSetPin
        fields = ["execution", "label", "note", "pinned_by", "created_at"]
        read_only_fields = fields


def _agent_run(request, agent, execution_id: int):
    """A run of this agent the caller can see: another workspace's is a 404, another
    agent's a 400 naming ``execution``."""
    execution = execution_get_for_user(user=request.user, execution_id=execution_id)
    if execution.agent_id != agent.pk:
        raise InvalidInput("That run is not one of this agent's.", details={"execution": ["Not this agent's run."]})
    return execution


class TestSetView(APIView):
    @extend_schema(responses={200: PinSerializer(many=True)})
    def get(self, request, agent_id):
        agent, _granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        return Response(PinSerializer(test_set(agent=agent), many=True).data)

    @extend_schema(request=PinInput, responses={201: PinSerializer})
    def post(self, request, agent_id):
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        require_granted(granted=granted, permission=AGENT_CREATE)
        body = PinInput(data=request.data)
        body.is_valid(raise_exception=True)
        values = body.validated_data
        execution = _agent_run(request, agent, values["execution"])
        pin = agent_evaluations.test_set_pin(
            agent=agent, execution_id=execution.pk, label=values["label"], note=values["note"], actor=request.user
        )
        return Response(PinSerializer(pin).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=UnpinInput, responses={204: None})
    def delete(self, request, agent_id):
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        require_granted(granted=granted, permission=AGENT_CREATE)
        body = UnpinInput(data=request.data)
        body.is_valid(raise_exception=True)
        execution = _agent_run(request, agent, body.validated_data["execution"])
        agent_evaluations.test_set_unpin(agent=agent, execution_id=execution.pk, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


_MINIMUM_HELP = "0 to 1, or null: not checked."


class GateSerializer(serializers.Serializer):
    workspace = serializers.IntegerField()
    min_approvals = serializers.FloatField(allow_null=True, help_text=_MINIMUM_HELP)
    min_rejections = serializers.FloatField(allow_null=True, help_text=_MINIMUM_HELP)
    min_edits = serializers.FloatField(allow_null=True, help_text=_MINIMUM_HELP)


class GateInput(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    min_approvals = serializers.FloatField(
        min_value=0,
        max_value=1,
        allow_null=True,
        required=False,
        help_text=_MINIMUM_HELP,
    )
    min_rejections = serializers.FloatField(
        min_value=0,
        max_value=1,
        allow_null=True,
        required=False,
        help_text=_MINIMUM_HELP,
    )
    min_edits = serializers.FloatField(
        min_value=0,
        max_value=1,
        allow_null=True,
        required=False,
        help_text=_MINIMUM_HELP,
    )


def gate_body(workspace_id: int, gate: PromotionGate | None) -> dict:
    minimums = gate.minimums() if gate else {}
    return {
        "workspace": workspace_id,
        **{f"min_{name}": minimums.get(name) for name in ("approvals", "rejections", "edits")},
    }


class PromotionGateView(APIView):
    @extend_schema(parameters=[OpenApiParameter("workspace", int, required=True)], responses=GateSerializer)
    def get(self, request):
        workspace_id = id_query_param(params=request.query_params, name="workspace")
        if workspace_id is None:
            raise InvalidInput("workspace is required.", details={"workspace": ["This field is required."]})
        workspace = workspace_get_for_user(user=request.user, workspace_id=workspace_id)
        return Response(gate_body(workspace.pk, promotion_gate_get(workspace_id=workspace.pk)))

    @extend_schema(request=GateInput, responses=GateSerializer)
    def patch(self, request):
        body = GateInput(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=values.pop("workspace"))
        require_permission(user=request.user, workspace=workspace, permission=POLICY_CREATE)
        gate = agent_evaluations.promotion_gate_set(workspace=workspace, actor=request.user, **values)
        return Response(gate_body(workspace.pk, gate))


urlpatterns = [
    path(
        "agents/<str:agent_id>/versions/<str:version>/evaluate",
        VersionEvaluateView.as_view(),
        name="agent-version-evaluate",
    ),
    path("evaluations/<str:evaluation_id>", EvaluationDetailView.as_view(), name="evaluation-detail"),
    path("agents/<str:agent_id>/test-set/", TestSetView.as_view(), name="agent-test-set"),
    path("promotion-gate/", PromotionGateView.as_view(), name="promotion-gate"),
]
