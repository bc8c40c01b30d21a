"""REST endpoints for data sources (mounted under /api/v1/ by riverapp.urls).

Views parse, authorize and call one service. Any member of the source's workspace may
read it (others get 404); writes need data_source:create / update / delete there.
``credentials`` is write-only: responses only say ``has_credentials``.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response

from common.api import StrictInput
from common.ids import id_query_param
from datasources import selectors, services
from datasources.connectors import SUPPORTED_TYPES
from datasources.models import DataSource
from datasources.types import LIMIT_RANGES, DataSourceChanges
from rivercore import limits
from rivercore.errors import InvalidInput
from tenancy import permissions as perms
from tenancy.selectors import require_permission, workspace_get_for_user

DATA_SOURCE_ID = OpenApiParameter("data_source_id", int, OpenApiParameter.PATH)


class _JSONObject(serializers.JSONField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return value


class DataSourceSerializer(serializers.ModelSerializer):
    has_credentials = serializers.BooleanField(read_only=True)
    table_count = serializers.SerializerMethodField()

    class Meta:
        model = DataSource
        fields = [
            "id",
            "workspace",
            "name",
            "description",
            "type",
            "connection_config",
            "access_level",
            "status",
            "status_message",
            "classifications",
            "has_credentials",
            "schema_discovered_at",
            "table_count",
            "query_row_limit",
            "observation_byte_limit",
            "query_timeout_seconds",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_table_count(self, data_source: DataSource) -> int:
        return len(data_source.schema_cache or [])


_TYPE_ERRORS = {
    "invalid_choice": f'"{{input}}" is not a supported type; supported types: {", ".join(SUPPORTED_TYPES)}.'
}
_CREATE_FILE_HELP = "SQLite: create an empty database file if connection_config.path does not exist yet."


def _limit_field(name: str, help_text: str) -> serializers.IntegerField:
    low, high = LIMIT_RANGES[name]
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=low, max_value=high, help_text=f"{help_text} Null: the workspace's."
    )


class _Limits(serializers.Serializer):
    query_row_limit = _limit_field("query_row_limit", "Rows returned per query at most.")
    observation_byte_limit = _limit_field(
        "observation_byte_limit", "Bytes of one query result handed to the model at most."
    )
    query_timeout_seconds = _limit_field("query_timeout_seconds", "Statement timeout of every query.")


class DataSourceCreateSerializer(StrictInput, _Limits):
    workspace = serializers.IntegerField()
    name = serializers.CharField(max_length=limits.NAME)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True, default="")
    type = serializers.ChoiceField(choices=DataSource.Type.choices, error_messages=_TYPE_ERRORS)
    connection_config = _JSONObject()
    credentials = _JSONObject(required=False, default=dict, write_only=True)
    access_level = serializers.ChoiceField(choices=DataSource.AccessLevel.choices, default="read_only")
    classifications = _JSONObject(required=False, default=dict)
    create_file = serializers.BooleanField(required=False, default=False, help_text=_CREATE_FILE_HELP)


class DataSourceUpdateSerializer(StrictInput, _Limits):
    name = serializers.CharField(max_length=limits.NAME, required=False)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True)
    type = serializers.ChoiceField(choices=DataSource.Type.choices, required=False, error_messages=_TYPE_ERRORS)
    connection_config = _JSONObject(required=False, help_text="Merged into the current config; null removes a key.")
    credentials = _JSONObject(required=False, write_only=True, help_text="Merged into the stored credentials.")
    access_level = serializers.ChoiceField(choices=DataSource.AccessLevel.choices, required=False)
    classifications = _JSONObject(required=False)
    create_file = serializers.BooleanField(required=False, help_text=_CREATE_FILE_HELP)


TEST_RESULT = inline_serializer(
    "ConnectionTestResult",
    {
        "success": serializers.BooleanField(),
        "latency_ms": serializers.IntegerField(),
        "message": serializers.CharField(),
    },
)
SCHEMA_RESULT = inline_serializer(
    "DataSourceSchema",
    {
        "data_source_id": serializers.IntegerField(),
        "discovered_at": serializers.DateTimeField(allow_null=True),
        "total_tables": serializers.IntegerField(),
        "tables": serializers.JSONField(),
    },
)
DISCOVER_RESULT = inline_serializer(
    "DiscoverResult",
    {
        "success": serializers.BooleanField(),
        "discovered_at": serializers.DateTimeField(),
        "total_tables": serializers.IntegerField(),
        "tables": serializers.JSONField(),
    },
)


def _source(request, data_source_id, permission: str) -> DataSource:
    source = selectors.data_source_get_for_user(user=request.user, data_source_id=data_source_id)
    require_permission(user=request.user, workspace=source.workspace, permission=permission)
    return source


class DataSourceList(ListAPIView):
    serializer_class = DataSourceSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("workspace", int),
            OpenApiParameter("type", str, enum=DataSource.Type.values),
            OpenApiParameter("status", str, enum=DataSource.Status.values),
            OpenApiParameter("search", str, description="Substring of the name."),
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        queryset = selectors.data_sources_for_user(user=self.request.user)
        for field, choices in (("type", DataSource.Type.values), ("status", DataSource.Status.values)):
            if field in params:
                if params[field] not in choices:
                    raise InvalidInput(
                        f"Unknown {field}.", details={field: [f'"{params[field]}" is not a valid choice.']}
                    )
                queryset = queryset.filter(**{field: params[field]})
        workspace_id = id_query_param(params=params, name="workspace")
        if workspace_id is not None:
            queryset = queryset.filter(workspace_id=workspace_id)
        if params.get("search"):
            queryset = queryset.filter(name__icontains=params["search"])
        return queryset.order_by("name", "id")

    @extend_schema(request=DataSourceCreateSerializer, responses={201: DataSourceSerializer})
    def post(self, request):
        data = DataSourceCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=values.pop("workspace"))
        require_permission(user=request.user, workspace=workspace, permission=perms.DATA_SOURCE_CREATE)
        source = services.data_source_create(workspace=workspace, **values)
        return Response(DataSourceSerializer(source).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[DATA_SOURCE_ID])
class DataSourceDetail(GenericAPIView):
    serializer_class = DataSourceSerializer

    def get(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_VIEW)
        return Response(DataSourceSerializer(source).data)

    @extend_schema(request=DataSourceUpdateSerializer, responses=DataSourceSerializer)
    def patch(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_UPDATE)
        data = DataSourceUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        create_file = values.pop("create_file", False)
        changes = DataSourceChanges.model_validate(values)
        source = services.data_source_update(data_source=source, changes=changes, create_file=create_file)
        return Response(DataSourceSerializer(source).data)

    @extend_schema(responses={204: None})
    def delete(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_DELETE)
        services.data_source_delete(data_source=source)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[DATA_SOURCE_ID], request=None, responses=TEST_RESULT)
class DataSourceTest(GenericAPIView):
    """Connect and run a trivial query; the outcome is also stored as the source's status."""

    def post(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_VIEW)
        return Response(services.data_source_test(data_source=source).model_dump())


