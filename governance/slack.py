"""Deciding an approval from Slack: the message's buttons, the signed interaction, the
verified link between a Slack user and a River user.

- **Signed requests.** Slack signs every request to River's endpoints with the app's
  signing secret: ``X-Slack-Signature: v0=HMAC-SHA256(secret, "v0:{timestamp}:{body}")``
  with ``X-Slack-Request-Timestamp``. ``slack_request_verify`` recomputes it over the raw
  body, compares in constant time and refuses timestamps more than five minutes away.
- **Linking.** A Slack user decides as a River user only after proving they are both:
  the person asks River for a one-time code (Settings, Slack; ten minutes, kept as a
  hash) and sends ``/river link CODE`` in Slack; River receives that slash command
  signed by Slack with the Slack user's ids, and links them (``SlackIdentity``).
- **Deciding.** An Approve or Reject click from a linked user goes through
  ``approval_resolve`` (channel ``slack``): the same role, requester rule, quorum and
  exactly-once checks as every other way in. Then the message is replaced, through the
  interaction's ``response_url`` (only ``RIVER_SLACK_RESPONSE_URL_PREFIXES``), to show
  the decision and who made it; anything refused is told to the clicker alone.
- **Slack down.** The request lives in River; Slack only mirrors it. A failed post is
  retried by its task and the inbox still has the request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from governance.models import ApprovalRequest, SlackIdentity, SlackLinkCode
from governance.quorum import APPROVALS_COUNTED
from rivercore.errors import Conflict, NotFound, RiverError
from rivercore.types.governance import DecisionChannel, ResolutionStatus

logger = logging.getLogger(__name__)

MAX_SKEW_SECONDS = 5 * 60
LINK_CODE_MINUTES = 10
APPROVE_ACTION = "river_approve"
REJECT_ACTION = "river_reject"
ACTIONS = {APPROVE_ACTION: ResolutionStatus.APPROVED.value, REJECT_ACTION: ResolutionStatus.REJECTED.value}
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud, typed by hand


class SlackRefused(RiverError):
    status_code = 401
    code = "slack_signature_invalid"


# --- signed requests ------------------------------------------------------------------


def slack_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """Slack's request signature of ``body`` sent at ``timestamp`` (as Slack documents it)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def slack_request_verify(*, timestamp: str | None, signature: str | None, body: bytes,
                         now: float | None = None) -> None:
    """Raise SlackRefused unless the request was signed by Slack with River's signing
    secret less than five minutes ago (either way: clocks drift)."""
    secret = settings.RIVER_SLACK_SIGNING_SECRET
    if not secret:
        raise SlackRefused("Slack is not configured (RIVER_SLACK_SIGNING_SECRET).", code="slack_not_configured")
    if not timestamp or not signature:
        raise SlackRefused("The request is not signed.")
    try:
        sent = int(timestamp)
    except ValueError:
        raise SlackRefused("The request's timestamp is not a number.") from None
    if abs((time.time() if now is None else now) - sent) > MAX_SKEW_SECONDS:
        raise SlackRefused("The request is too old (or from the future).", code="slack_request_stale")
    expected = slack_signature(secret=secret, timestamp=timestamp, body=body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise SlackRefused("The request's signature does not match.")


# --- the approval message ---------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: no ``<!channel>`` pings or disguised links from
    what an agent wrote."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def approval_message_blocks(*, approval: ApprovalRequest, title: str, body: str) -> list[dict]:
    """The approval message: what is asked, then Approve and Reject buttons (their value is
    the request's id; who clicked is checked when Slack tells River)."""
    value = str(approval.pk)
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{slack_escape(title)}*\n{slack_escape(body)}"}},
        {"type": "actions", "block_id": f"river_approval_{value}", "elements": [
            {"type": "button", "action_id": APPROVE_ACTION, "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": REJECT_ACTION, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Reject"}},
        ]},
    ]


def decided_message(approval: ApprovalRequest, *, via: str | None) -> dict:
    """The message as it reads once the request is decided (or expired): no buttons,
    who decided, when, and where (the channel the decision's audit entry names)."""
    from governance.notifications import approval_resolution_text

    text = (f"*{slack_escape(approval.tool_name)}* (run {approval.execution_id}): "
            f"{slack_escape(approval_resolution_text(approval))}{f' (via {via})' if via else ''}")
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


# --- linking a Slack user to a River user ------------------------------------------------


def _code_hash(code: str) -> str:
    normalized = "".join(ch for ch in code.upper() if ch.isalnum())
    return hashlib.sha256(normalized.encode()).hexdigest()


def slack_link_start(*, user) -> tuple[str, SlackLinkCode]:
    """A new one-time code for ``user`` (their earlier unused codes stop working).
    Returns the code, shown once, and its row."""
    code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(10))
    with transaction.atomic():
        SlackLinkCode.objects.filter(user=user, used_at__isnull=True).delete()
        row = SlackLinkCode.objects.create(user=user, code_hash=_code_hash(code),
                                           expires_at=timezone.now() + timedelta(minutes=LINK_CODE_MINUTES))
    return f"{code[:5]}-{code[5:]}", row


