"""Reads for triggers, always scoped to the caller's workspaces."""

from __future__ import annotations

import uuid

from django.db.models import F, OuterRef, Q, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber

from common.compiled import CompiledQuery
from common.search import CompiledSearch, query_words, ranked, text_match
from rivercore.errors import NotFound, PermissionDenied
from tenancy.models import Membership
from tenancy.permissions import AGENT_CREATE
from tenancy.selectors import is_org_admin, organizations_administered, require_permission, workspaces_for_user
from triggers.models import ApiKey, Trigger, TriggerFiring, WebhookEndpoint


def _with_run_as_role(rows: QuerySet[Trigger]) -> QuerySet[Trigger]:
    """``run_as_role``: the identity's role in the trigger's workspace, in the same query."""
    return rows.annotate(run_as_role=Subquery(Membership.objects.filter(
        user_id=OuterRef("run_as__user_id"), workspace_id=OuterRef("workspace_id")).values("role")[:1]))


def triggers_for_user(*, user, workspace_id: int | None = None, agent_id=None) -> QuerySet[Trigger]:
    rows = _with_run_as_role(Trigger.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related(
        "agent", "workspace", "run_as__user"
    ))
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return rows


def triggers_filter(*, user, workspace_id: int | None = None, agent_id=None, name_contains: str | None = None,
                    trigger_type: str | None = None, enabled: bool | None = None) -> QuerySet[Trigger]:
    """The user's triggers narrowed by the pages' filters, by name."""
    rows = triggers_for_user(user=user, workspace_id=workspace_id, agent_id=agent_id)
    if name_contains:
        rows = rows.filter(name__icontains=name_contains)
    if trigger_type is not None:
        rows = rows.filter(type=trigger_type)
    if enabled is not None:
        rows = rows.filter(enabled=enabled)
    return rows.order_by("name", "id")


def webhook_endpoint_in_workspace(*, workspace_id: int, slug) -> WebhookEndpoint | None:
    """The workspace's webhook endpoint with this slug, or None."""
    if not slug:
        return None
    return WebhookEndpoint.objects.filter(workspace_id=workspace_id, slug=slug).first()


def webhook_endpoint_slugs(*, workspace_id: int, limit: int) -> list[str]:
    """The slugs of the workspace's webhook endpoints, sorted, at most ``limit``."""
    return list(WebhookEndpoint.objects.filter(workspace_id=workspace_id).order_by("slug")
                .values_list("slug", flat=True)[:limit])


def trigger_get_for_user(*, user, trigger_id) -> Trigger:
    """The trigger if it lives in one of the user's workspaces; otherwise 404."""
    try:
        return triggers_for_user(user=user).get(pk=uuid.UUID(str(trigger_id)))
    except (Trigger.DoesNotExist, ValueError):
        raise NotFound("Trigger not found.") from None


def trigger_firings(*, trigger: Trigger) -> QuerySet[TriggerFiring]:
    """The trigger's firings, newest first (index firing_trigger_latest), each with the
    status and outcome of the run it started (``run_status``, ``run_outcome``; null when
    none started or the run has not ended)."""
    return (TriggerFiring.objects.filter(trigger=trigger)
            .annotate(run_status=F("execution__status"), run_outcome=F("execution__outcome"))
            .order_by("-fired_at", "-id"))


def trigger_firings_recent(*, trigger_ids, limit: int = 10) -> dict:
    """The ``limit`` latest firings of each trigger, keyed by trigger id, in one query
    (a row number per trigger, newest first, kept up to ``limit``)."""
    ids = list(trigger_ids)
    recent: dict = {trigger_id: [] for trigger_id in ids}
    if not ids:
        return recent
    ranked = TriggerFiring.objects.filter(trigger_id__in=ids).annotate(
        rank=Window(RowNumber(), partition_by=[F("trigger_id")], order_by=[F("fired_at").desc(), F("id").desc()]))
    for firing in ranked.filter(rank__lte=limit).order_by("trigger_id", "rank"):
        recent[firing.trigger_id].append(firing)
    return recent


def triggers_with_last_firing(rows: QuerySet[Trigger]) -> QuerySet[Trigger]:
    """Each trigger with its latest firing's time, outcome and reason (``last_fired_at``,
    ``last_outcome``, ``last_reason``), read in the same query (index firing_trigger_latest)."""
    latest = TriggerFiring.objects.filter(trigger_id=OuterRef("pk")).order_by("-fired_at", "-id")
    return rows.annotate(last_fired_at=Subquery(latest.values("fired_at")[:1]),
                         last_outcome=Subquery(latest.values("outcome")[:1]),
                         last_reason=Subquery(latest.values("reason")[:1]))


# Compiled once per process: every run's end asks for the workspace's workflow triggers.
_ENABLED_OF_TYPE = CompiledQuery(
    lambda workspace_id, trigger_type: Trigger.objects.filter(
        workspace_id=workspace_id, type=trigger_type, enabled=True).select_related(
        "agent", "run_as__user").order_by("created_at", "id"),
    workspace_id=-(2**62) + 111, trigger_type="\x00trigger-type",  # no real type holds a NUL
)


