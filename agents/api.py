"""REST endpoints for agents and their versions (mounted under /api/v1/ by riverapp.urls).

Views parse, authorize and call one service. Reads need membership of the agent's
workspace (the selectors 404 otherwise); writes need ``agent:create`` there.
"""

from __future__ import annotations

import copy

import pydantic
from django.db import transaction
from django.urls import path
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response

from agents import selectors, services
from agents.models import Agent, AgentVersion, WorkspaceMemory
from common.api import StrictInput
from common.ids import id_query_param, uuid_query_param
from governance.models import WorkspaceSettings
from governance.selectors import workspace_memory_mode
from governance.services import workspace_memory_mode_set
from rivercore import limits
from rivercore.errors import InvalidInput, pydantic_details
from rivercore.types.agents import (
    ApprovalRules,
    GovernanceLevel,
    ModelConfig,
    NotificationConfig,
)
from tenancy.permissions import AGENT_CREATE, POLICY_CREATE
from tenancy.selectors import require_permission, workspace_get_for_user

# ---------------------------------------------------------------- fields


class PydanticField(serializers.Field):
    """A JSON object checked by a pydantic model; the validated value is the model."""

    def __init__(self, schema: type[pydantic.BaseModel], **kwargs):
        self.schema = schema
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            return self.schema.model_validate(data)
        except pydantic.ValidationError as exc:
            raise serializers.ValidationError(pydantic_details(exc)) from None

    def to_representation(self, value):
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump(mode="json")
        return value


def _openapi_schema(model: type[pydantic.BaseModel]) -> dict:
    """The model's JSON schema as an OpenAPI 3.0 schema: refs inlined, null as ``nullable``."""
    raw = model.model_json_schema(mode="validation")
    defs = raw.pop("$defs", {})

    def convert(node):
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return convert(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
        node = {key: convert(value) for key, value in node.items()}
        options = node.get("anyOf")
        if options and {"type": "null"} in options:
            rest = [option for option in options if option != {"type": "null"}]
            node.pop("anyOf")
            if len(rest) == 1:
                node = {**rest[0], **node}
            else:
                node["anyOf"] = rest
            node["nullable"] = True
        return node

    return convert(raw)


class PydanticFieldSchema(OpenApiSerializerFieldExtension):
    target_class = PydanticField

    def map_serializer_field(self, auto_schema, direction):
        return _openapi_schema(self.target.schema)


# ---------------------------------------------------------------- serializers


class AgentSerializer(serializers.ModelSerializer):
    current_version = serializers.SerializerMethodField(help_text="Number of the deployed version.")

    class Meta:
        model = Agent
        fields = [
            "id",
            "workspace",
            "name",
            "description",
            "business_function",
            "domain",
            "owner",
            "status",
            "health",
            "consecutive_failures",
            "current_version",
            "parent_agent",
            "disallow_transfer_to_parent",
            "disallow_transfer_to_peers",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_current_version(self, agent: Agent) -> int | None:
        return agent.current_version.version if agent.current_version_id else None


_TEAM_HELP = ("The agent's parent in a team (an agent of the same workspace), or null for a team root "
              "(docs/sessions.md). A cycle is refused.")
_TEAM_FIELDS = ("parent_agent", "disallow_transfer_to_parent", "disallow_transfer_to_peers")


def _team_changes(values: dict) -> dict:
    """Pop the team fields out of validated input, as agent_team_update's keywords."""
    changes = {field: values.pop(field) for field in _TEAM_FIELDS if field in values}
    if "parent_agent" in changes:
        changes["parent_agent_id"] = changes.pop("parent_agent")
    return changes


class AgentCreateSerializer(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    name = serializers.CharField(max_length=limits.NAME)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True, default="")
    business_function = serializers.ChoiceField(choices=Agent._meta.get_field("business_function").choices)
    domain = serializers.CharField(max_length=limits.NAME, required=False, allow_blank=True, default="")
    parent_agent = serializers.UUIDField(required=False, allow_null=True, help_text=_TEAM_HELP)
    disallow_transfer_to_parent = serializers.BooleanField(required=False)
    disallow_transfer_to_peers = serializers.BooleanField(required=False)


class AgentUpdateSerializer(StrictInput):
    refused_fields = {"status": "Use the activate, pause and archive endpoints to change the status."}

    name = serializers.CharField(max_length=limits.NAME, required=False)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True)
    business_function = serializers.ChoiceField(
        choices=Agent._meta.get_field("business_function").choices, required=False
    )
    domain = serializers.CharField(max_length=limits.NAME, required=False, allow_blank=True)
    parent_agent = serializers.UUIDField(required=False, allow_null=True, help_text=_TEAM_HELP)
    disallow_transfer_to_parent = serializers.BooleanField(required=False)
    disallow_transfer_to_peers = serializers.BooleanField(required=False)


class AgentVersionSerializer(serializers.ModelSerializer):
    model_config = PydanticField(ModelConfig, read_only=True)
    approval_rules = PydanticField(ApprovalRules, read_only=True)
    notification_config = PydanticField(NotificationConfig, read_only=True)
    tools = serializers.ListField(child=serializers.CharField(), read_only=True)
    data_sources = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = AgentVersion
        fields = [
            "id",
            "agent",
            "version",
            "goal",
            "instructions",
            "system_prompt",
            "action_level",
            "governance_level",
            "model_config",
            "tools",
            "approval_rules",
            "notification_config",
            "data_sources",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class AgentVersionCreateSerializer(StrictInput):
    goal = serializers.CharField(max_length=limits.GOAL)
    instructions = serializers.CharField(max_length=limits.PROMPT)
    system_prompt = serializers.CharField(max_length=limits.PROMPT, required=False, allow_blank=True, default="")
    action_level = serializers.ChoiceField(choices=AgentVersion._meta.get_field("action_level").choices)
    governance_level = serializers.ChoiceField(
        choices=AgentVersion._meta.get_field("governance_level").choices,
        required=False,
        default=GovernanceLevel.STANDARD.value,
    )
    model_config = PydanticField(ModelConfig, required=False)
    tools = serializers.ListField(
        child=serializers.CharField(max_length=limits.IDENTIFIER), max_length=limits.LIST_ITEMS, required=False,
        default=list,
    )
    approval_rules = PydanticField(ApprovalRules, required=False)
    notification_config = PydanticField(NotificationConfig, required=False)
    data_sources = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), max_length=limits.LIST_ITEMS, required=False,
        default=list,
    )


