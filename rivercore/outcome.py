"""A finished run's outcome: whether it did the job, separate from its status (where
it is). Derived from the run's terminal status and its recorded steps only, so the
run's end, a replay and a backfill of stored runs compute the same value
(docs/engine.md, "Outcome").

The rules, for a ``completed`` run (every other terminal status maps to one outcome):

1. ``partial``: at least one write went through and at least one other call was
   refused (an approver rejected it, governance blocked it and no later call of that
   tool succeeded) or a write failed.
2. ``rejected``: an approver rejected a call and no write went through.
3. ``blocked``: governance refused a call (a policy block, or query rows withheld by an
   export limit), no later call of the same tool succeeded, and no write went through.
4. ``no_answer``: nothing was written and the run has no final answer, a blank one,
   an answer that opens with one of ``NO_ANSWER_OPENINGS`` (how the offline planner
   says it could not match or answer the request), or a write that failed.
5. ``answered`` otherwise.

A write is recognised by its intent step (a pending ``tool_call`` recorded before a
writing tool is dispatched); a delegation's pending call (``awaiting``) is not one.
A call recorded as a recommendation (``suggest_only``) is neither a block nor a write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from rivercore.contracts import StepStatus, StepType
from rivercore.types.governance import Decision, ResolutionStatus
from rivercore.types.runs import RunStatus


class Outcome(StrEnum):
    ANSWERED = "answered"
    NO_ANSWER = "no_answer"
    BLOCKED = "blocked"
    REJECTED = "rejected"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    TIMEOUT = "timeout"
    MAX_TURNS = "max_turns"
    BUDGET = "budget"


# The outcomes where a run did what it was asked. Success rate = these ÷ finished.
SUCCESSFUL = frozenset({Outcome.ANSWERED})

_BY_STATUS = {
    RunStatus.FAILED: Outcome.FAILED,
    RunStatus.CANCELLED: Outcome.CANCELLED,
    RunStatus.APPROVAL_EXPIRED: Outcome.EXPIRED,
    RunStatus.TIMEOUT: Outcome.TIMEOUT,
    RunStatus.MAX_TURNS_EXCEEDED: Outcome.MAX_TURNS,
    RunStatus.BUDGET_EXCEEDED: Outcome.BUDGET,
}
TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, *_BY_STATUS})


def outcomes_possible(status: RunStatus) -> tuple[Outcome, ...]:
    """The outcomes a run ending in ``status`` can have (a completed run's depend on its
    steps; every other end has exactly one)."""
    if status == RunStatus.COMPLETED:
        return (Outcome.ANSWERED, Outcome.NO_ANSWER, Outcome.BLOCKED, Outcome.REJECTED, Outcome.PARTIAL)
    return (_BY_STATUS[status],) if status in _BY_STATUS else ()

# How the offline planner opens an answer when it could not match or answer the request
# (rivercore.planner.brain writes them from here). Compared case-insensitively with the
# start of the final answer.
NO_MATCH_NOTE = ("I could not match the request to any table, column or value of the connected data sources, "
                 "so I did not run anything.")
NO_ANSWER_NOTE = "I could not answer that."
NO_ANSWER_OPENINGS = (NO_MATCH_NOTE, NO_ANSWER_NOTE)


class StepLike(Protocol):
    """What the rules read of a step: the engine's ``Step`` and a stored step row both fit
    (a row stores absent names as "")."""

    @property
    def step_type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def governance_decision(self) -> str | None: ...
    @property
    def output(self) -> Any: ...


@dataclass(frozen=True)
class OutcomeReading:
    """The outcome and, when governance blocked the run, the policy that did."""

    outcome: Outcome
    policy: str | None = None


def outcome_of(status: RunStatus | str, steps: Iterable[StepLike]) -> Outcome:
    """The outcome of a run that ended with ``status`` after ``steps`` (in order).
    Raises ValueError for a status that is not terminal."""
    return outcome_read(status, steps).outcome


def outcome_read(status: RunStatus | str, steps: Iterable[StepLike]) -> OutcomeReading:
    """``outcome_of`` with the name of the blocking policy (for ``blocked`` and a
    ``partial`` whose refusal was a policy)."""
    run_status = RunStatus(status)
    if run_status not in TERMINAL_STATUSES:
        raise ValueError(f"a {run_status.value} run has no outcome yet")
    if run_status != RunStatus.COMPLETED:
        return OutcomeReading(_BY_STATUS[run_status])
    return _completed(list(steps))


def _output(step: StepLike) -> dict[str, Any]:
    return step.output if isinstance(step.output, dict) else {}


def _completed(steps: list[StepLike]) -> OutcomeReading:
    writes: set[str] = set()
    last_observation: dict[str, StepLike] = {}
    rejected: set[str] = set()
    blocked: list[tuple[int, str, str]] = []  # (position, tool, policy) of each refused call
    succeeded_at: dict[str, list[int]] = {}  # tool -> positions of its successful observations
    answer: str | None = None
    for position, step in enumerate(steps):
        output = _output(step)
        call = step.call_id or ""
        tool = step.tool_name or ""
        if step.step_type == StepType.TOOL_CALL and step.status == StepStatus.PENDING and "awaiting" not in output:
            writes.add(call)
        elif step.step_type == StepType.GOVERNANCE_CHECK:
            resolution = output.get("resolution")
            if isinstance(resolution, dict) and resolution.get("status") == ResolutionStatus.REJECTED:
                rejected.add(call)
            elif step.status == StepStatus.BLOCKED and step.governance_decision != Decision.APPROVAL_REQUIRED:
                policy = output.get("policy_matched") or output.get("reason") or "a governance policy"
                blocked.append((position, tool, str(policy)))
        elif step.step_type == StepType.OBSERVATION:
            last_observation[call] = step
            if output.get("rejected") is True:
                rejected.add(call)
            if step.status == StepStatus.COMPLETED:
                succeeded_at.setdefault(tool, []).append(position)
        elif step.step_type == StepType.FINAL_ANSWER:
            answer = str(output.get("answer") or "")

    def settled(call: str, wanted: str) -> bool:
        seen = last_observation.get(call)
        return seen is not None and seen.status == wanted

    written = {call for call in writes if settled(call, StepStatus.COMPLETED)}
    failed_writes = {call for call in writes if settled(call, StepStatus.FAILED)}
    standing = [(tool, policy) for position, tool, policy in blocked
                if not any(later > position for later in succeeded_at.get(tool, []))]
    policy = standing[0][1] if standing else None
    if written and (rejected - written or failed_writes or standing):
        return OutcomeReading(Outcome.PARTIAL, policy)
    if written:
        return OutcomeReading(Outcome.ANSWERED)
    if rejected:
        return OutcomeReading(Outcome.REJECTED)
    if standing:
        return OutcomeReading(Outcome.BLOCKED, policy)
    if failed_writes or answer_missing(answer):
        return OutcomeReading(Outcome.NO_ANSWER)
    return OutcomeReading(Outcome.ANSWERED)


def answer_missing(answer: str | None) -> bool:
    """True when a final answer says nothing: absent, blank, or opening with a
    could-not-answer note."""
    if answer is None or not answer.strip():
        return True
    opening = answer.strip().casefold()
    return any(opening.startswith(note.casefold()) for note in NO_ANSWER_OPENINGS)
