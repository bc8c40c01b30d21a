"""Replay and what-if replay of finished runs (docs/replay.md).

A replay runs the engine again over a finished run's recorded inputs, synchronously in
the caller's request, with two ports swapped:

- the model port: ``RecordedLLM`` serves the recorded replies in order (plain replay),
  or the live router answers (what-if: a new agent version or policy set);
- the tool runner: ``RecordedTools`` serves recorded observations for calls that match
  the recording (same tool, same arguments) and never calls a handler. A write call
  that does not match is answered "would write" without dispatch; a read call that does
  not match stops the replay (no live data access: the documented choice).

Where the replay pauses, ``RecordedDecisions`` applies the recorded approver's decision
or answer, found by the paused call's content (tool, canonical arguments, occurrence),
never by the model's call id, which a live model makes up afresh on every call.

The engine's journal is in memory, so a replay writes no step, event or audit row of
the run; its result is one ``ExecutionReplay`` row, never an ``Execution``, so no
production count sees it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pydantic

from agents.models import Agent, AgentVersion
from agents.selectors import agent_version_get
from executions.models import Execution, ExecutionReplay
from executions.services.load import agent_config_build
from executions.services.segment import llm_for_execution, state_load
from governance import checker
from governance.selectors import active_policies, policy_get_for_user, policy_spec
from governance.services import policy_validate
from rivercore import context as ctxmod
from rivercore import observe
from rivercore.contracts import Step, StepStatus, StepType
from rivercore.errors import Conflict, InvalidInput
from rivercore.llm import LLMError, LLMReply, LLMToolCall
from rivercore.runner import Engine, MemoryJournal, Outcome
from rivercore.state import RUNNER_MODEL, RunState
from rivercore.steps import answer_step, resolution_step
from rivercore.tools import Tool, ToolContext, ToolError, ToolErrorKind
from rivercore.types.agents import ActionLevel, Tier, action_level_at_most
from rivercore.types.governance import Decision, Enforcement, GovernancePolicySpec

MAX_RECORDED_STEPS = 400  # a longer run is refused: replays run inside the request
MAX_RESUMES = 20  # recorded approvals/answers re-applied within one replay
BATCH_MAX_RUNS = 50
BATCH_DEFAULT_RUNS = 20
REPLAYABLE = Execution.TERMINAL - {Execution.Status.CANCELLED}

_CODE_KINDS = {"GOVERNANCE_BLOCKED": ToolErrorKind.FORBIDDEN, "NOT_FOUND": ToolErrorKind.NOT_FOUND,
               "VALIDATION_ERROR": ToolErrorKind.VALIDATION, "TIMEOUT": ToolErrorKind.TIMEOUT,
               "TRANSIENT": ToolErrorKind.TRANSIENT}


class ReplayStop(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Ends a replay where it can go no further without a live model call or data access.

    A BaseException on purpose: the engine turns every ``Exception`` a tool raises into
    an observation, and this must leave the loop instead."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _key(name: str, arguments: object) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True, default=str)}"


class RecordedLLM:
    """The model port of a plain replay: the run's recorded replies, in order. Asked for
    more than were recorded, it stops the replay (it never calls a model)."""

    def __init__(self, steps: list[Step]):
        self.replies: deque[LLMReply | LLMError] = deque()
        for past in steps:
            output = past.output if isinstance(past.output, dict) else {}
            if past.step_type == StepType.REASONING and past.model_used != RUNNER_MODEL:
                self.replies.append(LLMReply(
                    content=output.get("content"), model=past.model_used or "recorded",
                    provider=past.provider or "recorded", tier=_tier(past.model_tier),
                    tool_calls=[LLMToolCall.model_validate(c) for c in output.get("tool_calls") or []],
                    input_tokens=past.tokens.input if past.tokens else 0,
                    output_tokens=past.tokens.output if past.tokens else 0, cost_usd=output.get("cost_usd")))
            elif past.step_type == StepType.ERROR and output.get("llm_error"):
                if output["llm_error"] == "empty_response":
                    self.replies.append(LLMReply(content="", model=past.model_used or "recorded",
                                                 provider=past.provider or "recorded", tier=_tier(past.model_tier)))
                else:
                    self.replies.append(LLMError(output["llm_error"], past.error or "recorded model error",
                                                 output.get("details") or {}))
        self.served = 0

    def complete(self, *, messages, tools, tier, timeout_seconds) -> LLMReply:
        if not self.replies:
            raise ReplayStop("the replay asked the model for a reply the recording does not have")
        reply = self.replies.popleft()
        self.served += 1
        if isinstance(reply, LLMError):
            raise reply
        return reply


def _tier(value: str | None) -> Tier:
    try:
        return Tier(value)
    except ValueError:
        return Tier.BALANCED


@dataclass
class RecordedTools:
    """The tool-runner port of every replay: never calls a handler."""

    steps: list[Step]
    stop_on_divergence: bool
    by_call: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)
    served: list[dict[str, Any]] = field(default_factory=list)
    would_write: list[dict[str, Any]] = field(default_factory=list)
    last_error: tuple[str, ToolError] | None = None
    different_read: dict[str, Any] | None = None  # the read a what-if stopped at (never made)

    def __post_init__(self) -> None:
        for past in self.steps:
            output = past.output if isinstance(past.output, dict) else {}
            if past.step_type == StepType.OBSERVATION and output.get("_dispatched") and past.tool_name:
                self.by_call.setdefault(_key(past.tool_name, past.input or {}), deque()).append(output)

    async def __call__(self, tool: Tool, ctx: ToolContext, args: pydantic.BaseModel, timeout: float,
                       on_exit=None) -> object:
        arguments = args.model_dump(mode="json", exclude_none=True)
        key = _key(tool.name, arguments)
        if self.last_error and self.last_error[0] == key:  # the engine retrying a recorded failure
            raise self.last_error[1]
        queue = self.by_call.get(key)
        if queue:
            output = queue.popleft()
            self.served.append({"tool": tool.name, "arguments": arguments})
            if "error" in output:
                error = output["error"] or {}
                failure = ToolError(_CODE_KINDS.get(error.get("code"), ToolErrorKind.FAILED),
                                    str(error.get("message") or "recorded failure"), error.get("details") or {})
                self.last_error = (key, failure)
                raise failure
            self.last_error = None
            return output.get("result")
        if tool.writes:
            self.would_write.append({"tool": tool.name, "arguments": arguments})
            raise ToolError(ToolErrorKind.FAILED,
                            f"{tool.name} would write: a replay never dispatches a write (not in the recording).")
        if self.stop_on_divergence:
            raise ReplayStop(f"{tool.name} was called with arguments the recording does not have")
        self.different_read = {"tool": tool.name, "arguments": arguments}
        raise ReplayStop(f"{tool.name} was called with arguments the recording does not have; a what-if replay "
                         "makes no live data access, so it stops here")


# --- decisions and their diff ---------------------------------------------------------

def decisions(steps: list[Step]) -> list[dict[str, Any]]:
    """What a run decided, step by step: the tool calls asked for, governance verdicts,
    approvals, tool outcomes and the answer (model text and timings left out)."""
    found: list[dict[str, Any]] = []
    for s in steps:
        output = s.output if isinstance(s.output, dict) else {}
        if s.step_type == StepType.REASONING and s.model_used != RUNNER_MODEL:
            for call in output.get("tool_calls") or []:
                found.append({"step": s.step_number, "kind": "tool_call", "tool": call.get("name"),
                              "arguments": call.get("arguments")})
        elif s.step_type == StepType.GOVERNANCE_CHECK and "resolution" in output and "approval_request" not in output:
            found.append({"step": s.step_number, "kind": "approval", "tool": s.tool_name,
                          "status": (output.get("resolution") or {}).get("status")})
        elif s.step_type == StepType.GOVERNANCE_CHECK:
            found.append({"step": s.step_number, "kind": "governance", "tool": s.tool_name,
                          "decision": _value(s.governance_decision), "status": s.status.value,
                          "policy": output.get("policy_matched") or output.get("policy")})
        elif s.step_type == StepType.OBSERVATION:
            found.append({"step": s.step_number, "kind": "observation", "tool": s.tool_name,
                          "status": s.status.value})
        elif s.step_type == StepType.FINAL_ANSWER:
            found.append({"step": s.step_number, "kind": "answer", "answer": output.get("answer")})
        elif s.step_type == StepType.ERROR:
            found.append({"step": s.step_number, "kind": "error",
                          "code": output.get("code") or output.get("llm_error")})
    return found


def _value(decision: object) -> str | None:
    return getattr(decision, "value", decision) or None


def _bare(decision: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in decision.items() if k != "step"}


def _of(kind: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_bare(d) for d in items if d["kind"] == kind]


def _approvals_needed(items: list[dict[str, Any]]) -> int:
    return sum(1 for d in items if d["kind"] == "governance" and d["decision"] == Decision.APPROVAL_REQUIRED.value)


def decisions_diff(recorded: list[Step], replayed: list[Step]) -> dict[str, Any]:
    before, after = decisions(recorded), decisions(replayed)
    diverged = None
    for index in range(max(len(before), len(after))):
        old = before[index] if index < len(before) else None
        new = after[index] if index < len(after) else None
        if old is None or new is None or _bare(old) != _bare(new):
            diverged = {"index": index, "recorded_step": old and old["step"], "replayed_step": new and new["step"],
                        "recorded": old and _bare(old), "replayed": new and _bare(new)}
            break

    def part(kind: str) -> dict[str, Any]:
        old, new = _of(kind, before), _of(kind, after)
        return {"changed": old != new, "recorded": old, "replayed": new}

    answers = part("answer")
    return {
        "identical": diverged is None,
        "diverged_at": diverged,
        "tool_calls": part("tool_call"),
        "governance": part("governance"),
        "answer": {"changed": answers["changed"],
                   "recorded": answers["recorded"][-1]["answer"] if answers["recorded"] else None,
                   "replayed": answers["replayed"][-1]["answer"] if answers["replayed"] else None},
        "approvals_needed": {"recorded": _approvals_needed(before), "replayed": _approvals_needed(after)},
    }


# --- running a replay ------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    """A tool call the model asked for, named by its content: the tool, its canonical
    arguments and which occurrence of that tool-and-arguments pair it is in the run
    (1 for the first). A model's call id is never part of it: a live model makes up a
    new id every time, so an id names nothing a replay can find again."""

    tool: str
    arguments: dict[str, Any]
    occurrence: int

    def same_content(self, other: _Call) -> bool:
        return (self.tool, _canonical(self.arguments), self.occurrence) == \
            (other.tool, _canonical(other.arguments), other.occurrence)

    def view(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "occurrence": self.occurrence}


def _canonical(arguments: object) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class _Pause:
    """A recorded pause (an approval or an ``ask_user`` answer) and the step that let the
    run go on past it (None when the run ended while it waited)."""

    kind: str  # "approval" | "interaction"
    call: _Call
    decision: Step | None = None
    applied: bool = False

    def decision_view(self) -> dict[str, Any] | None:
        if self.decision is None:
            return None
        output = self.decision.output if isinstance(self.decision.output, dict) else {}
        if self.kind == "interaction":
            return {"answer": (output.get("result") or {}).get("user_response")}
        resolution = output.get("resolution") or {}
        view = {"status": resolution.get("status")}
        if resolution.get("modified_args"):
            view["modified_args"] = resolution["modified_args"]
        return view


class _CallNames:
    """Names each tool call the model asked for by its content while a run's steps are
    walked in order. A call id a model used again in a later turn names its latest call
    (the one a pause after that turn is about)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.by_id: dict[str, _Call] = {}
        self.in_order: list[_Call] = []

    def see(self, step: Step, output: dict[str, Any]) -> bool:
        """Takes in a model turn's calls; False for any other step."""
        if step.step_type != StepType.REASONING or step.model_used == RUNNER_MODEL or output.get("notice"):
            return False
        for call in output.get("tool_calls") or []:
            name, arguments = str(call.get("name") or ""), call.get("arguments") or {}
            key = f"{name}:{_canonical(arguments)}"
            self.counts[key] = self.counts.get(key, 0) + 1
            named = _Call(tool=name, arguments=arguments, occurrence=self.counts[key])
            self.by_id[str(call.get("id") or "")] = named
            self.in_order.append(named)
        return True


