"""Runs, the stateless engine contract and generate-agent over REST.

Each view parses, authorizes through a tenant-scoped selector, calls one service
and renders.
"""

from __future__ import annotations

import datetime as dt

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get_for_user, agent_get_with_permissions
from common.api import StrictInput
from common.days import day_from_text, day_window
from common.ids import count_query_param, id_query_param, text_query_param, uuid_query_param
from common.people import PersonRefSerializer
from common.search import MAX_QUERY_LENGTH
from executions import services, stateless
from executions.models import Execution, ExecutionEvent, ExecutionStep
from executions.selectors import (
    EXECUTION_SORT_DEFAULT,
    EXECUTION_SORTS,
    ExecutionFilters,
    execution_children,
    execution_get_for_user,
    execution_run_time,
    execution_sort_valid,
    executions_filter,
    executions_sorted,
)
from executions.types import PersonOrigin, RunRequest
from rivercore import limits
from rivercore.contracts import (
    ContinuationRequest,
    ExecutionRequest,
    GenerateAgentRequest,
    TriggerType,
)
from rivercore.errors import InvalidInput
from rivercore.events import event_message
from rivercore.outcome import Outcome
from tenancy.permissions import AGENT_CREATE, AGENT_EXECUTE
from tenancy.selectors import require_granted, require_permission, workspace_get_for_user

TRIGGER_TYPES = [t.value for t in TriggerType]


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = ExecutionStep
        fields = ["step_number", "turn", "step_type", "tool_name", "tool_category", "call_id", "input", "output",
                  "model_used", "model_tier", "provider", "tokens", "duration_ms", "status", "governance_decision",
                  "error", "created_at"]


class TriggerRefSerializer(serializers.Serializer):
    id = serializers.UUIDField(allow_null=True, help_text="The trigger that started the run; null for a person.")
    type = serializers.CharField(help_text="The engine's trigger type: manual, scheduled, event, api, threshold, "
                                           "workflow.")
    source = serializers.CharField()


class ExecutionSerializer(serializers.ModelSerializer):
    total_tokens = serializers.IntegerField(read_only=True)
    trigger = serializers.SerializerMethodField()
    # The run that delegated this one (docs/delegation.md), or null.
    parent_execution = serializers.IntegerField(source="parent_execution_id", read_only=True, allow_null=True)
    # The agent version by its number (what the agents API and pages call it), never
    # its internal row id.
    agent_version = serializers.IntegerField(source="agent_version.version", read_only=True)
    # The person answerable for the run, who may not approve its actions (docs/approvals.md);
    # ``requested_by`` stays the id of the identity the run acts as.
    requester = PersonRefSerializer(read_only=True, allow_null=True)

    class Meta:
        model = Execution
        fields = ["id", "workspace", "agent", "agent_version", "trigger", "trigger_type",
                  "trigger_source", "trigger_payload", "requested_by", "requester", "input_prompt", "status",
                  "outcome", "turn_count",
                  "tokens_input", "tokens_output", "total_tokens", "cost_usd", "cost_unknown", "queued_at",
                  "started_at", "finished_at", "attempts", "result", "usage", "error", "parent_execution",
                  "parent_execution_id", "session"]

    @extend_schema_field(TriggerRefSerializer)
    def get_trigger(self, obj) -> dict:
        return {"id": str(obj.trigger_id) if obj.trigger_id else None, "type": obj.trigger_type,
                "source": obj.trigger_source}


class ChildExecutionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.UUIDField(source="agent_id")
    status = serializers.ChoiceField(choices=Execution.Status.choices)
    call_id = serializers.CharField(source="parent_call_id")


class SegmentTimeSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True, help_text="Null while the segment runs.")
    ended_as = serializers.CharField(help_text="awaiting_approval, awaiting_interaction, awaiting_child (a pause), "
                                               "ended, interrupted; empty while it runs.")
    active_ms = serializers.IntegerField()


class WaitTimeSerializer(serializers.Serializer):
    kind = serializers.CharField(source="wait_kind", help_text="queued, approval, person, delegated_run, retry.")
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True, help_text="Null while the run still waits.")
    duration_ms = serializers.IntegerField()
    decided_by = serializers.CharField(allow_null=True, help_text="Who decided the approval or answered, by name.")
    resolution = serializers.CharField(allow_null=True)


