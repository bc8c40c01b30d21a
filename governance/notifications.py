"""Notifications: approval requests (per workspace channel settings) and run outcomes.

Channels: in-app (``Notification`` rows), email (Django's mail backend) and Slack
(an incoming-webhook URL). Delivery runs in Celery tasks after commit; a failure is
logged and retried and never blocks a run. The webhook URL is a secret: it is never
logged and never part of an error message.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import connections, transaction
from django.db.models import Q, sql
from django.utils import timezone

from common.compiled import CompiledQuery
from governance.models import ApprovalRequest, Notification, NotificationPreference
from governance.selectors import approval_notification_config
from telemetry.aftercommit import call_on_commit, task_send_on_commit
from telemetry.events import user_event_publish
from tenancy.models import Membership, OrganizationMember, Workspace

logger = logging.getLogger(__name__)

IN_APP = "in_app"
EMAIL = "email"
SLACK = "slack"
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_REMINDER = "approval_reminder"
APPROVAL_ESCALATED = "approval_escalated"
RUN_OUTCOME = "run_outcome"
SLACK_TIMEOUT_SECONDS = 5
# The event a person's feed receives when their unread notifications change (a new one,
# or some marked read in another tab): pages refresh the bell's count.
NOTIFICATIONS_CHANGED = "notifications_changed"


class NotificationError(Exception):
    """A delivery failed in a way worth retrying. Messages never contain secrets."""


def approval_url(approval_id) -> str:
    return f"/approvals/{approval_id}/"


def _absolute(url: str) -> str:
    base = getattr(settings, "RIVER_PUBLIC_URL", "") or ""
    return base.rstrip("/") + url if base else url


# --- recipients --------------------------------------------------------------------


def approvers_for(*, workspace: Workspace, roles: list[str]):
    """Workspace members holding one of ``roles``, plus the organization's admins; never a
    trigger's service identity (it cannot approve, so it is not asked)."""
    users = get_user_model().objects.filter(is_active=True, service_principal__isnull=True)
    member_ids = Membership.objects.filter(workspace=workspace, role__in=roles).values("user_id")
    admin_ids = OrganizationMember.objects.filter(
        organization_id=workspace.organization_id, role=OrganizationMember.OrgRole.ADMIN
    ).values("user_id")
    return users.filter(Q(pk__in=member_ids) | Q(pk__in=admin_ids)).order_by("pk")


# --- channels ----------------------------------------------------------------------


def _in_app(*, workspace_id: int, users, kind: str, title: str, body: str, url: str, approval_id=None,
            execution_id: int | None = None) -> int:
    """One row per user; idempotent per (user, kind, url) so a retried task adds none."""
    already = set(Notification.objects.filter(kind=kind, url=url).values_list("user_id", flat=True))
    rows = [
        Notification(workspace_id=workspace_id, user=user, kind=kind, title=title[:200], body=body, url=url,
                     approval_id=approval_id, execution_id=execution_id)
        for user in users
        if user.pk not in already
    ]
    Notification.objects.bulk_create(rows)
    user_event_publish(user_ids=[row.user_id for row in rows], event={"type": NOTIFICATIONS_CHANGED})
    return len(rows)


def _email(*, recipients: list[str], subject: str, body: str) -> None:
    try:
        send_mail(subject[:200], body, settings.DEFAULT_FROM_EMAIL, recipients, fail_silently=False)
    except Exception as exc:  # noqa: BLE001 - any backend failure is retried by the task
        raise NotificationError(f"email delivery failed: {type(exc).__name__}") from None


def _approval_emails(*, approval: ApprovalRequest, recipients: list[str], subject: str, body: str) -> None:
    """Issue 29 §4: each recipient who may decide gets signed Approve/Reject links."""
    from governance.email_links import approval_emails_send

    try:
        approval_emails_send(approval=approval, recipients=recipients, subject=subject, body=body, absolute=_absolute)
    except Exception as exc:  # noqa: BLE001 - any backend failure is retried by the task
        raise NotificationError(f"email delivery failed: {type(exc).__name__}") from None


