"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls).

Triggers, API keys and webhook endpoints are managed like agents: members of the
workspace read them, those who may create agents there (``agent:create``: editors,
admins, organization admins) create, edit, rotate, revoke and delete them; anyone else
gets a 404. Nobody creates, edits, enables or re-points a trigger whose runs act with a
role above their own (403 naming ``run_as_role``); a change re-binds the trigger to the
person who made it (triggers.services.trigger_update). Two endpoints take no user:
``triggers/{id}/invoke`` authenticates by ``X-API-Key`` only (triggers.apikeys) and
``hooks/{endpoint id}`` by its signature (triggers.webhooks).
"""

from __future__ import annotations

from datetime import timedelta

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get_for_user
from common.api import StrictInput
from common.ids import id_query_param, uuid_query_param
from rivercore import limits
from rivercore.errors import InvalidInput, NotFound
from tenancy.models import Membership
from tenancy.permissions import AGENT_CREATE, ROLE_ORDER
from tenancy.selectors import (
    organizations_administered,
    require_permission,
    workspace_get_for_user,
)
from triggers import apikeys, selectors, services, webhooks
from triggers.models import ApiKey, Trigger, TriggerFiring, WebhookEndpoint, WebhookScheme
from triggers.types import API_TYPE_NAMES, api_type_name, config_public, type_from_api

TRIGGER_ID = OpenApiParameter("trigger_id", OpenApiTypes.UUID, OpenApiParameter.PATH)


class RunAsSerializer(serializers.Serializer):
    user = serializers.IntegerField(help_text="Id of the service principal's user; runs name it as triggered_by.")
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True, help_text="The identity's stored role; its runs act with at most "
                                                            "its responsible person's current role.")
    responsible = serializers.IntegerField(allow_null=True, help_text="Id of the person answerable for its runs "
                                                                      "(who created or last changed the trigger).")


class TriggerSerializer(serializers.ModelSerializer):
    type = serializers.SerializerMethodField()
    config = serializers.SerializerMethodField()
    run_as = serializers.SerializerMethodField()

    class Meta:
        model = Trigger
        fields = ["id", "workspace", "agent", "name", "type", "prompt", "config", "enabled", "run_as", "created_by",
                  "created_at", "updated_at", "refused_invocations", "last_refused_at"]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=list(API_TYPE_NAMES.values())))
    def get_type(self, trigger: Trigger) -> str:
        return api_type_name(trigger.type)

    def get_config(self, trigger: Trigger) -> dict:
        return config_public(trigger.config)

    @extend_schema_field(RunAsSerializer)
    def get_run_as(self, trigger: Trigger) -> dict:
        principal = trigger.run_as
        if hasattr(trigger, "run_as_role"):  # annotated by triggers_for_user
            role = trigger.run_as_role
        else:
            role = Membership.objects.filter(user_id=principal.user_id, workspace_id=trigger.workspace_id
                                             ).values_list("role", flat=True).first()
        return {"user": principal.user_id, "username": principal.user.username, "role": role,
                "responsible": principal.responsible_id}


class TriggerCreateSerializer(StrictInput):
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


class TriggerUpdateSerializer(StrictInput):
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
    run_status = serializers.CharField(read_only=True, allow_null=True,
                                       help_text="The started run's status (null when none started).")
    run_outcome = serializers.CharField(read_only=True, allow_null=True, help_text=(
        "Whether the started run did the job (docs/engine.md, Outcome); null until it ends."))

    class Meta:
        model = TriggerFiring
        fields = ["id", "fired_at", "source", "outcome", "reason", "detail", "execution", "run_status",
                  "run_outcome", "dedupe_key", "payload_bytes"]
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
        workspace_id = id_query_param(params=params, name="workspace")
        if workspace_id is not None:
            filters["workspace_id"] = workspace_id
        agent = uuid_query_param(params=params, name="agent")
        if agent is not None:
            filters["agent_id"] = agent_get_for_user(user=self.request.user, agent_id=agent).pk
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


# ---------------------------------------------------------------- API keys


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "organization", "workspace", "name", "prefix", "rate_limit_per_minute", "created_by",
                  "created_at", "revoked_at", "last_used_at"]
        read_only_fields = fields


class ApiKeyIssuedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="The key. Shown once: River keeps only a digest.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields


class ApiKeyCreateSerializer(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False,
                                         help_text="The workspace the key serves.")
    organization = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False,
                                            help_text="Instead of workspace: a key for every workspace of the "
                                                      "organization (organization admins only).")
    name = serializers.CharField(max_length=100)
    rate_limit_per_minute = serializers.IntegerField(min_value=1, max_value=limits.RATE_LIMIT_RPM, required=False,
                                                     allow_null=True, default=None,
                                                     help_text="Default: the workspace's setting.")

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if ("workspace" in attrs) == ("organization" in attrs):
            raise serializers.ValidationError({"workspace": ["Give a workspace or an organization, not both."]})
        return attrs


API_KEY_ID = OpenApiParameter("api_key_id", OpenApiTypes.INT, OpenApiParameter.PATH)


class ApiKeyList(ListAPIView):
    """Keys of the caller's workspaces and of the organizations they administer (never the secret)."""

    serializer_class = ApiKeySerializer

    def get_queryset(self):
        return selectors.api_keys_for_user(user=self.request.user)

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyIssuedSerializer})
    def post(self, request):
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        values = dict(body.validated_data)
        workspace = organization = None
        if "workspace" in values:
            workspace = workspace_get_for_user(user=request.user, workspace_id=values["workspace"])
            require_permission(user=request.user, workspace=workspace, permission=AGENT_CREATE)
        else:
            organization = organizations_administered(user=request.user).filter(pk=values["organization"]).first()
            if organization is None:
                raise NotFound("Organization not found.")
        issued = apikeys.api_key_issue(created_by=request.user, name=values["name"], workspace=workspace,
                                       organization=organization,
                                       rate_limit_per_minute=values.get("rate_limit_per_minute"))
        data = {**ApiKeySerializer(issued.key).data, "key": issued.plaintext}
        return Response(data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[API_KEY_ID])
