"""The reasoning loop (Reason, Act, Observe) with the runner's guards.

Plain Python: it takes a RunState and a Journal and returns an Outcome. The
stateless HTTP driver runs it with an in-memory journal; the durable driver with
one that commits each turn's steps to PostgreSQL. Guards (turn limit, stall,
identical-call loop, token budget, timeouts) are enforced here, never by the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pydantic

from rivercore import context as ctxmod
from rivercore import gate, observe, unknown_outcome
from rivercore.contracts import (
    ApprovalRequestPayload,
    ErrorCode,
    ErrorInfo,
    ExecutionRequest,
    ExecutionResponse,
    ExecutionResult,
    InteractionRequest,
    ResponseStatus,
    Step,
    StepStatus,
    StepType,
    Tokens,
    Usage,
)
from rivercore.errors import pydantic_details
from rivercore.events import (
    PartialEventType,
    interaction_required_event,
    observation_received_event,
    partial_event,
    tool_called_event,
    turn_complete_event,
    turn_reasoning_event,
)
from rivercore.fence import WriteFence, fence_bound
from rivercore.llm import (
    DeltaKind,
    LLMClient,
    LLMError,
    LLMErrorKind,
    LLMReply,
    LLMToolCall,
    OnDelta,
    delta_kwargs,
    view_kwargs,
)
from rivercore.observation import observation_byte_limit, observation_fit
from rivercore.ports import blocking_call, drive
from rivercore.previews import EFFECT_MOVED, effect_moved_preview, effect_preview
from rivercore.state import RUNNER_MODEL, RunState, call_hash, step
from rivercore.steps import tool_message
from rivercore.text import json_storable, text_storable
from rivercore.tools import RETRYABLE, Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, tool_for
from rivercore.types.agents import Tier
from rivercore.types.governance import Decision, GovernanceResult, ResolutionStatus
from rivercore.types.toolservers import model_name
from rivercore.view import run_view

logger = logging.getLogger("river.engine")
T = TypeVar("T")

INTENT_TIERS = {
    "PLATFORM_EXPLANATION": Tier.FAST,
    "DATA_DISCOVERY": Tier.FAST,
    "DATA_QUERY": Tier.CODING,
    "DATA_SOURCE_MANAGEMENT": Tier.BALANCED,
    "ACTION_EXECUTION": Tier.CODING,
    "GOVERNANCE_MANAGEMENT": Tier.BALANCED,
    "WORKSPACE_ADMIN": Tier.FAST,
    "STORAGE_MANAGEMENT": Tier.FAST,
    "OBSERVABILITY": Tier.BALANCED,
}
# The spec's max turns per classified intent, counted after the classifying turn; a
# run stops at the lower of this and the agent's own max_turns.
INTENT_MAX_TURNS = {
    "PLATFORM_EXPLANATION": 3,
    "DATA_DISCOVERY": 4,
    "DATA_QUERY": 6,
    "DATA_SOURCE_MANAGEMENT": 5,
    "ACTION_EXECUTION": 6,
    "GOVERNANCE_MANAGEMENT": 4,
    "WORKSPACE_ADMIN": 5,
    "STORAGE_MANAGEMENT": 3,
    "OBSERVABILITY": 4,
}
RETRY_DELAYS = (0.1, 0.2)  # transient tool failures: two retries with backoff
MAX_CONSECUTIVE_LLM_ERRORS = 3
LOOP_LIMIT = 3  # identical calls
STALL_LIMIT = 3  # turns without an executed tool call
BUDGET_FINALIZE_RATIO = 0.8

_KIND_CODES = {
    ToolErrorKind.FORBIDDEN: ErrorCode.GOVERNANCE_BLOCKED.value,
    ToolErrorKind.NOT_FOUND: "NOT_FOUND",
    ToolErrorKind.VALIDATION: ErrorCode.VALIDATION_ERROR.value,
    ToolErrorKind.TIMEOUT: ErrorCode.TIMEOUT.value,
    ToolErrorKind.TRANSIENT: "TRANSIENT",
    ToolErrorKind.FAILED: ErrorCode.AGENT_ERROR.value,
}


class RunInterrupted(Exception):
    """The run must stop now: cancelled, or this worker lost its lease."""


class Journal(Protocol):
    def record(self, state: RunState, new_step: Step) -> None: ...

    def emit(self, event_type: str, payload: dict[str, Any]) -> None: ...

    def flush(self, state: RunState) -> None: ...

    def settle(self) -> None:
        """Block until everything flushed so far is durable (a journal may commit a
        flush after ``flush`` returns); raise ``RunInterrupted`` if it is not."""


@dataclass
class MemoryJournal:
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def record(self, state: RunState, new_step: Step) -> None:
        return None

    def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        self.events.append((event_type, payload))

    def flush(self, state: RunState) -> None:
        return None

    def settle(self) -> None:
        return None


class PartialSink(Protocol):
    """Where a run's partial events go (port): straight to live listeners, never to the
    journal. ``watched`` says whether anyone listens now; it is asked before each model
    call, inline, so it must answer from memory or in one short round trip. The engine
    streams a model call only when it says yes: a run nobody watches takes the plain
    call. ``send`` must only hand the event on (it is called for every piece)."""

    def watched(self) -> bool: ...

    def send(self, event: dict[str, Any]) -> None: ...


_PARTIAL_TYPES = {DeltaKind.ANSWER: PartialEventType.ANSWER_DELTA,
                  DeltaKind.REASONING: PartialEventType.REASONING_DELTA}


def partial_relay(sink: PartialSink, *, execution_id: int, turn: int) -> OnDelta:
    """The ``on_delta`` of one model call: each piece as a partial event with its index
    in the turn; a restart (the call is tried again) starts the indexes over."""
    counts: dict[DeltaKind, int] = {}

    def on_delta(kind: DeltaKind, text: str) -> None:
        if kind == DeltaKind.RESTART:
            counts.clear()
            return
        index = counts.get(kind, 0)
        counts[kind] = index + 1
        sink.send(partial_event(event_type=_PARTIAL_TYPES[kind], execution_id=execution_id, turn=turn, index=index,
                                text=text))

    return on_delta


class EngineHooks(Protocol):
    def tool_context_extras(self) -> dict[str, Any]: ...

    def auto_approved(
        self, state: RunState, *, call_id: str, tool_name: str, arguments: dict[str, Any], condition: str
    ) -> None: ...

    def approved_call_failed(self, state: RunState, *, call_id: str, tool_name: str, error: dict[str, Any]) -> None:
        """A call a person approved was dispatched and failed (optional hook)."""

    def standing_approval(self, state: RunState, *, call_id: str, tool_name: str, arguments: dict[str, Any],
                          preview: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Scopes (optional hook): the resolution of an earlier approval for this run or
        conversation, or of a standing grant, that lets this call through without asking
        (recorded and audited by the hook; its ``effect_terms`` bind the write to
        ``preview``, the call's effect computed just now), or None to ask, or
        ``{"declined": why}`` to ask and tell the approver why a grant did not apply."""


class ToolRunner(Protocol):
    """Runs one tool call within ``timeout`` seconds (``run_tool``); ``on_exit`` runs in
    the thread that ran the handler when it is done."""

    def __call__(self, tool: Tool, ctx: ToolContext, args: pydantic.BaseModel, timeout: float,
                 on_exit: Callable[[], None] | None = None) -> Awaitable[object]: ...


