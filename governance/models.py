from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

from common.fields import PydanticJSONField
from common.search import vector_index
from rivercore.types.governance import ApprovalNotificationConfig, Enforcement, PolicyScope, PolicyType


def _choices(enum) -> list[tuple[str, str]]:
    return [(member.value, member.value.replace("_", " ").capitalize()) for member in enum]


# The policy fields' choices (the OpenAPI document names their enums from these:
# settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]).
POLICY_SCOPE_CHOICES = _choices(PolicyScope)
POLICY_TYPE_CHOICES = _choices(PolicyType)
ENFORCEMENT_CHOICES = _choices(Enforcement)


class Policy(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="policies")
    workspace = models.ForeignKey(
        "tenancy.Workspace", null=True, blank=True, on_delete=models.CASCADE, related_name="policies"
    )
    scope = models.CharField(max_length=20, choices=POLICY_SCOPE_CHOICES)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    policy_type = models.CharField(max_length=30, choices=POLICY_TYPE_CHOICES)
    # {"expression": "..."}; the keyed form of the spec is normalised into this on save.
    conditions = models.JSONField(default=dict)
    enforcement = models.CharField(max_length=20, choices=ENFORCEMENT_CHOICES)
    # Quorum: how many distinct people must approve a call this policy pauses
    # (require_approval only; governance.quorum).
    required_approvals = models.PositiveSmallIntegerField(default=1)
    enabled = models.BooleanField(default=True)
    # With enforcement require_approval: a request this policy opens may be approved
    # only when the call's effect could be previewed (docs/approvals.md "Effect preview").
    require_preview = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(scope="organization", workspace__isnull=True))
                | (models.Q(scope="workspace", workspace__isnull=False)),
                name="policy_scope_matches_workspace",
            )
        ]

    def __str__(self) -> str:
        return self.name


class ApprovalRequest(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EDITED = "edited", "Edited and approved"
        EXPIRED = "expired", "Expired"

    class Kind(models.TextChoices):
        APPROVAL = "approval", "Approval"
        UNKNOWN_OUTCOME = "unknown_outcome", "Unknown outcome"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="approval_requests")
    # Plain ids, not foreign keys: governance sits below agents and executions.
    execution_id = models.BigIntegerField(db_index=True)
    agent_id = models.UUIDField(null=True, blank=True)
    tool_name = models.CharField(max_length=100)
    tool_call_id = models.CharField(max_length=100, blank=True)
    proposed_payload = models.JSONField(default=dict)
    reasoning_summary = models.TextField(blank=True)
    risk_context = models.TextField(blank=True)
    confidence_score = models.FloatField(null=True, blank=True)
    auto_approve_eligible = models.BooleanField(default=False)
    approver_roles = models.JSONField(default=list)
    # Who started the run (its requester, whether signed in or through one of their
    # API tokens). Segregation of duties: this person may not resolve the request
    # unless the workspace allows self-approval. Null for runs nobody started
    # (a trigger without a user), which any approver may resolve.
    run_started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    expires_at = models.DateTimeField()
    reminder_sent_at = models.DateTimeField(null=True, blank=True)
    resolution = models.JSONField(default=dict, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution_comment = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The effect of the proposed call (rivercore.types.previews.EffectPreview as JSON;
    # {} for a request opened before previews), and of the arguments an approver is
    # editing, re-previewed (governance.previews; docs/approvals.md "Effect preview").
    preview = models.JSONField(default=dict, blank=True)
    preview_edit = models.JSONField(default=dict, blank=True)
    # Quorum and escalation (governance.quorum, governance.escalation; docs/approvals.md).
    # ``quorum_round`` counts edits made under a quorum: an edit starts a new round and only
    # the approvals of the current round count; ``quorum_args`` are the edited arguments
    # the current round votes on (None: the proposed ones).
    required_approvals = models.PositiveSmallIntegerField(default=1)
    quorum_round = models.PositiveIntegerField(default=0)
    quorum_args = models.JSONField(null=True, blank=True)
    # The agent version's chain, copied when the request opened: [{after_minutes, approver_roles}].
    escalation_chain = models.JSONField(default=list, blank=True)
    escalation_level = models.PositiveSmallIntegerField(default=0)
    escalated_at = models.DateTimeField(null=True, blank=True)
    next_escalation_at = models.DateTimeField(null=True, blank=True)
    # Approve at the right scope (governance.grants): "once", "run", "session" or "grant".
    scope = models.CharField(max_length=10, default="once")
    # "approval": may this call be made? "unknown_outcome": an MCP write was sent and its
    # result never recorded; did it happen? (governance.unknown_outcome, docs/mcp.md).
    # A call may have one of each, so the kind is part of what makes a request unique.
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.APPROVAL)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "expires_at"]), models.Index(fields=["workspace", "status"]),
                   models.Index(fields=["status", "next_escalation_at"], name="approval_escalation_idx")]

    def __str__(self) -> str:
        return f"{self.tool_name} for run {self.execution_id} ({self.status})"