def slack_post(*, webhook_url: str, text: str, blocks: list | None = None, extra: dict | None = None) -> None:
    """POST one message to a Slack incoming webhook (or an interaction's response_url,
    with ``extra`` such as ``replace_original``); NotificationError on any failure."""
    if not webhook_url.startswith(("https://", "http://")):
        raise NotificationError("slack webhook URL is not http(s)")
    message = {"text": text, **({"blocks": blocks} if blocks else {}), **(extra or {})}
    request = urllib.request.Request(  # noqa: S310 - scheme checked above
        webhook_url,
        data=json.dumps(message).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=SLACK_TIMEOUT_SECONDS) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        raise NotificationError(f"slack webhook unreachable: {type(exc).__name__}") from None
    if not 200 <= status < 300:
        raise NotificationError(f"slack webhook answered HTTP {status}")


# --- approval requests -------------------------------------------------------------


def local_time(moment, *, workspace: Workspace | None) -> str:
    """``moment`` as people read it: in the workspace's time zone, named ("Mar 3, 2025,
    14:05 Europe/Paris"); UTC when the workspace's zone is unknown."""
    zone_name = getattr(workspace, "time_zone", "") or "UTC"
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone, zone_name = ZoneInfo("UTC"), "UTC"
    local = timezone.localtime(moment, zone)
    return f"{local:%b} {local.day}, {local:%Y}, {local:%H:%M} {zone_name}"


def _approval_text(approval: ApprovalRequest, *, reminder: bool = False, link: bool = False) -> tuple[str, str]:
    """The title and body of an approval's notification. ``link`` adds the review page's
    address for channels outside River (email, Slack); in-app the notification itself
    links there."""
    title = f"Approval needed: {approval.tool_name} (run {approval.execution_id})"
    if reminder:
        title = f"Reminder, expires soon: {approval.tool_name} (run {approval.execution_id})"
    elif approval.escalation_level:  # escalation chains (governance.escalation)
        title = f"Escalated to you, approval needed: {approval.tool_name} (run {approval.execution_id})"
    lines = [
        f"An agent wants to call {approval.tool_name} and needs approval.",
        f"Reasoning: {approval.reasoning_summary}" if approval.reasoning_summary else "",
        f"Risk: {approval.risk_context}" if approval.risk_context else "",
        f"Confidence: {approval.confidence_score:.2f}" if approval.confidence_score is not None else "",
        f"Needs {approval.required_approvals} distinct approvers." if approval.required_approvals > 1 else "",
        f"Escalated to {', '.join(approval.approver_roles)} after nobody decided."
        if approval.escalation_level else "",
        f"Expires: {local_time(approval.expires_at, workspace=approval.workspace)}",
        f"Review: {_absolute(approval_url(approval.pk))}" if link else "",
    ]
    return title, "\n".join(line for line in lines if line)


def approval_deciders(*, approval: ApprovalRequest) -> list:
    """The people who may decide ``approval`` now: the same rule as the inbox and the
    resolve endpoint (``approval_resolver``), so nobody is asked what they cannot decide."""
    from governance.approvals import approval_resolver

    users = approvers_for(workspace=approval.workspace, roles=list(approval.approver_roles or []))
    return [user for user in users if approval_resolver(user=user, workspace=approval.workspace)(approval)]


def _person(user) -> str:
    if user is None:
        return "someone"
    return (user.get_full_name() or user.get_username()) if hasattr(user, "get_username") else str(user)


_DECIDED_AS = {
    ApprovalRequest.Status.APPROVED: "Approved",
    ApprovalRequest.Status.REJECTED: "Rejected",
    ApprovalRequest.Status.EDITED: "Approved with edits",
}


