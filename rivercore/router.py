"""RiverCore: the multi-LLM router over litellm.

litellm does the calling (one client for every provider, request and response
translation, tool call parsing, exception mapping, price data). River adds what
litellm lacks: the tier -> model choice per provider, the shared health window,
the per-provider rate limit, and the order in which providers are tried. The
health window and the rate counter are ports (``HealthWindow``, ``RateAcquire``):
the Django side (``executions.routing``) backs them with the shared cache and
PostgreSQL, so this module stays plain Python.
Failover and the per-provider retry are a short loop here rather than litellm's
``fallbacks`` / ``num_retries``: the order changes per call with provider health,
and every attempt must land in the health window with its own outcome and latency.

One call (``complete``) has a budget, ``timeout_seconds``. Each provider is tried
in turn; on one provider:

- a timeout, a 5xx or a 429 is retried up to ``max_retries`` times with
  exponential backoff and jitter, as long as the backoff plus another full attempt
  (the provider's own ``timeout_seconds``, capped by the budget) still fits in the
  budget; otherwise, or when the retries are spent, the router fails over;
- a connection error or an auth/not-found error fails over at once (retrying the
  same address or key would fail the same way);
- a 400/422 (the request itself is wrong) is reported without failover;
- a provider at its ``rate_limit_rpm`` for the current clock minute is skipped
  without sending anything (the counter is shared by every process: the
  ``rate_acquire`` port, ``executions.providers.provider_call_acquire`` in River). When every provider was skipped
  for its rate limit, the router waits for the next minute if that fits in the
  budget, then tries them again.

Only when every provider has failed does the call fail.

Which providers a run gets is decided outside (``executions.routing``: the
organization's ``LLMProvider`` rows, else the quick-start settings, else the
built-in offline planner, which is a litellm custom provider and so takes the
same path as a real model).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import litellm
from litellm import exceptions as litellm_errors
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from rivercore.llm import DeltaKind, LLMError, LLMErrorKind, LLMReply, LLMToolCall, OnDelta
from rivercore.planner.provider import ensure_registered as offline_ensure_registered
from rivercore.planner.rules import MODEL as OFFLINE_MODEL
from rivercore.planner.rules import PROVIDER as OFFLINE_PROVIDER
from rivercore.ports import blocking_call, drive
from rivercore.types.agents import Tier
from rivercore.view import VIEW_KEY

logger = logging.getLogger("river.router")
T = TypeVar("T")
litellm.suppress_debug_info = True  # River logs failures itself; no banners on stdout

TIER_FALLBACK = (Tier.BALANCED, Tier.FAST, Tier.CODING, Tier.REASONING)
RETRYABLE = frozenset({"server_error", "rate_limited", "timeout"})
RETRY_BACKOFF_SECONDS = 0.25  # first retry waits about this long, doubling after
RETRY_BACKOFF_MAX_SECONDS = 8.0
RATE_WINDOW_SECONDS = 60


def retry_backoff(retry: int, *, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``retry`` (1-based): exponential, capped, with
    jitter in [50 %, 100 %] so workers retrying the same outage spread out."""
    ceiling = min(RETRY_BACKOFF_MAX_SECONDS, RETRY_BACKOFF_SECONDS * 2 ** (retry - 1))
    return float(ceiling * (0.5 + rand() / 2))


class HealthReading(Protocol):
    """What the router reads of a provider's health: whether it is degraded and by
    how much (0 = healthy), to order the providers."""

    @property
    def degraded(self) -> bool: ...

    @property
    def degradation(self) -> float: ...


class HealthWindow(Protocol):
    """The providers' shared health window (port). Called in place, on the event loop of a
    hosted run: it must answer from memory and keep any I/O to rare, short calls."""

    def get(self, providers: list[str]) -> Mapping[str, HealthReading]: ...

    def record(self, provider: str, latency_ms: float, ok: bool) -> None: ...


RateAcquire = Callable[[str, int, int], bool]
"""``(provider window key, limit per minute, window start epoch s) -> bool``: take one
request slot of the provider's current minute, atomically for every process (port)."""


