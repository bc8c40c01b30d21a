"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls): workspaces and tokens."""

from __future__ import annotations

from django.urls import path
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response

from common.api import StrictInput
from tenancy.authentication import BearerTokenAuthentication
from tenancy.models import AccessToken, Workspace
from tenancy.selectors import (
    access_tokens_for_user,
    workspace_get_for_user,
    workspace_permissions,
    workspace_roles,
    workspaces_for_user,
)
from tenancy.services import token_issue, token_revoke


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Describes personal access tokens in the OpenAPI schema (registered on import)."""

    target_class = BearerTokenAuthentication
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal access token: rvr_<prefix>_<secret>."}


class WorkspaceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workspace
        fields = ["id", "organization", "name", "slug", "description", "status", "time_zone", "allow_self_approval",
                  "created_at"]
        # Changed through PATCH /workspaces/<id>/approval-settings (admins, audited).
        read_only_fields = ["allow_self_approval"]


class WorkspaceDetailSerializer(WorkspaceSerializer):
    roles = serializers.ListField(child=serializers.CharField(), read_only=True)
    permissions = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta(WorkspaceSerializer.Meta):
        fields = [*WorkspaceSerializer.Meta.fields, "roles", "permissions"]


class WorkspaceList(ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self):
        return workspaces_for_user(user=self.request.user).order_by("id")


class WorkspaceDetail(GenericAPIView):
    """One workspace with the caller's roles and permissions in it."""

    serializer_class = WorkspaceDetailSerializer

    def get(self, request, workspace_id: int):
        workspace = workspace_get_for_user(user=request.user, workspace_id=workspace_id)
        workspace.roles = sorted(workspace_roles(user=request.user, workspace=workspace))
        workspace.permissions = sorted(workspace_permissions(user=request.user, workspace=workspace))
        return Response(WorkspaceDetailSerializer(workspace).data)


class AccessTokenSerializer(serializers.ModelSerializer):
    """A token as listed: never the secret, only the public prefix."""

    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = AccessToken
        fields = ["id", "name", "kind", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at", "is_active"]
        read_only_fields = fields


class AccessTokenCreateSerializer(StrictInput):
    name = serializers.CharField(max_length=100, required=False, default="token")
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_expires_at(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("Must be in the future.")
        return value


class IssuedAccessTokenSerializer(AccessTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown in this response only.")

    class Meta(AccessTokenSerializer.Meta):
        fields = [*AccessTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class AccessTokenList(ListAPIView):
    serializer_class = AccessTokenSerializer

    def get_queryset(self):
        return access_tokens_for_user(user=self.request.user)

    @extend_schema(request=AccessTokenCreateSerializer, responses={201: IssuedAccessTokenSerializer})
    def post(self, request):
        data = AccessTokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        issued = token_issue(user=request.user, **data.validated_data)
        issued.token.token = issued.plaintext
        return Response(IssuedAccessTokenSerializer(issued.token).data, status=status.HTTP_201_CREATED)


@extend_schema(request=None, responses=AccessTokenSerializer)
class AccessTokenRevoke(GenericAPIView):
    serializer_class = AccessTokenSerializer

    def post(self, request, token_id: int):
        token = token_revoke(user=request.user, token_id=token_id)
        return Response(AccessTokenSerializer(token).data)


urlpatterns = [
    path("workspaces/", WorkspaceList.as_view(), name="workspace-list"),
    path("workspaces/<int:workspace_id>/", WorkspaceDetail.as_view(), name="workspace-detail"),
    path("tokens/", AccessTokenList.as_view(), name="token-list"),
    path("tokens/<int:token_id>/revoke", AccessTokenRevoke.as_view(), name="token-revoke"),
]