def approval_resolution_text(approval: ApprovalRequest, *, cancelled_by: str = "") -> str:
    """What became of a request, for everyone who was asked: who decided and when."""
    when = local_time(approval.resolved_at or timezone.now(), workspace=approval.workspace)
    if approval.status in _DECIDED_AS:
        return f"{_DECIDED_AS[approval.status]} by {_person(approval.resolved_by)}, {when}"[:200]
    if cancelled_by:
        return f"Closed: the run was cancelled by {cancelled_by}, {when}"[:200]
    return f"Expired without a decision, {when}"[:200]


def notifications_resolve(*, resolution: str, by=None, approval_id=None, execution_id: int | None = None,
                          kinds: tuple[str, ...] = ()) -> int:
    """Resolve, for everyone who got them, the notifications about an approval (or a
    run's notifications of ``kinds``): they leave every unread count and say what
    happened. In the caller's transaction; the people's pages hear of it after commit."""
    if approval_id is None and execution_id is None:
        return 0
    open_rows = Notification.objects.filter(resolved_at__isnull=True)
    if approval_id is not None:
        # Rows written before notifications carried the request's id are found by its page.
        open_rows = open_rows.filter(Q(approval_id=approval_id) | Q(
            approval_id__isnull=True, kind__in=[APPROVAL_REQUESTED, APPROVAL_REMINDER], url=approval_url(approval_id)))
    else:
        open_rows = open_rows.filter(execution_id=execution_id)
    if kinds:
        open_rows = open_rows.filter(kind__in=kinds)
    user_ids = _update_returning_users(open_rows, resolved_at=timezone.now(), resolved_by=by,
                                       resolution=resolution[:200])
    changed = len(user_ids)
    if changed:
        user_event_publish(user_ids=user_ids, event={"type": NOTIFICATIONS_CHANGED})
    return changed


def _update_returning_users(rows, **values) -> list[int]:
    """``rows.update(**values)`` in one statement that also returns the updated rows'
    ``user_id`` (PostgreSQL and SQLite both have ``RETURNING``; the ORM's ``update``
    returns only a count, and reading the ids first costs a statement more)."""
    query = rows.query.chain(sql.UpdateQuery)
    query.add_update_values(values)
    statement, params = query.get_compiler(rows.db).as_sql()
    if not statement:
        return []
    with connections[rows.db].cursor() as cursor:
        cursor.execute(f"{statement} RETURNING {connections[rows.db].ops.quote_name('user_id')}", params)
        return [user_id for (user_id,) in cursor.fetchall()]


def approval_notifications_resolve(*, approval: ApprovalRequest, cancelled_by: str = "") -> int:
    """The request was decided, expired or closed with its run: its notifications
    resolve for every approver and for the run's requester."""
    return notifications_resolve(approval_id=approval.pk, by=approval.resolved_by,
                                 resolution=approval_resolution_text(approval, cancelled_by=cancelled_by))


def approval_notify(*, approval_id: UUID | str, reminder: bool = False) -> None:
    """Queue the approvers' notification (or reminder) once the transaction commits.
    Opening a request and the reminder sweep call this. A broker outage is logged and
    never fails the run or the sweep: notifications are best effort by contract."""
    from governance.tasks import notify_approval

    task_send_on_commit(notify_approval, str(approval_id), reminder=reminder,
                        subject=f"the {'reminder' if reminder else 'notification'} of approval {approval_id}")


def approval_notifications_send(*, approval_id: UUID | str, reminder: bool = False) -> list[str]:
    """Create the in-app notifications and return the external channels to deliver.

    Returns [] when the request is gone or no longer pending."""
    approval = ApprovalRequest.objects.select_related("workspace").filter(pk=approval_id).first()
    if approval is None or approval.status != ApprovalRequest.Status.PENDING:
        return []
    config = approval_notification_config(workspace_id=approval.workspace_id)
    if config.in_app.enabled:
        title, body = _approval_text(approval, reminder=reminder)
        kind = APPROVAL_REMINDER if reminder else APPROVAL_REQUESTED
        if not reminder and approval.escalation_level:
            kind = APPROVAL_ESCALATED
        _in_app(workspace_id=approval.workspace_id, users=approval_deciders(approval=approval), kind=kind,
                title=title, body=body, url=approval_url(approval.pk), approval_id=approval.pk,
                execution_id=approval.execution_id)
    channels = []
    if config.email.enabled and config.email.recipients:
        channels.append(EMAIL)
    if config.slack.enabled and config.slack.webhook_url:
        channels.append(SLACK)
    return channels