def _calls_by_id(steps: list[Step]) -> dict[str, _Call]:
    names = _CallNames()
    for past in steps:
        names.see(past, past.output if isinstance(past.output, dict) else {})
    return names.by_id


def _is_approval_pause(step: Step, output: dict[str, Any]) -> bool:
    return step.step_type == StepType.GOVERNANCE_CHECK and step.status == StepStatus.PENDING \
        and _value(step.governance_decision) == Decision.APPROVAL_REQUIRED.value and "resolution" not in output


def _is_resolution(step: Step, output: dict[str, Any]) -> bool:
    return step.step_type == StepType.GOVERNANCE_CHECK and "resolution" in output \
        and "approval_request" not in output


def recorded_pauses(steps: list[Step]) -> tuple[list[_Pause], list[_Call]]:
    """Every pause of a recorded run in order, each with the call it paused on (by
    content) and the decision or answer that ended it; and every call the model asked
    for."""
    names = _CallNames()
    calls = names.by_id
    pauses: list[_Pause] = []
    waiting: dict[str, _Pause] = {}  # call id -> its pause, until the decision arrives
    for past in steps:
        output = past.output if isinstance(past.output, dict) else {}
        if names.see(past, output):
            continue
        call_id = past.call_id or ""
        is_question = past.step_type == StepType.INTERACTION and past.status == StepStatus.PENDING
        if (_is_approval_pause(past, output) or is_question) and call_id in calls:
            pause = _Pause(kind="interaction" if is_question else "approval", call=calls[call_id])
            pauses.append(pause)
            waiting[call_id] = pause
        elif call_id in waiting and (
                (waiting[call_id].kind == "approval" and _is_resolution(past, output))
                or (waiting[call_id].kind == "interaction" and past.step_type == StepType.OBSERVATION)):
            waiting.pop(call_id).decision = past
    return pauses, names.in_order


