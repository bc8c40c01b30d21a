"""Reads for triggers, always scoped to the caller's workspaces."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from rivercore.errors import NotFound
from tenancy.selectors import workspaces_for_user
from triggers.models import Trigger, TriggerFiring


def triggers_for_user(*, user, workspace_id: int | None = None, agent_id=None) -> QuerySet[Trigger]:
    rows = Trigger.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related(
        "agent", "workspace", "run_as__user"
    )
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return rows


def trigger_get_for_user(*, user, trigger_id) -> Trigger:
    """The trigger if it lives in one of the user's workspaces; otherwise 404."""
    try:
        return triggers_for_user(user=user).get(pk=uuid.UUID(str(trigger_id)))
    except (Trigger.DoesNotExist, ValueError):
        raise NotFound("Trigger not found.") from None


def trigger_firings(*, trigger: Trigger) -> QuerySet[TriggerFiring]:
    """The trigger's firings, newest first (index firing_trigger_latest)."""
    return TriggerFiring.objects.filter(trigger=trigger).order_by("-fired_at", "-id")


def trigger_firings_recent(*, trigger_ids, limit: int = 10) -> dict:
    """The ``limit`` latest firings of each trigger, keyed by trigger id."""
    recent: dict = {}
    for trigger_id in trigger_ids:
        recent[trigger_id] = list(TriggerFiring.objects.filter(trigger_id=trigger_id).order_by("-fired_at", "-id")
                                  [:limit])
    return recent


def triggers_enabled_of_type(*, workspace_id: int, trigger_type: str) -> QuerySet[Trigger]:
    """Enabled triggers of one type in one workspace (index trigger_ws_type_enabled)."""
    return Trigger.objects.filter(workspace_id=workspace_id, type=trigger_type, enabled=True).select_related(
        "agent", "run_as__user"
    ).order_by("created_at", "id")


def trigger_get(*, trigger_id) -> Trigger:
    """A trigger by id, for code that authenticated its caller another way (an API key,
    a webhook signature, a scheduler); 404 when there is none."""
    try:
        return Trigger.objects.select_related("agent", "workspace", "run_as__user").get(pk=uuid.UUID(str(trigger_id)))
    except (Trigger.DoesNotExist, ValueError, TypeError):
        raise NotFound("Trigger not found.") from None