def approval_channel_deliver(*, approval_id: UUID | str, channel: str, reminder: bool = False) -> bool:
    """Deliver one external channel for an approval; NotificationError to retry.
    Returns False when there is nothing (left) to send."""
    approval = ApprovalRequest.objects.select_related("workspace").filter(pk=approval_id).first()
    if approval is None or approval.status != ApprovalRequest.Status.PENDING:
        return False
    config = approval_notification_config(workspace_id=approval.workspace_id)
    title, body = _approval_text(approval, reminder=reminder, link=True)
    if channel == EMAIL and config.email.enabled and config.email.recipients:
        _approval_emails(approval=approval, recipients=config.email.recipients, subject=title, body=body)
        return True
    if channel == SLACK and config.slack.enabled and config.slack.webhook_url:
        # Issue 29 §4: the message carries Approve and Reject buttons (governance.slack).
        from governance.slack import approval_message_blocks
        from governance.slack_updates import slack_chat_enabled, slack_chat_post

        blocks = approval_message_blocks(approval=approval, title=title, body=body)
        if slack_chat_enabled(config.slack.channel_id):  # a message River can update later
            slack_chat_post(approval=approval, channel_id=config.slack.channel_id, text=f"*{title}*\n{body}",
                            blocks=blocks)
            return True
        slack_post(webhook_url=config.slack.webhook_url, text=f"*{title}*\n{body}", blocks=blocks)
        return True
    return False


# --- run outcomes ------------------------------------------------------------------


def notify_run_outcome(
    *,
    workspace_id: int,
    execution_id: int,
    agent_name: str,
    status: str,
    channels: list[str],
    recipients: list[str] | None = None,
    notify_on: list[str] | None = None,
    summary: str = "",
    user_ids: list[int] | None = None,
) -> dict[str, bool]:
    """Tell people how a run ended, per an agent version's notification_config.

    In-app goes to ``user_ids`` (e.g. whoever started the run) plus the workspace's
    admins and editors; email to ``recipients``; Slack to the workspace's configured
    webhook. Each channel's failure is logged and reported as False, never raised.
    """
    if notify_on is not None and status not in notify_on:
        return {}
    title = f"{agent_name}: run {execution_id} {status}"
    body = summary or f"Run {execution_id} of {agent_name} ended with status {status}."
    url = f"/runs/{execution_id}/"
    outcome: dict[str, bool] = {}
    for channel in channels:
        try:
            if channel == IN_APP:
                users = get_user_model().objects.filter(
                    pk__in=Membership.objects.filter(workspace_id=workspace_id, role__in=["admin", "editor"]).values(
                        "user_id"
                    )
                ) | get_user_model().objects.filter(pk__in=list(user_ids or []))
                # Whoever already heard of this end as its requester (RUN_ENDED) is not told twice.
                users = users.exclude(pk__in=Notification.objects.filter(kind=RUN_ENDED, url=url).values("user_id"))
                _in_app(workspace_id=workspace_id, users=users.distinct(), kind=RUN_OUTCOME, title=title, body=body,
                        url=url, execution_id=execution_id)
            elif channel == EMAIL:
                if not recipients:
                    raise NotificationError("no email recipients configured")
                _email(recipients=list(recipients), subject=title, body=body + f"\n{_absolute(url)}")
            elif channel == SLACK:
                webhook = approval_notification_config(workspace_id=workspace_id).slack.webhook_url
                if not webhook:
                    raise NotificationError("the workspace has no Slack webhook configured")
                slack_post(webhook_url=webhook, text=f"*{title}*\n{body}")
            else:
                raise NotificationError(f"unknown channel {channel!r}")
            outcome[channel] = True
        except NotificationError as exc:
            logger.warning("run %s outcome notification via %s failed: %s", execution_id, channel, exc)
            outcome[channel] = False
    return outcome


