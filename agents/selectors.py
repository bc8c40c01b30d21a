"""Reads for agents, always scoped to the caller's workspaces."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db.models import Exists, OuterRef, Q, QuerySet

from agents.models import Agent, AgentMemory, AgentVersion
from datasources.models import DataSource
from rivercore.errors import InvalidInput, NotFound
from tenancy.selectors import role_annotations, roles_annotated, roles_permissions, workspaces_for_user


def agents_for_user(*, user, status: str | None = None, workspace_id: int | None = None) -> QuerySet[Agent]:
    agents = Agent.objects.filter(workspace__in=workspaces_for_user(user=user)).select_related(
        "current_version", "owner"
    )
    if status is not None:
        agents = agents.filter(status=status)
    if workspace_id is not None:
        agents = agents.filter(workspace_id=workspace_id)
    return agents


def agent_get_for_user(*, user, agent_id) -> Agent:
    """The agent if it lives in one of the user's workspaces; otherwise 404."""
    try:
        return agents_for_user(user=user).select_related("workspace").get(pk=uuid.UUID(str(agent_id)))
    except (Agent.DoesNotExist, ValueError):
        raise NotFound("Agent not found.") from None


def agent_get_in_workspace(*, workspace_id: int, reference: str) -> Agent:
    """The agent of this workspace named by ``reference``: its id, or else its exact
    name. An agent of another workspace is not found, like one that does not exist."""
    agents = Agent.objects.filter(workspace_id=workspace_id)
    try:
        return agents.get(pk=uuid.UUID(reference.strip()))
    except (ValueError, Agent.DoesNotExist):
        pass
    named = list(agents.filter(name=reference)[:2])
    if not named:
        raise NotFound(f"No agent {reference!r} in this workspace.", details={"agent": ["not found"]})
    if len(named) > 1:
        raise InvalidInput(f"More than one agent of this workspace is named {reference!r}; name it by its id.",
                           code="ambiguous_agent", details={"agent": ["ambiguous name"]})
    return named[0]


def agent_get_with_permissions(*, user, agent_id) -> tuple[Agent, frozenset[str]]:
    """The agent if the user can see its workspace (a member, or an admin of its
    organization), with the permissions the user holds there, read in one query; else 404."""
    try:
        pk = uuid.UUID(str(agent_id))
    except ValueError:
        raise NotFound("Agent not found.") from None
    if not user.is_authenticated:
        raise NotFound("Agent not found.")
    agent = (
        Agent.objects.select_related("workspace")
        .annotate(**role_annotations(user_id=user.pk, workspace_ref="workspace_id",
                                     organization_ref="workspace__organization_id"))
        .filter(Q(member_role__isnull=False) | Q(org_admin=True), pk=pk)
        .first()
    )
    if agent is None:
        raise NotFound("Agent not found.")
    return agent, roles_permissions(roles_annotated(agent))


def agent_versions(*, agent: Agent) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(agent=agent).prefetch_related("data_sources").order_by("-version")


def agent_version_get(*, agent: Agent, version) -> AgentVersion:
    """Version number ``version`` of an agent the caller already holds; otherwise 404."""
    try:
        return agent_versions(agent=agent).get(version=int(version))
    except (AgentVersion.DoesNotExist, TypeError, ValueError):
        raise NotFound(f"Version {version} of this agent not found.") from None


def data_source_ids_outside_workspace(*, workspace_id: int, data_source_ids: Iterable[int]) -> list[int]:
    """The ids among ``data_source_ids`` that are not data sources of the workspace."""
    wanted = set(data_source_ids)
    found = set(DataSource.objects.filter(workspace_id=workspace_id, pk__in=wanted).values_list("pk", flat=True))
    return sorted(wanted - found)


def agent_memories_recent(*, agent_id: int, limit: int = 10, before=None) -> list[AgentMemory]:
    """The agent's latest long-term memories, oldest first (the order a prompt reads them);
    with ``before``, only those written before that moment."""
    rows = AgentMemory.objects.filter(agent_id=agent_id)
    if before is not None:
        rows = rows.filter(created_at__lt=before)
    return list(reversed(rows.order_by("-created_at", "-pk")[:limit]))


def agent_memories_exist(*, agent_ref: str) -> Exists:
    """An annotation: whether the row's agent (a field path on it) has any memory."""
    return Exists(AgentMemory.objects.filter(agent_id=OuterRef(agent_ref)))


def version_data_sources_exist(*, version_ref: str) -> Exists:
    """An annotation: whether the row's agent version binds any data source."""
    return Exists(AgentVersion.data_sources.through.objects.filter(agentversion_id=OuterRef(version_ref)))
