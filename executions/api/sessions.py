"""Sessions over REST (docs/sessions.md): open, list, rename and archive a session; send
it messages (each answered by a durable run); read its messages and its event stream.

A session is its creator's: every lookup goes through ``session_get_for_user``, so
anyone else (another workspace, or another member of the same one) gets a 404."""

from __future__ import annotations

from django.db.models import Count, Q
from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import agent_get_in_workspace
from common.api import StrictInput
from common.ids import count_query_param, id_query_param, uuid_query_param
from executions.models import Session, SessionMessage
from executions.selectors import session_event_message, session_events, session_get_for_user, sessions_for_user
from executions.services import sessions as services
from rivercore import limits
from rivercore.errors import InvalidInput, NotFound
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import require_permission, workspace_get_for_user

EVENTS_PAGE = 1000


class SessionSerializer(serializers.ModelSerializer):
    archived = serializers.BooleanField(read_only=True)
    active_execution = serializers.IntegerField(source="active_execution_id", read_only=True, allow_null=True,
                                                help_text="The run answering now, or null when the session is idle.")
    queued_messages = serializers.IntegerField(read_only=True, help_text="Messages waiting for the active run.")

    class Meta:
        model = Session
        fields = ["id", "workspace", "agent", "title", "archived", "archived_at", "active_execution",
                  "queued_messages", "created_by", "created_at", "updated_at"]
        read_only_fields = fields


class SessionCreateInput(StrictInput):
    workspace = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    agent = serializers.UUIDField(help_text="The entry agent: an active agent of the workspace (the root of its "
                                            "team, if it has sub-agents).")
    title = serializers.CharField(max_length=limits.NAME, required=False, allow_blank=True, default="")


class SessionUpdateInput(StrictInput):
    title = serializers.CharField(max_length=limits.NAME, required=False, allow_blank=True)
    archived = serializers.BooleanField(required=False)


class MessageInput(StrictInput):
    content = serializers.CharField(max_length=limits.PROMPT, trim_whitespace=True)
    attachments = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), max_length=services.ATTACHMENTS_MAX,
        required=False, default=list, help_text="Artifact ids attached to the message.")


class MessageSerializer(serializers.ModelSerializer):
    execution = serializers.IntegerField(source="execution_id", read_only=True, allow_null=True)
    agent = serializers.UUIDField(source="agent_id", read_only=True, allow_null=True)
    reply_to = serializers.IntegerField(source="reply_to_id", read_only=True, allow_null=True)
    attachments = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    queued = serializers.SerializerMethodField()

    class Meta:
        model = SessionMessage
        fields = ["id", "sequence", "role", "state", "queued", "content", "attachments", "execution", "agent",
                  "reply_to", "references", "created_by", "created_at", "started_at"]
        read_only_fields = fields

    def get_queued(self, obj) -> bool:
        return obj.state == SessionMessage.State.QUEUED


class SessionEventSerializer(serializers.Serializer):
    """For the schema only: a run event (``rivercore.events.event_message``, the JSON the
    run's WebSocket and event list send) plus ``session_seq``. The event's payload fields
    follow these five."""

    type = serializers.CharField(help_text="user_message, agent_transferred, run_started, turn_reasoning, "
                                           "tool_called, observation_received, turn_complete, approval_required, "
                                           "approval_resolved, interaction_required, interaction_resolved, "
                                           "run_completed.")
    seq = serializers.IntegerField(help_text="The event's sequence number in its run's own log, from 1.")
    execution_id = serializers.IntegerField()
    created_at = serializers.CharField(help_text="When the event was stored, ISO 8601.")
    session_seq = serializers.IntegerField(help_text="The event's place in the session's stream: increasing, not "
                                                     "contiguous. Pass the last one seen as after=.")


def _with_queue(queryset):
    return queryset.annotate(queued_messages=Count("messages", filter=Q(
        messages__role=SessionMessage.Role.USER, messages__state=SessionMessage.State.QUEUED)))


def _session(request, session_id) -> Session:
    return session_get_for_user(user=request.user, session_id=session_id)


def _flag(params, name: str) -> bool | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in {"true", "1", "yes"}:
        return True
    if raw.lower() in {"false", "0", "no"}:
        return False
    raise InvalidInput(f"{name} must be true or false.", details={name: ["must be true or false"]})