class ExecutionDetailSerializer(ExecutionSerializer):
    steps = StepSerializer(many=True, read_only=True)
    # The run's segments and waits (docs/engine.md, "Times"): ``active_ms`` is its run time.
    active_ms = serializers.SerializerMethodField()
    waited_ms = serializers.SerializerMethodField()
    segments = serializers.SerializerMethodField()
    waits = serializers.SerializerMethodField()
    pending = serializers.SerializerMethodField()
    child_executions = serializers.SerializerMethodField()
    # The progressive status block (docs/observability.md); ``status`` stays the run's
    # status string, which clients rely on.
    status_detail = serializers.SerializerMethodField()

    class Meta(ExecutionSerializer.Meta):
        fields = [*ExecutionSerializer.Meta.fields, "status_detail", "child_executions", "steps", "pending",
                  "active_ms", "waited_ms", "segments", "waits"]

    def _run_time(self, obj):
        cached = getattr(obj, "_run_time_cache", None)
        if cached is None:
            cached = obj._run_time_cache = execution_run_time(execution=obj)
        return cached

    @extend_schema_field(OpenApiTypes.INT)
    def get_active_ms(self, obj) -> int:
        return self._run_time(obj).active_ms

    @extend_schema_field(OpenApiTypes.INT)
    def get_waited_ms(self, obj) -> int:
        return self._run_time(obj).waited_ms

    @extend_schema_field(SegmentTimeSerializer(many=True))
    def get_segments(self, obj) -> list[dict]:
        return SegmentTimeSerializer(self._run_time(obj).segments, many=True).data

    @extend_schema_field(WaitTimeSerializer(many=True))
    def get_waits(self, obj) -> list[dict]:
        return WaitTimeSerializer(self._run_time(obj).waits, many=True).data

    def get_status_detail(self, obj) -> dict:
        from executions.progress import execution_status_block

        return execution_status_block(execution=obj)

    def get_pending(self, obj) -> dict | None:
        snapshot = obj.context_snapshot or {}
        if obj.status in Execution.PAUSED:
            return snapshot.get("pending")
        return None

    @extend_schema_field(ChildExecutionSerializer(many=True))
    def get_child_executions(self, obj) -> list[dict]:
        """The runs this one delegated to, oldest first: one query for all of them
        (``execution_children``), never one per child."""
        return ChildExecutionSerializer(execution_children(execution=obj), many=True).data


class EventSerializer(serializers.Serializer):
    """For the schema only: the shape ``rivercore.events.event_message`` writes, the same
    JSON as the WebSocket sends. The event's payload fields follow these four."""

    type = serializers.CharField(help_text="run_started, turn_reasoning, tool_called, observation_received, "
                                           "turn_complete, approval_required, approval_resolved, "
                                           "interaction_required, interaction_resolved, run_completed.")
    seq = serializers.IntegerField(help_text="The run's sequence number of the event, from 1.")
    execution_id = serializers.IntegerField()
    created_at = serializers.CharField(help_text="When the event was stored, ISO 8601.")


def event_json(row: ExecutionEvent) -> dict:
    return event_message(event_type=row.event_type, seq=row.seq, execution_id=row.execution_id,
                         created_at=row.created_at, payload=row.payload)


class RunInput(StrictInput):
    input_prompt = serializers.CharField(allow_blank=True, required=False, default="", max_length=limits.PROMPT)
    payload = serializers.JSONField(required=False, default=None)
    artifacts = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), required=False, default=list,
        max_length=10, help_text="Artifact ids of the agent's workspace to attach (docs/artifacts.md).")


class RespondInput(StrictInput):
    user_response = serializers.JSONField()


class AgentRunView(APIView):
    @extend_schema(request=RunInput, responses={202: inline_serializer(
        "RunAccepted", {"execution_id": serializers.IntegerField(), "status": serializers.CharField()})})
    def post(self, request, agent_id):
        agent, granted = agent_get_with_permissions(user=request.user, agent_id=agent_id)  # one query
        require_granted(granted=granted, permission=AGENT_EXECUTE)
        body = RunInput(data=request.data)
        body.is_valid(raise_exception=True)
        execution = services.execution_start(agent=agent, request=RunRequest(
            agent_id=agent.pk, prompt=body.validated_data["input_prompt"], payload=body.validated_data["payload"],
            attachments=body.validated_data["artifacts"],
            origin=PersonOrigin(user_id=request.user.pk, requester_id=request.user.pk,
                                source="api" if request.auth is not None else "ui"),
        ))
        return Response({"execution_id": execution.pk, "status": execution.status}, status=status.HTTP_202_ACCEPTED)


def _day_param(*, params, name: str) -> dt.date | None:
    """A day filter (``YYYY-MM-DD``, the runs page's format): None when absent, a 400
    naming it when empty or not a day."""
    raw = text_query_param(params=params, name=name)
    if raw is None:
        return None
    day = day_from_text(raw)
    if day is None:
        raise InvalidInput(f"{name} must be a day.", details={name: ["A day: YYYY-MM-DD."]})
    return day


