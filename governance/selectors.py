"""Reads for governance."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from uuid import UUID

from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery

from common.compiled import CompiledQuery
from common.search import CompiledSearch, query_words, ranked, text_match
from governance.models import (
    AUDIT_SEARCHED_FIELDS,
    AUDIT_SEARCHED_LOOKUPS,
    ApprovalRequest,
    AuditLogEntry,
    Policy,
    WorkspaceSettings,
)
from rivercore.errors import NotFound
from rivercore.types.governance import ApprovalNotificationConfig, GovernancePolicySpec, PolicyScope
from tenancy.selectors import organizations_administered, workspaces_for_user


def approval_notification_config(*, workspace_id: int) -> ApprovalNotificationConfig:
    settings_row = WorkspaceSettings.objects.filter(workspace_id=workspace_id).first()
    return ApprovalNotificationConfig.model_validate(settings_row.approval_notification_config if settings_row else {})


def workspace_memory_mode(*, workspace_id: int) -> str:
    """The workspace's ``WorkspaceSettings.MemoryMode`` (the default when it has no settings row)."""
    row = _SETTINGS_OF.first(workspace_id=int(workspace_id))
    return (row.memory_mode if row is not None else None) or WorkspaceSettings.MemoryMode.PERSONAL.value


# Compiled once per process: every answered run's end asks for its workspace's memory mode.
_SETTINGS_OF = CompiledQuery(
    lambda workspace_id: WorkspaceSettings.objects.filter(workspace_id=workspace_id).only("pk", "memory_mode")
    .order_by()[:1],
    workspace_id=-(2**62) + 131,
)


def approval_channels_active(*, workspace_id: int) -> bool:
    """An act_with_approval agent may only be activated while this is true."""
    return approval_notification_config(workspace_id=workspace_id).any_active()


# --- policies ----------------------------------------------------------------------


def policies_for_user(*, user) -> QuerySet[Policy]:
    """Workspace policies of the workspaces the user sees, plus their organizations' policies."""
    workspaces = workspaces_for_user(user=user)
    return Policy.objects.filter(
        Q(workspace__in=workspaces)
        | Q(scope=PolicyScope.ORGANIZATION, organization_id__in=workspaces.values("organization_id"))
        | Q(scope=PolicyScope.ORGANIZATION, organization__in=organizations_administered(user=user))
    ).distinct()


def policy_get_for_user(*, user, policy_id) -> Policy:
    try:
        return policies_for_user(user=user).select_related("workspace").get(pk=UUID(str(policy_id)))
    except (Policy.DoesNotExist, ValueError, TypeError):
        raise NotFound("Policy not found.") from None


def policies_for_workspace(*, user, workspace_id: int) -> QuerySet[Policy]:
    """The policies binding one of the user's workspaces: its own and its organization's
    (what ``GET /api/v1/policies/?workspace_id=`` lists), by name."""
    workspace = workspaces_for_user(user=user).filter(pk=workspace_id).first()
    if workspace is None:
        raise NotFound("Workspace not found.")
    return policies_for_user(user=user).filter(
        Q(workspace_id=workspace_id) | Q(scope=PolicyScope.ORGANIZATION, organization_id=workspace.organization_id)
    ).order_by("name", "pk")


def policy_history(*, user, policy_id) -> QuerySet[AuditLogEntry]:
    """The audit entries of one policy's changes the user may read, newest first (they
    outlive the policy: a deleted policy's entries stay)."""
    return audit_entries_for_user(user=user).filter(
        policy_id=policy_id, event_type__in=("policy_created", "policy_updated", "policy_deleted")
    ).order_by("-created_at", "-id")


def policy_spec(policy: Policy) -> GovernancePolicySpec:
    return GovernancePolicySpec(
        policy_id=str(policy.pk),
        name=policy.name,
        scope=policy.scope,
        policy_type=policy.policy_type,
        conditions=policy.conditions,
        enforcement=policy.enforcement,
        required_approvals=policy.required_approvals,
    )


def _binding(org_id, workspace_id) -> Q:
    scope = Q(scope=PolicyScope.ORGANIZATION, organization_id=org_id)
    if workspace_id is not None:
        scope |= Q(scope=PolicyScope.WORKSPACE, workspace_id=workspace_id, organization_id=org_id)
    return scope & Q(enabled=True)


def active_policies(*, org_id: int, workspace_id: int | None) -> list[GovernancePolicySpec]:
    """Enabled policies binding a workspace: its organization's and its own."""
    rows = Policy.objects.filter(_binding(org_id, workspace_id)).order_by("scope", "created_at", "pk")
    return [policy_spec(policy) for policy in rows]