# --- the person answerable for a run ----------------------------------------------------

RUN_AWAITING_APPROVAL = "run_awaiting_approval"
RUN_QUESTION = "run_question"
RUN_ENDED = "run_ended"
# The events a person chooses in their preferences (NotificationPreference.EVENTS).
EVENT_APPROVAL_PAUSE = "approval_pause"
EVENT_QUESTION = "question"
EVENT_FAILED = "failed"
EVENT_NOT_ANSWERED = "not_answered"
EVENT_EVERY_END = "every_end"


def notification_preferences_get(*, user) -> NotificationPreference:
    """The person's preferences; the defaults (an unsaved row) when they never chose."""
    found = NotificationPreference.objects.filter(user=user).first()
    return found if found is not None else NotificationPreference(user=user)


def notification_preferences_update(*, user, channels: dict[str, bool], events: dict[str, bool]
                                    ) -> NotificationPreference:
    """Change some of the person's channels and events (validated by the caller's edge:
    only the names in ``NotificationPreference.CHANNELS``/``EVENTS``, booleans)."""
    changes = {**channels, **events}
    unknown = set(changes) - set(NotificationPreference.CHANNELS) - set(NotificationPreference.EVENTS)
    assert not unknown, unknown
    with transaction.atomic():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(user=user)
        for name, value in changes.items():
            setattr(preference, name, bool(value))
        preference.save()
    return preference


# The requester with their preferences (absent: the defaults), one statement compiled once
# per process: every run's end asks.
_REQUESTER = CompiledQuery(
    lambda user_id: get_user_model().objects.filter(pk=user_id, is_active=True, service_principal__isnull=True)
    .select_related("notification_preference").order_by()[:1],
    user_id=-(2**31) + 121,  # auth_user.id is a 32-bit integer: a larger stand-in compiles to nothing
)


def requester_notify(*, workspace_id: int, user_id: int | None, events: list[str], kind: str, title: str,
                     body: str, url: str, execution_id: int, approval_id=None) -> list[str]:
    """Tell the person answerable for a run about it, if they want to hear about any of
    ``events``, on the channels they chose. The in-app row is written in the caller's
    transaction; email and Slack go out after commit, best effort (a failure is logged,
    never raised into the run). Returns the channels used. Never a service identity."""
    if user_id is None:
        return []
    user = _REQUESTER.first(user_id=int(user_id))
    if user is None:
        return []
    try:
        preference = user.notification_preference  # read with the user
    except NotificationPreference.DoesNotExist:
        preference = NotificationPreference(user=user)  # never chose: the defaults
    if not any(getattr(preference, event) for event in events):
        return []
    used = []
    if preference.in_app:
        _in_app(workspace_id=workspace_id, users=[user], kind=kind, title=title, body=body, url=url,
                approval_id=approval_id, execution_id=execution_id)
        used.append(IN_APP)
    link = _absolute(url)
    if preference.email and user.email:
        call_on_commit(lambda: _email(recipients=[user.email], subject=title, body=f"{body}\n\nOpen: {link}"),
                       component="notifications", operation="requester email", subject=f"execution {execution_id}")
        used.append(EMAIL)
    if preference.slack:
        webhook = approval_notification_config(workspace_id=workspace_id).slack.webhook_url
        if webhook:
            text = f"*{title}* (for {_person(user)})\n{body}\n<{link}|Open>"
            call_on_commit(lambda: slack_post(webhook_url=webhook, text=text), component="notifications",
                           operation="requester slack", subject=f"execution {execution_id}")
            used.append(SLACK)
    return used