def slack_link_complete(*, team_id: str, slack_user_id: str, slack_user_name: str, code: str) -> SlackIdentity:
    """Link the Slack user who sent ``code`` (Slack vouched for their ids by signing the
    request) to the River user who asked for it. The code is claimed with a
    compare-and-set, so it links once; the Slack user's or River user's older link goes."""
    now = timezone.now()
    with transaction.atomic():
        row = SlackLinkCode.objects.select_for_update().select_related("user").filter(
            code_hash=_code_hash(code), used_at__isnull=True, expires_at__gt=now).first()
        if row is None or not row.user.is_active:
            raise NotFound("That code is unknown, used or expired. Ask River for a new one (Settings, Slack).")
        SlackLinkCode.objects.filter(pk=row.pk).update(used_at=now)
        SlackIdentity.objects.filter(team_id=team_id, slack_user_id=slack_user_id).delete()
        SlackIdentity.objects.filter(user=row.user).delete()
        identity = SlackIdentity.objects.create(user=row.user, team_id=team_id, slack_user_id=slack_user_id,
                                                slack_user_name=slack_user_name[:120])
    logger.info("slack user %s/%s linked to user %s", team_id, slack_user_id, row.user_id)
    return identity


def slack_link_remove(*, user) -> bool:
    return SlackIdentity.objects.filter(user=user).delete()[0] > 0


def slack_identity_of(*, user) -> SlackIdentity | None:
    return SlackIdentity.objects.filter(user=user).first()


def slack_user_resolve(*, team_id: str, slack_user_id: str):
    """The active River user linked to this Slack user, or None."""
    identity = SlackIdentity.objects.select_related("user").filter(
        team_id=team_id, slack_user_id=slack_user_id, user__is_active=True).first()
    return identity.user if identity else None


# --- slash commands -------------------------------------------------------------------------


def slack_command_handle(*, team_id: str, user_id: str, user_name: str, text: str) -> str:
    """``/river link CODE`` links the sender; ``/river unlink`` removes their link. The
    answer is shown to the sender only."""
    words = text.split()
    if len(words) == 2 and words[0].lower() == "link":
        try:
            identity = slack_link_complete(team_id=team_id, slack_user_id=user_id, slack_user_name=user_name,
                                           code=words[1])
        except NotFound as exc:
            return exc.message
        return f"Linked: your Slack clicks now decide as {identity.user.get_username()} in River."
    if words == ["unlink"]:
        gone = SlackIdentity.objects.filter(team_id=team_id, slack_user_id=user_id).delete()[0]
        return "Unlinked." if gone else "Your Slack account was not linked."
    return "Usage: /river link CODE (get a code in River: Settings, Slack), or /river unlink."


# --- interactions -----------------------------------------------------------------------------


class _SlackUser(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=32)
    username: str = Field(default="", max_length=120)


class _SlackTeam(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=32)


