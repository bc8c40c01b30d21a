"""Starting a durable run: the request is built once (the context builder's inputs),
the row committed, and its first segment queued after commit."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentVersion
from agents.selectors import agent_memories_recent
from datasources.selectors import data_source_prompt_metadata
from executions.models import Execution
from executions.services.queue import segment_queue_on_commit
from governance.audit import audit_record
from governance.selectors import active_policies
from rivercore.contracts import (
    AgentConfig,
    DataSourceMetadata,
    ExecutionRequest,
    TriggerContext,
    UserContext,
)
from rivercore.errors import InvalidInput
from rivercore.runner import new_state
from rivercore.state import RunState
from rivercore.types.agents import MemoryEntry
from tenancy.selectors import workspace_permissions, workspace_roles

logger = logging.getLogger("river.executions")

def agent_config_build(*, agent: Agent, version: AgentVersion) -> AgentConfig:
    workspace = agent.workspace
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
        governance_policies=active_policies(org_id=workspace.organization_id, workspace_id=workspace.pk),
        approval_rules=version.rules,
        notification_config=version.notification_config or None,
    )


def user_context_build(*, user, workspace) -> UserContext:
    return UserContext(
        user_id=user.pk,
        org_id=workspace.organization_id,
        workspace_id=workspace.pk,
        roles=workspace_roles(user=user, workspace=workspace),
        permissions=sorted(workspace_permissions(user=user, workspace=workspace)),
        attributes={"time_zone": workspace.time_zone, "observation_byte_limit": workspace.observation_byte_limit},
    )


def data_source_metadata_build(*, version: AgentVersion) -> list[DataSourceMetadata]:
    """Bound sources with their cached schemas (never fetched live, never credentials)."""
    return [
        DataSourceMetadata.model_validate(data_source_prompt_metadata(data_source=source))
        for source in version.data_sources.all().order_by("pk")
    ]


def memory_build(*, agent: Agent, limit: int = 10) -> list[MemoryEntry]:
    return [
        MemoryEntry(execution_id=m.execution_id, completed_at=m.created_at.isoformat(), summary=m.summary,
                    learnings=m.learnings, flagged_items=m.flagged_items)
        for m in agent_memories_recent(agent_id=agent.pk, limit=limit)
    ]


def execution_start(
    *,
    agent: Agent,
    user,
    input_prompt: str = "",
    payload=None,
    trigger_type: str = "manual",
    trigger_source: str = "ui",
    trigger_id=None,
    parent_execution_id: int | None = None,
) -> Execution:
    """Create a queued run and hand it to a worker after commit (spec steps 1-3)."""
    if agent.status != Agent.Status.ACTIVE:
        logger.warning("run of agent %s refused: agent is %s", agent.pk, agent.status)
        raise InvalidInput(
            f"Agent is {agent.status}; only active agents run.", code="agent_not_active",
            details={"agent": [f"status is {agent.status}"]},
        )
    version = agent.current_version
    if version is None:
        raise InvalidInput("Agent has no deployed version.", code="no_deployed_version")
    workspace = agent.workspace
    with transaction.atomic():
        execution = Execution.objects.create(
            workspace=workspace, agent=agent, agent_version=version, trigger_type=trigger_type,
            trigger_source=trigger_source, trigger_payload=payload if payload is not None else {},
            trigger_id=trigger_id, parent_execution_id=parent_execution_id, requested_by=user,
            input_prompt=input_prompt or "",
        )
        request = ExecutionRequest(
            execution_id=execution.pk,
            agent_config=agent_config_build(agent=agent, version=version),
            user_context=user_context_build(user=user, workspace=workspace),
            input_prompt=input_prompt or None,
            trigger_context=TriggerContext(
                trigger_type=trigger_type, trigger_source=trigger_source, trigger_payload=payload,
                triggered_by=str(user.pk) if user else None, triggered_at=execution.queued_at,
            ),
            data_source_metadata=data_source_metadata_build(version=version),
            conversation_history=memory_build(agent=agent),
        )
        state, detections = _new_state_screened(request)
        execution.context = {
            "request": state.request.model_dump(mode="json", by_alias=True),
            "base_messages": state.base_messages,
            "tool_schemas": state.tool_schemas,
            "security_events": detections,
        }
        execution.published_at = timezone.now()
        execution.save(update_fields=["context", "published_at"])
        if detections:
            _security_event(execution, detections)
        segment_queue_on_commit(execution.pk)
    return execution


def _new_state_screened(request: ExecutionRequest):
    if not settings.RIVER_PROMPT_INJECTION_DETECTION:
        from rivercore import context as ctxmod

        state = RunState(request=request, base_messages=ctxmod.base_messages(request),
                         tool_schemas=ctxmod.tool_schemas(request))
        return state, []
    return new_state(request)


def _security_event(execution: Execution, detections: list[dict]) -> None:
    logger.warning(
        "security event: possible prompt injection in trigger payload of execution %s (%d span(s) sanitised)",
        execution.pk, len(detections),
    )
    audit_record(
        organization_id=execution.workspace.organization_id, workspace_id=execution.workspace_id,
        event_type="prompt_injection_detected", execution_id=execution.pk, agent_id=execution.agent_id,
        details={"detections": detections},
    )