def triggers_enabled_of_type(*, workspace_id: int, trigger_type: str) -> list[Trigger]:
    """Enabled triggers of one type in one workspace (index trigger_ws_type_enabled)."""
    return _ENABLED_OF_TYPE.all(workspace_id=int(workspace_id), trigger_type=str(trigger_type))


def trigger_get(*, trigger_id) -> Trigger:
    """A trigger by id, for code that authenticated its caller another way (an API key,
    a webhook signature, a scheduler); 404 when there is none."""
    try:
        return Trigger.objects.select_related("agent", "workspace", "run_as__user").get(pk=uuid.UUID(str(trigger_id)))
    except (Trigger.DoesNotExist, ValueError, TypeError):
        raise NotFound("Trigger not found.") from None


def api_keys_for_user(*, user) -> QuerySet[ApiKey]:
    """Keys of the user's workspaces, and organization-wide keys of the organizations
    they administer; newest first."""
    return ApiKey.objects.filter(
        Q(workspace__in=workspaces_for_user(user=user))
        | Q(workspace__isnull=True, organization__in=organizations_administered(user=user))
    ).select_related("workspace").order_by("-created_at", "-id")


def api_key_get_for_user(*, user, api_key_id) -> ApiKey:
    try:
        return api_keys_for_user(user=user).get(pk=int(api_key_id))
    except (ApiKey.DoesNotExist, TypeError, ValueError, OverflowError):
        raise NotFound("API key not found.") from None


def api_keys_of_workspace(*, user, workspace) -> QuerySet[ApiKey]:
    """The keys ``api_keys_for_user`` lists that serve ``workspace``: its own, and its
    organization's organization-wide keys when the user administers that organization."""
    return api_keys_for_user(user=user).filter(
        Q(workspace_id=workspace.pk) | Q(workspace__isnull=True, organization_id=workspace.organization_id))


def api_key_get_manageable(*, user, api_key_id) -> ApiKey:
    """A key the user may revoke: one of their workspaces' (404 otherwise) where they hold
    ``agent:create`` (what issuing it takes), or an organization's key when they
    administer that organization (403 otherwise)."""
    key = api_key_get_for_user(user=user, api_key_id=api_key_id)
    if key.workspace_id is None:
        if not is_org_admin(user=user, organization_id=key.organization_id):
            raise PermissionDenied("Only an organization admin manages an organization's keys.")
    else:
        require_permission(user=user, workspace=key.workspace, permission=AGENT_CREATE)
    return key


def webhook_endpoints_for_user(*, user) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related(
        "workspace").order_by("slug", "id")


def webhook_endpoint_get_for_user(*, user, endpoint_id) -> WebhookEndpoint:
    try:
        return webhook_endpoints_for_user(user=user).get(pk=uuid.UUID(str(endpoint_id)))
    except (WebhookEndpoint.DoesNotExist, ValueError):
        raise NotFound("Webhook endpoint not found.") from None


def webhook_endpoint_get(*, endpoint_id) -> WebhookEndpoint:
    """The endpoint a delivery names (no user: the signature authenticates it); 404 otherwise."""
    try:
        return WebhookEndpoint.objects.get(pk=uuid.UUID(str(endpoint_id)))
    except (WebhookEndpoint.DoesNotExist, ValueError):
        raise NotFound("Webhook endpoint not found.") from None


def trigger_summary_in_workspace(*, workspace_id: int, trigger_id) -> Trigger | None:
    """The trigger's id, name and type if it is one of the workspace's, else None (a
    run page names the trigger that started the run; the trigger may be gone)."""
    return Trigger.objects.filter(pk=trigger_id, workspace_id=workspace_id).only("pk", "name", "type").first()


# What a text search of triggers reads (the search box): the name and the prompt.
TRIGGER_SEARCHED_FIELDS = ("name", "prompt")


def triggers_search(*, user, workspace, text: str, limit: int) -> list[Trigger]:
    """The search box's triggers: ``workspace``'s (only if the user may read it) whose name
    or prompt hold every word of ``text``, best match first."""
    words = query_words(text)
    if not words:
        return []
    return _TRIGGERS_MATCHING.rows(user=user, workspace_id=workspace.pk, words=words, limit=limit)


def _triggers_matching(*, user, workspace_id: int, words, limit: int) -> QuerySet[Trigger]:
    rows = triggers_for_user(user=user, workspace_id=workspace_id).filter(
        text_match(TRIGGER_SEARCHED_FIELDS, TRIGGER_SEARCHED_FIELDS, words))
    return ranked(rows, TRIGGER_SEARCHED_FIELDS, words, tiebreak="name")[:limit]


_TRIGGERS_MATCHING = CompiledSearch(_triggers_matching)