class _SlackAction(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action_id: str = Field(max_length=255)
    value: str = Field(default="", max_length=2000)


class SlackInteraction(BaseModel):
    """The part of a ``block_actions`` payload River reads."""

    model_config = ConfigDict(extra="ignore")
    type: str
    user: _SlackUser
    team: _SlackTeam
    actions: list[_SlackAction] = Field(default_factory=list, max_length=5)
    response_url: str = Field(default="", max_length=2000)


def slack_interaction_parse(raw: str) -> SlackInteraction:
    """The form field ``payload`` Slack sends, validated; InvalidInput-like 400 otherwise."""
    from rivercore.errors import InvalidInput

    try:
        return SlackInteraction.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        raise InvalidInput("The interaction payload is not valid.", details={"payload": ["not valid"]}) from None


def response_url_allowed(url: str) -> bool:
    return bool(url) and any(url.startswith(prefix) for prefix in settings.RIVER_SLACK_RESPONSE_URL_PREFIXES)


def slack_interaction_handle(interaction: SlackInteraction) -> dict | None:
    """Decide what a click asks (for a linked user), and queue the answer to the
    interaction's ``response_url``. Returns the message queued, or None when the click
    was not River's (another action, or a response_url River may not contact)."""
    action = next((a for a in interaction.actions if a.action_id in ACTIONS), None)
    if interaction.type != "block_actions" or action is None or not response_url_allowed(interaction.response_url):
        return None
    user = slack_user_resolve(team_id=interaction.team.id, slack_user_id=interaction.user.id)
    if user is None:
        message = _ephemeral("Your Slack account is not linked to a River user, so River cannot take this "
                             "decision from it. In River, open Settings, Slack to get a code, then send "
                             "/river link CODE here. The request is waiting in River's approvals inbox.")
    else:
        message = _decide(user=user, approval_id=action.value, status=ACTIONS[action.action_id])
    slack_respond_later(response_url=interaction.response_url, message=message)
    if not message.get("replace_original"):
        # The click did not decide: when the request is decided elsewhere, this message follows.
        from governance.slack_updates import slack_message_remember

        slack_message_remember(approval_id=action.value, response_url=interaction.response_url)
    return message


def _ephemeral(text: str) -> dict:
    return {"text": slack_escape(text), "response_type": "ephemeral", "replace_original": False}


def _decide(*, user, approval_id: str, status: str) -> dict:
    from governance.approvals import approval_get_for_user
    from governance.resolution import approval_resolve

    try:
        decided = approval_resolve(user=user, approval_id=approval_id, status=status, channel=DecisionChannel.SLACK)
    except Conflict:
        # Decided elsewhere first (or expired): the message shows what happened instead.
        current = approval_get_for_user(user=user, approval_id=approval_id)
        if current.status == ApprovalRequest.Status.PENDING:  # not decided: an expiry not yet swept
            return _ephemeral("This request can no longer be decided.")
        return {**decided_message(current, via=decided_via(current)), "replace_original": True}
    except RiverError as exc:  # 403 (role, requester rule), 404, 400
        return _ephemeral(exc.message)
    if decided.status == ApprovalRequest.Status.PENDING:  # a vote under a quorum: more approvers needed
        given = decided.votes.filter(round=decided.quorum_round, decision__in=APPROVALS_COUNTED).count()
        return _ephemeral(f"Your approval is recorded: {given} of {decided.required_approvals} approvals. The "
                          "request waits for another approver; this message will show the outcome.")
    return {**decided_message(decided, via=DecisionChannel.SLACK.value), "replace_original": True}


def decided_via(approval: ApprovalRequest) -> str | None:
    """The channel named by the audit entry of the request's decision (None for an expiry)."""
    from governance.models import AuditLogEntry

    return (AuditLogEntry.objects.filter(approval_id=approval.pk, details__has_key="channel")
            .values_list("details__channel", flat=True).first())


def slack_respond_later(*, response_url: str, message: dict) -> None:
    """Post ``message`` to the interaction's response_url after commit, in a retried task
    (Slack wants its 200 within three seconds; a slow Slack never holds the click)."""
    from governance.tasks import slack_respond
    from telemetry.aftercommit import task_send_on_commit

    task_send_on_commit(slack_respond, response_url, message, subject="a Slack interaction's answer")


def slack_respond_now(*, response_url: str, message: dict) -> None:
    """The task's body: one POST to an allowed response_url; NotificationError to retry."""
    from governance.notifications import NotificationError, slack_post

    if not response_url_allowed(response_url):
        raise NotificationError("the response_url is not one River may contact")
    extra = {key: value for key, value in message.items() if key not in ("text", "blocks")}
    slack_post(webhook_url=response_url, text=message.get("text", ""), blocks=message.get("blocks"), extra=extra)
