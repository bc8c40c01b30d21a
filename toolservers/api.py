"""REST endpoints for MCP tool servers (mounted under /api/v1/ by riverapp.urls).

Any member of the server's workspace may read it and its tools (others get 404);
register, discover, review and delete need ``tool_server:manage`` (workspace admins).
``env`` and ``headers`` are write-only: responses name their keys, never their values.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from common.api import StrictInput
from common.ids import id_query_param
from rivercore.types.toolservers import river_name
from tenancy import permissions as perms
from tenancy.selectors import require_permission, workspace_get_for_user
from toolservers import selectors, services
from toolservers.models import McpTool, ToolServer

SERVER_ID = OpenApiParameter("server_id", int, OpenApiParameter.PATH)
TOOL_NAME = OpenApiParameter("tool_name", str, OpenApiParameter.PATH)


class McpToolSerializer(serializers.ModelSerializer):
    river_name = serializers.SerializerMethodField()
    state = serializers.CharField(read_only=True)
    usable = serializers.BooleanField(read_only=True)
    suggested_class = serializers.CharField(read_only=True)
    action_class = serializers.CharField(read_only=True, help_text='"read", "write", or "" while unreviewed.')
    diff = serializers.SerializerMethodField()

    class Meta:
        model = McpTool
        fields = [
            "name",
            "river_name",
            "description",
            "input_schema",
            "annotations",
            "suggested_class",
            "action_class",
            "enabled",
            "state",
            "usable",
            "digest",
            "reviewed_digest",
            "reviewed_at",
            "changed_at",
            "discovered_at",
            "diff",
        ]
        read_only_fields = fields

    def get_river_name(self, tool: McpTool) -> str:
        return river_name(tool.server.name, tool.name)

    def get_diff(self, tool: McpTool) -> list[str]:
        return selectors.mcp_tool_diff(tool=tool)


class ToolServerSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolServer
        fields = [
            "id",
            "workspace",
            "name",
            "transport",
            "command",
            "args",
            "url",
            "secret_names",
            "health",
            "health_message",
            "health_checked_at",
            "discovered_at",
            "created_at",
        ]
        read_only_fields = fields


class ToolServerDetailSerializer(ToolServerSerializer):
    tools = serializers.SerializerMethodField()

    class Meta(ToolServerSerializer.Meta):
        fields = [*ToolServerSerializer.Meta.fields, "tools"]
        read_only_fields = fields

    def get_tools(self, server: ToolServer) -> list[dict]:
        return McpToolSerializer(selectors.tool_server_tools(server=server), many=True).data


class _Strings(serializers.DictField):
    child = serializers.CharField(max_length=services.SECRET_VALUE_MAX, allow_blank=True, trim_whitespace=False)


class ToolServerCreateSerializer(StrictInput):
    workspace = serializers.IntegerField()
    name = serializers.CharField(max_length=40)
    transport = serializers.ChoiceField(choices=ToolServer.Transport.values)
    command = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    args = serializers.ListField(
        child=serializers.CharField(max_length=services.ARG_MAX, allow_blank=True, trim_whitespace=False),
        required=False,
        default=list,
        max_length=services.ARGS_MAX,
    )
    env = _Strings(required=False, default=dict, write_only=True)
    url = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    headers = _Strings(required=False, default=dict, write_only=True)


class McpToolReviewSerializer(StrictInput):
    action_class = serializers.ChoiceField(choices=McpTool.ActionClass.values)
    enabled = serializers.BooleanField()


def _server(request, server_id, *, manage: bool) -> ToolServer:
    server = selectors.tool_server_get_for_user(user=request.user, server_id=server_id)
    require_permission(
        user=request.user,
        workspace=server.workspace,
        permission=perms.TOOL_SERVER_MANAGE if manage else perms.WORKSPACE_VIEW,
    )
    return server


class ToolServerList(GenericAPIView):
    serializer_class = ToolServerSerializer

    @extend_schema(parameters=[OpenApiParameter("workspace", int)], responses=ToolServerSerializer(many=True))
    def get(self, request):
        workspace_id = id_query_param(params=request.query_params, name="workspace")
        rows = selectors.tool_servers_for_user(user=request.user, workspace_id=workspace_id)
        page = self.paginate_queryset(rows)
        if page is not None:
            return self.get_paginated_response(ToolServerSerializer(page, many=True).data)
        return Response(ToolServerSerializer(rows, many=True).data)

    @extend_schema(request=ToolServerCreateSerializer, responses={201: ToolServerSerializer})
    def post(self, request):
        data = ToolServerCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=values.pop("workspace"))
        require_permission(user=request.user, workspace=workspace, permission=perms.TOOL_SERVER_MANAGE)
        server = services.tool_server_register(workspace=workspace, actor=request.user, **values)
        return Response(ToolServerSerializer(server).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[SERVER_ID])
class ToolServerDetail(GenericAPIView):
    serializer_class = ToolServerDetailSerializer

    def get(self, request, server_id):
        return Response(ToolServerDetailSerializer(_server(request, server_id, manage=False)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, server_id):
        services.tool_server_delete(server=_server(request, server_id, manage=True), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[SERVER_ID], request=None, responses=ToolServerDetailSerializer)
class ToolServerDiscover(GenericAPIView):
    """List the server's tools now; new ones are unreviewed, changed ones disabled."""

    serializer_class = ToolServerDetailSerializer

    def post(self, request, server_id):
        server = _server(request, server_id, manage=True)
        services.tool_server_discover(server=server, actor=request.user)
        server.refresh_from_db()
        return Response(ToolServerDetailSerializer(server).data)


@extend_schema(parameters=[SERVER_ID, TOOL_NAME], request=McpToolReviewSerializer, responses=McpToolSerializer)
class McpToolReview(GenericAPIView):
    """An admin's review of one tool as it is now: its class and whether agents may use it."""

    serializer_class = McpToolSerializer

    def get(self, request, server_id, tool_name):
        server = _server(request, server_id, manage=False)
        return Response(McpToolSerializer(selectors.mcp_tool_get(server=server, name=tool_name)).data)

    def patch(self, request, server_id, tool_name):
        server = _server(request, server_id, manage=True)
        tool = selectors.mcp_tool_get(server=server, name=tool_name)
        data = McpToolReviewSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tool = services.mcp_tool_review(tool=tool, actor=request.user, **data.validated_data)
        return Response(McpToolSerializer(tool).data)


urlpatterns = [
    path("tool-servers/", ToolServerList.as_view(), name="tool-server-list"),
    path("tool-servers/<int:server_id>/", ToolServerDetail.as_view(), name="tool-server-detail"),
    path("tool-servers/<int:server_id>/discover", ToolServerDiscover.as_view(), name="tool-server-discover"),
    path("tool-servers/<int:server_id>/tools/<str:tool_name>", McpToolReview.as_view(), name="mcp-tool-review"),
]
