"""REST endpoints for artifacts (mounted under /api/v1/ by riverapp.urls).

Views parse, authorize and call one service. Any member of the artifact's workspace may
list, read and download it (others get 404). Uploading needs ``agent:execute`` in the
workspace (handing an agent a file is part of running it); deleting needs to be the
uploader or to hold ``data_source:delete`` there.
"""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from artifacts import selectors, services
from artifacts.errors import FileTooLarge
from artifacts.models import Artifact
from artifacts.uploads import BoundedUploadHandler
from common.ids import id_query_param, text_query_param
from rivercore.errors import InvalidInput, PermissionDenied
from tenancy import permissions as perms
from tenancy.selectors import require_permission, workspace_get_for_user, workspace_permissions

ARTIFACT_ID = OpenApiParameter("artifact_id", int, OpenApiParameter.PATH)
UPLOAD_FIELDS = {"workspace", "file", "session"}
BIGINT_MAX = 2**63 - 1


class ArtifactSerializer(serializers.ModelSerializer):
    data_source_id = serializers.IntegerField(read_only=True, allow_null=True)
    table = serializers.CharField(read_only=True, allow_null=True)
    tables = serializers.ListField(child=serializers.CharField(), read_only=True)
    session = serializers.IntegerField(source="session_id", read_only=True, allow_null=True)
    created_by_execution = serializers.IntegerField(source="created_by_execution_id", read_only=True,
                                                    allow_null=True)
    download = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = [
            "id", "workspace", "name", "kind", "content_type", "size", "sha256", "version", "data_source_id",
            "table", "tables", "session", "created_by", "created_by_execution", "created_at", "download",
        ]
        read_only_fields = fields

    def get_download(self, artifact: Artifact) -> str:
        return f"/api/v1/artifacts/{artifact.pk}/download"


class ArtifactUploadSerializer(serializers.Serializer):
    workspace = serializers.IntegerField(min_value=1, max_value=BIGINT_MAX)
    file = serializers.FileField(allow_empty_file=True, use_url=False,
                                 help_text="The file: .csv, .tsv, .xlsx, .json, .txt or .md.")
    session = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=BIGINT_MAX,
                                       help_text="The session the file belongs to (optional).")


class ArtifactList(ListAPIView):
    serializer_class = ArtifactSerializer
    parser_classes = [MultiPartParser]

    def initialize_request(self, request, *args, **kwargs):
        # Before anything reads the body (DRF's CSRF check may): the file is counted as it arrives.
        if request.method == "POST":
            request.upload_handlers = [BoundedUploadHandler(request, max_bytes=settings.RIVER_ARTIFACT_MAX_BYTES)]
        return super().initialize_request(request, *args, **kwargs)

    @extend_schema(parameters=[
        OpenApiParameter("workspace", int), OpenApiParameter("name", str, description="Exact file name."),
        OpenApiParameter("session", int), OpenApiParameter("kind", str, enum=Artifact.Kind.values),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        queryset = selectors.artifacts_for_user(user=self.request.user)
        workspace = id_query_param(params=params, name="workspace")
        if workspace is not None:
            queryset = queryset.filter(workspace_id=workspace)
        session = id_query_param(params=params, name="session")
        if session is not None:
            queryset = queryset.filter(session_id=session)
        if "kind" in params:
            if params["kind"] not in Artifact.Kind.values:
                raise InvalidInput("Unknown kind.", details={"kind": [f'"{params["kind"]}" is not a valid choice.']})
            queryset = queryset.filter(kind=params["kind"])
        name = text_query_param(params=params, name="name")
        if name is not None:
            queryset = queryset.filter(name=name)
        return queryset.order_by("-created_at", "-id")

    @extend_schema(request={"multipart/form-data": ArtifactUploadSerializer},
                   responses={201: ArtifactSerializer, 413: OpenApiResponse(description="The file is too large.")})
    def post(self, request):
        handler = next((h for h in request.upload_handlers if isinstance(h, BoundedUploadHandler)), None)
        data = request.data
        limit = settings.RIVER_ARTIFACT_MAX_BYTES
        if handler is not None and handler.too_large:
            raise FileTooLarge(f"file: the file is larger than {limit} bytes.",
                               details={"file": [f"at most {limit} bytes"]})
        unknown = sorted(set(data.keys()) - UPLOAD_FIELDS)
        if unknown:
            raise InvalidInput("Unknown fields.", details={key[:100]: ["Unknown field."] for key in unknown[:20]})
        if len(request.FILES.getlist("file")) > 1 or (handler is not None and handler.file_parts > 1):
            raise InvalidInput("Send one file per request.", details={"file": ["exactly one file"]})
        body = ArtifactUploadSerializer(data=data)
        body.is_valid(raise_exception=True)
        values = body.validated_data
        workspace = workspace_get_for_user(user=request.user, workspace_id=values["workspace"])
        require_permission(user=request.user, workspace=workspace, permission=perms.AGENT_EXECUTE)
        if values.get("session") is not None:
            selectors.artifact_session_check(user=request.user, workspace_id=workspace.pk,
                                             session_id=values["session"])
        upload = values["file"]
        try:
            artifact = services.artifact_create(
                workspace=workspace, stream=upload.file, file_name=upload.name, created_by=request.user,
                session_id=values.get("session"),
            )
        finally:
            upload.close()
        return Response(ArtifactSerializer(artifact).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[ARTIFACT_ID])
class ArtifactDetail(GenericAPIView):
    serializer_class = ArtifactSerializer

    def get(self, request, artifact_id):
        artifact = selectors.artifact_get_for_user(user=request.user, artifact_id=artifact_id)
        return Response(ArtifactSerializer(artifact).data)

    @extend_schema(responses={204: None})
    def delete(self, request, artifact_id):
        artifact = selectors.artifact_get_for_user(user=request.user, artifact_id=artifact_id)
        own = artifact.created_by_id is not None and artifact.created_by_id == request.user.pk
        if not own and perms.DATA_SOURCE_DELETE not in workspace_permissions(
                user=request.user, workspace=artifact.workspace):
            raise PermissionDenied("Only the uploader or a holder of data_source:delete may delete an artifact.")
        services.artifact_delete(artifact=artifact)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[ARTIFACT_ID], responses={(200, "*/*"): OpenApiTypes.BINARY})
class ArtifactDownload(GenericAPIView):
    """The stored file, always as an attachment with its recorded type, never sniffed."""

    def get(self, request, artifact_id):
        artifact = selectors.artifact_get_for_user(user=request.user, artifact_id=artifact_id)
        handle = selectors.artifact_open(artifact=artifact)
        content_type = artifact.content_type
        if content_type.startswith("text/") or content_type == "application/json":
            content_type += "; charset=utf-8"
        response = FileResponse(handle, as_attachment=True, filename=artifact.name, content_type=content_type)
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        response["Cache-Control"] = "private, no-store"
        return response


urlpatterns = [
    path("artifacts/", ArtifactList.as_view(), name="artifact-list"),
    path("artifacts/<str:artifact_id>/", ArtifactDetail.as_view(), name="artifact-detail"),
    path("artifacts/<str:artifact_id>/download", ArtifactDownload.as_view(), name="artifact-download"),
]
