"""What the engine needs from a model: one completion per reasoning turn.

``rivercore.router`` implements this over litellm (providers, tiers,
health window, failover); tests may pass any object with the same ``complete``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, Field

from rivercore.types.agents import Tier


class LLMToolCall(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str = ""  # as the model sent it, when it was not valid JSON


class LLMReply(BaseModel):
    content: str | None = None
    tool_calls: list[LLMToolCall] = Field(default_factory=list)
    model: str
    provider: str
    tier: Tier
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None: no known price for this model
    latency_ms: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.tool_calls and not (self.content or "").strip()


class LLMErrorKind(StrEnum):
    TIMEOUT = "timeout"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    BAD_RESPONSE = "bad_response"


class LLMError(Exception):
    def __init__(self, kind: LLMErrorKind | str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = LLMErrorKind(kind)
        self.message = message
        self.details = details or {}


class DeltaKind(StrEnum):
    """What a piece of streamed model output is. ``RESTART``: the attempt that produced
    the pieces so far failed and another one starts (a retry or a failover), so what was
    shown of this reply is to be thrown away."""

    ANSWER = "answer"
    REASONING = "reasoning"
    RESTART = "restart"


OnDelta = Callable[[DeltaKind, str], None]
"""Called with each piece of a reply while the model generates it. It runs on the thread
(or event loop) that receives the stream, so it must only hand the piece on."""


class LLMClient(Protocol):
    """The engine's model port. A client may also set ``reads_view = True`` and accept a
    ``view`` keyword: a structured account of the request for a model that reads
    values instead of chat text (River's offline planner): ``{"run": RunView}`` on a
    turn of the loop, ``{"task": name, "payload": {...}}`` on a tool's sub-request.
    Callers pass it only to such clients (``view_kwargs``). A client that can stream
    sets ``streams = True`` and accepts an ``on_delta`` keyword (``OnDelta``); the reply
    it returns is still the complete one (``delta_kwargs``)."""

    def complete(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tier: Tier, timeout_seconds: float
    ) -> LLMReply: ...


def view_kwargs(client: object, view: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``{"view": view()}`` for a client that reads the structured view, else nothing
    (the view is only built when it is read)."""
    return {"view": view()} if getattr(client, "reads_view", False) else {}


def delta_kwargs(client: object, on_delta: OnDelta | None) -> dict[str, Any]:
    """``{"on_delta": on_delta}`` for a client that streams, else nothing."""
    return {"on_delta": on_delta} if on_delta is not None and getattr(client, "streams", False) else {}