class ProviderConfig(BaseModel):
    """One provider as the router uses it (the spec's provider configuration)."""

    model_config = ConfigDict(frozen=True)

    name: str
    models: dict[Tier, str] = Field(min_length=1)  # tier -> litellm model id
    api_key: SecretStr | None = None
    base_url: str | None = None
    priority: int = 1  # lower is preferred
    max_retries: int = Field(default=2, ge=0)
    # Longest wait for one request; None: the call's whole budget.
    timeout_seconds: float | None = Field(default=None, gt=0)
    # Requests per clock minute over every process; None: no limit.
    rate_limit_rpm: int | None = Field(default=None, ge=1)
    health_key: str = ""  # cache key of the health window; defaults to name

    @property
    def window(self) -> str:
        return self.health_key or self.name

    def model_for(self, tier: Tier) -> tuple[str, Tier]:
        """The model for a tier, falling back to balanced, then any tier it has."""
        for candidate in (tier, *TIER_FALLBACK):
            if candidate in self.models:
                return self.models[candidate], candidate
        raise LookupError(self.name)  # unreachable: models is never empty


def _litellm_model(model: str, base_url: str | None) -> str:
    """A bare model name served from a base URL is an OpenAI-compatible server."""
    if base_url and "/" not in model:
        return f"openai/{model}"
    return model


_UNPRICED: set[str] = set()  # models litellm's price map did not know (bounded below)
_UNPRICED_MAX = 256


