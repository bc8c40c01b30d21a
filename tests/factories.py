"""Small builders for agents and runs used across test modules."""

from __future__ import annotations

from agents.models import Agent, AgentVersion
from rivercore.llm import LLMReply, LLMToolCall
from rivercore.types.agents import Tier


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


class ScriptedLLM:
    """An in-process LLMClient for engine unit tests that need no HTTP. Tests of
    the model path itself use the fake OpenAI server (tests/fakes)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[dict] = []

    def complete(self, *, messages, tools, tier, timeout_seconds):
        self.requests.append({"messages": messages, "tools": tools, "tier": tier})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def tool_reply(name: str, arguments: dict, call_id: str = "call_1", **extra) -> LLMReply:
    return LLMReply(
        tool_calls=[LLMToolCall(id=call_id, name=name, arguments=arguments)], model="scripted", provider="test",
        tier=Tier.FAST, input_tokens=extra.get("input_tokens", 10), output_tokens=extra.get("output_tokens", 5),
        cost_usd=extra.get("cost_usd", 0.0),
    )


def text_reply(text: str, **extra) -> LLMReply:
    return LLMReply(
        content=text, model="scripted", provider="test", tier=Tier.BALANCED,
        input_tokens=extra.get("input_tokens", 10), output_tokens=extra.get("output_tokens", 5),
        cost_usd=extra.get("cost_usd", 0.0),
    )
