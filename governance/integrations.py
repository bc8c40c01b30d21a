"""Endpoints Slack calls (``/integrations/slack/...``): the approval buttons' interactions
and the ``/river`` slash command. No session, no CSRF token: each request is verified
by Slack's signature over its raw body (``governance.slack.slack_request_verify``)
before anything in it is read. Thin: verify, parse, call one service, answer."""

from __future__ import annotations

from urllib.parse import parse_qs

from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from governance.slack import (
    SlackRefused,
    slack_command_handle,
    slack_interaction_handle,
    slack_interaction_parse,
    slack_request_verify,
)
from rivercore.errors import InvalidInput


def _verified_form(request) -> dict[str, str]:
    """The request's form fields once its signature holds (SlackRefused otherwise)."""
    body = request.body
    slack_request_verify(timestamp=request.headers.get("X-Slack-Request-Timestamp"),
                         signature=request.headers.get("X-Slack-Signature"), body=body)
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise InvalidInput("The body is not UTF-8.") from None
    return {name: values[0] for name, values in fields.items() if values}


def _refused(exc) -> JsonResponse:
    status = 503 if exc.code == "slack_not_configured" else exc.status_code
    return JsonResponse({"error": {"code": exc.code, "message": exc.message}}, status=status)


@csrf_exempt
@require_POST
def slack_interactions(request):
    try:
        form = _verified_form(request)
        interaction = slack_interaction_parse(form.get("payload", ""))
    except (SlackRefused, InvalidInput) as exc:
        return _refused(exc)
    slack_interaction_handle(interaction)
    return HttpResponse(status=200)  # the answer goes to the response_url


@csrf_exempt
@require_POST
def slack_commands(request):
    try:
        form = _verified_form(request)
    except (SlackRefused, InvalidInput) as exc:
        return _refused(exc)
    team_id, user_id = form.get("team_id", "")[:32], form.get("user_id", "")[:32]
    if not team_id or not user_id:
        return JsonResponse({"error": {"code": "validation_error", "message": "team_id and user_id are required."}},
                            status=400)
    text = slack_command_handle(team_id=team_id, user_id=user_id, user_name=form.get("user_name", ""),
                                text=form.get("text", "")[:200])
    return JsonResponse({"response_type": "ephemeral", "text": text})


urlpatterns = [
    path("slack/interactions", slack_interactions, name="slack-interactions"),
    path("slack/commands", slack_commands, name="slack-commands"),
]