class ApprovalVote(models.Model):
    """One person's decision on a request that needs several approvers (quorum).

    One vote per person and round: an edit starts a new round (the earlier approvals
    were given to other arguments), and the database refuses a second vote of the same
    person in a round."""

    class Decision(models.TextChoices):
        APPROVED = "approved", "Approved"
        EDITED_APPROVED = "edited_approved", "Edited and approved"
        REJECTED = "rejected", "Rejected"

    approval = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="votes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    round = models.PositiveIntegerField(default=0)
    decision = models.CharField(max_length=20, choices=Decision.choices)
    comment = models.TextField(blank=True)
    modified_args = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The effect preview the vote approved (its fingerprint; "" without a preview): a vote
    # of a preview that is no longer the request's current one does not count.
    preview_fingerprint = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["approval", "user", "round"], name="uniq_approval_vote")]

    def __str__(self) -> str:
        return f"{self.decision} by {self.user_id} on {self.approval_id} (round {self.round})"


class ApprovalGrant(models.Model):
    """A standing grant (governance.grants): this agent may make this kind of call (one
    tool, one target, a condition on the arguments, at most ``max_rows`` rows) without
    asking, until ``expires_at`` or until revoked. Made by resolving an approval request
    with scope ``grant``; only that request's approvers may make one."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="approval_grants")
    # Plain ids, not foreign keys: governance sits below agents and executions.
    agent_id = models.UUIDField(db_index=True)
    tool_name = models.CharField(max_length=100)
    data_source_id = models.BigIntegerField(null=True, blank=True)
    target = models.CharField(max_length=300, blank=True)  # the table's policy key, or "" for a tool without one
    condition = models.TextField(blank=True)
    max_rows = models.PositiveIntegerField()
    approver_roles = models.JSONField(default=list)
    approval = models.ForeignKey(ApprovalRequest, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="grants")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    uses = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["workspace", "agent_id", "tool_name"], name="approval_grant_lookup_idx")]

    def __str__(self) -> str:
        return f"grant #{self.pk}: {self.tool_name} on {self.target or 'any target'}"


# What a text search of the audit trail reads (governance.selectors.audit_entries_search).
AUDIT_SEARCHED_FIELDS = ("event_type", "actor_label", Cast("details", output_field=models.TextField()))
AUDIT_SEARCHED_LOOKUPS = ("event_type", "actor_label", "details")


class AuditLogEntry(models.Model):
    """Append-only, HMAC-chained per organization (see governance.audit and docs/audit.md).

    An entry is inserted *pending* (``seq`` empty) in its caller's transaction, with
    ``content_hash`` (its content's MAC under the key ``key_id`` names), and sealed
    after commit by the organization's single sealer, which fills ``seq``,
    ``prev_hash`` and ``entry_hash`` once; the database trigger refuses every other
    UPDATE, and every DELETE and TRUNCATE.

    The organization, workspace and actor are kept as plain ids (no database
    constraint, nothing cascades): deleting any of them archives the entries in
    place instead of deleting or rewriting them.
    """

    organization = models.ForeignKey(
        "tenancy.Organization", on_delete=models.DO_NOTHING, db_constraint=False, related_name="audit_entries"
    )
    workspace = models.ForeignKey(
        "tenancy.Workspace", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="+",
    )
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    event_type = models.CharField(max_length=60, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="+",
    )
    actor_label = models.CharField(max_length=200, blank=True)
    execution_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    agent_id = models.UUIDField(null=True, blank=True)
    policy_id = models.UUIDField(null=True, blank=True)
    approval_id = models.UUIDField(null=True, blank=True)
    details = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    key_id = models.CharField(max_length=32, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    entry_hash = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["organization_id", "seq", "id"]
        verbose_name_plural = "audit log entries"
        constraints = [
            models.UniqueConstraint(fields=["organization", "seq"], name="uniq_audit_seq"),
            # A copied row (a replayed entry) is refused outright.
            models.UniqueConstraint(
                fields=["content_hash"], condition=models.Q(content_hash__gt=""), name="uniq_audit_content_hash"
            ),
        ]
        indexes = [
            models.Index(
                fields=["organization", "id"], condition=models.Q(seq__isnull=True), name="audit_pending_idx"
            ),
            # The search box (common/search.py): what happened, who, and the details' text.
            vector_index(*AUDIT_SEARCHED_FIELDS, name="audit_search_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq or 'pending'} {self.event_type}"


class AuditAnchor(models.Model):
    """A checkpoint of one organization's chain: its head's count and digest.

    Written periodically (``governance.audit_anchor``) and logged, so that deleting
    the newest entries, or all of them, is detected by ``audit_verify``. Append-only
    like the entries, and MACed with the audit key."""

    organization_id = models.BigIntegerField()
    number = models.PositiveBigIntegerField()
    entry_count = models.PositiveBigIntegerField()
    head_hash = models.CharField(max_length=64)
    key_id = models.CharField(max_length=32)
    anchor_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["organization_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["organization_id", "number"], name="uniq_audit_anchor_number")
        ]

    def __str__(self) -> str:
        return f"anchor {self.number} of organization {self.organization_id} ({self.entry_count} entries)"


class WorkspaceSettings(models.Model):
    class MemoryMode(models.TextChoices):
        """What a completed run leaves in the workspace's memory (docs/memory.md)."""

        OFF = "off", "Nothing is remembered"
        PERSONAL = "personal", "Personal memory, for users who consent"
        SHARED = "shared", "Shared with the workspace"

    workspace = models.OneToOneField("tenancy.Workspace", on_delete=models.CASCADE, related_name="governance_settings")
    approval_notification_config = PydanticJSONField(schema=ApprovalNotificationConfig, default=dict)
    memory_mode = models.CharField(max_length=20, choices=MemoryMode.choices, default=MemoryMode.PERSONAL)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "workspace settings"

    def __str__(self) -> str:
        return f"settings of {self.workspace}"


class Notification(models.Model):
    """An in-app notification for one user."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="notifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=50)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What the notification is about, so it can be resolved for everyone at once when
    # the work moves on (an approval decided, expired or closed; a question answered).
    approval_id = models.UUIDField(null=True, blank=True, db_index=True)
    execution_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    # Resolved: the thing asked for no longer waits on anyone. A resolved notification
    # leaves the unread count; ``resolution`` says what happened and who did it.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    resolution = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "read_at", "resolved_at"], name="notification_unread_idx")]

    def __str__(self) -> str:
        return self.title

    @property
    def is_unread(self) -> bool:
        return self.read_at is None and self.resolved_at is None


class NotificationPreference(models.Model):
    """One person's choice of how and when River tells them about the runs they are
    answerable for (their requester notifications). Absent means the defaults below."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_preference")
    # Channels.
    in_app = models.BooleanField(default=True)
    email = models.BooleanField(default=False)
    slack = models.BooleanField(default=False)
    # Events.
    approval_pause = models.BooleanField(default=True)
    question = models.BooleanField(default=True)
    failed = models.BooleanField(default=True)
    not_answered = models.BooleanField(default=True)
    every_end = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    CHANNELS = ("in_app", "email", "slack")
    EVENTS = ("approval_pause", "question", "failed", "not_answered", "every_end")

    def __str__(self) -> str:
        return f"notification preferences of {self.user_id}"