class Outcome(pydantic.BaseModel):
    status: ResponseStatus
    error: ErrorInfo | None = None


_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="river-tool")


def run_tool_in_thread(tool: Tool, ctx: ToolContext, args: pydantic.BaseModel, timeout: float,
                       on_exit: Callable[[], None] | None = None) -> object:
    """Run a handler with a hard deadline. A handler that overruns is abandoned and the
    call reports a timeout; its thread may finish in the background, but the write
    fence bound to it is closed first, so a write it started can no longer commit
    (rivercore.fence). A write that committed just before the fence closed is reported
    as done, not as a timeout."""
    future, fence = _tool_submit(tool, ctx, args, timeout, on_exit)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        return _tool_overran(tool, fence, future, timeout)


async def run_tool(tool: Tool, ctx: ToolContext, args: pydantic.BaseModel, timeout: float,
                   on_exit: Callable[[], None] | None = None) -> object:
    """``run_tool_in_thread`` for the async loop: the handler runs in the same bounded
    pool under the same fence, and the run awaits it without holding a thread of its own."""
    future, fence = _tool_submit(tool, ctx, args, timeout, on_exit)
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
    except TimeoutError:
        return _tool_overran(tool, fence, future, timeout)


def _tool_submit(tool: Tool, ctx: ToolContext, args: pydantic.BaseModel, timeout: float,
                 on_exit: Callable[[], None] | None) -> tuple[Future[object], WriteFence]:
    fence = WriteFence(deadline=time.monotonic() + timeout)

    def call() -> object:
        try:
            with fence_bound(fence):
                return tool.handler(ctx, args)
        finally:
            if on_exit:
                on_exit()

    return _pool.submit(call), fence


def _tool_overran(tool: Tool, fence: WriteFence, future: Future[object], timeout: float) -> object:
    settled = fence.close()
    if future.done():
        return future.result()  # it finished (or failed) while the fence was closing
    message = f"{tool.name} did not finish within {timeout:g} s"
    if tool.writes:
        message += (
            "; its write was not committed" if settled
            else "; its COMMIT was in flight, so the write may or may not have been applied"
        )
    raise ToolError(ToolErrorKind.TIMEOUT, message) from None


def turn_limit(state: RunState) -> int:
    """The run's turn limit: the agent's max_turns, lowered once the intent is known
    to the turn that classified it plus the intent's max turns (the spec's table
    counts the turns that follow the classify_intent turn)."""
    limit = state.request.agent_config.model_settings.max_turns
    if state.intent in INTENT_MAX_TURNS:
        limit = min(limit, _intent_turn(state) + INTENT_MAX_TURNS[state.intent])
    return limit


def _intent_turn(state: RunState) -> int:
    """The turn whose classify_intent call gave the run its current intent."""
    for past in reversed(state.steps):
        if (past.step_type == StepType.OBSERVATION and past.tool_name == "classify_intent"
                and past.status == StepStatus.COMPLETED and isinstance(past.output, dict)
                and isinstance(past.output.get("result"), dict)
                and past.output["result"].get("intent_type") == state.intent):
            return past.turn
    return 0


def select_tier(state: RunState) -> Tier:
    """The spec's per-turn priority order; an agent's preferred_tier overrides all but
    error escalation."""
    preferred = state.request.agent_config.model_settings.preferred_tier
    if state.last_turn_failed or any(n >= 2 for n in state.tool_error_streak.values()):
        return Tier.REASONING
    if preferred:
        return preferred
    if state.intent is None and state.turn == 0:
        return Tier.FAST
    if state.last_dispatched_tool in {"generate_query", "execute_query"}:
        return Tier.CODING
    if state.intent in INTENT_TIERS:
        return INTENT_TIERS[state.intent]
    return Tier.BALANCED


def _river_names(reply: LLMReply, request: ExecutionRequest) -> LLMReply:
    """The reply with each call named as River names the tool: an MCP tool's function
    name is a sanitized form of ``mcp:<server>/<tool>`` (rivercore.types.toolservers),
    and the run's steps, policies and audit name the tool itself."""
    tools = request.agent_config.mcp_tools
    if not tools or not reply.tool_calls:
        return reply
    names = {model_name(spec.name): spec.name for spec in tools}
    if not any(call.name in names for call in reply.tool_calls):
        return reply
    calls = [call.model_copy(update={"name": names[call.name]}) if call.name in names else call
             for call in reply.tool_calls]
    return reply.model_copy(update={"tool_calls": calls})


def _assistant_message(reply: LLMReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw_arguments or json.dumps(call.arguments)},
            }
            for call in reply.tool_calls
        ]
    return message


_STORED_TEXT = frozenset({"input", "output", "messages", "error"})


def _turn_duration_ms(state: RunState) -> int:
    """The time the turn's steps took (model call, tools), also across a pause."""
    return sum(s.duration_ms or 0 for s in state.steps if s.turn == state.turn)


def _view(state: RunState) -> dict[str, Any]:
    return {"run": run_view(state).model_dump(mode="json")}


