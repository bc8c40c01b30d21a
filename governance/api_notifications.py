"""A person's notifications over the API (mounted under /api/v1/ by riverapp.urls).

``GET notifications/`` (``?unread=true``: neither read nor resolved),
``POST notifications/<id>/read``, ``POST notifications/read-all`` and
``GET``/``PATCH notifications/preferences``. Every notification and preference is the
caller's own: another person's id is a 404, exactly like a missing one.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api import StrictInput
from common.ids import id_from_text
from governance.models import Notification, NotificationPreference
from governance.notifications import (
    notification_get_for_user,
    notification_preferences_get,
    notification_preferences_update,
    notifications_for_user,
    notifications_mark_read,
    notifications_unread,
)
from rivercore.errors import InvalidInput, NotFound

_TRUE, _FALSE = ("true", "1"), ("false", "0")


class NotificationSerializer(serializers.ModelSerializer):
    read = serializers.SerializerMethodField()
    resolved = serializers.SerializerMethodField()
    workspace_id = serializers.IntegerField(read_only=True)
    resolved_by = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "read", "resolved", "resolution", "resolved_by",
                  "resolved_at", "workspace_id", "created_at"]

    def get_read(self, item: Notification) -> bool:
        return item.read_at is not None

    def get_resolved(self, item: Notification) -> bool:
        return item.resolved_at is not None

    def get_resolved_by(self, item: Notification) -> str | None:
        person = item.resolved_by
        return (person.get_full_name() or person.get_username()) if person is not None else None


class NotificationList(ListAPIView):
    serializer_class = NotificationSerializer

    @extend_schema(parameters=[OpenApiParameter("unread", OpenApiTypes.BOOL,
                                                description="true: only those neither read nor resolved")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        raw = self.request.query_params.get("unread", "").strip().lower()
        if raw in _TRUE:
            mine = notifications_unread(user=self.request.user)
        elif raw in _FALSE or raw == "":
            mine = notifications_for_user(user=self.request.user)
        else:
            raise InvalidInput("unread must be true or false.", details={"unread": ["Either true or false."]})
        return mine.select_related("resolved_by")


def _own(request, notification_id: str) -> Notification:
    key = id_from_text(notification_id)
    if key is None:
        raise NotFound("Notification not found.")
    return notification_get_for_user(user=request.user, notification_id=key)


class NotificationRead(APIView):
    @extend_schema(request=None, responses=NotificationSerializer)
    def post(self, request, notification_id: str):
        item = _own(request, notification_id)
        notifications_mark_read(user=request.user, notification_id=item.pk)
        item.refresh_from_db()
        return Response(NotificationSerializer(item).data)


class NotificationReadAll(APIView):
    @extend_schema(request=None,
                   responses=inline_serializer("NotificationsMarked", {"marked": serializers.IntegerField()}))
    def post(self, request):
        return Response({"marked": notifications_mark_read(user=request.user)})


@extend_schema_field(OpenApiTypes.BOOL)
class StrictBoolean(serializers.Field):
    """A JSON boolean and nothing else: ``"yes"``, ``1`` or ``null`` is a 400, never a guess."""

    default_error_messages = {"invalid": "Must be true or false (a JSON boolean)."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return bool(value)


class _StrictFlags(serializers.Serializer):
    """A nested object of named booleans; a key it does not know is a 400 naming it."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({str(key)[:100]: ["Unknown field."] for key in unknown[:20]})
        return super().to_internal_value(data)


class ChannelsInput(_StrictFlags):
    in_app = StrictBoolean(required=False)
    email = StrictBoolean(required=False)
    slack = StrictBoolean(required=False)


class EventsInput(_StrictFlags):
    approval_pause = StrictBoolean(required=False, help_text="The run paused for someone's approval.")
    question = StrictBoolean(required=False, help_text="The run asks you a question (ask_user).")
    failed = StrictBoolean(required=False, help_text="The run failed.")
    not_answered = StrictBoolean(required=False, help_text="The run ended with an outcome other than answered.")
    every_end = StrictBoolean(required=False, help_text="Every end, answered included.")


class PreferencesInput(StrictInput):
    channels = ChannelsInput(required=False)
    events = EventsInput(required=False)


class ChannelsOutput(serializers.Serializer):
    in_app = serializers.BooleanField()
    email = serializers.BooleanField()
    slack = serializers.BooleanField()


class EventsOutput(serializers.Serializer):
    approval_pause = serializers.BooleanField()
    question = serializers.BooleanField()
    failed = serializers.BooleanField()
    not_answered = serializers.BooleanField()
    every_end = serializers.BooleanField()


class PreferencesOutput(serializers.Serializer):
    """What GET and PATCH answer: every channel and every event, always all of them."""

    channels = ChannelsOutput()
    events = EventsOutput()


def _preferences(preference: NotificationPreference) -> dict:
    return {
        "channels": {name: getattr(preference, name) for name in NotificationPreference.CHANNELS},
        "events": {name: getattr(preference, name) for name in NotificationPreference.EVENTS},
    }


class NotificationPreferences(APIView):
    @extend_schema(responses=PreferencesOutput)
    def get(self, request):
        return Response(_preferences(notification_preferences_get(user=request.user)))

    @extend_schema(request=PreferencesInput, responses=PreferencesOutput)
    def patch(self, request):
        body = PreferencesInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        preference = notification_preferences_update(user=request.user, channels=dict(data.get("channels") or {}),
                                                     events=dict(data.get("events") or {}))
        return Response(_preferences(preference))


urlpatterns = [
    path("notifications/", NotificationList.as_view(), name="notification-list"),
    path("notifications/read-all", NotificationReadAll.as_view(), name="notification-read-all"),
    path("notifications/preferences", NotificationPreferences.as_view(), name="notification-preferences"),
    path("notifications/<str:notification_id>/read", NotificationRead.as_view(), name="notification-read"),
]