class PolicyCounter(models.Model):
    """A fixed-window counter behind rate and budget policies, bumped atomically."""

    key = models.CharField(max_length=200)
    window_start = models.DateTimeField()
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "window_start"], name="uniq_policy_counter")]

    def __str__(self) -> str:
        return f"{self.key}@{self.window_start:%Y-%m-%d %H:%M} = {self.value}"


# --- deciding from e-mail and Slack (governance.email_links, governance.slack) ------------


class ApprovalLinkUse(models.Model):
    """A signed e-mail decision link that was used: one row per link (its nonce), written
    in the decision's transaction, so a link decides at most once."""

    nonce = models.CharField(max_length=64, unique=True)
    approval_id = models.UUIDField(db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    decision = models.CharField(max_length=20)
    used_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.decision} link for {self.approval_id} used by {self.user_id}"


class SlackLinkCode(models.Model):
    """A one-time code a person asked for in River to link their Slack account: kept as
    its SHA-256 only, valid for minutes, used once (``/river link CODE`` in Slack)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Slack link code of {self.user_id}"


class SlackIdentity(models.Model):
    """A Slack user verified to be this River user (they sent a code only River showed
    them). The only way a Slack click becomes a River user's decision."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identity")
    team_id = models.CharField(max_length=32)
    slack_user_id = models.CharField(max_length=32)
    slack_user_name = models.CharField(max_length=120, blank=True)
    linked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "slack identities"
        constraints = [models.UniqueConstraint(fields=["team_id", "slack_user_id"], name="uniq_slack_identity")]

    def __str__(self) -> str:
        return f"Slack {self.team_id}/{self.slack_user_id} is user {self.user_id}"


class SlackApprovalMessage(models.Model):
    """A Slack message showing an approval request that River can still change: the
    ``response_url`` Slack sent with a click on it that did not decide the request (an
    unlinked person, a role that may not decide, a quorum vote). Slack honours such a URL
    for 30 minutes, so when the request is decided elsewhere or expires within that time,
    River replaces the message with the outcome (``governance.slack_updates``). The URL
    lets anyone holding it post into the channel, so it is kept encrypted; its SHA-256
    keeps one row per URL. Or, with River's bot token: a message River posted with
    chat.postMessage (its channel and timestamp), updated with chat.update at any time."""

    approval = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="slack_messages")
    url_hash = models.CharField(max_length=64)
    response_url_encrypted = models.TextField(blank=True)
    # A message River posted with chat.postMessage (bot token): updated with chat.update.
    channel_id = models.CharField(max_length=32, blank=True)
    message_ts = models.CharField(max_length=32, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(null=True, blank=True)  # when River showed the outcome there

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval", "url_hash"], name="uniq_slack_approval_message")]

    def __str__(self) -> str:
        return f"Slack message of approval {self.approval_id}"
from governance.backtest_models import PolicyBacktest  # noqa: E402,F401  (issue 30 §1; its own module)
