"""Slack messages that follow a request decided elsewhere (issue 29 §4).

River posts the approval message through the workspace's incoming webhook, which returns
no handle to the message. What Slack does give River is a ``response_url`` with every
click on the message's buttons: for 30 minutes it may replace that message. So:

- a click that does not decide the request (an unlinked Slack user, a role that may not
  decide, the requester, one vote of a quorum) leaves its ``response_url`` with River
  (``slack_message_remember``, encrypted, one row per URL);
- when the request is then decided on any channel (inbox, e-mail link, API, Slack), or
  expires, or its run is cancelled, the deciding transaction queues one task after commit
  (``slack_messages_update_on_commit``, only when such a message is remembered);
- the task (``governance.slack_update_decided``, retried with backoff) replaces each
  remembered message whose URL is still fresh with the outcome and who decided it, and
  marks it updated with a compare-and-set, so a retry never posts twice to a message that
  took the update. Slack being down delays the update; the decision was committed first
  and never waits for Slack.

A message nobody clicked, or whose last click is older than 30 minutes, keeps its buttons;
a later click on them is answered with the outcome (``governance.slack``).

With River's bot token (``RIVER_SLACK_BOT_TOKEN``) and a ``channel_id`` in the workspace's
Slack settings, the approval message is posted with ``chat.postMessage`` instead of the
webhook (``slack_chat_post``), and River keeps its channel and timestamp: that message is
replaced with ``chat.update`` when the request is decided, whenever that is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.error
import urllib.request
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.crypto import decrypt_text, encrypt_text
from governance.models import ApprovalRequest, SlackApprovalMessage

logger = logging.getLogger("river.governance")

RESPONSE_URL_MINUTES = 30  # Slack honours a response_url this long (and for 5 posts)
MESSAGES_PER_REQUEST = 20  # a bound on what a burst of clicks can make River store and post
CHAT_MESSAGE_DAYS = 7  # a posted message is updatable this long after its request expires
SLACK_API_TIMEOUT_SECONDS = 5


def _url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def slack_message_remember(*, approval_id: str, response_url: str) -> bool:
    """Keep ``response_url`` (from a click that did not decide) so the message can show
    the request's outcome later. Returns True when a new URL was kept.

    The status is read under the request's row lock (the lock ``approval_decide`` takes):
    either the request is still pending and a later decision finds this row, or it was
    decided meanwhile and this message is answered with the outcome now."""
    from governance.slack import decided_message, decided_via, response_url_allowed, slack_respond_later

    if not response_url_allowed(response_url):
        return False
    try:
        pk = uuid.UUID(str(approval_id))
    except ValueError:
        return False
    with transaction.atomic():
        approval = (
            ApprovalRequest.objects.select_for_update(of=("self",))
            .select_related("workspace", "resolved_by")
            .filter(pk=pk)
            .first()
        )
        if approval is None:
            return False
        if approval.status != ApprovalRequest.Status.PENDING:
            slack_respond_later(
                response_url=response_url,
                message={**decided_message(approval, via=decided_via(approval)), "replace_original": True},
            )
            return False
        if SlackApprovalMessage.objects.filter(approval=approval).count() >= MESSAGES_PER_REQUEST:
            return False
        _, created = SlackApprovalMessage.objects.get_or_create(
            approval=approval,
            url_hash=_url_hash(response_url),
            defaults={
                "response_url_encrypted": encrypt_text(response_url),
                "expires_at": timezone.now() + timedelta(minutes=RESPONSE_URL_MINUTES),
            },
        )
    return created


def slack_chat_enabled(channel_id: str | None) -> bool:
    """Whether approval messages go through the Web API (a bot token and a channel)."""
    return bool(settings.RIVER_SLACK_BOT_TOKEN and channel_id)


def _slack_api(method: str, payload: dict) -> dict:
    """One call of Slack's Web API with the bot token; its JSON answer when ``ok``,
    NotificationError otherwise (the token is never in a message or a log line)."""
    from governance.notifications import NotificationError

    base = settings.RIVER_SLACK_API_URL.rstrip("/")
    if not base.startswith(("https://", "http://")):
        raise NotificationError("RIVER_SLACK_API_URL is not http(s)")
    request = urllib.request.Request(  # noqa: S310 - scheme checked above
        f"{base}/{method}",
        data=json.dumps(payload).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json; charset=utf-8",
            "Authorization": f"Bearer {settings.RIVER_SLACK_BOT_TOKEN}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=SLACK_API_TIMEOUT_SECONDS) as response:  # noqa: S310
            answer = json.loads(response.read(65536) or b"{}")
    except urllib.error.HTTPError as exc:
        raise NotificationError(f"slack {method} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NotificationError(f"slack {method} unreachable: {type(exc).__name__}") from None
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        error = str(answer.get("error", "not ok"))[:60] if isinstance(answer, dict) else "not ok"
        raise NotificationError(f"slack {method} refused: {error}")
    return answer


def slack_chat_post(
    *, approval: ApprovalRequest, channel_id: str, text: str, blocks: list
) -> SlackApprovalMessage | None:
    """Post the approval message with ``chat.postMessage`` and keep where it is (None when
    Slack named no message). If the request was decided while the message was on its way,
    it is updated at once."""
    answer = _slack_api("chat.postMessage", {"channel": channel_id, "text": text, "blocks": blocks})
    channel, ts = str(answer.get("channel") or channel_id)[:32], str(answer.get("ts") or "")[:32]
    if not ts:
        logger.warning(
            "approval %s: Slack posted the message but named no timestamp; it cannot be updated", approval.pk
        )
        return None
    with transaction.atomic():
        current = (
            ApprovalRequest.objects.select_for_update(of=("self",))
            .filter(pk=approval.pk)
            .values_list("status", flat=True)
            .first()
        )
        row, _ = SlackApprovalMessage.objects.get_or_create(
            approval=approval,
            url_hash=_url_hash(f"chat:{channel}:{ts}"),
            defaults={
                "channel_id": channel,
                "message_ts": ts,
                "expires_at": approval.expires_at + timedelta(days=CHAT_MESSAGE_DAYS),
            },
        )
        if current != ApprovalRequest.Status.PENDING:
            slack_messages_update_on_commit(approval=approval)
    return row


def slack_messages_update_on_commit(*, approval: ApprovalRequest) -> None:
    """Caller is deciding, expiring or closing ``approval`` in its transaction: after
    commit, queue the update of its remembered Slack messages. Whether there are any
    (most requests never had a click that did not decide) is read after commit too, so
    the decision's locked transaction gains no statement; a failure there is logged as a
    fault, never raised to the decider."""
    from governance.tasks import slack_update_decided
    from telemetry.aftercommit import call_on_commit, task_send

    approval_id = str(approval.pk)

    def send() -> None:
        if SlackApprovalMessage.objects.filter(
            approval_id=approval_id, updated_at__isnull=True, expires_at__gt=timezone.now()
        ).exists():
            task_send(slack_update_decided, approval_id, subject=f"approval {approval_id}'s Slack messages")

    call_on_commit(send, component="notifications", operation="slack message update", subject=f"approval {approval_id}")


def slack_messages_update(*, approval_id: str) -> int:
    """The task's body: replace each fresh, not yet updated message of a decided request
    with its outcome. Returns how many were updated; raises NotificationError (the task
    retries) when any could not be, after marking those that were."""
    from governance.notifications import NotificationError
    from governance.slack import decided_message, decided_via, slack_respond_now

    approval = ApprovalRequest.objects.select_related("workspace", "resolved_by").filter(pk=approval_id).first()
    if approval is None or approval.status == ApprovalRequest.Status.PENDING:
        return 0
    message = {**decided_message(approval, via=decided_via(approval)), "replace_original": True}
    updated = failed = 0
    for row in SlackApprovalMessage.objects.filter(
        approval=approval, updated_at__isnull=True, expires_at__gt=timezone.now()
    ).order_by("pk"):
        try:
            if row.message_ts:
                _slack_api(
                    "chat.update",
                    {
                        "channel": row.channel_id,
                        "ts": row.message_ts,
                        "text": message["text"],
                        "blocks": message["blocks"],
                    },
                )
            else:
                slack_respond_now(response_url=decrypt_text(row.response_url_encrypted), message=message)
        except NotificationError as exc:
            failed += 1
            logger.info("approval %s: a Slack message was not updated yet: %s", approval.pk, exc)
            continue
        updated += SlackApprovalMessage.objects.filter(pk=row.pk, updated_at__isnull=True).update(
            updated_at=timezone.now()
        )
    if failed:
        raise NotificationError(f"{failed} Slack message(s) of the request could not be updated")
    return updated