@dataclass
class RecordedDecisions:
    """The recorded approvers' decisions and answers, served to the replay's pauses by
    the content of the call paused on (``_Call``), each at most once."""

    pauses: list[_Pause]
    calls: list[_Call]
    applied: list[dict[str, Any]] = field(default_factory=list)
    unmatched: dict[str, Any] | None = None

    def resume_step(self, state: RunState) -> Step | None:
        """The step that lets the replay go on past the pause it reached, renumbered and
        bound to the replay's own call id; None when the recording has no decision for
        it (then ``unmatched`` says what the replay paused on and what the recording
        had)."""
        pending = state.pending
        if pending is None or pending.kind not in ("approval", "interaction"):
            return None
        call = _calls_by_id(state.steps).get(pending.call_id) or _Call(
            tool=pending.tool_name, arguments=pending.arguments, occurrence=1)
        match = next((p for p in self.pauses if not p.applied and p.kind == pending.kind
                      and p.call.same_content(call)), None)
        if match is None or match.decision is None:
            self.unmatched = self._unmatched(pending.kind, call, match)
            return None
        match.applied = True
        self.applied.append({"kind": match.kind, **call.view(), "decision": match.decision_view()})
        output = match.decision.output if isinstance(match.decision.output, dict) else {}
        if match.kind == "interaction":
            return answer_step(step_number=state.next_step_number, turn=state.turn, call_id=pending.call_id,
                               arguments=pending.arguments,
                               answer=(output.get("result") or {}).get("user_response"),
                               answered_by=output.get("answered_by"))
        return resolution_step(step_number=state.next_step_number, turn=state.turn, call_id=pending.call_id,
                               tool_name=pending.tool_name, resolution=dict(output["resolution"]))

    def _unmatched(self, kind: str, call: _Call, same: _Pause | None) -> dict[str, Any]:
        """What the replay paused on against what the recording had: ``changed`` is
        empty when the recorded run also ended waiting on this call; ``new_pause`` when
        the recorded run made this very call without pausing; else the fields in
        which the call differs from the recording's next undecided pause (``tool``,
        ``arguments``, ``occurrence``), or ``new_call`` when none is left."""
        replayed = call.view()
        if same is not None:
            return {"kind": kind, "replayed": replayed, "recorded": {**same.call.view(), "paused": True,
                                                                     "decision": None},
                    "changed": [], "as_recorded": True}
        made = next((c for c in self.calls if c.same_content(call)), None)
        if made is not None:
            return {"kind": kind, "replayed": replayed, "recorded": {**made.view(), "paused": False, "decision": None},
                    "changed": ["new_pause"], "as_recorded": False}
        recorded = next((p for p in self.pauses if not p.applied and p.kind == kind), None)
        if recorded is None:
            return {"kind": kind, "replayed": replayed, "recorded": None, "changed": ["new_call"],
                    "as_recorded": False}
        changed = [name for name, old, new in (
            ("tool", recorded.call.tool, call.tool),
            ("arguments", _canonical(recorded.call.arguments), _canonical(call.arguments)),
            ("occurrence", recorded.call.occurrence, call.occurrence)) if old != new]
        return {"kind": kind, "replayed": replayed,
                "recorded": {**recorded.call.view(), "paused": True, "decision": recorded.decision_view()},
                "changed": changed, "as_recorded": False}


