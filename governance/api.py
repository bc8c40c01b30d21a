"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls).

Policies: ``/policies/`` (list, create) and ``/policies/<id>/`` (read, update,
delete). Audit trail: ``/audit/`` (filtered list) and ``/audit/verify``. A
workspace's self-approval switch: ``/workspaces/<id>/approval-settings``.
"""

from __future__ import annotations

from uuid import UUID

from django.urls import path
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api import StrictInput
from common.ids import id_query_param, uuid_query_param
from common.people import PersonRefSerializer
from governance import services
from governance.approvals import approval_get_for_user, approvals_for_user
from governance.audit import audit_verify
from governance.grants import (
    GrantState,
    approval_scope_parse,
    grant_describe,
    grant_get_for_user,
    grant_revoke,
    grants_for_user,
)
from governance.models import ApprovalRequest, AuditLogEntry, Policy
from governance.previews import MAX_ROWS_CEILING, EffectApproval, approval_preview_refresh, stored_preview
from governance.quorum import quorum_state
from governance.resolution import approval_resolve
from governance.selectors import audit_entries_for_user, policies_for_user, policy_get_for_user
from rivercore import limits
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from rivercore.types.governance import DecisionChannel, PolicyScope, ResolutionStatus
from tenancy.selectors import organizations_administered, workspace_get_for_user, workspaces_for_user

# --- policies ----------------------------------------------------------------------


class PolicySerializer(serializers.ModelSerializer):
    organization_id = serializers.IntegerField(read_only=True)
    workspace_id = serializers.IntegerField(read_only=True, allow_null=True)
    created_by_id = serializers.IntegerField(read_only=True, allow_null=True)
    expression = serializers.SerializerMethodField()

    class Meta:
        model = Policy
        fields = [
            "id", "organization_id", "workspace_id", "scope", "name", "description", "policy_type",
            "conditions", "expression", "enforcement", "enabled", "created_by_id", "created_at", "updated_at",
            "require_preview",
            "required_approvals",
        ]

    def get_expression(self, policy: Policy) -> str:
        return (policy.conditions or {}).get("expression", "")


def _model_choices(field: str):
    return Policy._meta.get_field(field).choices


class PolicyWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=limits.NAME)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True, default="")
    scope = serializers.ChoiceField(choices=_model_choices("scope"))
    workspace_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    organization_id = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    policy_type = serializers.ChoiceField(choices=_model_choices("policy_type"), required=False, allow_null=True)
    conditions = serializers.JSONField(help_text='{"expression": "..."} or the keyed form')
    enforcement = serializers.ChoiceField(choices=_model_choices("enforcement"))
    enabled = serializers.BooleanField(required=False, default=True)
    require_preview = serializers.BooleanField(required=False, default=False)  # issue 29 §1
    # Quorum: distinct approvers for a require_approval policy (checked by the service).
    required_approvals = serializers.IntegerField(required=False, default=1, min_value=1, max_value=10)


class PolicyUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=limits.NAME, required=False)
    description = serializers.CharField(max_length=limits.DESCRIPTION, required=False, allow_blank=True)
    policy_type = serializers.ChoiceField(choices=_model_choices("policy_type"), required=False, allow_null=True)
    conditions = serializers.JSONField(required=False)
    enforcement = serializers.ChoiceField(choices=_model_choices("enforcement"), required=False)
    enabled = serializers.BooleanField(required=False)
    require_preview = serializers.BooleanField(required=False)  # issue 29 §1
    required_approvals = serializers.IntegerField(required=False, min_value=1, max_value=10)

    def validate(self, attrs):
        fixed = sorted({"scope", "workspace_id", "organization_id"} & set(self.initial_data))
        if fixed:
            raise serializers.ValidationError({f: ["cannot be changed; create a new policy"] for f in fixed})
        return attrs


class PolicyListCreate(ListAPIView):
    serializer_class = PolicySerializer

    def get_queryset(self):
        queryset = policies_for_user(user=self.request.user)
        params = self.request.query_params
        workspace_id = id_query_param(params=params, name="workspace_id")
        if workspace_id is not None:
            workspace = workspaces_for_user(user=self.request.user).filter(pk=workspace_id).first()
            if workspace is None:
                raise NotFound("Workspace not found.")
            queryset = queryset.filter(workspace_id=workspace_id) | queryset.filter(
                scope=PolicyScope.ORGANIZATION, organization_id=workspace.organization_id
            )
        if params.get("scope"):
            queryset = queryset.filter(scope=params["scope"])
        if params.get("policy_type"):
            queryset = queryset.filter(policy_type=params["policy_type"])
        return queryset.order_by("name", "pk")

    @extend_schema(request=PolicyWriteSerializer, responses={201: PolicySerializer})
    def post(self, request):
        data = PolicyWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        policy = services.policy_create(actor=request.user, **data.validated_data)
        return Response(PolicySerializer(policy).data, status=status.HTTP_201_CREATED)


@extend_schema_view(get=extend_schema(exclude=True), post=extend_schema(exclude=True))
class PolicyListCreateNoSlash(PolicyListCreate):
    """The spec's apply_governance_policy names POST /api/v1/policies (no slash)."""