def active_policies_exist(*, organization_ref: str, workspace_ref: str) -> Exists:
    """An annotation: whether any enabled policy binds the row's workspace (field paths
    on the annotated row), so a caller reads the policies only when there are some."""
    return Exists(Policy.objects.filter(_binding(OuterRef(organization_ref), OuterRef(workspace_ref))))


# --- audit trail -------------------------------------------------------------------


def audit_entries_for_user(*, user) -> QuerySet[AuditLogEntry]:
    """Org admins see their organizations' entries; members their workspaces' entries."""
    return AuditLogEntry.objects.filter(
        Q(organization__in=organizations_administered(user=user))
        | Q(workspace__in=workspaces_for_user(user=user))
    )


def approval_median_wait(*, workspace, since: dt.datetime) -> tuple[dt.timedelta | None, int]:
    """The median wait between a request and a person's decision (approved, edited or
    rejected; expiries and cancellations had no decision) over ``workspace``'s requests
    decided since ``since``, and how many there were: a count, then the middle one or two
    rows ordered by the wait."""
    decided = ApprovalRequest.objects.filter(
        workspace=workspace, resolved_by__isnull=False, resolved_at__gte=since,
    ).annotate(wait=ExpressionWrapper(F("resolved_at") - F("created_at"), output_field=DurationField()))
    total = decided.count()
    if not total:
        return None, 0
    middle = list(decided.order_by("wait").values_list("wait", flat=True)[(total - 1) // 2: total // 2 + 1])
    return sum(middle, dt.timedelta()) / len(middle), total


@dataclass(frozen=True, kw_only=True)
class AuditFilters:
    """The audit page's filters, validated by its form; ``since`` inclusive, ``until``
    exclusive (``common.days.day_window``)."""

    organization_id: int | None = None  # the organization's whole trail, else one workspace's
    workspace_id: int | None = None
    actor: str | None = None
    action: str | None = None
    agent_id: str | None = None
    execution_id: int | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def audit_entries_filter(*, user, filters: AuditFilters) -> QuerySet[AuditLogEntry]:
    """The entries the user may read, narrowed by ``filters``, newest first."""
    rows = audit_entries_for_user(user=user)
    if filters.organization_id is not None:
        rows = rows.filter(organization_id=filters.organization_id)
    if filters.workspace_id is not None:
        rows = rows.filter(workspace_id=filters.workspace_id)
    if filters.actor:
        rows = rows.filter(actor_label__icontains=filters.actor)
    if filters.action:
        rows = rows.filter(event_type=filters.action)
    if filters.agent_id:
        rows = rows.filter(agent_id=filters.agent_id)
    if filters.execution_id is not None:
        rows = rows.filter(execution_id=filters.execution_id)
    if filters.since is not None:
        rows = rows.filter(created_at__gte=filters.since)
    if filters.until is not None:
        rows = rows.filter(created_at__lt=filters.until)
    return rows.order_by("-created_at", "-id")


# How many of the newest matching entries the search box ranks.
AUDIT_SEARCH_CANDIDATES = 200


def audit_entries_search(*, user, workspace, text: str, limit: int) -> list[AuditLogEntry]:
    """The search box's audit entries: ``workspace``'s entries the user may read whose
    action, actor or details hold every word of ``text``; best match first among the
    newest ``AUDIT_SEARCH_CANDIDATES`` matches (the GIN index ``audit_search_idx``)."""
    words = query_words(text)
    if not words:
        return []
    return _AUDIT_MATCHING.rows(user=user, workspace_id=workspace.pk, words=words, limit=limit)


def _audit_entries_matching(*, user, workspace_id: int, words, limit: int) -> QuerySet[AuditLogEntry]:
    # Ordered by an expression of the id, not the id: walking the primary key backwards
    # would compute each passed-over entry's vector (the index is on the expression; no
    # column stores it), where the GIN index's bitmap and a top-N sort do not.
    candidates = audit_entries_for_user(user=user).filter(workspace_id=workspace_id).filter(
        text_match(AUDIT_SEARCHED_FIELDS, AUDIT_SEARCHED_LOOKUPS, words)).annotate(
        newest=F("pk") + 0).order_by("-newest").values("pk")[:AUDIT_SEARCH_CANDIDATES]
    rows = AuditLogEntry.objects.filter(pk__in=Subquery(candidates))
    return ranked(rows, AUDIT_SEARCHED_FIELDS, words, tiebreak="-pk")[:limit]


_AUDIT_MATCHING = CompiledSearch(_audit_entries_matching)
