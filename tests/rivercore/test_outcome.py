"""The outcome rules (rivercore.outcome): pure, from a status and steps alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rivercore.contracts import Step, StepStatus, StepType
from rivercore.outcome import NO_ANSWER_NOTE, NO_MATCH_NOTE, Outcome, outcome_of, outcome_read
from rivercore.types.governance import Decision
from rivercore.types.runs import RunStatus


class Trace:
    """Builds a run's steps in order, the way the runner records them."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def add(self, step_type: StepType, **fields) -> Trace:
        self.steps.append(Step(step_number=len(self.steps) + 1, step_type=step_type, **fields))
        return self

    def read(self, call: str, tool: str = "execute_query") -> Trace:
        self.add(StepType.GOVERNANCE_CHECK, call_id=call, tool_name=tool, governance_decision=Decision.PROCEED)
        self.add(StepType.TOOL_CALL, call_id=call, tool_name=tool)
        return self.add(StepType.OBSERVATION, call_id=call, tool_name=tool, output={"result": {"rows": []}})

    def write(self, call: str, *, ok: bool = True, tool: str = "write_back") -> Trace:
        self.add(StepType.TOOL_CALL, call_id=call, tool_name=tool, status=StepStatus.PENDING)
        if ok:
            return self.add(StepType.OBSERVATION, call_id=call, tool_name=tool, output={"result": {"rows": 1}})
        return self.add(StepType.OBSERVATION, call_id=call, tool_name=tool, status=StepStatus.FAILED,
                        output={"error": {"code": "TOOL_FAILED"}}, error="boom")

    def policy_block(self, call: str, tool: str = "execute_query", policy: str = "no-pii") -> Trace:
        self.add(StepType.GOVERNANCE_CHECK, call_id=call, tool_name=tool, status=StepStatus.BLOCKED,
                 governance_decision=Decision.BLOCKED, output={"reason": "PII", "policy_matched": policy})
        return self.add(StepType.OBSERVATION, call_id=call, tool_name=tool, status=StepStatus.BLOCKED,
                        output={"blocked": True, "policy": policy})

    def reject(self, call: str, tool: str = "write_back") -> Trace:
        self.add(StepType.GOVERNANCE_CHECK, call_id=call, tool_name=tool, status=StepStatus.PENDING,
                 governance_decision=Decision.APPROVAL_REQUIRED, output={"approval_request": {}})
        self.add(StepType.GOVERNANCE_CHECK, call_id=call, tool_name=tool, governance_decision=Decision.BLOCKED,
                 output={"resolution": {"status": "rejected"}})
        return self.add(StepType.OBSERVATION, call_id=call, tool_name=tool, status=StepStatus.BLOCKED,
                        output={"rejected": True, "comment": "no"})

    def answer(self, text: str = "There are 42 open tickets.") -> Trace:
        return self.add(StepType.FINAL_ANSWER, output={"answer": text})


@pytest.mark.parametrize(("status", "expected"), [
    (RunStatus.FAILED, Outcome.FAILED),
    (RunStatus.CANCELLED, Outcome.CANCELLED),
    (RunStatus.APPROVAL_EXPIRED, Outcome.EXPIRED),
    (RunStatus.TIMEOUT, Outcome.TIMEOUT),
    (RunStatus.MAX_TURNS_EXCEEDED, Outcome.MAX_TURNS),
    (RunStatus.BUDGET_EXCEEDED, Outcome.BUDGET),
])
def test_every_other_terminal_status_has_its_own_outcome_whatever_the_steps(status, expected):
    steps = Trace().read("c1").write("c2").answer().steps
    assert outcome_of(status, steps) == expected
    assert outcome_of(status.value, []) == expected


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL,
                                    RunStatus.AWAITING_INTERACTION, RunStatus.AWAITING_CHILD])
def test_a_run_that_has_not_ended_has_no_outcome(status):
    with pytest.raises(ValueError, match="no outcome"):
        outcome_of(status, [])


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError):
        outcome_of("done", [])


def test_a_read_and_an_answer_is_answered():
    assert outcome_of(RunStatus.COMPLETED, Trace().read("c1").answer().steps) == Outcome.ANSWERED


def test_a_write_that_went_through_is_answered():
    assert outcome_of(RunStatus.COMPLETED, Trace().read("c1").write("c2").answer("").steps) == Outcome.ANSWERED


@pytest.mark.parametrize("answer", [None, "", "   \n"])
def test_no_final_answer_or_a_blank_one_is_no_answer(answer):
    trace = Trace().read("c1")
    if answer is not None:
        trace.answer(answer)
    assert outcome_of(RunStatus.COMPLETED, trace.steps) == Outcome.NO_ANSWER


@pytest.mark.parametrize("note", [NO_ANSWER_NOTE, NO_MATCH_NOTE, NO_ANSWER_NOTE.upper()])
def test_the_planners_could_not_answer_notes_are_no_answer(note):
    steps = Trace().read("c1", tool="classify_intent").answer(f"  {note} I answer counts and sums.").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.NO_ANSWER