def execution_filters_from_query(*, user, params) -> ExecutionFilters:
    """The run list's query as ``executions_filter``'s filters, the same ones the runs
    page takes: ``status``, ``agent``, ``trigger_type``, ``since``, ``until`` (days,
    both inclusive), ``session`` and ``outcome``. An agent of another workspace is a 404 (as before);
    a session id only narrows runs already scoped to the user's workspaces (their
    ``session`` field is in every run's JSON), so it needs no lookup of its own."""
    status = params.get("status")
    if status and status not in Execution.Status.values:
        raise InvalidInput("Unknown run status.", details={
            "status": [f"must be one of {', '.join(Execution.Status.values)}"]})
    trigger_type = text_query_param(params=params, name="trigger_type")
    if trigger_type is not None and trigger_type not in TRIGGER_TYPES:
        raise InvalidInput("Unknown trigger type.", details={
            "trigger_type": [f"must be one of {', '.join(TRIGGER_TYPES)}"]})
    since_day, until_day = _day_param(params=params, name="since"), _day_param(params=params, name="until")
    if since_day and until_day and since_day > until_day:
        raise InvalidInput("until is before since.", details={"until": ["The end day is before the start day."]})
    since, until = day_window(since=since_day, until=until_day)
    agent = uuid_query_param(params=params, name="agent")
    session = id_query_param(params=params, name="session")
    return ExecutionFilters(
        status=status or None,
        agent_id=agent_get_for_user(user=user, agent_id=agent).pk if agent is not None else None,
        trigger_type=trigger_type,
        since=since,
        until=until,
        session_id=session,
        outcomes=tuple(outcome_query_param(params["outcome"])) if "outcome" in params else None,
        requester_id=id_query_param(params=params, name="requester"),
        text=_text_param(params=params),
    )


def _text_param(*, params) -> str | None:
    """``?q=``: words of the prompt or the answer, or a run id (common/search.py); a 400
    naming it when empty or longer than ``MAX_QUERY_LENGTH``."""
    raw = text_query_param(params=params, name="q")
    if raw is None:
        return None
    if len(raw) > MAX_QUERY_LENGTH or not raw.strip():
        raise InvalidInput("q must be 1 to 200 characters of text.", details={
            "q": [f"Give 1 to {MAX_QUERY_LENGTH} characters."]})
    return raw.strip()


def sort_query_param(*, params) -> str:
    """``?sort=``: a key of ``EXECUTION_SORTS``, ``-`` first for descending; newest first
    when absent; a 400 naming it when unknown (nothing unchecked reaches order_by)."""
    raw = text_query_param(params=params, name="sort")
    if raw is None:
        return EXECUTION_SORT_DEFAULT
    if not execution_sort_valid(raw):
        raise InvalidInput("Unknown sort key.", details={
            "sort": [f"must be one of {', '.join(EXECUTION_SORTS)}, each optionally preceded by -"]})
    return raw


def outcome_query_param(value: str) -> list[str]:
    """``?outcome=`` as a list of known outcomes (comma-separated); 400 naming the field
    for an empty or unknown one."""
    known = [outcome.value for outcome in Outcome]
    wanted = [part.strip() for part in value.split(",")]
    unknown = [part for part in wanted if part not in known]
    if unknown:
        shown = ", ".join(repr(part[:40]) for part in unknown[:5])
        raise InvalidInput("Unknown run outcome.", details={
            "outcome": [f"{shown} is not one of {', '.join(known)}"]})
    return wanted


class ExecutionList(ListAPIView):
    serializer_class = ExecutionSerializer

    @extend_schema(parameters=[
        OpenApiParameter("status", str), OpenApiParameter("agent", OpenApiTypes.UUID),
        OpenApiParameter("workspace", int),
        OpenApiParameter("trigger_type", str, enum=TRIGGER_TYPES),
        OpenApiParameter("since", OpenApiTypes.DATE, description="Runs queued on or after this day."),
        OpenApiParameter("until", OpenApiTypes.DATE, description="Runs queued on or before this day."),
        OpenApiParameter("session", int, description="Runs of this conversation."),
        OpenApiParameter("outcome", str, description=(
            "One outcome, or several separated by commas (docs/engine.md, Outcome).")),
        OpenApiParameter("requester", int, description="Runs this person answers for (a user id)."),
        OpenApiParameter("q", str, description=(
            "Every word a prefix of a word of the run's prompt or answer, or the run's id (docs/api.md).")),
        OpenApiParameter("sort", str, description=(
            "id, status, outcome, agent, trigger, started, turns, tokens or cost; - first for descending. "
            "Default: newest first.")),
    ])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        filters = execution_filters_from_query(user=self.request.user, params=params)
        workspace_id = id_query_param(params=params, name="workspace")
        workspace = None
        if workspace_id is not None:
            workspace = workspace_get_for_user(user=self.request.user, workspace_id=workspace_id)
        runs = executions_filter(user=self.request.user, workspace=workspace, filters=filters)
        sort = sort_query_param(params=params)
        if sort == EXECUTION_SORT_DEFAULT:
            # The list's order before sorting was offered, kept for existing clients.
            return runs.select_related("agent_version", "requester").order_by("-queued_at", "-id")
        return executions_sorted(runs.select_related("agent_version", "requester"), sort=sort)