# ---------------------------------------------------------------- views

AGENT_ID = OpenApiParameter("agent_id", OpenApiTypes.UUID, OpenApiParameter.PATH)
VERSION = OpenApiParameter("version", OpenApiTypes.INT, OpenApiParameter.PATH, description="Version number")


def _writable_agent(request, agent_id) -> Agent:
    agent = selectors.agent_get_for_user(user=request.user, agent_id=agent_id)
    require_permission(user=request.user, workspace=agent.workspace, permission=AGENT_CREATE)
    return agent


class AgentList(ListAPIView):
    serializer_class = AgentSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=Agent.Status.values),
            OpenApiParameter("workspace", int),
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        filters = {}
        if "status" in params:
            if params["status"] not in Agent.Status.values:
                raise InvalidInput(
                    "Unknown status.", details={"status": [f'"{params["status"]}" is not a valid choice.']}
                )
            filters["status"] = params["status"]
        workspace_id = id_query_param(params=params, name="workspace")
        if workspace_id is not None:
            filters["workspace_id"] = workspace_id
        return selectors.agents_for_user(user=self.request.user, **filters).order_by("name", "id")

    @extend_schema(request=AgentCreateSerializer, responses={201: AgentSerializer})
    def post(self, request):
        data = AgentCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=values.pop("workspace"))
        require_permission(user=request.user, workspace=workspace, permission=AGENT_CREATE)
        team = _team_changes(values)
        with transaction.atomic():  # a refused parent leaves no agent behind
            agent = services.agent_create(workspace=workspace, owner=request.user, **values)
            if team:
                agent = services.agent_team_update(agent=agent, actor=request.user, **team)
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[AGENT_ID])
class AgentDetail(GenericAPIView):
    serializer_class = AgentSerializer

    def get(self, request, agent_id):
        agent = selectors.agent_get_for_user(user=request.user, agent_id=agent_id)
        return Response(AgentSerializer(agent).data)

    @extend_schema(request=AgentUpdateSerializer, responses=AgentSerializer)
    def patch(self, request, agent_id):
        agent = _writable_agent(request, agent_id)
        data = AgentUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        team = _team_changes(values)
        with transaction.atomic():  # all of the change or none of it
            agent = services.agent_update(agent=agent, **values)
            if team:
                agent = services.agent_team_update(agent=agent, actor=request.user, **team)
        return Response(AgentSerializer(agent).data)