class SessionList(ListAPIView):
    serializer_class = SessionSerializer

    @extend_schema(parameters=[OpenApiParameter("workspace", int), OpenApiParameter("agent", str),
                               OpenApiParameter("archived", bool, description="false (the default): open sessions; "
                                                                              "true: archived ones.")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        qs = sessions_for_user(user=self.request.user)
        archived = _flag(params, "archived")
        qs = qs.filter(archived_at__isnull=not archived)
        workspace_id = id_query_param(params=params, name="workspace")
        if workspace_id is not None:
            qs = qs.filter(workspace_id=workspace_id)
        agent = uuid_query_param(params=params, name="agent")
        if agent is not None:
            qs = qs.filter(agent_id=agent)
        return _with_queue(qs).order_by("-updated_at", "-id")

    @extend_schema(request=SessionCreateInput, responses={201: SessionSerializer})
    def post(self, request):
        body = SessionCreateInput(data=request.data)
        body.is_valid(raise_exception=True)
        values = body.validated_data
        workspace = workspace_get_for_user(user=request.user, workspace_id=values["workspace"])
        require_permission(user=request.user, workspace=workspace, permission=AGENT_EXECUTE)
        try:
            agent = agent_get_in_workspace(workspace_id=workspace.pk, reference=str(values["agent"]))
        except NotFound:
            raise InvalidInput("No agent with that id in this workspace.",
                               details={"agent": ["no agent with this id in the workspace"]}) from None
        session = services.session_create(workspace=workspace, agent=agent, user=request.user, title=values["title"])
        return Response(SessionSerializer(_with_queue(Session.objects.filter(pk=session.pk)).get()).data,
                        status=status.HTTP_201_CREATED)


class SessionDetail(APIView):
    @extend_schema(responses=SessionSerializer)
    def get(self, request, session_id):
        session = _session(request, session_id)
        return Response(SessionSerializer(_with_queue(Session.objects.filter(pk=session.pk)).get()).data)

    @extend_schema(request=SessionUpdateInput, responses=SessionSerializer)
    def patch(self, request, session_id):
        session = _session(request, session_id)
        body = SessionUpdateInput(data=request.data)
        body.is_valid(raise_exception=True)
        services.session_update(session=session, **body.validated_data)
        return Response(SessionSerializer(_with_queue(Session.objects.filter(pk=session.pk)).get()).data)


class SessionMessages(ListAPIView):
    serializer_class = MessageSerializer

    def get_queryset(self):
        session = _session(self.request, self.kwargs["session_id"])
        return session.messages.order_by("sequence")

    @extend_schema(request=MessageInput, responses={202: inline_serializer("MessageAccepted", {
        "message_id": serializers.IntegerField(),
        "execution_id": serializers.IntegerField(allow_null=True, help_text="The run answering it; null while "
                                                                            "it is queued."),
        "queued": serializers.BooleanField(help_text="True: another run of the session is active; this message "
                                                     "starts when that run ends."),
    })})
    def post(self, request, session_id):
        session = _session(request, session_id)
        require_permission(user=request.user, workspace=session.workspace, permission=AGENT_EXECUTE)
        body = MessageInput(data=request.data)
        body.is_valid(raise_exception=True)
        message, execution = services.session_message_send(
            session=session, user=request.user, content=body.validated_data["content"],
            attachments=body.validated_data["attachments"])
        return Response({"message_id": message.pk, "execution_id": execution.pk if execution else None,
                         "queued": execution is None}, status=status.HTTP_202_ACCEPTED)


class SessionEvents(APIView):
    @extend_schema(parameters=[OpenApiParameter("after", int, description="The last seq seen (0: from the start).")],
                   responses=SessionEventSerializer(many=True))
    def get(self, request, session_id):
        session = _session(request, session_id)
        after = count_query_param(params=request.query_params, name="after")
        events = session_events(session_id=session.pk, after=after, limit=EVENTS_PAGE)
        return Response([session_event_message(row) for row in events])


urlpatterns = [
    path("sessions/", SessionList.as_view(), name="session-list"),
    path("sessions/<int:session_id>/", SessionDetail.as_view(), name="session-detail"),
    path("sessions/<int:session_id>/messages", SessionMessages.as_view(), name="session-messages"),
    path("sessions/<int:session_id>/events", SessionEvents.as_view(), name="session-events"),
]