def test_a_could_not_sentence_later_in_an_answer_is_still_an_answer():
    steps = Trace().read("c1").answer(f"There are 3 rows. {NO_ANSWER_NOTE}").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.ANSWERED


def test_a_policy_block_the_answer_needed_is_blocked_and_names_the_policy():
    steps = Trace().policy_block("c1", policy="Block PII export").answer("I was blocked by a policy.").steps
    assert outcome_read(RunStatus.COMPLETED, steps).outcome == Outcome.BLOCKED
    assert outcome_read(RunStatus.COMPLETED, steps).policy == "Block PII export"


def test_a_block_made_good_by_a_later_call_of_the_same_tool_is_answered():
    steps = Trace().policy_block("c1").read("c2").answer().steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.ANSWERED


def test_a_success_of_the_tool_before_the_block_does_not_make_it_good():
    steps = Trace().read("c1").policy_block("c2").answer("Blocked.").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.BLOCKED


def test_rows_withheld_by_an_export_limit_count_as_a_block():
    trace = Trace()
    trace.add(StepType.TOOL_CALL, call_id="c1", tool_name="execute_query")
    trace.add(StepType.GOVERNANCE_CHECK, call_id="c1", tool_name="execute_query", status=StepStatus.BLOCKED,
              governance_decision=Decision.BLOCKED,
              output={"reason": "too many rows", "policy_matched": "export cap", "point": "after_query"})
    trace.add(StepType.OBSERVATION, call_id="c1", tool_name="execute_query", status=StepStatus.BLOCKED,
              output={"result": {"withheld": True}})
    reading = outcome_read(RunStatus.COMPLETED, trace.answer("Withheld.").steps)
    assert (reading.outcome, reading.policy) == (Outcome.BLOCKED, "export cap")


def test_a_recommendation_recorded_under_suggest_only_is_not_a_block():
    trace = Trace()
    trace.add(StepType.GOVERNANCE_CHECK, call_id="c1", tool_name="write_back",
              governance_decision=Decision.SUGGEST_ONLY, output={"reason": "suggest only"})
    trace.add(StepType.OBSERVATION, call_id="c1", tool_name="write_back", status=StepStatus.BLOCKED,
              output={"suggestion_recorded": True})
    assert outcome_of(RunStatus.COMPLETED, trace.answer("Recorded as a recommendation.").steps) == Outcome.ANSWERED


def test_a_rejected_write_with_nothing_written_is_rejected():
    steps = Trace().read("c1").reject("c2").answer("The approver said no.").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.REJECTED


def test_a_rejection_wins_over_a_policy_block_when_nothing_was_written():
    steps = Trace().policy_block("c1").reject("c2").answer("No.").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.REJECTED


def test_one_write_done_and_one_rejected_is_partial():
    steps = Trace().write("c1").reject("c2").answer().steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.PARTIAL


def test_one_write_done_and_one_failed_is_partial():
    steps = Trace().write("c1").write("c2", ok=False).answer().steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.PARTIAL


def test_one_write_done_and_a_standing_policy_block_is_partial_naming_the_policy():
    reading = outcome_read(RunStatus.COMPLETED, Trace().write("c1").policy_block("c2", policy="p9").answer().steps)
    assert (reading.outcome, reading.policy) == (Outcome.PARTIAL, "p9")


def test_a_failed_write_with_nothing_written_is_no_answer():
    steps = Trace().write("c1", ok=False).answer("The update failed.").steps
    assert outcome_of(RunStatus.COMPLETED, steps) == Outcome.NO_ANSWER


def test_a_delegations_pending_call_is_not_a_write():
    trace = Trace()
    trace.add(StepType.TOOL_CALL, call_id="c1", tool_name="delegate_to_agent", status=StepStatus.PENDING,
              output={"awaiting": {"execution_id": 7}})
    trace.add(StepType.OBSERVATION, call_id="c1", tool_name="delegate_to_agent", status=StepStatus.FAILED,
              output={"error": {"code": "DELEGATED_RUN_FAILED"}})
    assert outcome_of(RunStatus.COMPLETED, trace.answer("The child failed; here is what I know.").steps) \
        == Outcome.ANSWERED


def test_stored_rows_with_empty_strings_read_the_same_as_engine_steps():
    steps = Trace().policy_block("c1").reject("c2").write("c3").answer().steps
    rows = [SimpleNamespace(step_type=s.step_type.value, status=s.status.value, tool_name=s.tool_name or "",
                            call_id=s.call_id or "", governance_decision=(s.governance_decision or ""),
                            output=s.output) for s in steps]
    assert outcome_read(RunStatus.COMPLETED, rows) == outcome_read(RunStatus.COMPLETED, steps)
    assert outcome_of("completed", rows) == Outcome.PARTIAL