@extend_schema(parameters=[AGENT_ID])
class AgentVersionList(ListAPIView):
    serializer_class = AgentVersionSerializer

    def get_queryset(self):
        agent = selectors.agent_get_for_user(user=self.request.user, agent_id=self.kwargs["agent_id"])
        return selectors.agent_versions(agent=agent)

    @extend_schema(request=AgentVersionCreateSerializer, responses={201: AgentVersionSerializer})
    def post(self, request, agent_id):
        agent = _writable_agent(request, agent_id)
        data = AgentVersionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        config = dict(data.validated_data)
        config["data_source_ids"] = config.pop("data_sources")
        version = services.agent_version_create(agent=agent, actor=request.user, **config)
        return Response(AgentVersionSerializer(version).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[AGENT_ID, VERSION])
class AgentVersionDetail(GenericAPIView):
    """Versions are immutable: there is no update or delete."""

    serializer_class = AgentVersionSerializer

    def get(self, request, agent_id, version):
        agent = selectors.agent_get_for_user(user=request.user, agent_id=agent_id)
        return Response(AgentVersionSerializer(selectors.agent_version_get(agent=agent, version=version)).data)


class DeployInput(StrictInput):
    override_reason = serializers.CharField(
        max_length=1000, required=False, allow_blank=True,
        help_text="Admins only: deploy although the promotion gate refuses (audited as version_deploy_override).")


@extend_schema(parameters=[AGENT_ID, VERSION], request=DeployInput, responses=AgentSerializer)
class AgentVersionDeploy(GenericAPIView):
    serializer_class = AgentSerializer

    def post(self, request, agent_id, version):
        agent = _writable_agent(request, agent_id)
        agent_version = selectors.agent_version_get(agent=agent, version=version)
        body = DeployInput(data=request.data)
        body.is_valid(raise_exception=True)
        agent = services.agent_version_deploy(agent=agent, version=agent_version, actor=request.user,
                                              override_reason=body.validated_data.get("override_reason"))
        return Response(AgentSerializer(agent).data)


@extend_schema(parameters=[AGENT_ID], request=None, responses=AgentSerializer)
class AgentLifecycle(GenericAPIView):
    serializer_class = AgentSerializer
    target: str = ""

    def post(self, request, agent_id):
        agent = _writable_agent(request, agent_id)
        agent = services.agent_transition(agent=agent, target=self.target, actor=request.user)
        return Response(AgentSerializer(agent).data)


# ---------------------------------------------------------------- workspace memory


class WorkspaceMemorySerializer(serializers.ModelSerializer):
    personal = serializers.BooleanField(read_only=True, help_text="True: only its user sees it and runs they start.")
    agent = serializers.UUIDField(source="agent_id", read_only=True, allow_null=True)

    class Meta:
        model = WorkspaceMemory
        fields = ["id", "workspace", "agent", "personal", "content", "source_execution_id", "created_at"]
        read_only_fields = fields


class MemorySettingsSerializer(serializers.Serializer):
    workspace = serializers.IntegerField(read_only=True)
    mode = serializers.ChoiceField(choices=WorkspaceSettings.MemoryMode.choices, read_only=True)
    personal_consent = serializers.BooleanField(read_only=True, help_text="The caller's own consent.")