class ApiKeyDetail(GenericAPIView):
    serializer_class = ApiKeySerializer

    def get(self, request, api_key_id):
        return Response(ApiKeySerializer(selectors.api_key_get_for_user(user=request.user,
                                                                        api_key_id=api_key_id)).data)

    @extend_schema(responses={204: None}, description="Revoke the key (it stays listed, with revoked_at).")
    def delete(self, request, api_key_id):
        apikeys.api_key_revoke(key=selectors.api_key_get_manageable(user=request.user, api_key_id=api_key_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvokeAccepted(serializers.Serializer):
    executions = serializers.ListField(child=serializers.IntegerField(),
                                       help_text="Runs started: one, or none for a duplicate or an inactive agent.")
    firing = FiringSerializer()


def _started(firings: list[TriggerFiring]) -> Response:
    return Response({"executions": [f.execution_id for f in firings if f.execution_id is not None]},
                    status=status.HTTP_202_ACCEPTED)


@extend_schema(
    parameters=[TRIGGER_ID, OpenApiParameter("X-API-Key", str, OpenApiParameter.HEADER, required=True),
                OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                 description="Optional: a second call with the same key and value starts nothing.")],
    request={"application/json": {"type": "object", "additionalProperties": True}},
    responses={202: InvokeAccepted},
    auth=[],
)
class TriggerInvoke(APIView):
    """Fire an API trigger. Authenticated only by X-API-Key (no session, no bearer token)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if response.status_code == status.HTTP_401_UNAUTHORIZED:
            response["WWW-Authenticate"] = 'ApiKey header="X-API-Key"'
        return response

    def post(self, request, trigger_id):
        key = request.headers.get("X-API-Key")
        if not key:
            raise apikeys.NotAuthenticated(apikeys.INVALID_KEY)
        payload = request.data if request.body else {}
        if not isinstance(payload, dict):
            raise InvalidInput("The payload must be a JSON object.", details={"payload": ["A JSON object."]})
        idempotency = request.headers.get("Idempotency-Key")
        if idempotency is not None and not 0 < len(idempotency) <= 100:
            raise InvalidInput("Invalid Idempotency-Key.", details={"Idempotency-Key": ["1 to 100 characters."]})
        try:
            firing = apikeys.trigger_invoke(plaintext_key=key, trigger_id=trigger_id, payload=dict(payload),
                                            idempotency_key=idempotency)
        except apikeys.RateLimited as exc:
            response = Response({"error": {"code": exc.code, "message": exc.message, "details": exc.details}},
                                status=status.HTTP_429_TOO_MANY_REQUESTS)
            response["Retry-After"] = str(exc.retry_after)
            return response
        data = {"executions": [firing.execution_id] if firing.execution_id else [],
                "firing": FiringSerializer(firing).data}
        return Response(data, status=status.HTTP_202_ACCEPTED)


# ---------------------------------------------------------------- webhook endpoints


class WebhookEndpointSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="Where the sender posts events.")
    previous_secret_active = serializers.SerializerMethodField()

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "workspace", "slug", "scheme", "url", "created_by", "created_at", "rotated_at",
                  "previous_secret_expires_at", "previous_secret_active"]
        read_only_fields = fields

    def get_url(self, endpoint: WebhookEndpoint) -> str:
        return f"/api/v1/hooks/{endpoint.pk}"

    def get_previous_secret_active(self, endpoint: WebhookEndpoint) -> bool:
        from django.utils import timezone

        expires = endpoint.previous_secret_expires_at
        return bool(endpoint.previous_secret_encrypted and expires and expires > timezone.now())


class WebhookEndpointIssuedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(allow_null=True, help_text=(
        "The signing secret River made (standard, river_legacy), shown once; null when you supplied it "
        "(github, stripe)."))

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


_SCHEME_HELP = ("How deliveries are signed: standard (Standard Webhooks, the default), github or stripe. "
                "river_legacy is kept only for endpoints made before the schemes and cannot be chosen.")
_SENDER_SIGNING_HELP = ("github and stripe only (required there): the signing secret the sender shows. Never shown "
                "again. River makes the secret of a standard endpoint.")


def _secret_field():
    return serializers.CharField(max_length=256, required=False, trim_whitespace=False, help_text=_SENDER_SIGNING_HELP)


class WebhookEndpointCreateSerializer(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    slug = serializers.CharField(max_length=80)
    scheme = serializers.ChoiceField(choices=webhooks.CHOOSABLE_SCHEMES, default=WebhookScheme.STANDARD,
                                     help_text=_SCHEME_HELP)
    secret = _secret_field()


class WebhookEndpointSchemeSerializer(StrictInput):
    scheme = serializers.ChoiceField(choices=webhooks.CHOOSABLE_SCHEMES, help_text=_SCHEME_HELP)
    secret = _secret_field()


class RotateSerializer(StrictInput):
    previous_valid_seconds = serializers.IntegerField(
        min_value=0, max_value=int(webhooks.MAX_ROTATION_GRACE.total_seconds()), required=False,
        default=int(webhooks.DEFAULT_ROTATION_GRACE.total_seconds()),
        help_text="How long the replaced secret keeps working (default one day; 0 ends it now).")
    secret = _secret_field()


ENDPOINT_ID = OpenApiParameter("endpoint_id", OpenApiTypes.UUID, OpenApiParameter.PATH)


def _writable_endpoint(request, endpoint_id) -> WebhookEndpoint:
    """An endpoint the caller may rotate or delete: ``agent:create`` here, and no trigger
    listening on it acts above the caller's role (403 naming ``run_as_role``)."""
    endpoint = selectors.webhook_endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
    require_permission(user=request.user, workspace=endpoint.workspace, permission=AGENT_CREATE)
    services.webhook_endpoint_authority_check(actor=request.user, workspace=endpoint.workspace, slug=endpoint.slug)
    return endpoint


def _issued(issued) -> dict:
    return {**WebhookEndpointSerializer(issued.endpoint).data, "secret": issued.secret}


class WebhookEndpointList(ListAPIView):
    serializer_class = WebhookEndpointSerializer

    def get_queryset(self):
        return selectors.webhook_endpoints_for_user(user=self.request.user)

    @extend_schema(request=WebhookEndpointCreateSerializer, responses={201: WebhookEndpointIssuedSerializer})
    def post(self, request):
        body = WebhookEndpointCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        workspace = workspace_get_for_user(user=request.user, workspace_id=body.validated_data["workspace"])
        require_permission(user=request.user, workspace=workspace, permission=AGENT_CREATE)
        services.webhook_endpoint_authority_check(actor=request.user, workspace=workspace,
                                                  slug=body.validated_data["slug"])
        issued = webhooks.webhook_endpoint_create(
            workspace=workspace, slug=body.validated_data["slug"], created_by=request.user,
            scheme=body.validated_data["scheme"], secret=body.validated_data.get("secret"))
        return Response(_issued(issued), status=status.HTTP_201_CREATED)


@extend_schema(parameters=[ENDPOINT_ID])
class WebhookEndpointDetail(GenericAPIView):
    serializer_class = WebhookEndpointSerializer

    def get(self, request, endpoint_id):
        endpoint = selectors.webhook_endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
        return Response(WebhookEndpointSerializer(endpoint).data)

    @extend_schema(request=WebhookEndpointSchemeSerializer, responses=WebhookEndpointIssuedSerializer)
    def patch(self, request, endpoint_id):
        """Switch the endpoint's scheme; its secret is replaced at once (made and shown
        once for standard, supplied for github and stripe)."""
        endpoint = _writable_endpoint(request, endpoint_id)
        body = WebhookEndpointSchemeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = webhooks.webhook_endpoint_scheme_set(endpoint=endpoint, scheme=body.validated_data["scheme"],
                                                      secret=body.validated_data.get("secret"))
        return Response(_issued(issued))

    @extend_schema(responses={204: None})
    def delete(self, request, endpoint_id):
        webhooks.webhook_endpoint_delete(endpoint=_writable_endpoint(request, endpoint_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(parameters=[ENDPOINT_ID], request=RotateSerializer, responses=WebhookEndpointIssuedSerializer)
class WebhookEndpointRotate(GenericAPIView):
    serializer_class = WebhookEndpointIssuedSerializer

    def post(self, request, endpoint_id):
        endpoint = _writable_endpoint(request, endpoint_id)
        body = RotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = webhooks.webhook_endpoint_rotate(
            endpoint=endpoint, previous_valid_for=timedelta(seconds=body.validated_data["previous_valid_seconds"]),
            secret=body.validated_data.get("secret"))
        return Response(_issued(issued))


@extend_schema(
    parameters=[ENDPOINT_ID,
                OpenApiParameter("webhook-id", str, OpenApiParameter.HEADER,
                                 description="standard: the message id (signed; the dedupe key)"),
                OpenApiParameter("webhook-timestamp", str, OpenApiParameter.HEADER,
                                 description="standard: unix seconds (signed; within 300 s of now)"),
                OpenApiParameter("webhook-signature", str, OpenApiParameter.HEADER,
                                 description="standard: space-separated v1,<base64 HMAC-SHA256 of "
                                             "'<id>.<timestamp>.<raw body>'>"),
                OpenApiParameter("Stripe-Signature", str, OpenApiParameter.HEADER,
                                 description="stripe: t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<raw body>'>"),
                OpenApiParameter("X-Hub-Signature-256", str, OpenApiParameter.HEADER,
                                 description="github: sha256=<hex HMAC-SHA256 of the raw body>"),
                OpenApiParameter("X-GitHub-Event", str, OpenApiParameter.HEADER, description="github: event type"),
                OpenApiParameter("X-GitHub-Delivery", str, OpenApiParameter.HEADER, description="github: delivery id"),
                OpenApiParameter("X-River-Signature", str, OpenApiParameter.HEADER,
                                 description="river_legacy: t=<unix seconds>,v1=<hex HMAC-SHA256 of "
                                             "'<t>.<raw body>'>"),
                OpenApiParameter("X-River-Event-Type", str, OpenApiParameter.HEADER,
                                 description="river_legacy: event type (unsigned)"),
                OpenApiParameter("X-River-Event-Id", str, OpenApiParameter.HEADER,
                                 description="river_legacy: event id (unsigned)")],
    request={"application/json": {"type": "object", "additionalProperties": True}},
    responses={202: inline_serializer("HookAccepted", {"executions": serializers.ListField(
        child=serializers.IntegerField())})},
    auth=[],
)
class WebhookReceive(APIView):
    """Receive a signed event, verified by the endpoint's scheme. 404: no such endpoint;
    401: the signature, its timestamp or a signing header is wrong, or (github) the
    signed body came before with another id or type (nothing is stored); 400: a
    verified body without what the scheme needs (event type, id, data)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    signature_header = "X-River-Signature"

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if response.status_code == status.HTTP_401_UNAUTHORIZED:
            response["WWW-Authenticate"] = f'Signature header="{self.signature_header}"'
        return response

    def post(self, request, endpoint_id):
        endpoint = selectors.webhook_endpoint_get(endpoint_id=endpoint_id)
        self.signature_header = webhooks.SIGNATURE_HEADERS[endpoint.scheme]
        firings = webhooks.webhook_receive(endpoint=endpoint, body=request.body, headers=request.headers)
        return _started(firings)


urlpatterns = [
    path("triggers/", TriggerList.as_view(), name="trigger-list"),
    path("triggers/<str:trigger_id>/", TriggerDetail.as_view(), name="trigger-detail"),
    path("triggers/<str:trigger_id>/firings/", TriggerFiringList.as_view(), name="trigger-firings"),
    path("triggers/<str:trigger_id>/invoke", TriggerInvoke.as_view(), name="trigger-invoke"),
    path("api-keys/", ApiKeyList.as_view(), name="api-key-list"),
    path("api-keys/<str:api_key_id>/", ApiKeyDetail.as_view(), name="api-key-detail"),
    path("webhook-endpoints/", WebhookEndpointList.as_view(), name="webhook-endpoint-list"),
    path("webhook-endpoints/<str:endpoint_id>/", WebhookEndpointDetail.as_view(), name="webhook-endpoint-detail"),
    path("webhook-endpoints/<str:endpoint_id>/rotate", WebhookEndpointRotate.as_view(),
         name="webhook-endpoint-rotate"),
    path("hooks/<str:endpoint_id>", WebhookReceive.as_view(), name="webhook-receive"),
]

from triggers.metrics_api import urlpatterns as metrics_urlpatterns  # noqa: E402 - POST /api/v1/metrics/

urlpatterns += metrics_urlpatterns