def _summarise(value: object, limit: int = 240) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Engine:
    llm: LLMClient
    journal: Journal = field(default_factory=MemoryJournal)
    hooks: EngineHooks | None = None
    policy: gate.PolicyChecker = field(default_factory=gate.policy_checker)
    # None: the agent's model_config.run_timeout_seconds (default one hour).
    execution_timeout_seconds: float | None = None
    compress_threshold_tokens: int = 24_000
    tool_thread_exit: Callable[[], None] | None = None
    # Ports with plain defaults: the tool runner (a handler in the bounded pool, under
    # the write fence), the wall clock (epoch seconds) and the pause between retries.
    tool_runner: ToolRunner = field(default_factory=lambda: run_tool)
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # True: every port is called inline on the thread driving the run and the loop never
    # suspends (``run`` drives it without an event loop; a tool runs under
    # ``run_tool_in_thread``). False: the run is awaited on a live loop (a run host).
    blocking: bool = False
    # Live listeners of the run's partial events (None: nobody; the model is not streamed).
    partials: PartialSink | None = None

    # --- ports -------------------------------------------------------------------------
    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking port call (journal, policy checker, hooks): inline when the run is
        driven without a loop, else off the loop on the thread that drives the run (for
        runs hosted on a shared loop, the host's one I/O thread)."""
        return await blocking_call(self.blocking, fn, *args, **kwargs)

    async def _complete(self, **request: Any) -> LLMReply:
        """The model port: awaited when the client is async (the router) and the run is
        on a live loop (a run host), otherwise a blocking call."""
        acomplete = getattr(self.llm, "acomplete", None)
        if acomplete is not None and not self.blocking:
            reply: LLMReply = await acomplete(**request)
            return reply
        return await self._io(self.llm.complete, **request)

    def _streaming(self, state: RunState, turn: int) -> dict[str, Any]:
        """``on_delta`` for a model call when the client can stream and someone is
        watching the run, else nothing (the plain call)."""
        if self.partials is None or not getattr(self.llm, "streams", False) or not self.partials.watched():
            return {}
        return delta_kwargs(self.llm, partial_relay(self.partials, execution_id=state.request.execution_id,
                                                    turn=turn))

    async def _run_tool(self, tool: Tool, ctx: ToolContext, parsed: pydantic.BaseModel, timeout: float) -> object:
        if self.blocking and self.tool_runner is run_tool:  # an injected runner (a replay) is used as given
            return run_tool_in_thread(tool, ctx, parsed, timeout, self.tool_thread_exit)
        return await self.tool_runner(tool, ctx, parsed, timeout, self.tool_thread_exit)

    async def _sleep(self, seconds: float) -> None:
        if self.sleep is not time.sleep:
            self.sleep(seconds)  # an injected clock (tests) decides what waiting means
        elif self.blocking:
            time.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    # --- bookkeeping -----------------------------------------------------------------
    def _add(self, state: RunState, step_type: StepType, **fields: Any) -> Step:
        # Model replies and tool arguments may carry NUL or lone surrogates: escaped
        # here, so neither the journal nor the run's result refuses them (rivercore.text).
        fields = {key: json_storable(value) if key in _STORED_TEXT else value for key, value in fields.items()}
        new = step(state, step_type, **fields)
        state.apply(new)
        self.journal.record(state, new)
        observe.step_added(state, new)
        return new

    def _notice(self, state: RunState, text: str, **extra: Any) -> None:
        self._add(
            state, StepType.REASONING, model_used=RUNNER_MODEL, input={"notice": text},
            output={"notice": True, **extra}, messages=[{"role": "system", "content": text}],
        )

    # --- the loop --------------------------------------------------------------------
    def run(self, state: RunState) -> Outcome:
        """Run the loop to its end or next pause from synchronous code (the stateless API,
        a segment run inside its task, a test): every port is called inline on this
        thread and the coroutine is driven without an event loop."""
        self.blocking = True
        return drive(self.arun(state))

    async def arun(self, state: RunState) -> Outcome:
        cfg = state.request.agent_config
        settings = cfg.model_settings
        while True:
            paused = await self._process_open_calls(state)
            if paused is not None:
                await self._io(self.journal.flush, state)
                return paused
            if state.open_calls and state.turn:
                self.journal.emit(*turn_complete_event(turn=state.turn, duration_ms=_turn_duration_ms(state)))
            if state.final_answer is None and any(c.name == "finalize" for c in state.open_calls):
                answer = next(c for c in state.open_calls if c.name == "finalize").arguments.get("answer", "")
                self._add(state, StepType.FINAL_ANSWER, output={"answer": str(answer)})
            await self._io(self.journal.flush, state)
            if state.final_answer is not None:
                return Outcome(status=ResponseStatus.SUCCESS)

            if self._run_seconds_left(state) <= 0:
                return await self._terminate(
                    state, ResponseStatus.TIMEOUT,
                    ErrorInfo(code=ErrorCode.TIMEOUT,
                              message=f"The execution ran past its time limit of {self._run_timeout(state):g} s.",
                              recoverable=True),
                )
            budget = settings.token_budget
            if state.total_tokens >= budget:
                return await self._terminate(
                    state, ResponseStatus.BUDGET_EXCEEDED,
                    ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED,
                              message=f"Used {state.total_tokens} of {budget} tokens."),
                )
            if state.total_tokens >= BUDGET_FINALIZE_RATIO * budget and state.turn_limit_override is None:
                self._notice(state, ctxmod.BUDGET_NOTICE, turn_limit=state.turn + 1)
            turn_cap = turn_limit(state)
            limit = turn_cap
            if state.turn_limit_override is not None:
                limit = min(limit, state.turn_limit_override)
            if state.turn >= limit:
                if state.turn_limit_override is not None and state.turn < turn_cap:
                    return await self._terminate(
                        state, ResponseStatus.BUDGET_EXCEEDED,
                        ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED,
                                  message="The token budget forced finalisation and the model did not conclude."),
                    )
                return await self._turn_limit(state)
            last = state.steps[-1] if state.steps else None
            already_nudged = last is not None and (last.input or {}) == {"notice": ctxmod.NUDGE}
            if state.stalled_turns and state.stalled_turns % STALL_LIMIT == 0 and not already_nudged:
                self._notice(state, ctxmod.NUDGE)

            outcome = await self._reason(state)
            if outcome is not None:
                await self._io(self.journal.flush, state)
                return outcome

    def _run_timeout(self, state: RunState) -> float:
        if self.execution_timeout_seconds is not None:
            return self.execution_timeout_seconds
        return float(state.request.agent_config.model_settings.run_timeout_seconds)

    def _run_seconds_left(self, state: RunState) -> float:
        """The time limit counts the run's running time (``RunState.run_ms``): a run that
        waited overnight for an approval resumes with the time it had left when it paused."""
        return self._run_timeout(state) - state.run_ms(self.clock()) / 1000

    def _llm_timeout(self, state: RunState) -> float:
        """A model call may not outlive the run's deadline (at least one second, so
        a run at its last moment still gets an answer or a clean timeout)."""
        configured = state.request.agent_config.model_settings.llm_timeout_seconds
        return max(1.0, min(float(configured), self._run_seconds_left(state)))

    async def _reason(self, state: RunState) -> Outcome | None:
        turn = state.turn + 1
        if state.request.agent_config.governance_policies:
            verdict = await self._io(gate.before_llm, self.policy, state)
        else:  # nothing to check (no policies): no hop off the loop for it
            verdict = gate.before_llm(self.policy, state)
        if verdict.decision == Decision.BLOCKED:
            self._add(state, StepType.GOVERNANCE_CHECK, turn=turn, governance_decision=Decision.BLOCKED,
                      status=StepStatus.BLOCKED, output={"reason": verdict.reason, "policy": verdict.policy_matched})
            return await self._terminate(
                state, ResponseStatus.FAILED,
                ErrorInfo(code=ErrorCode.GOVERNANCE_BLOCKED, message=verdict.reason,
                          details={"policy": verdict.policy_matched}),
            )
        tier = select_tier(state)
        messages = ctxmod.compress(state.messages(), threshold_tokens=self.compress_threshold_tokens,
                                   estimated_tokens=state.estimated_context_tokens)
        started, started_at, timeout = time.monotonic(), self.clock(), self._llm_timeout(state)

        def observed(**outcome: Any) -> int:
            duration = int((time.monotonic() - started) * 1000)
            observe.model_called(state, observe.ModelCall(
                turn=turn, tier=tier.value, messages=messages, tools=state.tool_schemas, timeout_seconds=timeout,
                started_at=started_at, duration_ms=duration, **outcome))
            return duration

        try:
            reply = await self._complete(
                messages=messages, tools=state.tool_schemas, tier=tier,
                timeout_seconds=timeout, **view_kwargs(self.llm, lambda: _view(state)),
                **self._streaming(state, turn),
            )
        except LLMError as exc:
            duration = observed(error=exc)
            self._add(state, StepType.ERROR, turn=turn, status=StepStatus.FAILED, duration_ms=duration,
                      model_tier=tier.value, error=exc.message,
                      output={"llm_error": exc.kind.value, "details": exc.details})
            if exc.kind == LLMErrorKind.PROVIDER_UNAVAILABLE:
                return await self._terminate(
                    state, ResponseStatus.FAILED,
                    ErrorInfo(code=ErrorCode.PROVIDER_UNAVAILABLE, message=exc.message, recoverable=True,
                              details=exc.details),
                )
            if state.consecutive_llm_errors >= MAX_CONSECUTIVE_LLM_ERRORS:
                code = ErrorCode.TIMEOUT if exc.kind == LLMErrorKind.TIMEOUT else ErrorCode.LLM_ERROR
                return await self._terminate(state, ResponseStatus.FAILED,
                                       ErrorInfo(code=code, message=exc.message, recoverable=True))
            return None
        duration = observed(reply=reply)
        tokens = Tokens(input=reply.input_tokens, output=reply.output_tokens)
        if reply.is_empty:
            self._add(state, StepType.ERROR, turn=turn, status=StepStatus.FAILED, duration_ms=duration,
                      model_used=reply.model, model_tier=reply.tier.value, provider=reply.provider, tokens=tokens,
                      error="The model returned an empty response.",
                      output={"llm_error": "empty_response", "cost_usd": reply.cost_usd})
            if state.consecutive_llm_errors >= MAX_CONSECUTIVE_LLM_ERRORS:
                return await self._terminate(
                    state, ResponseStatus.FAILED,
                    ErrorInfo(code=ErrorCode.LLM_ERROR, message="The model kept returning empty responses.",
                              recoverable=True),
                )
            return None
        shown = _assistant_message(reply)  # the names as the model gave them
        reply = _river_names(reply, state.request)
        self._add(
            state, StepType.REASONING, turn=turn, duration_ms=duration, model_used=reply.model,
            model_tier=reply.tier.value, provider=reply.provider, tokens=tokens,
            input={"messages": len(messages), "tier": tier.value},
            output={"content": reply.content, "tool_calls": [c.model_dump() for c in reply.tool_calls],
                    "cost_usd": reply.cost_usd},
            messages=[shown],
        )
        self.journal.emit(*turn_reasoning_event(
            turn=turn, thought_summary=_summarise(reply.content or ", ".join(c.name for c in reply.tool_calls)),
            model_used=reply.model, step_number=state.steps[-1].step_number,
        ))
        if not reply.tool_calls:
            self._add(state, StepType.FINAL_ANSWER, output={"answer": reply.content or ""})
        return None

    # --- tool calls ------------------------------------------------------------------
    async def _process_open_calls(self, state: RunState) -> Outcome | None:
        if state.final_answer is not None:
            return None  # a call that ends the run answered already: nothing after it runs
        for call in state.unfinished_calls():
            outcome = await self._handle_call(state, call)
            if outcome is not None:
                return outcome
        return None

    def _refuse(self, state: RunState, call: LLMToolCall, kind: ToolErrorKind, message: str,
                details: dict[str, Any] | None = None, code: str | None = None) -> None:
        error = {"code": code or _KIND_CODES[kind], "message": message, "details": details or {}}
        self._add(state, StepType.OBSERVATION, tool_name=call.name, call_id=call.id, input=call.arguments,
                  status=StepStatus.FAILED, error=message, output={"error": error},
                  messages=[tool_message(call.id, call.name, {"error": error}, ok=False)])

    async def _handle_call(self, state: RunState, call: LLMToolCall) -> Outcome | None:
        cfg = state.request.agent_config
        waiting = state.pending
        if waiting is not None and waiting.kind == "child" and waiting.call_id == call.id:
            # Its child run is under way (started before a crash or a duplicate segment):
            # the run keeps waiting for it; the child's end appends the observation.
            return Outcome(status=ResponseStatus.AWAITING_CHILD)
        tool = tool_for(call.name, cfg)
        arguments = state.arg_overrides.get(call.id, call.arguments)
        resolution = state.resolutions.get(call.id)
        resumed = call.id in state.intents_recorded or resolution is not None or call.id in state.governance_pending

        if not resumed and state.call_counts.get(call_hash(call.name, call.arguments), 0) >= LOOP_LIMIT:
            count = state.call_counts[call_hash(call.name, call.arguments)]
            message = f"{call.name} was called {count} times with identical arguments; the runner stopped the run."
            self._add(state, StepType.ERROR, tool_name=call.name, call_id=call.id, status=StepStatus.FAILED,
                      error=message, input=call.arguments,
                      output={"code": ErrorCode.INFINITE_TOOL_LOOP.value, "tool_name": call.name, "count": count,
                              "arguments": call.arguments})
            self._refuse(state, call, ToolErrorKind.FAILED, message, code=ErrorCode.INFINITE_TOOL_LOOP.value)
            return await self._terminate(state, ResponseStatus.FAILED, ErrorInfo(
                code=ErrorCode.INFINITE_TOOL_LOOP, message=message,
                details={"tool_name": call.name, "arguments": call.arguments, "count": count}))

        if call.id in state.intents_recorded and not (tool and tool.idempotent):
            if tool is not None and unknown_outcome.asks_a_person(tool_name=call.name, writes=tool.writes,
                                                                  idempotent=tool.idempotent):
                return self._outcome_unknown_pause(state, call, arguments)
            message = (f"The outcome of {call.name} is unknown: the run was interrupted after the call was sent. "
                       "Do not assume it succeeded or failed; check the data before trying again.")
            self._refuse(state, call, ToolErrorKind.FAILED, message, code="OUTCOME_UNKNOWN")
            return None
        if unknown_outcome.confirmation(resolution) == unknown_outcome.DONE:
            self._outcome_confirmed(state, call, arguments, resolution or {})
            return None
        if tool is None or call.name not in cfg.tools:
            self._refuse(state, call, ToolErrorKind.FAILED, f"Tool {call.name!r} is not available to this agent.",
                         code=ErrorCode.INVALID_TOOL.value)
            return None
        permissions = set(state.request.user_context.permissions)
        if tool.permission and tool.permission not in permissions:
            self._refuse(state, call, ToolErrorKind.FORBIDDEN,
                         f"Permission denied: {call.name} needs {tool.permission}.")
            return None
        try:
            parsed = tool.input_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            self._refuse(state, call, ToolErrorKind.VALIDATION, f"Invalid arguments for {call.name}.",
                         details=pydantic_details(exc))
            return None
        args = parsed.model_dump(mode="json", exclude_none=True)

        if tool.category == ToolCategory.INTERACTION:
            request = InteractionRequest.model_validate(args)
            self._add(state, StepType.INTERACTION, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=request.model_dump(mode="json"), status=StepStatus.PENDING)
            self.journal.emit(*interaction_required_event(turn=state.turn, request=request.model_dump(mode="json")))
            return Outcome(status=ResponseStatus.AWAITING_INTERACTION)

        if tool.category == ToolCategory.EXECUTION or tool.writes:
            # The registry says what writes, never the model: a writing tool is
            # governed whatever its category.
            blocked = await self._govern(state, call, tool, args, resolution)
            if blocked is not None:
                return blocked if isinstance(blocked, Outcome) else None
        paused = await self._dispatch(state, call, tool, parsed, args)
        if paused is not None:
            return paused
        if resolution is not None and resolution.get("status") != ResolutionStatus.REJECTED and tool.writes:
            return await self._approved_write_checked(state, call, resolution)
        return None

    async def _approved_write_checked(self, state: RunState, call: LLMToolCall,
                                resolution: dict[str, Any]) -> Outcome | None:
        """A write a person approved and that then failed (after the tool's own retries
        of transient errors) ends the run ``failed``: the run must not go on to report
        success as if the approved change had been made, and the approver is told."""
        observed = state.steps[-1]
        if observed.step_type != StepType.OBSERVATION or observed.status != StepStatus.FAILED:
            return None
        error = dict((observed.output or {}).get("error") or {})
        approver = resolution.get("resolved_by")
        if self.hooks is not None and approver not in (None, "auto") and hasattr(self.hooks, "approved_call_failed"):
            await self._io(self.hooks.approved_call_failed, state, call_id=call.id, tool_name=call.name,
                           error=error)
        raw_details = error.get("details")
        details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
        return await self._terminate(state, ResponseStatus.FAILED, ErrorInfo(
            code=ErrorCode.AGENT_ERROR,
            message=f"The approved {call.name} call failed: {error.get('message') or observed.error}",
            recoverable=bool(details.get("transient")),
            details={"approved_call_failed": True, "tool_name": call.name, "call_id": call.id,
                     "resolved_by": approver, "error": error},
        ))

    async def _govern(self, state: RunState, call: LLMToolCall, tool: Tool, args: dict[str, Any],
                resolution: dict[str, Any] | None) -> Outcome | bool | None:
        """None to dispatch; True when handled without dispatch; an Outcome to pause."""
        if unknown_outcome.confirmation(resolution) == unknown_outcome.NOT_DONE:
            return await self._outcome_retry_govern(state, call, tool, args)
        if resolution is not None:
            status = resolution.get("status")
            if status == ResolutionStatus.REJECTED:
                comment = resolution.get("resolution_comment") or "no comment"
                message = f"The approver rejected this {call.name} call: {comment}"
                self._add(state, StepType.OBSERVATION, tool_name=call.name, call_id=call.id, input=args,
                          status=StepStatus.BLOCKED, error=message,
                          output={"rejected": True, "comment": comment},
                          messages=[tool_message(call.id, call.name, {"rejected": True, "comment": comment},
                                                  ok=False)])
                return True
            if status == ResolutionStatus.EDITED_APPROVED:
                verdict = await self._io(gate.before_tool, self.policy, state, tool, args, confidence=None)
                if verdict.decision == Decision.BLOCKED:
                    return self._blocked(state, call, args, verdict)
            return None

        confidence = self._confidence(state)
        verdict = await self._io(gate.before_tool, self.policy, state, tool, args, confidence=confidence)
        decision = verdict.decision
        common = {"tool_name": call.name, "tool_category": tool.category.value, "call_id": call.id, "input": args,
                  "governance_decision": decision}
        policy = {"reason": verdict.reason, "policy_matched": verdict.policy_matched,
                  "policy_id": verdict.policy_id, "policy_type": verdict.policy_type,
                  "enforcement": verdict.enforcement, "warnings": verdict.warnings}
        if decision == Decision.BLOCKED:
            self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.BLOCKED, output=policy, **common)
            return self._blocked(state, call, args, verdict, record=False)
        if decision == Decision.SUGGEST_ONLY:
            self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.COMPLETED, output=policy, **common)
            note = {"suggestion_recorded": True,
                    "message": f"Action level {state.request.agent_config.action_level.value}: {call.name} was "
                               "recorded as a recommendation and not executed."}
            self._add(state, StepType.OBSERVATION, tool_name=call.name, call_id=call.id, input=args,
                      status=StepStatus.BLOCKED, output=note, messages=[tool_message(call.id, call.name, note,
                                                                                       ok=True)])
            return True
        if decision == Decision.APPROVAL_REQUIRED:
            return await self._approval_gate(state, call, tool, args, verdict, confidence=confidence, common=common,
                                       policy=policy)
        self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.COMPLETED, output=policy, **common)
        return None

    def _outcome_unknown_pause(self, state: RunState, call: LLMToolCall, args: dict[str, Any]) -> Outcome:
        """An MCP write sent and never journaled: the run pauses on an "unknown outcome"
        request (rivercore.unknown_outcome); nothing is sent on River's own."""
        payload = unknown_outcome.payload(tool_name=call.name, arguments=args,
                                          reasoning_summary=self._reasoning_summary(state))
        self._add(state, StepType.GOVERNANCE_CHECK, tool_name=call.name, call_id=call.id, input=args,
                  governance_decision=Decision.APPROVAL_REQUIRED, status=StepStatus.PENDING,
                  output={"reason": unknown_outcome.CARD_TITLE, "unknown_outcome": True,
                          "approval_request": payload.model_dump(mode="json")})
        return Outcome(status=ResponseStatus.AWAITING_APPROVAL)

    def _outcome_confirmed(self, state: RunState, call: LLMToolCall, args: dict[str, Any],
                           resolution: dict[str, Any]) -> None:
        """A person confirmed the call happened: that is its observation; nothing is sent."""
        body = {"confirmed_by_person": True, "outcome": unknown_outcome.DONE,
                "message": (f"A person confirmed that {call.name} happened. River did not send it again; "
                            "its result was never recorded.")}
        self._add(state, StepType.OBSERVATION, tool_name=call.name, call_id=call.id, input=args,
                  status=StepStatus.COMPLETED,
                  output={"result": body, "summary": body["message"], "confirmed_by": resolution.get("resolved_by")},
                  messages=[tool_message(call.id, call.name, body, ok=True)])

    async def _outcome_retry_govern(self, state: RunState, call: LLMToolCall, tool: Tool,
                                    args: dict[str, Any]) -> Outcome | bool | None:
        """A person said the call did not happen: it goes through the gate again. An
        approval already given for this call holds (no second one), unless the gate
        now blocks it; a call that needed none and now does asks for one."""
        verdict = await self._io(gate.before_tool, self.policy, state, tool, args, confidence=None)
        if verdict.decision == Decision.BLOCKED:
            return self._blocked(state, call, args, verdict)
        if verdict.decision == Decision.SUGGEST_ONLY:
            return await self._govern(state, call, tool, args, None)
        if verdict.decision == Decision.APPROVAL_REQUIRED and not unknown_outcome.earlier_approval(state.steps,
                                                                                                   call.id):
            return await self._govern(state, call, tool, args, None)
        self._add(state, StepType.GOVERNANCE_CHECK, tool_name=call.name, tool_category=tool.category.value,
                  call_id=call.id, input=args, governance_decision=Decision.PROCEED, status=StepStatus.COMPLETED,
                  output={"reason": verdict.reason, "policy_matched": verdict.policy_matched,
                          "unknown_outcome_retry": True})
        return None

    async def _approval_gate(self, state: RunState, call: LLMToolCall, tool: Tool, args: dict[str, Any],
                       verdict: GovernanceResult, *, confidence: float | None, common: dict[str, Any],
                       policy: dict[str, Any], extra_risk: str = "") -> Outcome | None:
        """APPROVAL_REQUIRED: pause for a human, unless one of the agent's auto-approve
        conditions explicitly holds for this call (then None: go on)."""
        rules = state.request.agent_config.approval_rules
        payload = ApprovalRequestPayload(
            tool_name=call.name,
            proposed_payload=args,
            reasoning_summary=self._reasoning_summary(state),
            risk_context=(f"{'Write' if tool.writes else 'Execution'} tool {call.name}. {verdict.reason}"
                          + (f" {extra_risk}" if extra_risk else "")),
            confidence_score=confidence,
            auto_approve_eligible=any(rule.tool == call.name for rule in rules.auto_approve_conditions),
            required_approvals=verdict.required_approvals,  # quorum (governance.quorum)
            rows=policy.get("total_rows"),
        )
        condition = await self._io(gate.auto_approved, self.policy, state, call.name, {
            "confidence_score": confidence, "tool": {"name": call.name}, "args": args})
        if condition:
            resolution = {"status": ResolutionStatus.APPROVED.value, "resolved_by": "auto", "auto_approved": True,
                          "condition": condition}
            self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.COMPLETED,
                      output={**policy, "approval_request": payload.model_dump(mode="json"),
                              "resolution": resolution}, **common)
            if self.hooks:
                await self._io(self.hooks.auto_approved, state, call_id=call.id, tool_name=call.name,
                               arguments=args, condition=condition)
            return None
        # The effect (issue 29 §1), computed before a scope or a grant is asked: one that
        # lets the call through binds the write to it (the write checks it in its own
        # transaction), and a grant's row ceiling is held to its row count.
        payload.preview = await self._effect_preview(state, call, tool, args, verdict)
        standing = await self._standing_approval(state, call, args, payload.preview)  # scopes: governance.grants
        if standing is not None and standing.get("declined"):
            payload.risk_context = f"{payload.risk_context} {standing['declined']}"
        elif standing is not None:
            self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.COMPLETED,
                      output={**policy, "approval_request": payload.model_dump(mode="json"),
                              "resolution": standing}, **common)
            return None
        self._add(state, StepType.GOVERNANCE_CHECK, status=StepStatus.PENDING,
                  output={**policy, "approval_request": payload.model_dump(mode="json")}, **common)
        return Outcome(status=ResponseStatus.AWAITING_APPROVAL)

    async def _effect_preview(self, state: RunState, call: LLMToolCall, tool: Tool, args: dict[str, Any],
                              verdict: GovernanceResult) -> dict[str, Any] | None:
        """The call's effect for the approval card (rivercore.previews), computed off the
        loop. None for a call that writes nothing, and in a replay (an injected tool
        runner): a replay never touches the data it would write."""
        if not tool.writes or self.tool_runner is not run_tool:
            return None
        ctx = ToolContext(execution_id=state.request.execution_id, user=state.request.user_context,
                          agent=state.request.agent_config, data_sources=state.request.data_source_metadata,
                          input_prompt=state.request.input_prompt, llm=None,
                          extras={**(self.hooks.tool_context_extras() if self.hooks else {}), "call_id": call.id})
        preview = await self._io(effect_preview, tool, ctx, args)
        preview.policy_id = str(verdict.policy_id) if verdict.policy_id else None
        return preview.model_dump(mode="json")
    def _effect_moved(self, state: RunState, call: LLMToolCall, args: dict[str, Any], error: ToolError,
                      terms: dict[str, Any]) -> Outcome:
        """The approved write found, in its own transaction, that its effect is not the
        agreed one (the data moved, or it is over the ceiling) and rolled back: nothing
        was written. The call pauses again with the fresh preview and a note of what
        moved (docs/approvals.md, "Effect preview"); a new approval request opens for it
        and the earlier decision no longer holds (rivercore.state)."""
        resolution = state.resolutions.get(call.id) or {}
        before = state.governance_pending.get(call.id)
        agreed = _agreed_preview(state, call.id, terms.get("fingerprint"))
        fresh = effect_moved_preview(error.details or {}, terms=terms, arguments=args, agreed=agreed)
        standing = bool(resolution.get("standing"))
        payload = ApprovalRequestPayload(
            tool_name=call.name, proposed_payload=args,
            reasoning_summary=before.reasoning_summary if before else self._reasoning_summary(state),
            risk_context=before.risk_context if before else f"Write tool {call.name}.",
            confidence_score=before.confidence_score if before else None,
            auto_approve_eligible=before.auto_approve_eligible if before else False,
            required_approvals=before.required_approvals if before else 1,
            rows=before.rows if before else None,
            preview=fresh.model_dump(mode="json"),
            reopens={"approval_id": None if standing else resolution.get("approval_id"),
                     "code": (error.details or {}).get("code"), "fingerprint": terms.get("fingerprint"),
                     "max_rows": terms.get("max_rows"), "standing": resolution.get("text") if standing else None},
        )
        message = fresh.stale.message if fresh.stale else error.message
        self._add(state, StepType.GOVERNANCE_CHECK, tool_name=call.name, call_id=call.id, input=args,
                  governance_decision=Decision.APPROVAL_REQUIRED, status=StepStatus.PENDING,
                  output={"reason": message, "effect_moved": True, "approval_request": payload.model_dump(mode="json")})
        return Outcome(status=ResponseStatus.AWAITING_APPROVAL)

    async def _standing_approval(self, state: RunState, call: LLMToolCall, args: dict[str, Any],
                                 preview: dict[str, Any] | None) -> dict[str, Any] | None:
        """Asked only where the gate wants an approval (never for a blocked call)."""
        ask = getattr(self.hooks, "standing_approval", None)
        if ask is None:
            return None
        return await self._io(ask, state, call_id=call.id, tool_name=call.name, arguments=args, preview=preview)

    def _blocked(self, state: RunState, call: LLMToolCall, args: dict[str, Any], verdict: GovernanceResult,
                 record: bool = True) -> bool:
        if record:
            self._add(state, StepType.GOVERNANCE_CHECK, tool_name=call.name, call_id=call.id, input=args,
                      governance_decision=Decision.BLOCKED, status=StepStatus.BLOCKED,
                      output={"reason": verdict.reason, "policy_matched": verdict.policy_matched})
        body = {"blocked": True, "reason": verdict.reason, "policy": verdict.policy_matched}
        error = f"Action blocked by governance: {verdict.reason}"
        observed = self._add(state, StepType.OBSERVATION, tool_name=call.name, call_id=call.id, input=args,
                             status=StepStatus.BLOCKED, error=error, output=body,
                             messages=[tool_message(call.id, call.name, body, ok=False)])
        # The live feed shows the refusal as the call's result, so a run that ends
        # "blocked" shows which call was refused and why.
        self.journal.emit(*observation_received_event(
            turn=state.turn, tool_name=call.name, duration_ms=0, result_summary=_summarise(error), call_id=call.id,
            step_number=observed.step_number, status=StepStatus.BLOCKED.value,
        ))
        return True

    async def _dispatch(self, state: RunState, call: LLMToolCall, tool: Tool, parsed: pydantic.BaseModel,
                  args: dict[str, Any]) -> Outcome | None:
        request = state.request
        if tool.writes:
            # Intent first, committed before the call leaves the process.
            self._add(state, StepType.TOOL_CALL, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args, status=StepStatus.PENDING)
            await self._io(self.journal.flush, state)
            await self._io(self.journal.settle)
        elif tool.awaits_result:
            # The turn that asked for the call is committed before the work starts, so a
            # run resumed after a crash asks its handler again with the same call id (the
            # handler starts at most one piece of work per call) instead of a new turn.
            await self._io(self.journal.flush, state)
            await self._io(self.journal.settle)
        else:
            self._add(state, StepType.TOOL_CALL, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args)
        called = state.steps[-1] if state.steps and state.steps[-1].call_id == call.id else None
        self.journal.emit(*tool_called_event(turn=state.turn, tool_name=call.name, args_summary=_summarise(args),
                                             call_id=call.id, step_number=called.step_number if called else None))
        sub_usage: list[dict[str, Any]] = []  # model calls made by the tool itself (sub-requests)

        def count_usage(reply: LLMReply) -> None:
            sub_usage.append({"model": reply.model, "provider": reply.provider, "tier": reply.tier.value,
                              "input": reply.input_tokens, "output": reply.output_tokens,
                              "cost_usd": reply.cost_usd})

        extras = {**(self.hooks.tool_context_extras() if self.hooks else {}), "llm_usage": count_usage,
                  "call_id": call.id}
        # What the approver agreed to (the previewed effect, a row ceiling): the tool
        # checks it in the write's own transaction (docs/approvals.md "Effect preview").
        approved_effect = (state.resolutions.get(call.id) or {}).get("effect_terms")
        if approved_effect:
            extras["approved_effect"] = approved_effect
        ctx = ToolContext(
            execution_id=request.execution_id, user=request.user_context, agent=request.agent_config,
            data_sources=request.data_source_metadata, input_prompt=request.input_prompt, llm=self.llm,
            extras=extras,
        )
        timeout = float(request.agent_config.model_settings.timeout_seconds)  # one budget for every tool
        started = time.monotonic()
        attempts = 0
        error: ToolError | None = None
        output = None
        retries: list[dict[str, Any]] = []  # the attempts that failed and were tried again (for traces)
        while True:
            attempt_started = time.monotonic()
            try:
                output = await self._run_tool(tool, ctx, parsed, timeout)
                error = None
                break
            except ToolError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - a tool crash is an observation, not a run crash
                logger.exception("tool %s crashed in execution %s", tool.name, request.execution_id)
                error = ToolError(ToolErrorKind.FAILED, f"{tool.name} failed unexpectedly: {exc.__class__.__name__}")
            retry_ok = error.kind in RETRYABLE and (tool.idempotent or error.kind == ToolErrorKind.TRANSIENT)
            if not retry_ok or attempts >= len(RETRY_DELAYS):
                break
            retries.append({"attempt": attempts + 1, "error_code": _KIND_CODES[error.kind],
                            "started_ms": int((attempt_started - started) * 1000),
                            "failed_ms": int((time.monotonic() - started) * 1000)})
            await self._sleep(RETRY_DELAYS[attempts])
            attempts += 1
        duration = int((time.monotonic() - started) * 1000)
        if error is not None and approved_effect and (error.details or {}).get("code") in EFFECT_MOVED:
            return self._effect_moved(state, call, args, error, approved_effect)

        if tool.awaits_result and error is None:
            reference = tool.output_model.model_validate(
                output.model_dump(mode="json") if isinstance(output, pydantic.BaseModel) else output
            ).model_dump(mode="json")
            # The call stays open (pending): its observation is appended when the work ends.
            self._add(state, StepType.TOOL_CALL, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args, status=StepStatus.PENDING, duration_ms=duration,
                      output={"awaiting": reference, **reference})
            return Outcome(status=ResponseStatus.AWAITING_CHILD)
        if tool.awaits_result:
            self._add(state, StepType.TOOL_CALL, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args, status=StepStatus.FAILED, duration_ms=duration)
        if error is not None:
            status = StepStatus.FAILED
            limit = observation_byte_limit(request.user_context.attributes)
            error = ToolError(error.kind, text_storable(str(error.message))[:limit],
                              observation_fit(error.details, limit=limit))
            body = {"error": {"code": _KIND_CODES[error.kind], "message": error.message, "details": error.details},
                    "status": "timeout" if error.kind == ToolErrorKind.TIMEOUT else "error", "attempts": attempts + 1}
            self._add(state, StepType.OBSERVATION, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args, status=status, duration_ms=duration, error=error.message,
                      output={**body, "_dispatched": True, "summary": error.message, "llm_usage": sub_usage,
                              **({"retries": retries} if retries else {})},
                      messages=[tool_message(call.id, call.name, body, ok=False)])
        else:
            result = output.model_dump(mode="json") if isinstance(output, pydantic.BaseModel) else output
            result = tool.output_model.model_validate(result).model_dump(mode="json")
            withheld = await self._export_check(state, call, tool, args, result)
            if isinstance(withheld, Outcome):
                return withheld  # paused: the export waits for an approver; the query runs again after
            shown = withheld or observation_fit(
                result, limit=observation_byte_limit(request.user_context.attributes)
            )
            observed = {"result": shown, "_dispatched": True, "summary": _summarise(shown, 300),
                        "llm_usage": sub_usage}
            if retries:
                observed["retries"] = retries
            if call.name == "execute_query" and not withheld:
                observed["artifact"] = {"type": "query_result", "tool_name": call.name, "call_id": call.id,
                                        "columns": result.get("columns"), "total_rows": result.get("total_rows")}
            elif call.name == "save_artifact":  # a file the run wrote: its reference joins output_artifacts
                observed["artifact"] = {"type": "artifact", "tool_name": call.name, "call_id": call.id,
                                        **{key: result.get(key) for key in ARTIFACT_REF_KEYS}}
            self._add(state, StepType.OBSERVATION, tool_name=call.name, tool_category=tool.category.value,
                      call_id=call.id, input=args, status=StepStatus.BLOCKED if withheld else StepStatus.COMPLETED,
                      duration_ms=duration, output=observed,
                      messages=[tool_message(call.id, call.name, shown, ok=not withheld)])
        observed_step = state.steps[-1]
        self.journal.emit(*observation_received_event(
            turn=state.turn, tool_name=call.name, duration_ms=duration,
            result_summary=_summarise(observed_step.output.get("summary", "")), call_id=call.id,
            step_number=observed_step.step_number, status=observed_step.status.value,
        ))
        if tool.ends_run and error is None and state.steps[-1].status == StepStatus.COMPLETED:
            shown_result = state.steps[-1].output.get("result")
            message = shown_result.get("message") if isinstance(shown_result, dict) else None
            self._add(state, StepType.FINAL_ANSWER, output={"answer": str(message or ""), "ended_by": call.name})
            return Outcome(status=ResponseStatus.SUCCESS)
        return None

    async def _export_check(self, state: RunState, call: LLMToolCall, tool: Tool, args: dict[str, Any],
                      result: dict[str, Any]) -> dict[str, Any] | Outcome | None:
        """Data export limits on a query's result, before the model sees it: None to
        show it, a withheld body when blocked, an Outcome when it waits for approval.

        A ``require_approval`` limit pauses the run like any approval; no rows are
        kept in the request (it carries the query, the row count and the tables).
        Once approved, the query runs again and its result is shown."""
        if call.name != "execute_query":
            return None
        verdict = await self._io(gate.after_query, self.policy, state, tool, args,
                                 rows=int(result.get("total_rows") or 0), tables=list(result.get("tables") or []))
        if verdict.decision in (Decision.PROCEED, Decision.SUGGEST_ONLY):
            return None
        if verdict.decision == Decision.APPROVAL_REQUIRED:
            resolution = state.resolutions.get(call.id) or {}
            if resolution.get("status") in (ResolutionStatus.APPROVED, ResolutionStatus.EDITED_APPROVED):
                return None
            common = {"tool_name": call.name, "tool_category": tool.category.value, "call_id": call.id,
                      "input": args, "governance_decision": Decision.APPROVAL_REQUIRED}
            policy = {"reason": verdict.reason, "policy_matched": verdict.policy_matched,
                      "policy_id": verdict.policy_id, "policy_type": verdict.policy_type,
                      "enforcement": verdict.enforcement, "warnings": verdict.warnings, "point": "after_query",
                      "total_rows": result.get("total_rows"), "tables": list(result.get("tables") or [])}
            tables = ", ".join(result.get("tables") or []) or "unknown tables"
            outcome = await self._approval_gate(
                state, call, tool, args, verdict, confidence=self._confidence(state), common=common, policy=policy,
                extra_risk=f"Data export of {result.get('total_rows')} row(s) from {tables}; the rows are shown "
                           "to the agent only once this is approved.")
            return outcome  # None when an auto-approve condition held
        self._add(state, StepType.GOVERNANCE_CHECK, tool_name=call.name, call_id=call.id, input=args,
                  governance_decision=verdict.decision, status=StepStatus.BLOCKED,
                  output={"reason": verdict.reason, "policy_matched": verdict.policy_matched, "point": "after_query"})
        return {"withheld": True, "reason": verdict.reason, "policy": verdict.policy_matched,
                "total_rows": result.get("total_rows")}

    # --- helpers ---------------------------------------------------------------------
    @staticmethod
    def _confidence(state: RunState) -> float | None:
        for past in reversed(state.steps):
            if past.step_type == StepType.OBSERVATION and isinstance(past.output, dict):
                result = past.output.get("result")
                if isinstance(result, dict) and isinstance(result.get("confidence"), int | float):
                    return float(result["confidence"])
        return None

    @staticmethod
    def _reasoning_summary(state: RunState) -> str:
        for past in reversed(state.steps):
            if past.step_type == StepType.REASONING and isinstance(past.output, dict) and past.output.get("content"):
                return str(past.output["content"])[:1000]
        done = [f"{a.tool_name}: {a.result_summary}" for a in state.actions_taken[-3:]]
        return "; ".join(done)[:1000]

    async def _turn_limit(self, state: RunState) -> Outcome:
        self._notice(state, ctxmod.SUMMARY_REQUEST)
        summary = ""
        try:
            reply = await self._complete(messages=state.messages(), tools=[], tier=Tier.FAST,
                                      timeout_seconds=state.request.agent_config.model_settings.llm_timeout_seconds,
                                      **view_kwargs(self.llm, lambda: _view(state)),
                                      **self._streaming(state, state.turn))
            self._add(state, StepType.REASONING, turn=state.turn, model_used=reply.model, model_tier=reply.tier.value,
                      provider=reply.provider, tokens=Tokens(input=reply.input_tokens, output=reply.output_tokens),
                      output={"content": reply.content, "summary_request": True, "cost_usd": reply.cost_usd})
            summary = reply.content or ""
        except LLMError as exc:
            logger.warning("final summary request failed: %s", exc.message)
        if not summary:
            summary = "Turn limit reached. Partial results: " + "; ".join(
                f"{a.tool_name} ({a.status})" for a in state.actions_taken) if state.actions_taken else \
                "Turn limit reached before any action completed."
        self._add(state, StepType.FINAL_ANSWER, status=StepStatus.COMPLETED, output={"answer": summary,
                                                                                      "partial": True})
        await self._io(self.journal.flush, state)
        return Outcome(status=ResponseStatus.MAX_TURNS_EXCEEDED)

    async def _terminate(self, state: RunState, status: ResponseStatus, error: ErrorInfo) -> Outcome:
        if status != ResponseStatus.FAILED:
            partial = "; ".join(f"{a.tool_name} ({a.status})" for a in state.actions_taken)
            self._add(state, StepType.FINAL_ANSWER, status=StepStatus.COMPLETED,
                      output={"answer": f"{error.message} Partial results: {partial or 'none'}", "partial": True})
        await self._io(self.journal.flush, state)
        return Outcome(status=status, error=error if status == ResponseStatus.FAILED else None)


