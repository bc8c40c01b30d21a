"""Reads for executions, always scoped to the caller's workspaces."""

from __future__ import annotations

from django.db.models import QuerySet

from executions.models import Execution
from rivercore.errors import NotFound
from tenancy.selectors import workspaces_for_user


def executions_for_user(*, user) -> QuerySet[Execution]:
    return Execution.objects.filter(workspace__in=workspaces_for_user(user=user))


def execution_get_for_user(*, user, execution_id) -> Execution:
    """The run if it belongs to one of the user's workspaces; otherwise 404."""
    try:
        return executions_for_user(user=user).select_related("agent", "workspace").get(pk=int(execution_id))
    except (Execution.DoesNotExist, TypeError, ValueError):
        raise NotFound("Execution not found.") from None
