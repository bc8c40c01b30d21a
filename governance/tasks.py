"""Celery entry points for governance. Tasks take ids and call one service each."""

from __future__ import annotations

import logging

from celery import shared_task

from governance.notifications import NotificationError

logger = logging.getLogger(__name__)


@shared_task(name="governance.notify_approval")
def notify_approval(approval_id: str, reminder: bool = False) -> list[str]:
    """In-app notifications for an approval request (or its expiry reminder), then one
    retried task per external channel (so a Slack outage never re-sends the email)."""
    from governance.notifications import approval_notifications_send

    channels = approval_notifications_send(approval_id=approval_id, reminder=reminder)
    for channel in channels:
        deliver_approval_notification.delay(approval_id, channel, reminder=reminder)
    return channels


@shared_task(
    bind=True,
    name="governance.deliver_approval_notification",
    autoretry_for=(NotificationError,),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=5,
)
def deliver_approval_notification(self, approval_id: str, channel: str, reminder: bool = False) -> bool:
    from governance.notifications import approval_channel_deliver

    try:
        return approval_channel_deliver(approval_id=approval_id, channel=channel, reminder=reminder)
    except NotificationError as exc:
        # The message never carries the webhook URL or other secrets.
        logger.warning(
            "approval %s: %s notification failed (attempt %d of %d): %s",
            approval_id, channel, self.request.retries + 1, self.max_retries + 1, exc,
        )
        raise


@shared_task(name="governance.prune_counters")
def prune_counters() -> int:
    """Drop policy counter windows older than two days (schedule it daily)."""
    from governance.counters import counter_prune

    return counter_prune()


@shared_task(name="governance.audit_anchor")
def audit_anchor() -> int:
    """Seal pending audit entries and anchor every chain head that moved (beat:
    every RIVER_AUDIT_ANCHOR_SECONDS). Safe to run twice: an unchanged head is not
    anchored again, and anchors are written under each organization's sealer lock."""
    from governance.audit import audit_anchor_all

    return len(audit_anchor_all())


@shared_task(name="governance.expire_approvals")
def expire_approvals() -> int:
    """Periodic: move undecided requests along their escalation chains, remind approvers
    of requests about to expire, then expire the overdue ones (their runs end
    ``approval_expired``). Returns how many expired."""
    from django.conf import settings

    from governance.approvals import approvals_remind_due
    from governance.escalation import approvals_escalate_due
    from governance.resolution import approvals_expire_due

    approvals_escalate_due()  # escalation chains first: a moved request is no longer the old group's
    approvals_remind_due(before_minutes=settings.RIVER_APPROVAL_REMINDER_MINUTES)
    return approvals_expire_due()


@shared_task(
    bind=True,
    name="governance.slack_respond",
    autoretry_for=(NotificationError,),
    retry_backoff=True,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=4,
)
def slack_respond(self, response_url: str, message: dict) -> None:
    """Answer a Slack click through its response_url (replace the approval message with
    the decision, or tell the clicker why not). Retried; the URL is never logged."""
    from governance.slack import slack_respond_now

    try:
        slack_respond_now(response_url=response_url, message=message)
    except NotificationError as exc:
        logger.warning("a Slack interaction's answer failed (attempt %d of %d): %s",
                       self.request.retries + 1, self.max_retries + 1, exc)
        raise


@shared_task(
    bind=True,
    name="governance.slack_update_decided",
    autoretry_for=(NotificationError,),
    retry_backoff=True,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=5,
)
def slack_update_decided(self, approval_id: str) -> int:
    """Show a decided (or expired) request's outcome on the Slack messages River may still
    change (governance.slack_updates). Safe to run twice: each message is marked once."""
    from governance.slack_updates import slack_messages_update

    try:
        return slack_messages_update(approval_id=approval_id)
    except NotificationError as exc:
        logger.warning("approval %s: Slack update failed (attempt %d of %d): %s",
                       approval_id, self.request.retries + 1, self.max_retries + 1, exc)
        raise