@dataclass
class RecordedStanding:
    """The engine's hooks in a replay. A call the recorded run let through on an earlier
    approval for its run or conversation, or on a standing grant (governance.grants),
    passes the same way in the replay: served from the recording by content (tool and
    canonical arguments), each at most once. Nothing is read or audited."""

    allowed: list[tuple[str, str, dict[str, Any]]]

    def tool_context_extras(self) -> dict[str, Any]:
        return {}

    def auto_approved(self, state: RunState, **_call: Any) -> None:
        return None

    def standing_approval(self, state: RunState, *, call_id: str, tool_name: str, arguments: dict[str, Any],
                          preview: dict[str, Any] | None = None) -> dict[str, Any] | None:
        wanted = (tool_name, _canonical(arguments))
        for index, (tool, canonical, resolution) in enumerate(self.allowed):
            if (tool, canonical) == wanted:
                del self.allowed[index]
                return dict(resolution)
        return None


def recorded_standing(steps: list[Step]) -> RecordedStanding:
    allowed = []
    for step in steps:
        output = step.output if isinstance(step.output, dict) else {}
        resolution = output.get("resolution") if step.step_type == StepType.GOVERNANCE_CHECK else None
        if isinstance(resolution, dict) and resolution.get("standing"):
            allowed.append((step.tool_name or "", _canonical(step.input or {}), resolution))
    return RecordedStanding(allowed=allowed)