# --- an approved action that failed ------------------------------------------------


APPROVED_ACTION_FAILED = "approved_action_failed"


def approved_action_failed_notify(*, approval: ApprovalRequest, error_message: str) -> dict[str, bool]:
    """Tell the person who approved a call that it failed after approval: an in-app
    notification (once per approval) and an email when they have an address. Each
    channel's failure is logged and reported as False, never raised."""
    approver = approval.resolved_by
    if approver is None:
        return {}
    title = f"Approved {approval.tool_name} failed (run {approval.execution_id})"
    body = (
        f"You approved {approval.tool_name} for run {approval.execution_id}; it failed when it ran and the run "
        f"ended failed.\nError: {error_message[:500]}\nRun: {_absolute(f'/runs/{approval.execution_id}/')}"
    )
    outcome = {IN_APP: _in_app(workspace_id=approval.workspace_id, users=[approver], kind=APPROVED_ACTION_FAILED,
                               title=title, body=body, url=approval_url(approval.pk)) >= 0}
    if approver.email:
        try:
            _email(recipients=[approver.email], subject=title, body=body)
            outcome[EMAIL] = True
        except NotificationError as exc:
            logger.warning("approval %s failure email failed: %s", approval.pk, exc)
            outcome[EMAIL] = False
    return outcome


# --- a trigger paused because its responsible person is gone ----------------------------


TRIGGER_OWNER_REMOVED = "trigger_owner_removed"


def workspace_admins_notify(*, workspace: Workspace, kind: str, title: str, body: str, url: str) -> int:
    """An in-app notification to the workspace's admins and its organization's admins
    (never a service identity), in the caller's transaction; once per (kind, url)."""
    return _in_app(workspace_id=workspace.pk, users=approvers_for(workspace=workspace, roles=["admin"]), kind=kind,
                   title=title, body=body, url=url)


# --- a person's inbox ----------------------------------------------------------------


# What a person may choose in their notification preferences (the page and the API).
PREFERENCE_CHANNELS: tuple[str, ...] = tuple(NotificationPreference.CHANNELS)
PREFERENCE_EVENTS: tuple[str, ...] = tuple(NotificationPreference.EVENTS)


def notifications_for_user(*, user, unread_only: bool = False):
    """The user's notifications, newest first (every workspace's: they are theirs)."""
    mine = Notification.objects.filter(user=user).select_related("workspace").order_by("-created_at", "-pk")
    return mine.filter(read_at__isnull=True, resolved_at__isnull=True) if unread_only else mine


def notifications_unread(*, user):
    """The user's unread notifications: not read, and not resolved (a decided approval,
    an answered question no longer waits on anyone, whoever settled it)."""
    return notifications_for_user(user=user, unread_only=True)


def notifications_unread_count(*, user) -> int:
    return Notification.objects.filter(user=user, read_at__isnull=True, resolved_at__isnull=True).count()


def notification_get_for_user(*, user, notification_id: int) -> Notification:
    """One of the user's own notifications; another person's id is a 404, like a missing one."""
    from rivercore.errors import NotFound

    found = Notification.objects.filter(user=user, pk=notification_id).select_related("workspace").first()
    if found is None:
        raise NotFound("Notification not found.")
    return found


def notifications_mark_read(*, user, notification_id: int | None = None) -> int:
    """Mark one of the user's notifications (or all, without an id) as read; returns how
    many changed. Another person's id changes nothing, exactly like a missing one."""
    unread = Notification.objects.filter(user=user, read_at__isnull=True)
    if notification_id is not None:
        unread = unread.filter(pk=notification_id)
    with transaction.atomic():
        changed = unread.update(read_at=timezone.now())
        if changed:
            user_event_publish(user_ids=[user.pk], event={"type": NOTIFICATIONS_CHANGED})
    return changed
