"""Canaries over REST (docs/changing-safely.md, docs/api.md): start one for a version,
read its figures, stop it, promote it. Reads need membership of the agent's workspace
(404 otherwise); writes need ``agent:create`` there, like a deploy (403 otherwise)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.canary import MIN_RUNS_MAX, agent_canary_promote, agent_canary_start, agent_canary_stop
from agents.models import AgentCanary
from agents.selectors import agent_get_with_permissions, agent_version_get
from common.api import StrictInput
from executions.canary import canary_arm_run_ids, canary_compare, canary_latest, canary_of_version
from rivercore.errors import NotFound
from tenancy.permissions import AGENT_CREATE
from tenancy.selectors import require_granted

AGENT_ID = OpenApiParameter("agent_id", OpenApiTypes.UUID, OpenApiParameter.PATH)
VERSION = OpenApiParameter("version", OpenApiTypes.INT, OpenApiParameter.PATH, description="Version number")


class CanaryStartInput(StrictInput):
    percent = serializers.IntegerField(
        min_value=AgentCanary.PERCENT_MIN,
        max_value=AgentCanary.PERCENT_MAX,
        help_text="Share of new runs that take this version (1-50).",
    )
    margin = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=1,
        help_text="How much worse it may do before River rolls it back: rate "
        "points as a fraction (0.1 = ten points), and the same fraction "
        "of the deployed version's mean cost and turns. Default "
        "RIVER_CANARY_MARGIN.",
    )
    min_runs = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MIN_RUNS_MAX,
        help_text="Finished runs each arm needs before a figure is compared. Default RIVER_CANARY_MIN_RUNS.",
    )


class CanarySerializer(serializers.ModelSerializer):
    agent = serializers.UUIDField(source="agent_id", read_only=True)
    version = serializers.IntegerField(source="version.version", read_only=True)
    base_version = serializers.IntegerField(source="base_version.version", read_only=True)
    started_by = serializers.CharField(source="started_by.get_username", default=None, read_only=True)
    ended_by = serializers.CharField(source="ended_by.get_username", default=None, read_only=True)

    class Meta:
        model = AgentCanary
        fields = [
            "id",
            "agent",
            "version",
            "base_version",
            "percent",
            "margin",
            "min_runs",
            "seed",
            "status",
            "started_at",
            "started_by",
            "ended_at",
            "ended_by",
            "end_reason",
        ]
        read_only_fields = fields


def canary_body(canary: AgentCanary) -> dict:
    """The canary, its figures now (or as they stood when it ended) and the latest
    finished runs of each arm they come from."""
    figures = (
        canary.figures
        if not canary.is_running and canary.figures
        else canary_compare(canary=canary).model_dump(mode="json")
    )
    return {**CanarySerializer(canary).data, "figures": figures, "run_ids": canary_arm_run_ids(canary=canary)}


def _writable(request, agent_id, version):
    agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)
    chosen = agent_version_get(agent=agent, version=version)
    require_granted(granted=granted, permission=AGENT_CREATE)
    return agent, chosen


@extend_schema(parameters=[AGENT_ID])
class AgentCanaryView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, agent_id):
        """The agent's running canary, else its latest one, with figures; 404 if none."""
        agent, _ = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        canary = canary_latest(agent=agent)
        if canary is None:
            raise NotFound("This agent has had no canary.", code="no_canary")
        return Response(canary_body(canary))


@extend_schema(parameters=[AGENT_ID, VERSION])
class VersionCanaryView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, agent_id, version):
        """The version's latest canary with its figures."""
        agent, _ = agent_get_with_permissions(user=request.user, agent_id=agent_id)
        chosen = agent_version_get(agent=agent, version=version)
        return Response(canary_body(canary_of_version(agent=agent, version=chosen)))

    @extend_schema(request=CanaryStartInput, responses={201: OpenApiTypes.OBJECT})
    def post(self, request, agent_id, version):
        """Start sending ``percent`` of new runs to this version."""
        agent, chosen = _writable(request, agent_id, version)
        body = CanaryStartInput(data=request.data)
        body.is_valid(raise_exception=True)
        agent_canary_start(agent=agent, version=chosen, actor=request.user, **body.validated_data)
        return Response(
            canary_body(canary_of_version(agent=agent, version=chosen, running=True)), status=status.HTTP_201_CREATED
        )

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    def delete(self, request, agent_id, version):
        """Stop the version's running canary: every new run takes the deployed version."""
        agent, chosen = _writable(request, agent_id, version)
        canary = canary_of_version(agent=agent, version=chosen, running=True)
        figures = canary_compare(canary=canary).model_dump(mode="json") | {"status": AgentCanary.Status.STOPPED}
        return Response(canary_body(agent_canary_stop(canary=canary, actor=request.user, figures=figures)))


class CanaryPromoteInput(StrictInput):
    override_reason = serializers.CharField(
        max_length=1000, required=False, allow_blank=True,
        help_text="Admins only: promote although the promotion gate refuses (audited as version_deploy_override).")


@extend_schema(parameters=[AGENT_ID, VERSION], request=CanaryPromoteInput, responses={200: OpenApiTypes.OBJECT})
class VersionCanaryPromoteView(APIView):
    def post(self, request, agent_id, version):
        """Deploy the canary's version (its canary ends ``promoted``), through the deploy's
        rules: the promotion gate refuses it as it refuses a deploy unless an admin gives
        ``override_reason``."""
        agent, chosen = _writable(request, agent_id, version)
        body = CanaryPromoteInput(data=request.data)
        body.is_valid(raise_exception=True)
        canary = canary_of_version(agent=agent, version=chosen, running=True)
        figures = canary_compare(canary=canary).model_dump(mode="json") | {"status": AgentCanary.Status.PROMOTED}
        promoted = agent_canary_promote(canary=canary, actor=request.user, figures=figures,
                                        override_reason=body.validated_data.get("override_reason"))
        return Response(canary_body(promoted))


urlpatterns = [
    path("agents/<str:agent_id>/canary", AgentCanaryView.as_view(), name="agent-canary"),
    path(
        "agents/<str:agent_id>/versions/<str:version>/canary", VersionCanaryView.as_view(), name="agent-version-canary"
    ),
    path(
        "agents/<str:agent_id>/versions/<str:version>/canary/promote",
        VersionCanaryPromoteView.as_view(),
        name="agent-version-canary-promote",
    ),
]
