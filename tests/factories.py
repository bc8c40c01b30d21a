"""Small builders for agents and runs used across test modules."""

from __future__ import annotations

from agents.models import Agent, AgentVersion
from tests.rivercore.scripted import ScriptedLLM, text_reply, tool_reply  # noqa: F401 - re-exported


def make_agent(
    *,
    workspace,
    owner,
    name: str = "Test agent",
    tools: list[str] | None = None,
    action_level: str = "automated",
    require_approval_for: list[str] | None = None,
    approver_roles: list[str] | None = None,
    model_config: dict | None = None,
    auto_approve_conditions: list[dict] | None = None,
    data_sources=(),
    status: str = Agent.Status.ACTIVE,
    escalation_timeout_minutes: int = 1440,
    notification_config: dict | None = None,
) -> Agent:
    agent = Agent.objects.create(
        workspace=workspace, name=name, business_function="customer_support", domain="Support", owner=owner,
        status=status,
    )
    version = AgentVersion.objects.create(
        agent=agent, version=1, goal="Help.", instructions="Be careful.", action_level=action_level,
        model_config=model_config or {}, tools=tools or [],
        approval_rules={
            "require_approval_for": require_approval_for or [],
            "approver_roles": approver_roles or ["admin", "editor"],
            "auto_approve_conditions": auto_approve_conditions or [],
            "escalation_timeout_minutes": escalation_timeout_minutes,
        },
        notification_config=notification_config or {},
    )
    if data_sources:
        version.data_sources.set(data_sources)
    agent.current_version = version
    agent.save(update_fields=["current_version"])
    return agent