@extend_schema(parameters=[DATA_SOURCE_ID], request=None, responses=DISCOVER_RESULT)
class DataSourceDiscover(GenericAPIView):
    """Refresh the cached schema from the database."""

    def post(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_VIEW)
        tables = services.data_source_discover(data_source=source)
        return Response(
            {
                "success": True,
                "discovered_at": source.schema_discovered_at,
                "total_tables": len(tables),
                "tables": [table.model_dump(mode="json") for table in tables],
            }
        )


@extend_schema(parameters=[DATA_SOURCE_ID], responses=SCHEMA_RESULT)
class DataSourceSchema(GenericAPIView):
    """The cached schema and when it was discovered (never a live lookup)."""

    def get(self, request, data_source_id):
        source = _source(request, data_source_id, perms.DATA_SOURCE_VIEW)
        tables = list(source.schema_cache or [])
        return Response(
            {
                "data_source_id": source.pk,
                "discovered_at": source.schema_discovered_at,
                "total_tables": len(tables),
                "tables": tables,
            }
        )


urlpatterns = [
    path("data-sources/", DataSourceList.as_view(), name="data-source-list"),
    path("data-sources/<str:data_source_id>/", DataSourceDetail.as_view(), name="data-source-detail"),
    path("data-sources/<str:data_source_id>/test", DataSourceTest.as_view(), name="data-source-test"),
    path("data-sources/<str:data_source_id>/discover", DataSourceDiscover.as_view(), name="data-source-discover"),
    path("data-sources/<str:data_source_id>/schema", DataSourceSchema.as_view(), name="data-source-schema"),
]
