"""The request a claimed run loads. A run is stored by reference (its agent version,
requester, prompt and trigger, ``executions.services.start``); the engine's request is
built from those rows each time a segment loads the run (``execution_for_segment``,
or the claim's one statement on PostgreSQL, ``executions.services.claim``), so roles
and policies are read as they are now and a run costs no copy of its agent's
configuration.

Nothing here imports ``start``: a run is started in one place and loaded in another."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from agents.models import Agent, AgentVersion
from agents.selectors import (
    agent_memories_exist,
    agent_memories_recent,
    memory_keywords,
    version_data_sources_exist,
)
from artifacts.selectors import artifact_data_source_ids
from datasources.selectors import (
    data_source_prompt_tables,
    data_sources_bound_to_version,
    data_sources_in_workspace,
)
from executions.models import Execution
from governance.selectors import active_policies, active_policies_exist
from rivercore import context as ctxmod
from rivercore.contracts import (
    AgentConfig,
    DataSourceMetadata,
    ExecutionRequest,
    TriggerContext,
    UserContext,
)
from rivercore.state import RunState
from rivercore.types.agents import ActionLevel, MemoryEntry, action_level_at_most
from rivercore.types.sessions import TRANSFER_TOOL, SessionContext
from rivercore.types.toolservers import river_name_split
from tenancy.selectors import role_annotations, roles_annotated, roles_permissions
from toolservers.selectors import mcp_tool_specs


def agent_config_build(*, agent: Agent, version: AgentVersion, policies: list) -> AgentConfig:
    workspace = agent.workspace  # the caller joined it (execution_for_segment)
    return AgentConfig(
        agent_id=agent.pk,
        name=agent.name,
        business_function=agent.business_function,
        domain=agent.domain or workspace.name,
        goal=version.goal,
        instructions=version.instructions,
        system_prompt=version.system_prompt or None,
        action_level=version.action_level,
        governance_level=version.governance_level,
        model_config=version.model_settings,
        tools=list(version.tools),
        governance_policies=policies,
        approval_rules=version.rules,
        notification_config=version.notification_config or None,
        mcp_tools=mcp_tool_specs(workspace_id=agent.workspace_id, names=version.tools)
        if any(river_name_split(name) for name in version.tools) else [],
    )


def user_context_build(*, execution: Execution) -> UserContext:
    """The requester's roles as they are now (read with the run, ``execution_for_segment``):
    a role revoked while a run waits applies to its next segment."""
    workspace = execution.workspace
    roles = roles_annotated(execution)
    return UserContext(
        user_id=execution.requested_by_id,
        org_id=workspace.organization_id,
        workspace_id=workspace.pk,
        roles=roles,
        permissions=sorted(roles_permissions(roles)),
        attributes={"time_zone": workspace.time_zone, "observation_byte_limit": workspace.observation_byte_limit},
    )


def data_source_metadata_build(*, version: AgentVersion) -> list[DataSourceMetadata]:
    """Bound sources with their cached schemas (never fetched live, never credentials)."""
    return [_data_source_metadata(source) for source in data_sources_bound_to_version(version_id=version.pk)]


def _data_source_metadata(source) -> DataSourceMetadata:
    """``data_source_prompt_metadata`` as the contract; its schema is validated once per
    process and change (``data_source_prompt_tables``), not on every run start."""
    return DataSourceMetadata(data_source_id=source.pk, name=source.name, type=source.type, status=source.status,
                              access_level=source.access_level, schemas=data_source_prompt_tables(data_source=source))


def attached_data_source_metadata_build(*, workspace_id: int, artifact_ids: list[int],
                                        bound: set[int]) -> list[DataSourceMetadata]:
    """The data sources of the tabular artifacts a run was started with (those of its
    workspace only), besides the ones its agent version binds: the run may query them
    for this run only, with the same guard and limits as any source."""
    wanted = [pk for pk in artifact_data_source_ids(workspace_id=workspace_id, artifact_ids=artifact_ids)
              if pk not in bound]
    if not wanted:
        return []
    sources = data_sources_in_workspace(workspace_id=workspace_id).filter(pk__in=wanted).defer("schema_cache")
    return [_data_source_metadata(source) for source in sources.order_by("pk")]


MEMORY_LIMIT = 50  # the latest memories a run's request chooses from (memories_relevant)


def memory_build(*, agent_id: int, before: datetime | None, limit: int = MEMORY_LIMIT) -> list[MemoryEntry]:
    return [
        MemoryEntry(execution_id=m.execution_id, completed_at=m.created_at.isoformat(), summary=m.summary,
                    learnings=m.learnings, flagged_items=m.flagged_items)
        for m in agent_memories_recent(agent_id=agent_id, limit=limit, before=before)
    ]


def _memory_tokens(entry: MemoryEntry) -> int:
    """About how many prompt tokens a memory takes (four characters a token)."""
    text = entry.summary + "".join(entry.learnings) + "".join(entry.flagged_items)
    return len(text) // 4 + 8


def memories_relevant(*, question: str, memories: list[MemoryEntry], limit: int | None = None,
                      token_cap: int | None = None) -> list[MemoryEntry]:
    """The memories a run's prompt gets (oldest first, as the prompt reads them): one per
    summary (the newest), ranked by how many of the question's words they share
    (``memory_keywords``, the newer first among equals), the top ``limit`` that fit in
    ``token_cap`` tokens together. Deterministic for a given question and memories, so
    every segment of a run reads the same ones."""
    limit = settings.RIVER_MEMORY_PROMPT_ITEMS if limit is None else limit
    token_cap = settings.RIVER_MEMORY_PROMPT_TOKENS if token_cap is None else token_cap
    wanted = set(memory_keywords(question))
    newest: dict[str, tuple[int, MemoryEntry]] = {}
    for age, entry in enumerate(reversed(memories)):  # newest first
        newest.setdefault(" ".join(entry.summary.casefold().split()), (age, entry))
    ranked = sorted(newest.values(), key=lambda item: (
        -len(wanted & set(memory_keywords(" ".join([item[1].summary, *item[1].learnings])))), item[0]))
    chosen: list[tuple[int, MemoryEntry]] = []
    spent = 0
    for age, entry in ranked:
        if len(chosen) >= limit:
            break
        cost = _memory_tokens(entry)
        if spent + cost > token_cap:
            continue
        chosen.append((age, entry))
        spent += cost
    return [entry for _, entry in sorted(chosen, key=lambda item: -item[0])]


def execution_for_segment(execution_id: int, *, queryset=None) -> Execution:
    """The run with its workspace, agent and version, and what its request needs to know
    about its requester's roles and whether there are policies, sources or memories to
    read: one query, and one more for each of those that exists."""
    rows = queryset if queryset is not None else Execution.objects.all()
    return rows.select_related("workspace", "agent", "agent_version").annotate(
        **role_annotations(workspace_ref="workspace_id", organization_ref="workspace__organization_id",
                           user_ref="requested_by_id"),
        has_policies=active_policies_exist(organization_ref="workspace__organization_id",
                                           workspace_ref="workspace_id"),
        has_sources=version_data_sources_exist(version_ref="agent_version_id"),
        has_memory=agent_memories_exist(agent_ref="agent_id"),
    ).get(pk=execution_id)


def request_build(execution: Execution) -> ExecutionRequest:
    """The engine's request for a run loaded by ``execution_for_segment``.

    Policies and the requester's roles are read as they are at each segment; memories are
    those written before the run first started, so every segment of a run reads the same
    ones; the agent's configuration is its version's, which never changes."""
    if not hasattr(execution, "has_policies"):
        execution = execution_for_segment(execution.pk)
    workspace, agent, version, stored = execution.workspace, execution.agent, execution.agent_version, execution.context
    agent.workspace = workspace  # the same row: no second query for it
    if "request" in stored:  # a run queued before requests were built at load time
        return ExecutionRequest.model_validate(stored["request"])
    agent_config = agent_config_build(agent=agent, version=version, policies=active_policies(
        org_id=workspace.organization_id, workspace_id=workspace.pk) if execution.has_policies else [])
    for cap in ((stored.get("delegation") or {}).get("action_level_cap"),
                (stored.get("handoff") or {}).get("action_level_cap")):
        if cap:  # a delegated run, or a hand-off's, never runs above the level of the run it came from
            agent_config.action_level = action_level_at_most(agent_config.action_level, ActionLevel(cap))
    session = SessionContext.model_validate(stored["session"]) if stored.get("session") else None
    if session is not None and session.team and TRANSFER_TOOL not in agent_config.tools:
        agent_config.tools.append(TRANSFER_TOOL)  # a team member in a session may always hand over
    sources = data_source_metadata_build(version=version) if execution.has_sources else []
    if stored.get("artifact_ids"):
        sources += attached_data_source_metadata_build(
            workspace_id=workspace.pk, artifact_ids=list(stored["artifact_ids"]),
            bound={source.data_source_id for source in sources})
    return ExecutionRequest(
        execution_id=execution.pk,
        agent_config=agent_config,
        user_context=user_context_build(execution=execution),
        input_prompt=execution.input_prompt or None,
        trigger_context=TriggerContext(
            trigger_type=execution.trigger_type, trigger_source=execution.trigger_source,
            trigger_payload=stored.get("trigger_payload", execution.trigger_payload),
            triggered_by=str(execution.requested_by_id) if execution.requested_by_id else None,
            triggered_at=stored.get("triggered_at") or execution.queued_at,
        ),
        data_source_metadata=sources,
        conversation_history=memories_loaded(execution),
        session=session,
    )


def memories_loaded(execution: Execution) -> list[MemoryEntry]:
    """Read by the claim on PostgreSQL (``memories``); elsewhere, when there are any."""
    loaded = getattr(execution, "memories", None)
    if loaded is None:
        if not execution.has_memory:
            return []
        loaded = memory_build(agent_id=execution.agent_id, before=execution.started_at or execution.queued_at)
    return memories_relevant(question=execution.input_prompt or "", memories=list(loaded))


def run_state_build(execution: Execution) -> RunState:
    """A fresh state for the run (no steps yet): the request and the prompt built from it."""
    stored = execution.context
    if "request" in stored:
        return RunState(request=ExecutionRequest.model_validate(stored["request"]),
                        base_messages=stored["base_messages"], tool_schemas=stored["tool_schemas"])
    request = request_build(execution)
    return RunState(request=request, base_messages=ctxmod.base_messages(request),
                    tool_schemas=ctxmod.tool_schemas(request))
