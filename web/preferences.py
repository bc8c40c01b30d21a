"""The person's own settings pages: how and when River notifies them about the runs they
are answerable for (the same preferences as ``/api/v1/notifications/preferences``)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from governance.notifications import (
    PREFERENCE_CHANNELS,
    PREFERENCE_EVENTS,
    notification_preferences_get,
    notification_preferences_update,
)
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


urlpatterns = [
    path("settings/notifications", notification_settings, name="notification-settings"),
]
