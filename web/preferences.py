"""The person's own settings pages: how and when River notifies them about the runs they
are answerable for (the same preferences as ``/api/v1/notifications/preferences``), and
the time zone every page shows times in (``tenancy.time_zones``)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from governance.notifications import (
    PREFERENCE_CHANNELS,
    PREFERENCE_EVENTS,
    notification_preferences_get,
    notification_preferences_update,
)
from tenancy.time_zones import COOKIE, person_time_zone, person_time_zone_set, time_zone_names, time_zone_valid
from web.page_tools import page_login_required

LABELS = {
    "in_app": "In River (the bell)",
    "email": "Email, to your account's address",
    "slack": "Slack, through the workspace's webhook",
    "approval_pause": "A run I started is waiting for someone's approval",
    "question": "A run asks me a question",
    "failed": "A run I started failed",
    "not_answered": ("A run I started ended without an answer (failed, blocked, cancelled, expired, "
                     "out of turns or budget)"),
    "every_end": "Every end of a run I started, answered ones too",
}


class PreferencesForm(forms.Form):
    """Unticked boxes are not sent by browsers: every field is optional and means False."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in (*PREFERENCE_CHANNELS, *PREFERENCE_EVENTS):
            self.fields[name] = forms.BooleanField(required=False, label=LABELS[name])

    def channels(self):
        return {name: self.cleaned_data[name] for name in PREFERENCE_CHANNELS}

    def events(self):
        return {name: self.cleaned_data[name] for name in PREFERENCE_EVENTS}


@page_login_required
@require_http_methods(["GET", "POST"])
def notification_settings(request):
    if request.method == "POST":
        form = PreferencesForm(request.POST)
        if form.is_valid():
            notification_preferences_update(user=request.user, channels=form.channels(), events=form.events())
            messages.success(request, "Notification preferences saved.")
            return redirect(reverse("notification-settings"))
        status_code = 400
    else:
        preference = notification_preferences_get(user=request.user)
        form = PreferencesForm(initial={name: getattr(preference, name) for name in
                                        (*PREFERENCE_CHANNELS, *PREFERENCE_EVENTS)})
        status_code = 200
    return render(request, "settings/notifications.html", {
        "form": form,
        "channels": [form[name] for name in PREFERENCE_CHANNELS],
        "events": [form[name] for name in PREFERENCE_EVENTS],
    }, status=status_code)


class TimeZoneForm(forms.Form):
    time_zone = forms.ChoiceField(
        required=False, label="Time zone",
        help_text="Every page shows dates and times in this zone. Follow my browser uses the zone your computer "
                  "is set to.")

    def __init__(self, *args, browser_zone: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        follow = f"Follow my browser ({browser_zone})" if browser_zone else "Follow my browser"
        self.fields["time_zone"].choices = [("", follow), *((name, name) for name in time_zone_names())]


@page_login_required
@require_http_methods(["GET", "POST"])
def time_zone_settings(request):
    browser_zone = time_zone_valid(request.COOKIES.get(COOKIE))
    if request.method == "POST":
        form = TimeZoneForm(request.POST, browser_zone=browser_zone)
        if form.is_valid():
            chosen = person_time_zone_set(user=request.user, time_zone=form.cleaned_data["time_zone"],
                                          session=request.session)
            messages.success(request, f"Times are now shown in {chosen or 'your browser’s time zone'}.")
            return redirect(reverse("time-zone-settings"))
        status_code = 400
    else:
        form = TimeZoneForm(initial={"time_zone": person_time_zone(user=request.user)}, browser_zone=browser_zone)
        status_code = 200
    return render(request, "settings/time_zone.html", {"form": form, "browser_zone": browser_zone,
                                                       "now_moment": timezone.now()},
                  status=status_code)


urlpatterns = [
    path("settings/notifications", notification_settings, name="notification-settings"),
    path("settings/time-zone", time_zone_settings, name="time-zone-settings"),
]