class DryRunChecker:
    """Governance's checker with rate limits evaluated but never consumed: a replay's
    calls must not use up the agent's production rate-limit counters."""

    def check_tool_call(self, facts):
        return checker.check_tool_call(facts, count=False)

    def check_llm_call(self, **kwargs):
        return checker.check_llm_call(**kwargs)

    def check_query_result(self, **kwargs):
        return checker.check_query_result(**kwargs)

    def auto_approve_matches(self, **kwargs):
        return checker.auto_approve_matches(**kwargs)


_WAITS_FOR = {"approval": "an approval", "interaction": "an answer", "child": "a delegated run"}


def _engine_run(state: RunState, *, decided: RecordedDecisions, llm,
                tools: RecordedTools, standing: RecordedStanding | None = None) -> tuple[Outcome | None, str]:
    engine = Engine(llm=llm, journal=MemoryJournal(), policy=DryRunChecker(), tool_runner=tools, sleep=lambda _s: None,
                    execution_timeout_seconds=3600.0, hooks=standing)
    with observe.unobserved():  # a replay is not a run: metrics, logs and traces never see it
        try:
            for _ in range(MAX_RESUMES):
                outcome = engine.run(state)
                resume = decided.resume_step(state)
                if resume is None:
                    paused = state.pending.kind if state.pending else None
                    return outcome, f"the run would wait for {_WAITS_FOR.get(paused, paused)}" if paused else ""
                state.apply(resume)
            return None, "too many pauses to replay"
        except ReplayStop as stop:
            return None, stop.reason


def _fresh_state(base: RunState, *, agent_config=None) -> RunState:
    request = base.request if agent_config is None else base.request.model_copy(update={"agent_config": agent_config})
    if agent_config is None:
        return RunState(request=request, base_messages=base.base_messages, tool_schemas=base.tool_schemas)
    return RunState(request=request, base_messages=ctxmod.base_messages(request),
                    tool_schemas=ctxmod.tool_schemas(request))


def _recorded(execution: Execution) -> RunState:
    """The finished run's state: its request and prompt, and its recorded steps."""
    if execution.status not in REPLAYABLE:
        raise Conflict(f"Only a finished run can be replayed; this one is {execution.status}.",
                       code="run_not_finished")
    if execution.steps.count() > MAX_RECORDED_STEPS:
        raise Conflict(f"This run has more than {MAX_RECORDED_STEPS} steps; replays are limited to that.",
                       code="run_too_long")
    return state_load(execution)


