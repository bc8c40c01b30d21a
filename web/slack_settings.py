"""The person's Slack link (``/settings/slack``): ask for a one-time code to send to
River's Slack app (``/river link CODE``), see which Slack account is linked, unlink it.
The link is what lets a Slack button decide as this person (governance.slack)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from governance.slack import LINK_CODE_MINUTES, slack_identity_of, slack_link_remove, slack_link_start
from web.page_tools import page_login_required


class SlackLinkForm(forms.Form):
    action = forms.ChoiceField(choices=[("start", "Get a code"), ("unlink", "Unlink")])


@never_cache
@page_login_required
@require_http_methods(["GET", "POST"])
def slack_settings(request):
    code = None
    status = 200
    if request.method == "POST":
        form = SlackLinkForm(request.POST)
        if not form.is_valid():
            status = 400
        elif form.cleaned_data["action"] == "start":
            code, _ = slack_link_start(user=request.user)  # shown once, on this response only
        else:
            removed = slack_link_remove(user=request.user)
            messages.success(request, "Slack account unlinked." if removed else "No Slack account was linked.")
            return redirect(reverse("slack-settings"))
    return render(request, "settings/slack.html", {
        "identity": slack_identity_of(user=request.user), "code": code, "minutes": LINK_CODE_MINUTES,
        "form_error": status == 400,
    }, status=status)


urlpatterns = [
    path("settings/slack", slack_settings, name="slack-settings"),
]