class PolicyDetail(APIView):
    serializer_class = PolicySerializer

    @extend_schema(responses=PolicySerializer)
    def get(self, request, policy_id: UUID):
        return Response(PolicySerializer(policy_get_for_user(user=request.user, policy_id=policy_id)).data)

    @extend_schema(request=PolicyUpdateSerializer, responses=PolicySerializer)
    def patch(self, request, policy_id: UUID):
        data = PolicyUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        policy = services.policy_update(actor=request.user, policy_id=policy_id, **data.validated_data)
        return Response(PolicySerializer(policy).data)

    @extend_schema(responses={204: None})
    def delete(self, request, policy_id: UUID):
        services.policy_delete(actor=request.user, policy_id=policy_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- audit trail -------------------------------------------------------------------


class AuditEntrySerializer(serializers.ModelSerializer):
    organization_id = serializers.IntegerField(read_only=True)
    workspace_id = serializers.IntegerField(read_only=True, allow_null=True)
    actor_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = AuditLogEntry
        fields = [
            "id", "organization_id", "workspace_id", "seq", "event_type", "actor_id", "actor_label",
            "execution_id", "agent_id", "policy_id", "approval_id", "details", "created_at", "key_id", "content_hash",
            "prev_hash", "entry_hash",
        ]


def _datetime_param(params, name: str):
    if not params.get(name):
        return None
    try:
        value = parse_datetime(params[name])
    except ValueError:
        value = None
    if value is None:
        raise InvalidInput("Invalid filter.", details={name: ["must be an ISO 8601 date-time"]})
    return value


_AUDIT_FILTERS = [
    OpenApiParameter(name, type=kind, required=False)
    for name, kind in [
        ("event_type", str), ("execution_id", int), ("agent_id", UUID), ("policy_id", UUID),
        ("approval_id", UUID), ("organization_id", int), ("workspace_id", int), ("since", str), ("until", str),
    ]
]


@extend_schema(parameters=_AUDIT_FILTERS)
class AuditList(ListAPIView):
    serializer_class = AuditEntrySerializer

    def get_queryset(self):
        params = self.request.query_params
        queryset = audit_entries_for_user(user=self.request.user)
        event_type = params.get("event_type")
        if event_type:
            if "\x00" in event_type or len(event_type) > 60:
                raise InvalidInput("Invalid filter.", details={"event_type": ["must be at most 60 characters, no NUL"]})
            queryset = queryset.filter(event_type=event_type)
        for name in ("execution_id", "organization_id", "workspace_id"):
            value = id_query_param(params=params, name=name)
            if value is not None:
                queryset = queryset.filter(**{name: value})
        for name in ("agent_id", "policy_id", "approval_id"):
            value = uuid_query_param(params=params, name=name)
            if value is not None:
                queryset = queryset.filter(**{name: value})
        since, until = _datetime_param(params, "since"), _datetime_param(params, "until")
        if since:
            queryset = queryset.filter(created_at__gte=since)
        if until:
            queryset = queryset.filter(created_at__lt=until)
        return queryset.select_related(None).order_by("-created_at", "-id")


class AuditVerify(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("organization_id", type=int, required=False)],
        responses=inline_serializer(
            "AuditVerification",
            {
                "ok": serializers.BooleanField(),
                "organizations": inline_serializer(
                    "AuditChainReport",
                    {
                        "organization_id": serializers.IntegerField(),
                        "verdict": serializers.CharField(
                            help_text="ok | broken at entry N | truncated after anchor K | empty but anchored"
                        ),
                        "ok": serializers.BooleanField(),
                        "entries_checked": serializers.IntegerField(),
                        "anchors_checked": serializers.IntegerField(),
                        "pending": serializers.IntegerField(),
                        "first_broken": serializers.DictField(allow_null=True),
                        "rejected_anchors": serializers.ListField(child=serializers.IntegerField()),
                        "detail": serializers.CharField(),
                    },
                    many=True,
                ),
            },
        ),
    )
    def get(self, request):
        administered = list(organizations_administered(user=request.user).values_list("pk", flat=True))
        organization_id = id_query_param(params=request.query_params, name="organization_id")
        if organization_id is not None:
            if organization_id not in administered:
                if workspaces_for_user(user=request.user).filter(organization_id=organization_id).exists():
                    raise PermissionDenied("Only organization admins can verify the audit trail.")
                raise NotFound("Organization not found.")
            administered = [organization_id]
        elif not administered:
            raise PermissionDenied("Only organization admins can verify the audit trail.")
        return Response(audit_verify(organization_ids=administered).as_dict())


