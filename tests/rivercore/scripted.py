"""A scripted model for the engine's own tests: plain Python, no Django (tests/factories.py
re-exports these for the tests that also build agents in the database)."""

from __future__ import annotations

from rivercore.llm import LLMReply, LLMToolCall
from rivercore.types.agents import Tier


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