def model_cost(*, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """USD from litellm's bundled price map; None when the model has no price.
    The configured model name is priced, not the name a server reports about
    itself, so a local server calling itself "gpt-4o" is not billed as OpenAI.
    A model found without a price is remembered for the process (litellm's search for
    it, with its exceptions, cost about a millisecond a call); the bundled map does not
    change while River runs."""
    if model in _UNPRICED:
        return None
    attempts = [{"model": model}]
    if "/" in model:
        prefix, name = model.split("/", 1)
        attempts.insert(0, {"model": name, "custom_llm_provider": prefix})
    for kwargs in attempts:
        try:
            prompt_cost, completion_cost = litellm.cost_per_token(
                prompt_tokens=input_tokens, completion_tokens=output_tokens, **kwargs
            )
        except Exception:  # noqa: BLE001, S112 - litellm raises plain Exception for unmapped models
            continue
        return float(prompt_cost) + float(completion_cost)
    if len(_UNPRICED) < _UNPRICED_MAX:
        _UNPRICED.add(model)
    return None


def _failure_kind(exc: Exception) -> str | None:
    """Why an attempt failed, or None when the request itself is at fault (no
    other provider would accept it either)."""
    if isinstance(exc, litellm_errors.Timeout):
        return "timeout"
    if isinstance(exc, litellm_errors.ContextWindowExceededError | litellm_errors.BadRequestError |
                  litellm_errors.UnprocessableEntityError):
        return None
    if isinstance(exc, litellm_errors.APIConnectionError):
        return "connection_error"
    if isinstance(exc, litellm_errors.RateLimitError):
        return "rate_limited"
    if isinstance(exc, litellm_errors.AuthenticationError | litellm_errors.PermissionDeniedError
                  | litellm_errors.NotFoundError):
        return "misconfigured"
    return "server_error"


def _parse_tool_calls(raw_calls: Any) -> list[LLMToolCall]:
    return [_tool_call(index, raw.id, raw.function.name, raw.function.arguments)
            for index, raw in enumerate(raw_calls or [])]


def _tool_call(index: int, call_id: str | None, name: str | None, text: str | None) -> LLMToolCall:
    text = text or ""
    try:
        arguments = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        arguments = None
    if isinstance(arguments, dict):
        return LLMToolCall(id=call_id or f"call_{index}", name=name or "", arguments=arguments)
    # invalid JSON: the runner's argument validation reports it to the model
    return LLMToolCall(id=call_id or f"call_{index}", name=name or "", arguments={}, raw_arguments=text)


class _Relay:
    """Hands streamed pieces to the caller's ``on_delta``, and tells it to start over
    when an attempt that already sent some failed and another one begins."""

    def __init__(self, on_delta: OnDelta):
        self.on_delta = on_delta
        self.sent = False

    def begin(self) -> None:
        if self.sent:
            self.on_delta(DeltaKind.RESTART, "")
            self.sent = False

    def send(self, kind: DeltaKind, text: str) -> None:
        if text:
            self.sent = True
            self.on_delta(kind, text)


class StreamedReply:
    """A reply put together from stream chunks: the content in order, each tool call
    from the pieces with its ``index`` (its id and name come once, its arguments in
    pieces that only form JSON together), the usage of the last chunk that had one."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None

    def add(self, chunk: Any, relay: _Relay | None) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0):
                continue  # River asks for one choice
            delta = choice.delta
            reasoning = getattr(delta, "reasoning_content", None)
            if reasoning and relay is not None:
                relay.send(DeltaKind.REASONING, reasoning)
            if delta.content:
                self.content.append(delta.content)
                if relay is not None:
                    relay.send(DeltaKind.ANSWER, delta.content)
            for piece in getattr(delta, "tool_calls", None) or []:
                position = piece.index if piece.index is not None else len(self.calls)
                call = self.calls.setdefault(position, {"id": None, "name": None, "arguments": []})
                function = piece.function
                if piece.id:
                    call["id"] = piece.id
                if function is not None and function.name:
                    call["name"] = function.name
                if function is not None and function.arguments:
                    call["arguments"].append(function.arguments)

    def tool_calls(self) -> list[LLMToolCall]:
        return [_tool_call(order, call["id"], call["name"], "".join(call["arguments"]))
                for order, (_, call) in enumerate(sorted(self.calls.items()))]


class Router:
    """``LLMClient`` over a list of providers, with the shared health window and the
    rate counter as ports. ``sleep`` and ``clock`` (epoch seconds) are injectable so
    tests drive backoff and rate windows without waiting."""

    def __init__(self, providers: list[ProviderConfig], *, health: HealthWindow, rate_acquire: RateAcquire,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random):
        if not providers:
            raise ValueError("a router needs at least one provider")
        self.providers = list(providers)
        # The offline planner reads the run's structured view (rivercore.view) rather than chat text.
        self.reads_view = any(p.name == OFFLINE_PROVIDER for p in self.providers)
        self.health = health
        self.rate_acquire = rate_acquire
        self.sleep = sleep
        self.clock = clock
        self.rand = rand

    # One implementation of the call (retries, failover, rate limit) serves both entries:
    # ``acomplete`` awaits litellm's async client and runs the blocking ports off the
    # loop; ``complete`` (a tool's sub-request in its worker thread, agent generation)
    # drives the same coroutine with the blocking client, so it never suspends and
    # needs no event loop.

    async def _io(self, blocking: bool, fn: Callable[..., T], *args: Any) -> T:
        """A blocking port call (health window, rate counter)."""
        return await blocking_call(blocking, fn, *args)

    async def _sleep(self, blocking: bool, seconds: float) -> None:
        if self.sleep is not time.sleep:
            self.sleep(seconds)  # an injected clock (tests) decides what waiting means
        elif blocking:
            time.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    async def ordered(self, blocking: bool = False) -> list[ProviderConfig]:
        """Healthy providers by priority, then degraded ones, least degraded first
        (so when every provider is degraded the least degraded is tried first)."""
        # The health window is called in place: it must answer from memory (River's
        # keeps the window in process and reaches the shared cache once a second).
        health = self.health.get([p.window for p in self.providers])
        return sorted(
            self.providers,
            key=lambda p: (health[p.window].degraded, health[p.window].degradation, p.priority),
        )

    async def _slot(self, blocking: bool, provider: ProviderConfig) -> bool:
        """Whether a request may be sent to the provider now (its rate limit)."""
        if provider.rate_limit_rpm is None:
            return True
        window_start = int(self.clock() // RATE_WINDOW_SECONDS) * RATE_WINDOW_SECONDS
        return await self._io(blocking, self.rate_acquire, provider.window, provider.rate_limit_rpm, window_start)

    # Every provider is reached through litellm, which streams from all of them.
    streams = True

    def complete(self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tier: Tier,
                 timeout_seconds: float, view: dict[str, Any] | None = None,
                 on_delta: OnDelta | None = None) -> LLMReply:
        """One model call with retries and failover, blocking the calling thread. With
        ``on_delta`` the reply is streamed and each piece handed to it as it comes."""
        return drive(self._run(True, messages, tools, tier, timeout_seconds, view, on_delta))

    async def acomplete(self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tier: Tier,
                        timeout_seconds: float, view: dict[str, Any] | None = None,
                        on_delta: OnDelta | None = None) -> LLMReply:
        """One model call with retries and failover; the caller waits without holding a
        thread (litellm's async client)."""
        return await self._run(False, messages, tools, tier, timeout_seconds, view, on_delta)

    async def _run(self, blocking: bool, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tier: Tier,
                   timeout_seconds: float, view: dict[str, Any] | None, on_delta: OnDelta | None = None) -> LLMReply:
        failures: list[dict[str, Any]] = []
        relay = _Relay(on_delta) if on_delta is not None else None
        pending = await self.ordered(blocking)
        while True:
            limited: list[ProviderConfig] = []
            for provider in pending:
                if not await self._slot(blocking, provider):
                    logger.info("provider %s is at its rate limit (%s/min); not sent", provider.name,
                                provider.rate_limit_rpm)
                    limited.append(provider)
                    continue
                reply = await self._try_provider(blocking, provider, messages, tools, tier, timeout_seconds,
                                                 failures, view, relay)
                if reply is not None:
                    return reply
            if not limited:
                break
            wait = RATE_WINDOW_SECONDS - self.clock() % RATE_WINDOW_SECONDS
            if failures or wait >= timeout_seconds:
                # Another provider failed for real, or the window opens too late.
                failures.extend({"provider": p.name, "model": p.model_for(tier)[0], "error": "rate_limited",
                                 "attempts": 0, "message": f"at its limit of {p.rate_limit_rpm} requests a minute; "
                                                           "not sent"} for p in limited)
                break
            await self._sleep(blocking, wait)
            timeout_seconds -= wait
            pending = limited
        if failures and all(f["error"] == "timeout" for f in failures):
            # Every provider was merely slow: a turn error the runner retries (with
            # escalation), not an outage.
            raise LLMError(
                LLMErrorKind.TIMEOUT,
                f"No provider answered within {timeout_seconds:g} s.",
                {"attempts": failures},
            )
        raise LLMError(
            LLMErrorKind.PROVIDER_UNAVAILABLE,
            "Every configured model provider failed: "
            + "; ".join(f"{f['provider']} ({f['error']})" for f in failures),
            {"attempts": failures},
        )

    async def _try_provider(self, blocking: bool, provider: ProviderConfig, messages: list[dict[str, Any]],
                            tools: list[dict[str, Any]], tier: Tier, budget: float, failures: list[dict[str, Any]],
                            view: dict[str, Any] | None = None, relay: _Relay | None = None) -> LLMReply | None:
        """One provider with its retries, within ``budget`` seconds. The reply, or
        None after appending why it failed to ``failures``."""
        model, served_tier = provider.model_for(tier)
        deadline = self.clock() + budget
        retries = 0
        attempt_timeout = min(provider.timeout_seconds or budget, budget)
        while True:
            started = time.monotonic()
            if relay is not None:
                relay.begin()
            try:
                response = await self._call(blocking, provider, model, messages, tools, attempt_timeout, view, relay)
            except Exception as exc:  # noqa: BLE001 - every litellm failure is classified below
                latency = (time.monotonic() - started) * 1000
                kind = _failure_kind(exc)
                if kind is None:
                    raise LLMError(LLMErrorKind.BAD_RESPONSE, f"{provider.name} rejected the request: {exc}",
                                   {"provider": provider.name, "model": model}) from exc
                self.health.record(provider.window, latency, False)
                logger.warning("provider %s (%s) failed: %s", provider.name, model, kind)
                if kind in RETRYABLE and retries < provider.max_retries:
                    pause = retry_backoff(retries + 1, rand=self.rand)
                    left = deadline - self.clock() - pause
                    # Retry only when a full attempt still fits; else fail over now.
                    if left >= attempt_timeout or (kind != "timeout" and left > 0):
                        retries += 1
                        await self._sleep(blocking, pause)
                        attempt_timeout = min(attempt_timeout, max(left, 0.001))
                        if not await self._slot(blocking, provider):
                            failures.append({"provider": provider.name, "model": model, "error": "rate_limited",
                                             "attempts": retries, "message": f"{kind}, then at its rate limit"})
                            return None
                        continue
                failures.append({"provider": provider.name, "model": model, "error": kind,
                                 "attempts": retries + 1, "message": str(exc)[:300]})
                return None
            latency = (time.monotonic() - started) * 1000
            self.health.record(provider.window, latency, True)
            return self._reply(response, provider, model, served_tier, messages, int(latency))

    async def _call(self, blocking: bool, provider: ProviderConfig, model: str, messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]], timeout_seconds: float, view: dict[str, Any] | None = None,
                    relay: _Relay | None = None) -> Any:
        kwargs: dict[str, Any] = {
            "model": _litellm_model(model, provider.base_url),
            "messages": messages,
            "timeout": timeout_seconds,
            "num_retries": 0,
            "max_retries": 0,
        }
        if tools:
            kwargs["tools"] = tools
        if provider.base_url:
            kwargs["api_base"] = provider.base_url
        if provider.api_key is not None:
            kwargs["api_key"] = provider.api_key.get_secret_value()
        elif provider.base_url:
            kwargs["api_key"] = "not-needed"  # local servers (vLLM, Ollama) accept any key
        if view is not None and provider.name == OFFLINE_PROVIDER:
            kwargs["metadata"] = {VIEW_KEY: view}  # only the offline planner reads it; never sent to a provider
        if relay is not None:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
            stream = litellm.completion(**kwargs) if blocking else await litellm.acompletion(**kwargs)
            return await _collect(stream, blocking=blocking, relay=relay, timeout_seconds=timeout_seconds,
                                  model=kwargs["model"], provider=provider.name)
        if blocking:
            return litellm.completion(**kwargs)
        return await litellm.acompletion(**kwargs)

    @staticmethod
    def _reply(response: Any, provider: ProviderConfig, model: str, tier: Tier, messages: list[dict[str, Any]],
               latency_ms: int) -> LLMReply:
        if isinstance(response, StreamedReply):
            content = "".join(response.content) or None
            calls = response.tool_calls()
            usage = response.usage
        else:
            choice = response.choices[0] if response.choices else None
            message = choice.message if choice is not None else None
            content = getattr(message, "content", None)
            calls = _parse_tool_calls(getattr(message, "tool_calls", None))
            usage = getattr(response, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        if not input_tokens:
            input_tokens = litellm.token_counter(model=model, messages=messages)
        return LLMReply(
            content=content,
            tool_calls=calls,
            model=model,
            provider=provider.name,
            tier=tier,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=model_cost(model=model, input_tokens=input_tokens, output_tokens=output_tokens),
            latency_ms=latency_ms,
        )


async def _collect(stream: Any, *, blocking: bool, relay: _Relay, timeout_seconds: float, model: str,
                   provider: str) -> StreamedReply:
    """Read a litellm stream to its end, relaying each piece. A stream that outlives the
    attempt's timeout is a timeout; one that stops before the model said it had finished
    (litellm then ends it as if it had) is a server error: both are retried or failed
    over like any other failed attempt."""
    reply = StreamedReply()
    deadline = time.monotonic() + timeout_seconds

    def take(chunk: Any) -> None:
        reply.add(chunk, relay)
        if time.monotonic() > deadline:
            raise litellm_errors.Timeout(message=f"the stream ran past {timeout_seconds:g} s", model=model,
                                         llm_provider=provider)

    if blocking:
        for chunk in stream:
            take(chunk)
    else:
        async for chunk in stream:
            take(chunk)
    if getattr(stream, "received_finish_reason", "unknown") is None:
        raise litellm_errors.InternalServerError(message="the stream ended before the model finished its reply",
                                                 llm_provider=provider, model=model)
    return reply


def offline_provider() -> ProviderConfig:
    offline_ensure_registered()
    return ProviderConfig(
        name=OFFLINE_PROVIDER, models={tier: OFFLINE_MODEL for tier in Tier}, health_key=OFFLINE_PROVIDER
    )