def _step_rows(steps: list[Step]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json", include={"step_number", "turn", "step_type", "tool_name", "call_id", "input",
                                               "output", "status", "governance_decision", "error"})
            for s in steps]


def policies_resolve(*, user, policies: object) -> list[GovernancePolicySpec]:
    """A what-if policy set: policy ids the caller can see, or inline definitions checked
    like the policy API's (conditions, policy type, enforcement). Errors name the item."""
    if not isinstance(policies, list) or len(policies) > 50:
        raise InvalidInput("policies must be a list of at most 50 items.", details={"policies": ["invalid"]})
    specs: list[GovernancePolicySpec] = []
    for index, item in enumerate(policies):
        field_name = f"policies[{index}]"
        if isinstance(item, str | int) and not isinstance(item, bool):
            specs.append(policy_spec(policy_get_for_user(user=user, policy_id=item)))
            continue
        if not isinstance(item, dict):
            raise InvalidInput("A policy is an id or an object.", details={field_name: ["invalid"]})
        name = str(item.get("name") or "").strip()[:200]
        if not name:
            raise InvalidInput("A policy needs a name.", details={f"{field_name}.name": ["required"]})
        try:
            enforcement = Enforcement(item.get("enforcement"))
        except ValueError:
            raise InvalidInput("Invalid enforcement.", details={f"{field_name}.enforcement": [
                "must be one of: " + ", ".join(e.value for e in Enforcement)]}) from None
        try:
            shape = policy_validate(conditions=item.get("conditions"), policy_type=item.get("policy_type"))
        except InvalidInput as exc:
            raise InvalidInput(f"{field_name}: {exc}", details={field_name: exc.details}) from None
        specs.append(GovernancePolicySpec(policy_id=f"what-if-{index}", name=name, policy_type=shape.policy_type,
                                          conditions=shape.conditions, enforcement=enforcement))
    return specs


def _replay_result(execution: Execution, *, version: AgentVersion | None, policies: list[GovernancePolicySpec] | None,
                   llm=None) -> dict[str, Any]:
    base = _recorded(execution)
    recorded = base.steps
    what_if = version is not None or policies is not None
    if what_if:
        use = version or execution.agent_version
        agent = execution.agent
        agent.workspace = execution.workspace
        config = agent_config_build(agent=agent, version=use, policies=policies if policies is not None else
                                    active_policies(org_id=execution.workspace.organization_id,
                                                    workspace_id=execution.workspace_id))
        cap = (execution.context.get("delegation") or {}).get("action_level_cap")
        if cap:  # a delegated run is replayed under its parent's cap, as it ran
            config.action_level = action_level_at_most(config.action_level, ActionLevel(cap))
        state = _fresh_state(base, agent_config=config)
        model = llm if llm is not None else llm_for_execution(execution)
    else:
        state = _fresh_state(base)
        model = RecordedLLM(recorded)
    tools = RecordedTools(steps=recorded, stop_on_divergence=not what_if)
    pauses, calls = recorded_pauses(recorded)
    decided = RecordedDecisions(pauses=pauses, calls=calls)
    outcome, stopped = _engine_run(state, decided=decided, llm=model, tools=tools,
                                   standing=recorded_standing(recorded))
    diff = decisions_diff(recorded, state.steps)
    paused = decided.unmatched if stopped else None
    result: dict[str, Any] = {
        "execution_id": execution.pk,
        "kind": ExecutionReplay.Kind.WHAT_IF.value if what_if else ExecutionReplay.Kind.REPLAY.value,
        "agent_version": (version or execution.agent_version).version,
        "policies": [p.model_dump(mode="json") for p in policies] if policies is not None else None,
        "status": outcome.status.value if outcome else "stopped",
        "stopped": stopped or None,
        "paused_on": paused,
        "decisions_applied": decided.applied,
        "diff": diff,
        "would_write": tools.would_write,
        "different_read": tools.different_read,
        "served_from_recording": len(tools.served),
        "steps": _step_rows(state.steps),
    }
    if not what_if:
        # A run that ended waiting (an approval that expired, say) replays to the same wait.
        ended_as_recorded = bool(paused and paused["as_recorded"])
        result["deterministic"] = diff["identical"] and (not stopped or ended_as_recorded)
        result["non_determinism"] = None if result["deterministic"] else (diff["diverged_at"] or {"reason": stopped})
    return result


