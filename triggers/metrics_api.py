"""``POST /api/v1/metrics/``: metric samples for threshold triggers (mounted by triggers.api).

Authenticated either by ``X-API-Key`` (a trigger key of the workspace or of its
organization; the header wins when present) or as a person (bearer token or session)
holding ``agent:execute`` in the workspace: feeding metrics can start runs.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from rivercore.errors import InvalidInput, PermissionDenied
from tenancy.models import Workspace
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import require_permission, workspace_get_for_user
from triggers import apikeys, metrics


class MetricSampleIn(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="Metric name, e.g. cpu_percent.")
    value = serializers.FloatField(help_text="A finite number.")
    labels = serializers.DictField(child=serializers.CharField(max_length=metrics.LABEL_VALUE_MAX), required=False,
                                   help_text="Label name -> string; a series is a name with one label set.")
    timestamp = serializers.CharField(max_length=40, required=False,
                                      help_text="ISO 8601 with offset, or Unix seconds (a number); now if absent.")


class MetricBatchIn(serializers.Serializer):
    workspace = serializers.IntegerField()
    samples = MetricSampleIn(many=True, help_text=f"1 to {metrics.MAX_SAMPLES} samples.")


def _workspace_for_key(*, plaintext: str, workspace_id) -> Workspace:
    """The workspace a trigger key may feed (403 alike for another organization's and
    for a workspace that does not exist)."""
    key = apikeys.api_key_authenticate(plaintext=plaintext)
    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None or workspace.organization_id != key.organization_id or (
            key.workspace_id is not None and key.workspace_id != workspace.pk):
        raise PermissionDenied("This key may not send metrics to that workspace.")
    return workspace


@extend_schema(
    request=MetricBatchIn,
    parameters=[OpenApiParameter("X-API-Key", str, OpenApiParameter.HEADER, required=False,
                                 description="A trigger API key, instead of a person's token.")],
    responses={202: inline_serializer("MetricsAccepted", {
        "accepted": serializers.IntegerField(),
        "executions": serializers.ListField(child=serializers.IntegerField(),
                                            help_text="Runs that threshold triggers started on this batch."),
    })},
)
class MetricIngest(APIView):
    permission_classes = [AllowAny]  # a key or a person, checked in post()

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if response.status_code == status.HTTP_401_UNAUTHORIZED:
            response["WWW-Authenticate"] = 'Bearer, ApiKey header="X-API-Key"'
        return response

    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise InvalidInput("The body must be a JSON object.", details={"body": ["{workspace, samples}"]})
        unknown = sorted(set(body) - {"workspace", "samples"})
        if unknown:
            raise InvalidInput("Unknown field.", details={unknown[0][:100]: ["Unknown field."]})
        workspace_id = body.get("workspace")
        if isinstance(workspace_id, bool) or not isinstance(workspace_id, int) or not 0 < workspace_id < 2**63:
            raise InvalidInput("workspace must be an id.", details={"workspace": ["A workspace id."]})
        key = request.headers.get("X-API-Key")
        if key is not None:
            workspace = _workspace_for_key(plaintext=key, workspace_id=workspace_id)
        else:
            if not request.user.is_authenticated:
                raise apikeys.NotAuthenticated("Send a bearer token or an X-API-Key.")
            workspace = workspace_get_for_user(user=request.user, workspace_id=workspace_id)
            require_permission(user=request.user, workspace=workspace, permission=AGENT_EXECUTE)
        result = metrics.metrics_ingest(workspace=workspace, samples=body.get("samples"))
        return Response({"accepted": result.accepted,
                         "executions": [f.execution_id for f in result.firings if f.execution_id is not None]},
                        status=status.HTTP_202_ACCEPTED)


urlpatterns = [path("metrics/", MetricIngest.as_view(), name="metrics-ingest")]