DATA_TOOLS = frozenset({"execute_query", "write_back"})
# What a saved file's reference in output_artifacts carries (ids and names, never the data).
ARTIFACT_REF_KEYS = ("artifact_id", "name", "version", "content_type", "data_source_id", "table")
WRITE_DATA_TOOLS = frozenset({"write_back"})


def _agreed_preview(state: RunState, call_id: str, fingerprint: str | None) -> dict[str, Any] | None:
    """The preview with ``fingerprint`` that a governance step of the call carries (the
    pause's, or the one a scope or a grant let through), or None."""
    if not fingerprint:
        return None
    for earlier in reversed(state.steps):
        if earlier.step_type != StepType.GOVERNANCE_CHECK or earlier.call_id != call_id:
            continue
        output = earlier.output if isinstance(earlier.output, dict) else {}
        preview = (output.get("approval_request") or {}).get("preview")
        if isinstance(preview, dict) and preview.get("fingerprint") == fingerprint:
            return preview
    return None


def summary_build(state: RunState) -> str:
    """The run's summary: the final answer, unless every data tool call failed, in
    which case it says so first: an answer without data must not read as one with it."""
    answer = state.final_answer or ""
    data_calls = [a for a in state.actions_taken if a.tool_name in DATA_TOOLS]
    if not data_calls or any(a.status == StepStatus.COMPLETED.value for a in data_calls):
        return answer
    failures = "; ".join(f"{a.tool_name}: {a.result_summary or a.status}" for a in data_calls[-3:])
    wrote = any(a.tool_name in WRITE_DATA_TOOLS for a in data_calls)
    head = (f"{'Nothing was written' if wrote else 'No data was retrieved'}: "
            f"{'the' if len(data_calls) == 1 else 'all ' + str(len(data_calls))} "
            f"data tool call{'' if len(data_calls) == 1 else 's'} failed ({failures}).")
    return f"{head} The agent's reply below is not based on data.\n\n{answer}" if answer else head


