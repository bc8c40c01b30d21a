"""Backtests over REST (docs/changing-safely.md): a policy change, or an agent version's
auto-approve conditions, decided again over the workspace's recorded history.

``POST /policies/backtest`` and ``POST /agents/{id}/versions/backtest`` answer 202 with
the queued row; ``GET /policies/backtest/{id}`` gives its progress, then its result.
The rows are governance's; these views live here because the work reads runs' steps."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get_for_user, agent_version_get
from common.api import StrictInput
from governance.backtest_models import PolicyBacktest
from governance.backtests import (
    MAX_DAYS,
    auto_approve_backtest_create,
    backtest_get_for_user,
    backtest_queue,
    policy_backtest_create,
)
from governance.models import Policy
from rivercore import limits
from rivercore.errors import InvalidInput
from rivercore.types.governance import PolicyScope
from tenancy.permissions import AGENT_CREATE
from tenancy.selectors import require_permission

_ID = {"min_value": 1, "max_value": 2**63 - 1}


def _policy_choices(field: str):
    """The policy model's own choices (values and labels), so the schema names one enum
    for a policy field whether a policy or a proposed change carries it."""
    return Policy._meta.get_field(field).choices


class NestedStrictInput(serializers.Serializer):
    """StrictInput for a nested object: an unknown key is a 400 naming it."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({str(key)[:100]: ["Unknown or read-only field."]
                                                   for key in unknown[:20]})
        return super().to_internal_value(data)


class ProposedPolicyInput(NestedStrictInput):
    """The fields of ``POST /policies/`` (checked again, as there, by the service)."""

    name = serializers.CharField(max_length=limits.NAME)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True)
    scope = serializers.ChoiceField(choices=_policy_choices("scope"), required=False,
                                    default=PolicyScope.WORKSPACE.value)
    workspace_id = serializers.IntegerField(required=False, allow_null=True, **_ID)
    organization_id = serializers.IntegerField(required=False, allow_null=True, **_ID)
    policy_type = serializers.ChoiceField(choices=_policy_choices("policy_type"), required=False, allow_null=True)
    conditions = serializers.JSONField(help_text='{"expression": "..."} or the keyed form')
    enforcement = serializers.ChoiceField(choices=_policy_choices("enforcement"))
    enabled = serializers.BooleanField(required=False, default=True)
    require_preview = serializers.BooleanField(required=False, default=False)
    required_approvals = serializers.IntegerField(required=False, default=1, min_value=1, max_value=10)


class PolicyBacktestInput(StrictInput):
    policy = ProposedPolicyInput(required=False, help_text="A new policy to try.")
    policy_id = serializers.UUIDField(required=False, help_text="An existing policy to try with the changed fields.")
    workspace_id = serializers.IntegerField(required=False, help_text="Whose runs (default: the policy's workspace).",
                                            **_ID)
    days = serializers.IntegerField(required=False, default=14, min_value=1, max_value=MAX_DAYS)
    # The changed fields of policy_id (PATCH /policies/{id}/'s).
    name = serializers.CharField(max_length=limits.NAME, required=False)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True)
    policy_type = serializers.ChoiceField(choices=_policy_choices("policy_type"), required=False, allow_null=True)
    conditions = serializers.JSONField(required=False)
    enforcement = serializers.ChoiceField(choices=_policy_choices("enforcement"), required=False)
    enabled = serializers.BooleanField(required=False)
    require_preview = serializers.BooleanField(required=False)
    required_approvals = serializers.IntegerField(required=False, min_value=1, max_value=10)

    CHANGES = ("name", "description", "policy_type", "conditions", "enforcement", "enabled", "required_approvals")

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if ("policy" in attrs) == ("policy_id" in attrs):
            raise serializers.ValidationError({"policy": ["Give either policy or policy_id."]})
        changed = sorted(set(self.CHANGES) & set(self.initial_data))
        if "policy" in attrs and changed:
            raise serializers.ValidationError({name: ["Only with policy_id; put it inside policy."]
                                               for name in changed})
        return attrs


class AutoApproveConditionInput(NestedStrictInput):
    tool = serializers.CharField(max_length=100)
    condition = serializers.CharField(max_length=limits.GOAL)


class AutoApproveBacktestInput(StrictInput):
    auto_approve_conditions = serializers.ListField(child=AutoApproveConditionInput(), min_length=1, max_length=50)
    agent_version = serializers.IntegerField(required=False, min_value=1, max_value=2**31 - 1,
                                             help_text="Whose tools the conditions name (default: current).")
    days = serializers.IntegerField(required=False, default=14, min_value=1, max_value=MAX_DAYS)


class BacktestSerializer(serializers.ModelSerializer):
    """The row; a finished policy backtest's result fields are lifted to the top."""

    class Meta:
        model = PolicyBacktest
        fields = ["id", "kind", "status", "progress", "days", "policy_id", "agent_id", "error", "created_at",
                  "finished_at"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if instance.status == PolicyBacktest.Status.DONE:
            data.update(instance.result)
        return data


class PolicyBacktestStart(APIView):
    @extend_schema(request=PolicyBacktestInput, responses={202: BacktestSerializer})
    def post(self, request):
        body = PolicyBacktestInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        changes = {name: data[name] for name in PolicyBacktestInput.CHANGES if name in data}
        backtest = policy_backtest_create(
            actor=request.user, days=data["days"], workspace_id=data.get("workspace_id"),
            policy=dict(data["policy"]) if "policy" in data else None,
            policy_id=data.get("policy_id"), changes=changes)
        backtest_queue(backtest=backtest)
        return Response({"id": backtest.pk, "status": backtest.status}, status=status.HTTP_202_ACCEPTED)


class BacktestDetail(APIView):
    @extend_schema(responses=BacktestSerializer)
    def get(self, request, backtest_id):
        return Response(BacktestSerializer(backtest_get_for_user(user=request.user, backtest_id=backtest_id)).data)


class AutoApproveBacktestStart(APIView):
    @extend_schema(request=AutoApproveBacktestInput, responses={202: BacktestSerializer})
    def post(self, request, agent_id):
        agent = agent_get_for_user(user=request.user, agent_id=agent_id)
        require_permission(user=request.user, workspace=agent.workspace, permission=AGENT_CREATE)
        body = AutoApproveBacktestInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("agent_version"):
            version = agent_version_get(agent=agent, version=data["agent_version"])
        elif agent.current_version_id:
            version = agent.current_version
        else:
            raise InvalidInput("The agent has no version.", details={"agent_version": ["required"]})
        backtest = auto_approve_backtest_create(
            actor=request.user, workspace=agent.workspace, agent_id=agent.pk, agent_version=version.version,
            tools=list(version.tools), days=data["days"],
            conditions=[dict(item) for item in data["auto_approve_conditions"]])
        backtest_queue(backtest=backtest)
        return Response({"id": backtest.pk, "status": backtest.status}, status=status.HTTP_202_ACCEPTED)


urlpatterns = [
    path("policies/backtest", PolicyBacktestStart.as_view(), name="policy-backtest"),
    path("policies/backtest/<str:backtest_id>", BacktestDetail.as_view(), name="policy-backtest-detail"),
    path("agents/<str:agent_id>/versions/backtest", AutoApproveBacktestStart.as_view(),
         name="agent-version-backtest"),
]
