"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls).

Triggers are managed like agents: members of the workspace read them, those who may
create agents there (``agent:create``: editors, admins, organization admins) create,
edit, enable, disable and delete them; anyone else gets a 404.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response

from agents.selectors import agent_get_for_user
from rivercore.errors import InvalidInput, NotFound
from tenancy.models import Membership
from tenancy.permissions import AGENT_CREATE, ROLE_ORDER
from tenancy.selectors import require_permission, workspace_get_for_user
from triggers import selectors, services
from triggers.models import Trigger, TriggerFiring
from triggers.types import API_TYPE_NAMES, api_type_name, config_public, type_from_api

TRIGGER_ID = OpenApiParameter("trigger_id", OpenApiTypes.UUID, OpenApiParameter.PATH)


class _StrictInput(serializers.Serializer):
    """Refuses keys it does not know, so a typo or a read-only field is a 400, not ignored."""

    refused_fields: dict[str, str] = {}

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            raise serializers.ValidationError(
                {key: [self.refused_fields.get(key, "Unknown or read-only field.")] for key in unknown}
            )
        return attrs


class RunAsSerializer(serializers.Serializer):
    user = serializers.IntegerField(help_text="Id of the service principal's user; runs name it as triggered_by.")
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True)


class TriggerSerializer(serializers.ModelSerializer):
    type = serializers.SerializerMethodField()
    config = serializers.SerializerMethodField()
    run_as = serializers.SerializerMethodField()

    class Meta:
        model = Trigger
        fields = ["id", "workspace", "agent", "name", "type", "prompt", "config", "enabled", "run_as", "created_by",
                  "created_at", "updated_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=list(API_TYPE_NAMES.values())))
    def get_type(self, trigger: Trigger) -> str:
        return api_type_name(trigger.type)

    def get_config(self, trigger: Trigger) -> dict:
        return config_public(trigger.config)

    @extend_schema_field(RunAsSerializer)
    def get_run_as(self, trigger: Trigger) -> dict:
        principal = trigger.run_as
        role = Membership.objects.filter(user_id=principal.user_id, workspace_id=trigger.workspace_id).values_list(
            "role", flat=True).first()
        return {"user": principal.user_id, "username": principal.user.username, "role": role}


class TriggerCreateSerializer(_StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    agent = serializers.UUIDField()
    name = serializers.CharField(max_length=services.NAME_MAX)
    type = serializers.ChoiceField(choices=list(API_TYPE_NAMES.values()))
    prompt = serializers.CharField(max_length=20_000, required=False, allow_blank=True, default="")
    config = serializers.JSONField(required=False, default=dict, help_text="The settings of the type (see docs).")
    enabled = serializers.BooleanField(required=False, default=True)
    run_as_role = serializers.ChoiceField(choices=list(ROLE_ORDER), required=False,
                                          default=services.DEFAULT_RUN_AS_ROLE,
                                          help_text="Workspace role the trigger's runs act with; at most yours.")


class TriggerUpdateSerializer(_StrictInput):
    refused_fields = {
        "workspace": "A trigger stays in its workspace.",
        "agent": "A trigger stays with its agent; create another trigger.",
        "type": "A trigger keeps its type; create another trigger.",
    }

    name = serializers.CharField(max_length=services.NAME_MAX, required=False)
    prompt = serializers.CharField(max_length=20_000, required=False, allow_blank=True)
    config = serializers.JSONField(required=False)
    enabled = serializers.BooleanField(required=False)
    run_as_role = serializers.ChoiceField(choices=list(ROLE_ORDER), required=False)


class FiringSerializer(serializers.ModelSerializer):
    reason = serializers.SerializerMethodField(help_text="Why nothing started (null when a run started).")

    class Meta:
        model = TriggerFiring
        fields = ["id", "fired_at", "source", "outcome", "reason", "detail", "execution", "dedupe_key",
                  "payload_bytes"]
        read_only_fields = fields


    @extend_schema_field(serializers.ChoiceField(choices=TriggerFiring.Reason.choices, allow_null=True))
    def get_reason(self, firing: TriggerFiring) -> str | None:
        return firing.reason or None


def _writable_trigger(request, trigger_id) -> Trigger:
    trigger = selectors.trigger_get_for_user(user=request.user, trigger_id=trigger_id)
    require_permission(user=request.user, workspace=trigger.workspace, permission=AGENT_CREATE)
    return trigger


class TriggerList(ListAPIView):
    serializer_class = TriggerSerializer

    @extend_schema(parameters=[OpenApiParameter("workspace", int), OpenApiParameter("agent", OpenApiTypes.UUID)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        filters: dict = {}
        if params.get("workspace"):
            try:
                filters["workspace_id"] = int(params["workspace"])
            except ValueError:
                raise InvalidInput("workspace must be an id.",
                                   details={"workspace": ["A valid integer is required."]}) from None
        if params.get("agent"):
            filters["agent_id"] = agent_get_for_user(user=self.request.user, agent_id=params["agent"]).pk
        return selectors.triggers_for_user(user=self.request.user, **filters).order_by("name", "id")

    @extend_schema(request=TriggerCreateSerializer, responses={201: TriggerSerializer})
    def post(self, request):
        body = TriggerCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=values.pop("workspace"))
        require_permission(user=request.user, workspace=workspace, permission=AGENT_CREATE)
        try:
            agent = agent_get_for_user(user=request.user, agent_id=values.pop("agent"))
        except NotFound:
            raise InvalidInput("Unknown agent.",
                               details={"agent": ["No agent with this id in the workspace."]}) from None
        trigger = services.trigger_create(
            actor=request.user, workspace=workspace, agent=agent, trigger_type=type_from_api(values.pop("type")),
            **values,
        )
        return Response(TriggerSerializer(trigger).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[TRIGGER_ID])
class TriggerDetail(GenericAPIView):
    serializer_class = TriggerSerializer

    def get(self, request, trigger_id):
        trigger = selectors.trigger_get_for_user(user=request.user, trigger_id=trigger_id)
        return Response(TriggerSerializer(trigger).data)

    @extend_schema(request=TriggerUpdateSerializer, responses=TriggerSerializer)
    def patch(self, request, trigger_id):
        trigger = _writable_trigger(request, trigger_id)
        body = TriggerUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        trigger = services.trigger_update(actor=request.user, trigger=trigger, **body.validated_data)
        return Response(TriggerSerializer(trigger).data)

    @extend_schema(responses={204: None})
    def delete(self, request, trigger_id):
        services.trigger_delete(trigger=_writable_trigger(request, trigger_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[TRIGGER_ID])
class TriggerFiringList(ListAPIView):
    """The trigger's firing attempts, newest first: the run each started, or why it was skipped."""

    serializer_class = FiringSerializer

    def get_queryset(self):
        trigger = selectors.trigger_get_for_user(user=self.request.user, trigger_id=self.kwargs["trigger_id"])
        return selectors.trigger_firings(trigger=trigger)


urlpatterns = [
    path("triggers/", TriggerList.as_view(), name="trigger-list"),
    path("triggers/<str:trigger_id>/", TriggerDetail.as_view(), name="trigger-detail"),
    path("triggers/<str:trigger_id>/firings/", TriggerFiringList.as_view(), name="trigger-firings"),
]