def version_what_if(execution: Execution, *, version: AgentVersion, llm=None) -> dict[str, Any]:
    """The what-if result of one finished run against ``version`` (as a batch row would
    be made from it), without storing a replay: for an evaluation (executions.services.evaluation)."""
    return _replay_result(execution, version=version, policies=None, llm=llm)


def _summary(result: dict[str, Any]) -> str:
    diff = result["diff"]
    if result["kind"] == ExecutionReplay.Kind.REPLAY.value:
        if result["deterministic"]:
            return "identical"
        where = diff["diverged_at"]
        return f"diverged at step {where['replayed_step']}" if where else f"stopped: {result['stopped']}"
    return "unchanged" if diff["identical"] else "changed"


def execution_replay(*, execution: Execution, user, agent_version: int | None = None,
                     policies: object = None, llm=None) -> ExecutionReplay:
    """Replay a finished run (no model call, no data access, no write), or what-if replay
    it against another version of its agent and/or another policy set."""
    version = agent_version_get(agent=execution.agent, version=agent_version) if agent_version is not None else None
    specs = policies_resolve(user=user, policies=policies) if policies is not None else None
    result = _replay_result(execution, version=version, policies=specs, llm=llm)
    return ExecutionReplay.objects.create(
        workspace_id=execution.workspace_id, agent_id=execution.agent_id, replay_of=execution,
        kind=result["kind"], agent_version=result["agent_version"], requested_by=user if user.pk else None,
        summary=_summary(result)[:300], result=result,
    )


def agent_replay_batch(*, agent: Agent, user, agent_version: int, last_n: int = BATCH_DEFAULT_RUNS,
                       llm=None) -> ExecutionReplay:
    """What-if replay of the agent's last ``last_n`` finished production runs against
    ``agent_version``; the summary is kept for the agent's page."""
    if not isinstance(last_n, int) or isinstance(last_n, bool) or not 1 <= last_n <= BATCH_MAX_RUNS:
        raise InvalidInput(f"last_n must be between 1 and {BATCH_MAX_RUNS}.", details={
            "last_n": [f"between 1 and {BATCH_MAX_RUNS}"]})
    version = agent_version_get(agent=agent, version=agent_version)
    runs = list(Execution.objects.filter(agent=agent, status__in=REPLAYABLE)
                .select_related("workspace", "agent", "agent_version")
                .order_by("-finished_at", "-id")[:last_n])
    rows, changed, approvals = [], 0, 0
    for run in runs:
        try:
            result = _replay_result(run, version=version, policies=None, llm=llm)
        except Conflict as exc:
            rows.append({"execution_id": run.pk, "skipped": str(exc)})
            continue
        diff = result["diff"]
        more = max(0, diff["approvals_needed"]["replayed"] - diff["approvals_needed"]["recorded"])
        changed += 0 if diff["identical"] else 1
        approvals += more
        rows.append({"execution_id": run.pk, "changed": not diff["identical"], "approvals_added": more,
                     "stopped": result["stopped"], "paused_on": result["paused_on"],
                     "diverged_at": diff["diverged_at"],
                     "tool_calls_changed": diff["tool_calls"]["changed"],
                     "governance_changed": diff["governance"]["changed"], "answer_changed": diff["answer"]["changed"],
                     "would_write": result["would_write"]})
    summary = (f"{changed} of {len(runs)} runs would change; "
               f"{approvals} more approval{'' if approvals == 1 else 's'} needed")
    return ExecutionReplay.objects.create(
        workspace_id=agent.workspace_id, agent=agent, kind=ExecutionReplay.Kind.BATCH, agent_version=version.version,
        requested_by=user if user.pk else None, summary=summary,
        result={"agent_version": version.version, "runs": len(runs), "changed": changed,
                "approvals_added": approvals, "summary": summary, "results": rows},
    )


def replay_batch_latest(*, agent_id) -> ExecutionReplay | None:
    return ExecutionReplay.objects.filter(agent_id=agent_id, kind=ExecutionReplay.Kind.BATCH) \
        .order_by("-created_at", "-id").first()