def response_build(state: RunState, outcome: Outcome) -> ExecutionResponse:
    """ExecutionResponse from a state and how the segment ended."""
    usage = Usage(
        total_turns=state.turn,
        total_tokens=state.total_tokens,
        models_used=state.models_used,
        execution_duration_ms=state.run_ms(time.time()),
    )
    usage.cost_incomplete = any(not m.cost_known for m in state.models_used.values())
    usage.cost_estimate = round(sum(m.estimated_cost or 0.0 for m in state.models_used.values()), 10)
    pending = state.pending
    return ExecutionResponse(
        execution_id=state.request.execution_id,
        status=outcome.status,
        result=ExecutionResult(
            summary=summary_build(state),
            actions_taken=state.actions_taken,
            recommendations=state.recommendations,
            output_artifacts=state.output_artifacts,
        ),
        steps=state.steps,
        approval_request=pending.approval if pending and pending.kind == "approval" else None,
        interaction_request=pending.interaction if pending and pending.kind == "interaction" else None,
        usage=usage,
        error=outcome.error,
    )


def new_state(request: ExecutionRequest) -> tuple[RunState, list[dict[str, Any]]]:
    """A fresh run: the context is built here, once. Returns the state and any
    prompt-injection detections in the trigger payload (already sanitised)."""
    screened = ctxmod.screen_payload(request.trigger_context.trigger_payload)
    if screened.detections:
        request = request.model_copy(deep=True)
        request.trigger_context.trigger_payload = screened.payload
    state = RunState(request=request, base_messages=ctxmod.base_messages(request),
                     tool_schemas=ctxmod.tool_schemas(request))
    return state, screened.detections