class ExecutionDetail(APIView):
    @extend_schema(responses=ExecutionDetailSerializer)
    def get(self, request, execution_id):
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        return Response(ExecutionDetailSerializer(execution).data)


class ExecutionEvents(APIView):
    @extend_schema(parameters=[OpenApiParameter("after", int)], responses=EventSerializer(many=True))
    def get(self, request, execution_id):
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        after = count_query_param(params=request.query_params, name="after")
        events = execution.events.filter(seq__gt=after).order_by("seq")[:1000]
        return Response([event_json(row) for row in events])


class StepWhy(APIView):
    """The answer to "why did the agent do this?" for one step (docs/observability.md)."""

    @extend_schema(responses=inline_serializer("StepWhy", {"step": serializers.DictField()}))
    def get(self, request, execution_id, step_number):
        from executions.why import step_why

        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        return Response(step_why(execution=execution, step_number=step_number))


class ExecutionCancel(APIView):
    @extend_schema(request=None, responses=ExecutionSerializer)
    def post(self, request, execution_id):
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        require_permission(user=request.user, workspace=execution.workspace, permission=AGENT_EXECUTE)
        return Response(ExecutionSerializer(services.execution_cancel(execution=execution, user=request.user)).data)


class ExecutionRespond(APIView):
    @extend_schema(request=RespondInput, responses={202: ExecutionSerializer})
    def post(self, request, execution_id):
        execution = execution_get_for_user(user=request.user, execution_id=execution_id)
        require_permission(user=request.user, workspace=execution.workspace, permission=AGENT_EXECUTE)
        body = RespondInput(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.execution_respond(
            execution=execution, user=request.user, user_response=body.validated_data["user_response"]
        )
        return Response(ExecutionSerializer(row).data, status=status.HTTP_202_ACCEPTED)


# --- the stateless contract ----------------------------------------------------------------

_JSON = inline_serializer("ContractJSON", {"any": serializers.JSONField()})


class Execute(APIView):
    @extend_schema(request=_JSON, responses=_JSON, description="Run a whole execution from an ExecutionRequest.")
    def post(self, request):
        body = ExecutionRequest.model_validate(request.data)
        response = stateless.execute(user=request.user, auth=request.auth, request=body)
        return Response(response.model_dump(mode="json"))


class ExecuteContinue(APIView):
    @extend_schema(request=_JSON, responses=_JSON, description="Resume a paused execution.")
    def post(self, request):
        body = ContinuationRequest.model_validate(request.data)
        response = stateless.execute_continue(user=request.user, auth=request.auth, continuation=body)
        return Response(response.model_dump(mode="json"))


class GenerateAgent(APIView):
    @extend_schema(request=_JSON, responses=_JSON, description="Suggest an agent configuration.")
    def post(self, request):
        from executions.routing import router_for_organization
        from rivercore.generate import agent_generate

        body = GenerateAgentRequest.model_validate(request.data)
        workspace = workspace_get_for_user(user=request.user, workspace_id=body.user_context.workspace_id)
        require_permission(user=request.user, workspace=workspace, permission=AGENT_CREATE)
        llm = router_for_organization(organization_id=workspace.organization_id)
        return Response(agent_generate(request=body, llm=llm).model_dump(mode="json"))


# --- approvals -------------------------------------------------------------------------------


urlpatterns = [
    path("agents/<uuid:agent_id>/run", AgentRunView.as_view(), name="agent-run"),
    path("executions/", ExecutionList.as_view(), name="execution-list"),
    path("executions/<int:execution_id>/", ExecutionDetail.as_view(), name="execution-detail"),
    path("executions/<int:execution_id>/events/", ExecutionEvents.as_view(), name="execution-events"),
    path("executions/<int:execution_id>/steps/<int:step_number>/why", StepWhy.as_view(), name="execution-step-why"),
    path("executions/<int:execution_id>/cancel", ExecutionCancel.as_view(), name="execution-cancel"),
    path("executions/<int:execution_id>/respond", ExecutionRespond.as_view(), name="execution-respond"),
    path("execute", Execute.as_view(), name="execute"),
    path("execute/continue", ExecuteContinue.as_view(), name="execute-continue"),
    path("generate-agent", GenerateAgent.as_view(), name="generate-agent"),
]