# --- workspace approval settings -----------------------------------------------------


class WorkspaceApprovalSettingsSerializer(serializers.Serializer):
    workspace_id = serializers.IntegerField(read_only=True)
    allow_self_approval = serializers.BooleanField()


@extend_schema_field(OpenApiTypes.BOOL)
class _JsonBoolean(serializers.JSONField):
    """A JSON true or false only: DRF's BooleanField would also take "yes", 1 or "false"."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            raise serializers.ValidationError("Must be true or false.")
        return data


class WorkspaceApprovalSettingsInput(StrictInput):
    allow_self_approval = _JsonBoolean()


class WorkspaceApprovalSettings(APIView):
    """Segregation of duties for one workspace: may whoever started a run approve it?"""

    @extend_schema(responses=WorkspaceApprovalSettingsSerializer)
    def get(self, request, workspace_id: int):
        workspace = workspace_get_for_user(user=request.user, workspace_id=workspace_id)
        return Response({"workspace_id": workspace.pk, "allow_self_approval": workspace.allow_self_approval})

    @extend_schema(request=WorkspaceApprovalSettingsInput, responses=WorkspaceApprovalSettingsSerializer)
    def patch(self, request, workspace_id: int):
        body = WorkspaceApprovalSettingsInput(data=request.data)
        body.is_valid(raise_exception=True)
        workspace = services.workspace_approval_settings_update(
            actor=request.user, workspace_id=workspace_id,
            allow_self_approval=body.validated_data["allow_self_approval"],
        )
        return Response({"workspace_id": workspace.pk, "allow_self_approval": workspace.allow_self_approval})


# --- approval requests ---------------------------------------------------------------


class ApprovalVoteSerializer(serializers.Serializer):
    user = PersonRefSerializer(read_only=True, allow_null=True)
    decision = serializers.CharField(read_only=True)
    comment = serializers.CharField(read_only=True)
    round = serializers.IntegerField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    preview_fingerprint = serializers.CharField(read_only=True)  # the effect preview it approved


class ApprovalQuorumSerializer(serializers.Serializer):
    """Issue 29 §3: "1 of 2 approvals" and who gave them (governance.quorum)."""

    required = serializers.IntegerField(read_only=True)
    given = serializers.IntegerField(read_only=True)
    round = serializers.IntegerField(read_only=True)
    approvals = ApprovalVoteSerializer(many=True, read_only=True)
    superseded = ApprovalVoteSerializer(many=True, read_only=True)
    older_preview = ApprovalVoteSerializer(many=True, read_only=True)  # approvals of a preview no longer current
    rejections = ApprovalVoteSerializer(many=True, read_only=True)
    edited_args = serializers.JSONField(read_only=True, allow_null=True)
    you_approved = serializers.BooleanField(read_only=True)


class ApprovalEscalationSerializer(serializers.Serializer):
    chain = serializers.JSONField(source="escalation_chain", read_only=True)
    level = serializers.IntegerField(source="escalation_level", read_only=True)
    escalated_at = serializers.DateTimeField(read_only=True, allow_null=True)
    next_escalation_at = serializers.DateTimeField(read_only=True, allow_null=True)


class ApprovalSerializer(serializers.ModelSerializer):
    # The run's requester: the person answerable for it, who may not resolve this request
    # unless the workspace allows self-approval.
    requester = PersonRefSerializer(source="run_started_by", read_only=True, allow_null=True)
    # Issue 29 §1: the call's effect, and that of the arguments being edited (docs/approvals.md).
    preview = serializers.SerializerMethodField()
    preview_edit = serializers.SerializerMethodField()
    # Quorum and escalation (issue 29 §3): null quorum for a request one approver decides.
    quorum = serializers.SerializerMethodField()
    escalation = ApprovalEscalationSerializer(source="*", read_only=True)

    class Meta:
        model = ApprovalRequest
        fields = ["id", "workspace", "execution_id", "agent_id", "tool_name", "proposed_payload",
                  "reasoning_summary", "risk_context", "confidence_score", "auto_approve_eligible",
                  "approver_roles", "requester", "status", "expires_at", "resolution", "resolved_by",
                  "resolution_comment", "resolved_at", "created_at", "required_approvals", "quorum", "escalation",
                  "scope",  # scopes (governance.grants)
                  "preview", "preview_edit",  # issue 29 §1 (governance.previews)
                  "kind"]  # "approval" or "unknown_outcome" (governance.unknown_outcome)

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_preview(self, approval) -> dict | None:
        shown = stored_preview(approval.preview)
        return shown.public() if shown else None

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_preview_edit(self, approval) -> dict | None:
        shown = stored_preview(approval.preview_edit)
        return shown.public() if shown else None

    @extend_schema_field(ApprovalQuorumSerializer(allow_null=True))
    def get_quorum(self, approval: ApprovalRequest) -> dict | None:
        request = self.context.get("request")
        state = quorum_state(approval, user=getattr(request, "user", None))
        return ApprovalQuorumSerializer(state).data if state is not None else None


class ResolveInput(serializers.Serializer):
    status = serializers.ChoiceField(choices=[s.value for s in ResolutionStatus])
    modified_args = serializers.JSONField(required=False, default=None)
    resolution_comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)
    # Issue 29 §1: the fingerprint of the preview the approver saw, and a row ceiling.
    preview_fingerprint = serializers.RegexField(r"^[0-9a-f]{64}$", required=False, default=None, allow_null=True,
                                              max_length=64)
    max_rows = serializers.IntegerField(required=False, default=None, allow_null=True, min_value=0,
                                        max_value=MAX_ROWS_CEILING)
    # Quorum: the round of arguments the caller reviewed (``quorum.round``); 409
    # ``arguments_changed`` when someone edited them since. Optional.
    arguments_round = serializers.IntegerField(required=False, default=None, allow_null=True, min_value=0)
    # Scopes (governance.grants): parsed by approval_scope_parse, which names the field at fault.
    scope = serializers.JSONField(required=False, default=None, help_text="once (default), run, session or grant")
    grant = serializers.JSONField(required=False, default=None,
                                  help_text="with scope grant: {expires_in_days, max_rows, condition}")

    def validate(self, attrs):
        if attrs["status"] == ResolutionStatus.EDITED_APPROVED and not isinstance(attrs.get("modified_args"), dict):
            raise serializers.ValidationError({"modified_args": ["An object is required with edited_approved."]})
        return attrs


class ApprovalList(ListAPIView):
    serializer_class = ApprovalSerializer

    @extend_schema(parameters=[OpenApiParameter("status", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        wanted = self.request.query_params.get("status")
        if wanted and wanted not in ApprovalRequest.Status.values:
            raise InvalidInput(
                "Unknown status.", details={"status": [f"must be one of {ApprovalRequest.Status.values}"]}
            )
        return approvals_for_user(user=self.request.user, status=wanted, resolvable_only=True).prefetch_related(
            "votes__user")


class ApprovalDetail(APIView):
    @extend_schema(responses=ApprovalSerializer)
    def get(self, request, approval_id):
        approval = approval_get_for_user(user=request.user, approval_id=approval_id)
        return Response(ApprovalSerializer(approval, context={"request": request}).data)


class ApprovalResolve(APIView):
    @extend_schema(request=ResolveInput, responses=ApprovalSerializer)
    def post(self, request, approval_id):
        body = ResolveInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        scope = approval_scope_parse(scope=data.get("scope"), grant=data.get("grant"))
        approval = approval_resolve(
            user=request.user, approval_id=approval_id, status=data["status"],
            modified_args=data.get("modified_args"), comment=data.get("resolution_comment", ""),
            effect=EffectApproval(fingerprint=data.get("preview_fingerprint"), max_rows=data.get("max_rows")),
            channel=DecisionChannel.API, arguments_round=data.get("arguments_round"), scope=scope,
        )
        return Response(ApprovalSerializer(approval, context={"request": request}).data)


# --- standing approval grants (governance.grants) -------------------------------------


class ApprovalGrantSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    workspace_id = serializers.IntegerField()
    agent_id = serializers.UUIDField()
    tool_name = serializers.CharField()
    data_source_id = serializers.IntegerField(allow_null=True)
    target = serializers.CharField(allow_blank=True)
    condition = serializers.CharField(allow_blank=True)
    max_rows = serializers.IntegerField()
    approval_id = serializers.UUIDField(allow_null=True)
    granted_by = serializers.JSONField(allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoked_by = serializers.JSONField(allow_null=True)
    state = serializers.ChoiceField(choices=[s.value for s in GrantState])
    uses = serializers.IntegerField()
    last_used_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, instance):
        return super().to_representation(grant_describe(instance))


class ApprovalGrantList(ListAPIView):
    serializer_class = ApprovalGrantSerializer

    @extend_schema(parameters=[OpenApiParameter("state", str, description="active, expired or revoked")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return grants_for_user(user=self.request.user, state=self.request.query_params.get("state"))


class ApprovalGrantDetail(APIView):
    @extend_schema(responses=ApprovalGrantSerializer)
    def get(self, request, grant_id):
        return Response(ApprovalGrantSerializer(grant_get_for_user(user=request.user, grant_id=grant_id)).data)


class ApprovalGrantRevoke(APIView):
    @extend_schema(request=None, responses=ApprovalGrantSerializer)
    def post(self, request, grant_id):
        return Response(ApprovalGrantSerializer(grant_revoke(user=request.user, grant_id=grant_id)).data)


class PreviewInput(serializers.Serializer):
    modified_args = serializers.JSONField()

    def validate_modified_args(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("An object is required.")
        return value


class ApprovalPreview(APIView):
    """Issue 29 §1: the effect of the call with edited arguments (rolled back), kept on
    the request as ``preview_edit``; only people who may resolve it may ask."""

    @extend_schema(request=PreviewInput, responses=ApprovalSerializer)
    def post(self, request, approval_id):
        body = PreviewInput(data=request.data)
        body.is_valid(raise_exception=True)
        approval = approval_preview_refresh(user=request.user, approval_id=approval_id,
                                            modified_args=body.validated_data["modified_args"])
        return Response(ApprovalSerializer(approval).data)


urlpatterns = [
    path("approvals/", ApprovalList.as_view(), name="approval-list"),
    path("approvals/<str:approval_id>/", ApprovalDetail.as_view(), name="approval-detail"),
    path("approvals/<str:approval_id>/resolve", ApprovalResolve.as_view(), name="approval-resolve"),
    path("approvals/<str:approval_id>/preview", ApprovalPreview.as_view(), name="approval-preview"),
    path("approval-grants/", ApprovalGrantList.as_view(), name="approval-grant-list"),
    path("approval-grants/<str:grant_id>/", ApprovalGrantDetail.as_view(), name="approval-grant-detail"),
    path("approval-grants/<str:grant_id>/revoke", ApprovalGrantRevoke.as_view(), name="approval-grant-revoke"),
    path("workspaces/<int:workspace_id>/approval-settings", WorkspaceApprovalSettings.as_view(),
         name="workspace-approval-settings"),
    path("policies/", PolicyListCreate.as_view(), name="policy-list"),
    path("policies", PolicyListCreateNoSlash.as_view()),
    path("policies/<uuid:policy_id>/", PolicyDetail.as_view(), name="policy-detail"),
    path("audit/", AuditList.as_view(), name="audit-list"),
    path("audit/verify", AuditVerify.as_view(), name="audit-verify"),
]
