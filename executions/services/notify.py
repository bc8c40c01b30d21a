"""Telling the person answerable for a run (its requester: whoever started it, or for a
trigger's run the trigger's responsible person) what became of it: when it pauses for
an approval, asks them a question, and how it ended, each per their notification
preferences (``governance.notifications.requester_notify``).

Both hooks run in the caller's transaction: the pause in the segment's end, the end in
post-processing (once per run). A failure here is logged and never changes the run."""

from __future__ import annotations

import logging

from django.db import transaction

from executions.models import Execution
from governance import notifications as notices
from rivercore.outcome import Outcome

logger = logging.getLogger("river.executions")

ANSWERED = Outcome.ANSWERED.value


def run_outcome(execution: Execution) -> str:
    """Whether the run did the job: its stored ``outcome`` (set with its terminal status);
    for a row without one (written before outcomes), its status."""
    if execution.outcome:
        return str(execution.outcome)
    return ANSWERED if execution.status == Execution.Status.COMPLETED else str(execution.status)


def _agent_name(execution: Execution) -> str:
    agent = getattr(execution, "agent", None)
    return getattr(agent, "name", "") or "Agent"


def _run_url(execution_id: int) -> str:
    return f"/runs/{execution_id}/"


def _best_effort(what: str, execution_id: int, call) -> None:
    try:
        with transaction.atomic():
            call()
    except Exception:  # noqa: BLE001 - a notification never changes a run
        logger.exception("could not notify the requester of execution %s (%s)", execution_id, what)


def run_paused_for_approval_notify(execution: Execution, *, approval) -> None:
    """The run waits for someone's approval: its requester hears which call waits,
    and the notification resolves with the request (decided, expired or closed)."""
    title = f"{_agent_name(execution)}: run {execution.pk} is waiting for approval of {approval.tool_name}"
    when = notices.local_time(approval.expires_at, workspace=execution.workspace)
    body = (f"Your run paused before calling {approval.tool_name}: an approver must decide. "
            f"The request expires {when}.")
    _best_effort("approval pause", execution.pk, lambda: notices.requester_notify(
        workspace_id=execution.workspace_id, user_id=execution.requester_id, events=[notices.EVENT_APPROVAL_PAUSE],
        kind=notices.RUN_AWAITING_APPROVAL, title=title, body=body,
        url=f"{_run_url(execution.pk)}#approval-{approval.pk}", execution_id=execution.pk, approval_id=approval.pk))


def run_question_notify(execution: Execution, *, call_id: str, question: str) -> None:
    """The run asks its requester a question (``ask_user``): the notification links to
    the run page where it is answered, and resolves once it is answered or the run ends."""
    title = f"{_agent_name(execution)} asks you: {question}"[:200]
    body = f"Run {execution.pk} is waiting for your answer:\n{question[:2000]}"
    _best_effort("question", execution.pk, lambda: notices.requester_notify(
        workspace_id=execution.workspace_id, user_id=execution.requester_id, events=[notices.EVENT_QUESTION],
        kind=notices.RUN_QUESTION, title=title, body=body, url=f"{_run_url(execution.pk)}#question-{call_id}",
        execution_id=execution.pk))


def run_question_answered(*, execution_id: int, user) -> None:
    """The question was answered: its notification resolves, naming who answered."""
    name = user.get_full_name() or user.get_username()
    notices.notifications_resolve(execution_id=execution_id, kinds=(notices.RUN_QUESTION,), by=user,
                                  resolution=f"Answered by {name}")


_END_WORDS = {
    Outcome.ANSWERED.value: "finished with an answer",
    Outcome.NO_ANSWER.value: "ended without an answer",
    Outcome.BLOCKED.value: "was blocked by policy",
    Outcome.REJECTED.value: "ended after an approver rejected a call",
    Outcome.PARTIAL.value: "finished with a partial answer",
    Outcome.FAILED.value: "failed",
    Outcome.CANCELLED.value: "was cancelled",
    Outcome.EXPIRED.value: "ended: an approval expired",
    "approval_expired": "ended: an approval expired",
    Outcome.TIMEOUT.value: "timed out",
    Outcome.MAX_TURNS.value: "ran out of turns",
    "max_turns_exceeded": "ran out of turns",
    Outcome.BUDGET.value: "ran out of budget",
    "budget_exceeded": "ran out of budget",
}


def run_end_notify(execution: Execution) -> None:
    """A run ended: its requester hears of it when it failed or did not answer
    (``outcome`` other than ``answered``), or of every end if they asked to; a question
    still open resolves ("Run ended"). Called once per run, from post-processing."""
    outcome = run_outcome(execution)
    events = [notices.EVENT_EVERY_END]
    if outcome != ANSWERED:
        events.append(notices.EVENT_NOT_ANSWERED)
    if execution.status == Execution.Status.FAILED or outcome == Outcome.FAILED:
        events.append(notices.EVENT_FAILED)
    words = _END_WORDS.get(outcome, f"ended ({outcome})")
    title = f"{_agent_name(execution)}: run {execution.pk} {words}"
    summary = ((execution.result or {}).get("summary") or "").strip()
    error = (execution.error or {}).get("message") if isinstance(execution.error, dict) else ""
    when = notices.local_time(execution.finished_at, workspace=execution.workspace) if execution.finished_at else ""
    lines = [f"Ended {when}." if when else "", f"Answer: {summary[:500]}" if summary else "",
             f"Error: {str(error)[:500]}" if error else ""]
    body = "\n".join(line for line in lines if line)

    def notify() -> None:
        notices.notifications_resolve(execution_id=execution.pk, kinds=(notices.RUN_QUESTION,),
                                      resolution=f"Run ended ({outcome})")
        notices.requester_notify(workspace_id=execution.workspace_id, user_id=execution.requester_id,
                                 events=events, kind=notices.RUN_ENDED, title=title, body=body,
                                 url=_run_url(execution.pk), execution_id=execution.pk)

    _best_effort("end", execution.pk, notify)
