"""Replay and what-if replay over REST (docs/replay.md)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get_with_permissions
from common.api import StrictInput
from executions.models import ExecutionReplay
from executions.selectors import execution_get_for_user
from executions.services import replay
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import require_granted, require_permission


class ReplayInput(StrictInput):
    agent_version = serializers.IntegerField(required=False, min_value=1,
                                             help_text="What-if: replay against this version number.")
    policies = serializers.ListField(child=serializers.JSONField(), required=False, max_length=50,
                                     help_text="What-if: this policy set instead of the active one (ids or "
                                               "inline definitions).")


class BatchInput(StrictInput):
    agent_version = serializers.IntegerField(min_value=1)
    last_n = serializers.IntegerField(min_value=1, max_value=replay.BATCH_MAX_RUNS, default=replay.BATCH_DEFAULT_RUNS)


class ReplaySerializer(serializers.ModelSerializer):
    execution = serializers.IntegerField(source="replay_of_id", allow_null=True, read_only=True)

    class Meta:
        model = ExecutionReplay
        fields = ["id", "kind", "execution", "agent", "agent_version", "summary", "result", "created_at"]


class ExecutionReplayView(APIView):
    @extend_schema(responses={200: ReplaySerializer(many=True)})
    def get(self, request, execution_id):
        """The run's replays, newest first (replays never appear in the run lists)."""
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        rows = execution.replays.order_by("-created_at", "-id")[:50]
        return Response(ReplaySerializer(rows, many=True).data)

    @extend_schema(request=ReplayInput, responses={200: ReplaySerializer})
    def post(self, request, execution_id):
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        require_permission(user=request.user, workspace=execution.workspace, permission=AGENT_EXECUTE)
        body = ReplayInput(data=request.data)
        body.is_valid(raise_exception=True)
        row = replay.execution_replay(execution=execution, user=request.user,
                                      agent_version=body.validated_data.get("agent_version"),
                                      policies=body.validated_data.get("policies"))
        return Response(ReplaySerializer(row).data, status=status.HTTP_200_OK)


class AgentReplayView(APIView):
    @extend_schema(request=BatchInput, responses={200: ReplaySerializer})
    def post(self, request, agent_id):
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        require_granted(granted=granted, permission=AGENT_EXECUTE)
        body = BatchInput(data=request.data)
        body.is_valid(raise_exception=True)
        row = replay.agent_replay_batch(agent=agent, user=request.user, **body.validated_data)
        return Response(ReplaySerializer(row).data, status=status.HTTP_200_OK)


urlpatterns = [
    path("executions/<int:execution_id>/replay", ExecutionReplayView.as_view(), name="execution-replay"),
    path("agents/<str:agent_id>/replay", AgentReplayView.as_view(), name="agent-replay"),
]
