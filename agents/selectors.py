"""Reads for agents, always scoped to the caller's workspaces."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from agents.models import Agent, AgentMemory, AgentVersion, MemoryConsent, WorkspaceMemory
from common.compiled import CompiledQuery
from common.search import CompiledSearch, query_words, ranked, text_match
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


# The most agents a page's choice list (a filter, a trigger's agent) offers.
AGENT_CHOICES_MAX = 500


def agent_choices(*, workspace, include_archived: bool = True, runnable_only: bool = False) -> list[tuple[str, str]]:
    """``(id, name)`` of ``workspace``'s agents by name, at most AGENT_CHOICES_MAX: the
    choices of every page's agent field. ``runnable_only`` keeps the active agents with
    a deployed version (what a new conversation may talk to)."""
    agents = Agent.objects.filter(workspace=workspace)
    if not include_archived:
        agents = agents.exclude(status=Agent.Status.ARCHIVED)
    if runnable_only:
        agents = agents.filter(status=Agent.Status.ACTIVE, current_version__isnull=False)
    rows = agents.order_by("name", "pk").values_list("pk", "name")[:AGENT_CHOICES_MAX]
    return [(str(pk), name) for pk, name in rows]


def agent_names(*, organization_id: int, agent_ids: Iterable) -> dict:
    """``{agent id: name}`` for those of ``agent_ids`` in the organization (one query;
    none when no ids)."""
    ids = {agent_id for agent_id in agent_ids if agent_id}
    if not ids:
        return {}
    return dict(Agent.objects.filter(pk__in=ids, workspace__organization_id=organization_id).values_list("pk", "name"))


def agent_in_workspace(*, workspace_id: int, agent_id) -> Agent | None:
    """The agent ``agent_id`` (a UUID or its text) if it is one of the workspace's, else
    None: for an id a page already holds (a validated choice, a trigger's config)."""
    try:
        pk = agent_id if isinstance(agent_id, uuid.UUID) else uuid.UUID(str(agent_id))
    except ValueError:
        return None
    return (Agent.objects.select_related("workspace", "current_version", "owner")
            .filter(pk=pk, workspace_id=workspace_id).first())


def agent_status_health_counts(*, workspace) -> list[dict]:
    """``{"status", "health", "n"}`` rows counting ``workspace``'s agents (the overview)."""
    return list(Agent.objects.filter(workspace=workspace).values("status", "health").annotate(n=Count("id")).order_by())


def agents_filter(*, user, workspace_id: int, name_contains: str | None = None, status: str | None = None,
                  health: str | None = None) -> QuerySet[Agent]:
    """The workspace's agents the user may see, narrowed by the agents page's filters, by name."""
    rows = agents_for_user(user=user, workspace_id=workspace_id, status=status or None)
    if name_contains:
        rows = rows.filter(name__icontains=name_contains)
    if health:
        rows = rows.filter(health=health)
    return rows.order_by("name", "id")


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


# Every run started over the API reads its agent this way: compiled once, not per request
# (common.compiled). The stand-ins appear nowhere else in the query.
_AGENT_WITH_ROLES = CompiledQuery(
    lambda user_id, agent_id: Agent.objects.select_related("workspace")
    .annotate(**role_annotations(user_id=user_id, workspace_ref="workspace_id",
                                 organization_ref="workspace__organization_id"))
    .filter(Q(member_role__isnull=False) | Q(org_admin=True), pk=agent_id).order_by()[:1],
    user_id=-(2**62) + 27, agent_id=uuid.UUID("00000000-0000-4000-8000-00000000c0de"),
)


def agent_get_with_permissions(*, user, agent_id) -> tuple[Agent, frozenset[str]]:
    """The agent if the user can see its workspace (a member, or an admin of its
    organization), with the permissions the user holds there, read in one query; else 404."""
    try:
        pk = uuid.UUID(str(agent_id))
    except ValueError:
        raise NotFound("Agent not found.") from None
    if not user.is_authenticated:
        raise NotFound("Agent not found.")
    agent = _AGENT_WITH_ROLES.first(user_id=user.pk, agent_id=pk)
    if agent is None:
        raise NotFound("Agent not found.")
    return agent, roles_permissions(roles_annotated(agent))


def agent_versions(*, agent: Agent, with_creator: bool = False) -> QuerySet[AgentVersion]:
    """The agent's versions, newest first (``with_creator``: who made each, joined)."""
    versions = AgentVersion.objects.filter(agent=agent).prefetch_related("data_sources").order_by("-version")
    return versions.select_related("created_by") if with_creator else versions


def agent_version_numbers(*, agent: Agent) -> list[int]:
    """The agent's version numbers, newest first."""
    return list(AgentVersion.objects.filter(agent=agent).order_by("-version").values_list("version", flat=True))


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


# --- workspace memory ---------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")
_STOPWORDS = frozenset("""
a about after again all also am an and any are as at be been before being below between both but by can could
did do does doing down during each few for from further had has have having he her here hers him his how i if
in into is it its itself just me more most my no nor not now of off on once only or other our ours out over own
same she should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
please tell show give many much last next
""".split())
MEMORY_KEYWORDS_MAX = 64
MEMORY_QUERY_TERMS_MAX = 8
MEMORY_SEARCH_CANDIDATES = 200


def memory_keywords(text: str, *, limit: int = MEMORY_KEYWORDS_MAX) -> list[str]:
    """The words a memory is found by, in order of first appearance: lower-cased, common
    words dropped, a plural ``s`` folded (``tickets`` finds ``ticket``). The same
    function reads a search, so both sides agree on every database."""
    found: dict[str, None] = {}
    for raw in _WORD.findall(text.lower()):
        word = raw.removesuffix("'s")
        if word in _STOPWORDS or (len(word) < 3 and not word.isdigit()):
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.setdefault(word, None)
        if len(found) >= limit:
            break
    return list(found)


def memories_visible(*, user_id: int | None) -> Q:
    """Shared memories, and the personal ones of ``user_id`` (none without a user)."""
    return Q(user__isnull=True) | Q(user_id=user_id) if user_id is not None else Q(user__isnull=True)


@dataclass(frozen=True)
class MemoryMatch:
    memory: WorkspaceMemory
    score: float  # the share of the search's words the memory holds, 0..1


def memory_search(*, workspace_id: int, user_id: int | None, query: str, top_k: int = 5,
                  agent_id=None) -> list[MemoryMatch]:
    """The workspace's memories that hold any word of ``query``, best first (more of its
    words, then newer), that a run of ``user_id`` may read: shared ones and that user's
    personal ones. Bounded whatever the memory's size: the newest
    ``MEMORY_SEARCH_CANDIDATES`` matches are ranked."""
    terms = memory_keywords(query, limit=MEMORY_QUERY_TERMS_MAX)
    if not terms:
        return []
    any_term = Q()
    for term in terms:
        any_term |= Q(keywords__contains=f" {term} ")
    rows = WorkspaceMemory.objects.filter(memories_visible(user_id=user_id), any_term, workspace_id=workspace_id)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    candidates = list(rows.order_by("-created_at", "-id")[:MEMORY_SEARCH_CANDIDATES])
    scored = [MemoryMatch(memory=row, score=sum(f" {t} " in row.keywords for t in terms) / len(terms))
              for row in candidates]
    scored.sort(key=lambda match: match.score, reverse=True)  # stable: newer first among equals
    return scored[:top_k]


def memories_for_user(*, user, workspace_id: int | None = None, agent_id=None,
                      query: str | None = None) -> QuerySet[WorkspaceMemory]:
    """The memories the user may see: shared ones of their workspaces and their own
    personal ones, newest first; filtered by workspace, agent and words of ``query``."""
    rows = WorkspaceMemory.objects.filter(memories_visible(user_id=user.pk),
                                          workspace__in=workspaces_for_user(user=user))
    if workspace_id is not None:
        rows = rows.filter(workspace_id=workspace_id)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    if query:
        for term in memory_keywords(query, limit=MEMORY_QUERY_TERMS_MAX):
            rows = rows.filter(keywords__contains=f" {term} ")
    return rows.select_related("agent").order_by("-created_at", "-id")


def memory_get_for_user(*, user, memory_id) -> WorkspaceMemory:
    """A memory the user may see; another workspace's, or another user's personal one, is a 404."""
    try:
        pk = int(memory_id)
        if not 1 <= pk <= 2**63 - 1:
            raise ValueError(memory_id)
        return memories_for_user(user=user).select_related("workspace").get(pk=pk)
    except (WorkspaceMemory.DoesNotExist, TypeError, ValueError):
        raise NotFound("Memory not found.") from None


def agent_memories_for_user(*, user, agent: Agent, limit: int = 50) -> list[WorkspaceMemory]:
    """For the agent's page: the newest memories its runs wrote that the user may see
    (shared, and the user's own personal ones). ``agent`` comes from a tenant-scoped
    selector (``agent_get_for_user``)."""
    return list(memories_for_user(user=user, workspace_id=agent.workspace_id, agent_id=agent.pk)[:limit])


def memory_consent_given(*, workspace_id: int, user_id: int | None) -> bool:
    """Whether the user consented to personal memory in the workspace (not by default)."""
    if user_id is None:
        return False
    return _CONSENT.first(workspace_id=int(workspace_id), user_id=int(user_id)) is not None


# Compiled once per process: every answered run's end asks (workspace memory).
_CONSENT = CompiledQuery(
    lambda workspace_id, user_id: MemoryConsent.objects.filter(workspace_id=workspace_id, user_id=user_id,
                                                               personal=True).only("pk").order_by()[:1],
    workspace_id=-(2**62) + 141, user_id=-(2**31) + 142,  # auth_user.id is a 32-bit integer
)


# What a text search of agents reads (the search box): name, description and domain.
AGENT_SEARCHED_FIELDS = ("name", "description", "domain")


def agent_ids_named(*, workspace, words) -> QuerySet:
    """The ids of ``workspace``'s agents whose name contains every one of ``words`` (the
    search box's agent match for runs)."""
    agents = Agent.objects.filter(workspace=workspace)
    for word in words:
        agents = agents.filter(name__icontains=word)
    return agents.values_list("pk", flat=True)


def agents_search(*, user, workspace, text: str, limit: int) -> list[Agent]:
    """The search box's agents: ``workspace``'s agents (only if the user may read it)
    whose name, description or domain hold every word of ``text``, best match first."""
    words = query_words(text)
    if not words:
        return []
    return _AGENTS_MATCHING.rows(user=user, workspace_id=workspace.pk, words=words, limit=limit)


def _agents_matching(*, user, workspace_id: int, words, limit: int) -> QuerySet[Agent]:
    rows = agents_for_user(user=user, workspace_id=workspace_id).filter(
        text_match(AGENT_SEARCHED_FIELDS, AGENT_SEARCHED_FIELDS, words))
    return ranked(rows, AGENT_SEARCHED_FIELDS, words, tiebreak="name")[:limit]


_AGENTS_MATCHING = CompiledSearch(_agents_matching)


# --- who uses a data source -----------------------------------------------------------------


@dataclass(frozen=True)
class DataSourceUse:
    """An agent with at least one version that binds a data source."""

    agent: Agent
    versions: tuple[int, ...]  # the binding versions' numbers, newest first
    active: bool  # its current (deployed) version is one of them


def data_source_uses(*, data_source: DataSource) -> list[DataSourceUse]:
    """The agents of the source's workspace whose versions bind ``data_source``, by name:
    what deleting it takes from them (the binding rows go with the source)."""
    rows = (AgentVersion.data_sources.through.objects.filter(datasource_id=data_source.pk)
            .select_related("agentversion__agent").order_by("agentversion__agent__name", "-agentversion__version"))
    found: dict = {}
    for row in rows:
        version = row.agentversion
        agent, numbers, pks = found.setdefault(version.agent_id, (version.agent, [], set()))
        numbers.append(version.version)
        pks.add(version.pk)
    return [DataSourceUse(agent=agent, versions=tuple(numbers), active=agent.current_version_id in pks)
            for agent, numbers, pks in found.values()]
