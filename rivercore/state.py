"""A run's state as a fold over its steps.

Nothing here is stored as a growing blob: the durable driver appends steps, and a
resumed segment rebuilds this object by replaying them (``RunState.replay``). The
same ``apply`` runs live, so a replayed state equals the live one.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pydantic import BaseModel, Field

from rivercore.context import message_chars
from rivercore.contracts import (
    ActionTaken,
    ApprovalRequestPayload,
    ExecutionRequest,
    InteractionRequest,
    ModelUsage,
    Step,
    StepStatus,
    StepType,
)
from rivercore.llm import LLMToolCall
from rivercore.types.governance import ResolutionStatus

RUNNER_MODEL = "river-runner"  # model_used of runner notices (not a model turn)


def call_hash(name: str, arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{name}:{canonical}".encode()).hexdigest()[:32]


class PendingCall(BaseModel):
    """A call the run is paused on (approval), an ask_user awaiting its answer, or a
    call whose result arrives later (a delegated child run)."""

    kind: str  # "approval" | "interaction" | "child"
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    turn: int
    approval: ApprovalRequestPayload | None = None
    interaction: InteractionRequest | None = None
    child_execution_id: int | None = None


class RunState(BaseModel):
    request: ExecutionRequest
    base_messages: list[dict[str, Any]]
    tool_schemas: list[dict[str, Any]]
    steps: list[Step] = Field(default_factory=list)
    # The run's time limit counts running time only: ``started_at_ms`` is when the
    # stretch now running began (this segment's start; a fresh run's start) and
    # ``active_before_ms`` how long the run ran before it, in its earlier segments.
    # Waits between segments (for approval, a person, a delegated run, the queue) count
    # in neither (``run_ms``).
    started_at_ms: int = Field(default_factory=lambda: int(time.time() * 1000))
    active_before_ms: int = 0

    # --- derived by apply(); never stored separately ---------------------------------
    turn: int = 0
    tokens_input: int = 0
    tokens_output: int = 0
    models_used: dict[str, ModelUsage] = Field(default_factory=dict)
    intent: str | None = None
    last_dispatched_tool: str | None = None
    last_turn_failed: bool = False
    consecutive_llm_errors: int = 0
    consecutive_stalls: int = 0
    turn_limit_override: int | None = None
    call_counts: dict[str, int] = Field(default_factory=dict)
    tool_error_streak: dict[str, int] = Field(default_factory=dict)
    open_calls: list[LLMToolCall] = Field(default_factory=list)  # of the latest reasoning step
    observed_calls: set[str] = Field(default_factory=set)
    intents_recorded: set[str] = Field(default_factory=set)  # write calls dispatched, outcome pending
    governance_pending: dict[str, ApprovalRequestPayload] = Field(default_factory=dict)
    resolutions: dict[str, dict[str, Any]] = Field(default_factory=dict)  # call_id -> approval resolution
    arg_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)  # edited arguments the model sees
    pending: PendingCall | None = None
    actions_taken: list[ActionTaken] = Field(default_factory=list)
    recommendations: list[dict[str, Any]] = Field(default_factory=list)
    output_artifacts: list[dict[str, Any]] = Field(default_factory=list)
    final_answer: str | None = None
    # Plain fields rather than pydantic private attributes: those are read through
    # BaseModel.__getattr__, which is slow on a path taken several times a turn.
    dispatched_this_turn: bool = False
    calls_this_turn: int = 0
    context_chars: int | None = None  # message_chars() summed over messages(), kept up to date

    @classmethod
    def replay(cls, *, request: ExecutionRequest, base_messages: list[dict[str, Any]],
               tool_schemas: list[dict[str, Any]], steps: list[Step], started_at_ms: int | None = None,
               active_before_ms: int = 0) -> RunState:
        state = cls(request=request, base_messages=base_messages, tool_schemas=tool_schemas,
                    active_before_ms=max(int(active_before_ms), 0))
        if started_at_ms is not None:
            state.started_at_ms = started_at_ms
        for step in steps:
            state.apply(step)
        return state

    # --- the fold ------------------------------------------------------------------
    @property
    def next_step_number(self) -> int:
        return len(self.steps) + 1

    def run_ms(self, now_seconds: float) -> int:
        """How long the run has been running at ``now_seconds`` (epoch seconds): its
        earlier segments and the current stretch, never the waits between them."""
        return self.active_before_ms + max(0, int(now_seconds * 1000) - self.started_at_ms)

    @property
    def total_tokens(self) -> int:
        return self.tokens_input + self.tokens_output

    def apply(self, step: Step) -> None:
        self.steps.append(step)
        if self.context_chars is not None:
            self.context_chars += sum(message_chars(m) for m in step.messages)
        handler = getattr(self, f"_apply_{step.step_type.value}", None)
        if handler:
            handler(step)

    def _apply_reasoning(self, step: Step) -> None:
        output = step.output or {}
        if output.get("notice"):
            if output.get("turn_limit") is not None:
                self.turn_limit_override = int(output["turn_limit"])
            return
        self._close_turn()
        self.turn = step.turn
        tokens = step.tokens
        if step.model_used:
            self._count_model(
                model=step.model_used, provider=step.provider or "", tier=step.model_tier or "",
                input_tokens=tokens.input if tokens else 0, output_tokens=tokens.output if tokens else 0,
                cost=output.get("cost_usd"), turn=True,
            )
        elif tokens:
            self.tokens_input += tokens.input
            self.tokens_output += tokens.output
        if output.get("summary_request"):
            return
        self.last_turn_failed = False
        self.consecutive_llm_errors = 0
        self.open_calls = [LLMToolCall.model_validate(call) for call in output.get("tool_calls", [])]
        self.calls_this_turn = len(self.open_calls)
        self.dispatched_this_turn = False
        for call in self.open_calls:
            if call.name != "finalize":
                key = call_hash(call.name, call.arguments)
                self.call_counts[key] = self.call_counts.get(key, 0) + 1

    def _count_model(self, *, model: str, provider: str, tier: str, input_tokens: int, output_tokens: int,
                     cost: float | None, turn: bool) -> None:
        self.tokens_input += input_tokens
        self.tokens_output += output_tokens
        usage = self.models_used.setdefault(model, ModelUsage(provider=provider, tier=tier))
        usage.turns += 1 if turn else 0
        usage.input_tokens += input_tokens
        usage.output_tokens += output_tokens
        if cost is None:
            usage.cost_known = False
            usage.estimated_cost = None
        elif usage.estimated_cost is not None:
            usage.estimated_cost += float(cost)

    def _close_turn(self) -> None:
        """A turn whose calls were all refused before dispatch is a stall."""
        if self.calls_this_turn and not self.dispatched_this_turn:
            self.consecutive_stalls += 1
        elif self.calls_this_turn:
            self.consecutive_stalls = 0
        self.calls_this_turn = 0

    def _apply_tool_call(self, step: Step) -> None:
        if step.status == StepStatus.PENDING and step.call_id:
            self.intents_recorded.add(step.call_id)
            awaiting = (step.output or {}).get("awaiting") if isinstance(step.output, dict) else None
            if isinstance(awaiting, dict):  # a call whose result arrives later: the run waits on it
                self.pending = PendingCall(
                    kind="child", call_id=step.call_id, tool_name=step.tool_name or "",
                    arguments=step.input if isinstance(step.input, dict) else {}, turn=step.turn,
                    child_execution_id=awaiting.get("child_execution_id"),
                )

    def _apply_observation(self, step: Step) -> None:
        if step.call_id:
            self.observed_calls.add(step.call_id)
            self.intents_recorded.discard(step.call_id)
            self.governance_pending.pop(step.call_id, None)
        output = step.output if isinstance(step.output, dict) else {}
        for used in output.get("llm_usage") or []:  # the tool's own model calls count too
            self._count_model(model=used["model"], provider=used["provider"], tier=used["tier"],
                              input_tokens=used["input"], output_tokens=used["output"], cost=used["cost_usd"],
                              turn=False)
        dispatched = bool(output.get("_dispatched"))
        if dispatched:
            self.dispatched_this_turn = True
            self.last_dispatched_tool = step.tool_name
        name = step.tool_name or ""
        if step.status == StepStatus.COMPLETED:
            self.tool_error_streak[name] = 0
            if name == "classify_intent" and isinstance(output.get("result"), dict):
                self.intent = output["result"].get("intent_type") or self.intent
        elif dispatched or step.status == StepStatus.FAILED:
            self.tool_error_streak[name] = self.tool_error_streak.get(name, 0) + 1
        if dispatched:
            self.actions_taken.append(
                ActionTaken(
                    tool_name=name,
                    arguments=(step.input or {}) if isinstance(step.input, dict) else {},
                    result_summary=str(output.get("summary", ""))[:300],
                    status=step.status.value,
                )
            )
            artifact = output.get("artifact")
            if artifact:
                self.output_artifacts.append(artifact)
        if self.pending and self.pending.call_id == step.call_id:
            self.pending = None

    def _apply_governance_check(self, step: Step) -> None:
        output = step.output if isinstance(step.output, dict) else {}
        if "resolution" in output and step.call_id:
            self.resolutions[step.call_id] = output["resolution"]
            modified = output["resolution"].get("modified_args")
            if output["resolution"].get("status") == ResolutionStatus.EDITED_APPROVED and modified:
                self.arg_overrides[step.call_id] = modified
            self.pending = None
            return
        if step.governance_decision == "SUGGEST_ONLY":
            self.recommendations.append(
                {"tool_name": step.tool_name, "arguments": step.input or {}, "reason": output.get("reason", "")}
            )
        if step.governance_decision == "APPROVAL_REQUIRED" and step.status == StepStatus.PENDING and step.call_id:
            payload = ApprovalRequestPayload.model_validate(output["approval_request"])
            self.governance_pending[step.call_id] = payload
            # Paused again at write time (payload.reopens): that write rolled back, so its
            # intent is closed, and the earlier approval no longer holds; a new one will.
            self.intents_recorded.discard(step.call_id)
            self.resolutions.pop(step.call_id, None)
            self.pending = PendingCall(
                kind="approval", call_id=step.call_id, tool_name=step.tool_name or "",
                arguments=payload.proposed_payload, turn=step.turn, approval=payload,
            )

    def _apply_interaction(self, step: Step) -> None:
        if step.status == StepStatus.PENDING and step.call_id:
            self.pending = PendingCall(
                kind="interaction", call_id=step.call_id, tool_name="ask_user",
                arguments=step.input or {}, turn=step.turn,
                interaction=InteractionRequest.model_validate(step.input),
            )

    def _apply_error(self, step: Step) -> None:
        output = step.output if isinstance(step.output, dict) else {}
        if step.tokens and step.model_used:  # an empty reply still consumed tokens
            self._count_model(model=step.model_used, provider=step.provider or "", tier=step.model_tier or "",
                              input_tokens=step.tokens.input, output_tokens=step.tokens.output,
                              cost=output.get("cost_usd"), turn=False)
        if output.get("llm_error"):
            self.last_turn_failed = True
            self.consecutive_llm_errors += 1
            self.turn = max(self.turn, step.turn)

    def _apply_final_answer(self, step: Step) -> None:
        output = step.output if isinstance(step.output, dict) else {}
        self.final_answer = output.get("answer", "")

    # --- views ---------------------------------------------------------------------
    @property
    def stalled_turns(self) -> int:
        """Consecutive turns, including the latest finished one, whose tool calls
        were all refused before dispatch."""
        current = bool(self.calls_this_turn) and not self.dispatched_this_turn and not self.unfinished_calls()
        return self.consecutive_stalls + (1 if current else 0)

    def unfinished_calls(self) -> list[LLMToolCall]:
        return [c for c in self.open_calls if c.id not in self.observed_calls and c.name != "finalize"]

    @property
    def estimated_context_tokens(self) -> int:
        """``context.estimate_tokens(self.messages())``, kept as a running sum so a
        turn costs the same however long the history is (edited arguments are
        counted at their original size: it is an estimate)."""
        if self.context_chars is None:
            self.context_chars = sum(message_chars(m) for m in self.base_messages) + sum(
                message_chars(m) for s in self.steps for m in s.messages)
        return self.context_chars // 4

    def messages(self) -> list[dict[str, Any]]:
        """The conversation the model sees: base context + every step's messages,
        with approver-edited arguments in place of the originals."""
        out: list[dict[str, Any]] = list(self.base_messages)
        for step in self.steps:
            for message in step.messages:
                if self.arg_overrides and message.get("tool_calls"):
                    message = _with_overrides(message, self.arg_overrides)
                out.append(message)
        return out


def _with_overrides(message: dict[str, Any], overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    calls = []
    for call in message["tool_calls"]:
        if call.get("id") in overrides:
            call = {**call, "function": {**call["function"], "arguments": json.dumps(overrides[call["id"]])}}
        calls.append(call)
    return {**message, "tool_calls": calls}


def step(state: RunState, step_type: StepType, **fields: Any) -> Step:
    return Step(step_number=state.next_step_number, step_type=step_type, turn=fields.pop("turn", state.turn), **fields)
