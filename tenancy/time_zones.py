"""The time zone pages are shown in, per person: their setting (``PersonSettings``), else
the zone their browser reports (a cookie that static/timezone.js sets), else the
server's ``TIME_ZONE``. Every name is checked against ``zoneinfo.available_timezones()``;
anything else (a path, an abbreviation, a name with a NUL byte) is ignored, never an
error.

The setting is copied into the session when the person signs in and when they change
it, so activating it costs no query per request."""

from __future__ import annotations

import functools
import zoneinfo

from django.contrib.auth import SESSION_KEY as SESSION_USER_KEY
from django.contrib.auth.signals import user_logged_in
from django.db import DatabaseError
from django.dispatch import receiver
from django.utils import timezone

from tenancy.models import PersonSettings

COOKIE = "river_tz"
SESSION_KEY = "river_time_zone"
MAX_NAME = 64


# Names the zone database lists that are not places: "localtime" is whatever the
# server's clock is set to, "Factory" a placeholder with the abbreviation "-00".
NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - NOT_PLACES


def time_zone_names() -> list[str]:
    return sorted(_known())


def time_zone_valid(name) -> str | None:
    """``name`` if it is an IANA time zone this server knows, else None."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or name not in _known():
        return None
    return name


def person_time_zone(*, user) -> str:
    """The person's chosen zone, "" when they follow their browser."""
    return _chosen_by_user_id(user.pk)


def person_time_zone_set(*, user, time_zone: str, session=None) -> str:
    """Store the person's zone ("" = follow the browser); raises ValueError for a name
    that is not a known zone. ``session`` (the request's) follows the change."""
    if time_zone and time_zone_valid(time_zone) is None:
        raise ValueError(f"Unknown time zone: {time_zone[:MAX_NAME]}")
    PersonSettings.objects.update_or_create(user_id=user.pk, defaults={"time_zone": time_zone})
    if session is not None:
        session[SESSION_KEY] = time_zone
    return time_zone


@receiver(user_logged_in, dispatch_uid="tenancy.time_zones.remember")
def _remember_on_sign_in(sender, request, user, **kwargs):
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_KEY] = person_time_zone(user=user)


def time_zone_for_request(request) -> tuple[str, str]:
    """(the zone to show the page in, where it came from: "setting", "browser" or "server").

    Reads the session only (the user row is not loaded for this): signing out flushes
    it, and a session from before this setting existed is filled in once."""
    session = getattr(request, "session", None)
    if session is not None:
        if SESSION_KEY not in session and session.get(SESSION_USER_KEY):
            session[SESSION_KEY] = _chosen_by_user_id(session[SESSION_USER_KEY])
        chosen = time_zone_valid(session.get(SESSION_KEY))
        if chosen:
            return chosen, "setting"
    browser = time_zone_valid(request.COOKIES.get(COOKIE))
    if browser:
        return browser, "browser"
    return timezone.get_default_timezone_name(), "server"


def _chosen_by_user_id(user_id) -> str:
    row = PersonSettings.objects.filter(user_id=user_id).values_list("time_zone", flat=True).first()
    return time_zone_valid(row) or ""


class TimeZoneMiddleware:
    """Activates the request's time zone (after AuthenticationMiddleware) so templates,
    forms and ``timezone.localtime`` show times in it; ``request.time_zone`` names it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            name, source = time_zone_for_request(request)
        except DatabaseError:
            # The session's row could not be read (pool exhausted, database away): the view
            # meets the same error and common.dbpool answers 503; the page is not shown anyway.
            name, source = timezone.get_default_timezone_name(), "server"
        request.time_zone, request.time_zone_source = name, source
        timezone.activate(zoneinfo.ZoneInfo(name))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