class MemorySettingsUpdateSerializer(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    mode = serializers.ChoiceField(choices=WorkspaceSettings.MemoryMode.choices, required=False,
                                   help_text="Needs policy:create (workspace admins).")
    personal_consent = serializers.BooleanField(required=False, help_text="The caller's own consent.")


class MemoryList(ListAPIView):
    """The memories the caller may see: shared ones of their workspaces and their own personal ones."""

    serializer_class = WorkspaceMemorySerializer

    @extend_schema(parameters=[
        OpenApiParameter("workspace", int), OpenApiParameter("agent", OpenApiTypes.UUID),
        OpenApiParameter("q", str, description="Words the memory must all hold."),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        agent_id = None
        agent = uuid_query_param(params=params, name="agent")
        if agent is not None:
            agent_id = selectors.agent_get_for_user(user=self.request.user, agent_id=agent).pk
        query = params.get("q") or None
        if query is not None and len(query) > limits.NAME:
            raise InvalidInput("q is too long.", details={"q": [f"At most {limits.NAME} characters."]})
        workspace_id = id_query_param(params=params, name="workspace")
        return selectors.memories_for_user(user=self.request.user, workspace_id=workspace_id,
                                           agent_id=agent_id, query=query)


class MemoryDetail(GenericAPIView):
    serializer_class = WorkspaceMemorySerializer

    def get(self, request, memory_id):
        return Response(WorkspaceMemorySerializer(selectors.memory_get_for_user(user=request.user,
                                                                                memory_id=memory_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, memory_id):
        """Your own personal memory; a shared one needs agent:create in its workspace."""
        memory = selectors.memory_get_for_user(user=request.user, memory_id=memory_id)
        if not memory.personal:
            require_permission(user=request.user, workspace=memory.workspace, permission=AGENT_CREATE)
        services.workspace_memory_delete(memory=memory, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemorySettings(GenericAPIView):
    """What runs of a workspace remember (its mode) and the caller's consent to personal memory."""

    serializer_class = MemorySettingsSerializer

    @staticmethod
    def _body(workspace, user) -> dict:
        return {"workspace": workspace.pk, "mode": workspace_memory_mode(workspace_id=workspace.pk),
                "personal_consent": selectors.memory_consent_given(workspace_id=workspace.pk, user_id=user.pk)}

    @extend_schema(parameters=[OpenApiParameter("workspace", int, required=True)])
    def get(self, request):
        workspace_id = id_query_param(params=request.query_params, name="workspace")
        if workspace_id is None:
            raise InvalidInput("workspace is required.", details={"workspace": ["This field is required."]})
        workspace = workspace_get_for_user(user=request.user, workspace_id=workspace_id)
        return Response(self._body(workspace, request.user))

    @extend_schema(request=MemorySettingsUpdateSerializer, responses=MemorySettingsSerializer)
    def patch(self, request):
        data = MemorySettingsUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        workspace = workspace_get_for_user(user=request.user, workspace_id=values["workspace"])
        if "mode" in values:  # checked before anything is written
            require_permission(user=request.user, workspace=workspace, permission=POLICY_CREATE)
        with transaction.atomic():
            if "mode" in values:
                workspace_memory_mode_set(workspace=workspace, mode=values["mode"], actor=request.user)
            if "personal_consent" in values:
                services.memory_consent_set(workspace=workspace, user=request.user,
                                            personal=values["personal_consent"])
        return Response(self._body(workspace, request.user))


urlpatterns = [
    path("memory/", MemoryList.as_view(), name="memory-list"),
    path("memory/settings/", MemorySettings.as_view(), name="memory-settings"),
    path("memory/<str:memory_id>/", MemoryDetail.as_view(), name="memory-detail"),
    path("agents/", AgentList.as_view(), name="agent-list"),
    path("agents/<str:agent_id>/", AgentDetail.as_view(), name="agent-detail"),
    path("agents/<str:agent_id>/versions/", AgentVersionList.as_view(), name="agent-version-list"),
    path("agents/<str:agent_id>/versions/<str:version>/", AgentVersionDetail.as_view(), name="agent-version-detail"),
    path(
        "agents/<str:agent_id>/versions/<str:version>/deploy",
        AgentVersionDeploy.as_view(),
        name="agent-version-deploy",
    ),
    path("agents/<str:agent_id>/activate", AgentLifecycle.as_view(target=Agent.Status.ACTIVE), name="agent-activate"),
    path("agents/<str:agent_id>/pause", AgentLifecycle.as_view(target=Agent.Status.PAUSED), name="agent-pause"),
    path("agents/<str:agent_id>/archive", AgentLifecycle.as_view(target=Agent.Status.ARCHIVED), name="agent-archive"),
]
