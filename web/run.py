"""The run page (/runs/<id>/): a run followed live, steered and explained.

The page is server-rendered in parts (``PARTS``): the head (status, progress, Cancel), the
cause (trigger, person, parent and delegated runs), the cards (approval requests and an
open question) and the outcome (summary, and the last query's result as a paged table with
a chart: web/results.py). ``static/run.js`` renders the activity feed from the run's stored
events, embedded in the page, then follows the run's WebSocket from the last embedded
sequence number and re-fetches a part (``run_parts``) when an event changes it. The page
therefore reads the same after the run ended as while it ran: everything comes from the
event log and the steps.

Each view looks the run up through ``execution_get_for_user`` (another workspace's run is
a 404), and writes through one service: ``execution_cancel``, ``execution_respond``.
"""

from __future__ import annotations

from django import forms
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from common.people import person_label
from executions import services
from executions.models import Execution
from executions.progress import execution_status_block
from executions.selectors import (
    execution_children_named,
    execution_events_first,
    execution_get_for_user,
    execution_question_open,
    execution_run_time,
)
from executions.why import step_why
from governance.approvals import approval_resolver, approvals_of_execution
from governance.grants import standing_uses_of_execution
from rivercore.errors import NotFound, RiverError
from rivercore.events import event_message
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import service_principal_of, users_by_id, workspace_permissions
from triggers.selectors import trigger_summary_in_workspace
from web.approval_card import approval_card
from web.evaluations import run_pin_context
from web.page_tools import page_login_required
from web.results import results_for_runs

PARTS = ("head", "cause", "cards", "outcome")
# Events embedded in the page; the WebSocket replays any after them.
FEED_EMBEDDED = 1000


def _run_or_404(user, execution_id) -> Execution:
    try:
        return execution_get_for_user(user=user, execution_id=execution_id)
    except NotFound as exc:
        raise Http404(exc.message) from None


def _may_steer(user, execution: Execution) -> bool:
    return AGENT_EXECUTE in workspace_permissions(user=user, workspace=execution.workspace)


def _head(execution: Execution) -> dict:
    block = execution_status_block(execution=execution)
    turn, tokens = block["turn"], block["tokens"]
    return {
        "progress": block,
        "turn_percent": min(100, round(100 * turn["current"] / turn["max"])) if turn["max"] else 0,
        "token_percent": min(100, round(100 * tokens["used"] / tokens["budget"])) if tokens["budget"] else 0,
        # Its segments and the waits between them: the duration shown is the segments'.
        "run_time": execution_run_time(execution=execution),
    }


def _cause(user, execution: Execution) -> dict:
    trigger = None
    if execution.trigger_id:
        trigger = trigger_summary_in_workspace(workspace_id=execution.workspace_id, trigger_id=execution.trigger_id)
    return {
        "trigger": trigger,
        **_people(execution),
        "children": execution_children_named(execution=execution),
    }


def _people(execution: Execution) -> dict:
    """Who the run is for: ``requester`` (the person answerable for it, who may not
    approve its actions) and, when the run acts as someone else, ``acting_as`` (a
    trigger's identity by its label, or another person by name)."""
    users = users_by_id(user_ids=[execution.requester_id, execution.requested_by_id])
    requester = users.get(execution.requester_id)
    acting_as = acting_as_username = None
    identity = users.get(execution.requested_by_id) if execution.requested_by_id != execution.requester_id else None
    if identity is not None:
        principal = service_principal_of(user=identity)
        acting_as = principal.label if principal is not None else person_label(identity)
        acting_as_username = identity.get_username()
    return {"requester": person_label(requester) if requester is not None else None, "acting_as": acting_as,
            "acting_as_username": acting_as_username if acting_as_username != acting_as else None}


def _question(execution: Execution) -> dict | None:
    """The open ``ask_user`` question, from its pending interaction step.

    The worker commits the question (its step and the ``interaction_required`` event,
    which makes run.js fetch this part) before it closes the segment and saves the
    pause: a page asking in between reads the run still ``running``. The question is
    open then too when its step is the run's latest tool step (an answer is a later
    step), or the card would stay missing, as no event follows the pause."""
    if execution.status not in (Execution.Status.AWAITING_INTERACTION, Execution.Status.RUNNING):
        return None
    step = execution_question_open(execution_id=execution.pk)
    if step is None or not isinstance(step["input"], dict):
        return None
    if execution.status == Execution.Status.RUNNING:
        latest = execution_status_block(execution=execution)["current_tool"]
        if not latest or latest["step_number"] != step["step_number"]:
            return None
    return {**step["input"], "step_number": step["step_number"]}


def run_cards(user, execution: Execution, *, answer_error: dict | None = None, answer: str = "") -> dict:
    approvals = approvals_of_execution(user=user, execution_id=execution.pk)
    allowed = approval_resolver(user=user, workspace=execution.workspace)
    return {
        "cards": [approval_card(user=user, approval=approval, can_resolve=allowed(approval)) for approval in approvals],
        "question": _question(execution),
        "answer_error": answer_error,
        "answer": answer,
        "standing_uses": standing_uses_of_execution(execution_id=execution.pk),  # scopes: governance.grants
    }


def _outcome(execution: Execution) -> dict:
    """The run's summary and its last query's result (table, chart, SQL: web/results.py)."""
    return {"result": results_for_runs(execution_ids=[execution.pk]).get(execution.pk),
            "summary": (execution.result or {}).get("summary", "") if execution.is_terminal else ""}


def _parts_context(request, execution: Execution, parts, **card_state) -> dict:
    context: dict = {"execution": execution, "may_steer": _may_steer(request.user, execution)}
    if "head" in parts:
        context.update(_head(execution))
    if "cause" in parts:
        context.update(_cause(request.user, execution))
    if "cards" in parts:
        context.update(run_cards(request.user, execution, **card_state))
    if "outcome" in parts:
        context.update(_outcome(execution))
    return context


def _events(execution: Execution) -> list[dict]:
    rows = execution_events_first(execution_id=execution.pk, limit=FEED_EMBEDDED)
    return [event_message(event_type=row.event_type, seq=row.seq, execution_id=execution.pk,
                          created_at=row.created_at, payload=row.payload) for row in rows]


@page_login_required
@require_GET
def run_page(request, execution_id):
    execution = _run_or_404(request.user, execution_id)
    events = _events(execution)
    # The row again, read after the events: a run that moved on in between (a worker
    # claimed it and wrote run_started) shows its status as of those events or later,
    # never older; the socket replays from the last embedded event, so nothing is lost.
    execution.refresh_from_db()
    context = _parts_context(request, execution, PARTS)
    context.update({
        "events": events,
        "last_seq": events[-1]["seq"] if events else 0,
        "status_labels": dict(Execution.Status.choices),
        **run_pin_context(user=request.user, execution=execution),
    })
    return render(request, "runs/run.html", context)


@page_login_required
@require_GET
def run_parts(request, execution_id):
    """Some parts of the page (``?part=head&part=cards``), re-rendered for run.js."""
    execution = _run_or_404(request.user, execution_id)
    parts = [p for p in request.GET.getlist("part") if p in PARTS] or list(PARTS)
    return render(request, "runs/_parts.html", {**_parts_context(request, execution, parts), "parts": parts})


# The step's own fields the Why panel lists under "Step details" (its input and output
# are the tool's arguments and result, shown in their own section when there is one).
STEP_NUMBER_MAX = 2**31 - 1
STEP_FACTS = ("step_type", "status", "tool_name", "tool_category", "governance_decision", "error", "duration_ms",
              "model_used", "model_tier", "provider", "tokens", "call_id")


def _message_view(message) -> dict:
    """One message the model was given: its role, and its content as text or a structure."""
    message = message if isinstance(message, dict) else {"content": message}
    content = message.get("content")
    return {"role": str(message.get("role") or ""), "text": content if isinstance(content, str) else "",
            "value": None if isinstance(content, str) else (content or message)}


def _model_view(call: dict | None) -> dict | None:
    if not call:
        return None
    messages = call.get("messages") or []
    asked = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")][-2:]
    output = call.get("output") if isinstance(call.get("output"), dict) else {}
    tool_calls = output.get("tool_calls") if isinstance(output.get("tool_calls"), list) else []
    return {**call, "asked": [_message_view(m) for m in asked], "said": output.get("content") or "",
            "called": [c.get("name") or (c.get("function") or {}).get("name")
                       for c in tool_calls if isinstance(c, dict)],
            "message_count": len(messages)}


def why_context(why: dict) -> dict:
    """What ``runs/_why.html`` shows of ``step_why``'s answer (the API's, unchanged)."""
    step = why["step"]
    tool = why.get("tool")
    facts = {name: step[name] for name in STEP_FACTS if step.get(name) not in (None, "", {}, [])}
    if not tool:  # no tool section: the step's own input and output belong here
        facts.update({name: step[name] for name in ("input", "output") if step.get(name) not in (None, "", {}, [])})
    approval = why.get("approval")
    return {"why": why, "step": step, "facts": facts, "model": _model_view(why.get("model_call")), "tool": tool,
            "approval": approval, "edited": bool(approval and isinstance(approval.get("edits"), dict))}


@page_login_required
@require_GET
def run_step_why(request, execution_id, step_number):
    """The Why panel of one step, fetched by run.js: ``step_why`` (what
    ``GET /api/v1/executions/{id}/steps/{n}/why`` answers) as structured views."""
    execution = _run_or_404(request.user, execution_id)
    if step_number > STEP_NUMBER_MAX:  # beyond the column's range: no such step
        raise Http404("No such step.")
    return render(request, "runs/_why.html", why_context(step_why(execution=execution, step_number=step_number)))


class AnswerForm(forms.Form):
    answer = forms.CharField(max_length=4000, required=False, strip=True)

    def __init__(self, *args, question: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.question = question

    def clean_answer(self):
        answer = self.cleaned_data["answer"]
        options = [str(o) for o in self.question.get("options") or []]
        if self.question.get("required", True) and not answer:
            raise forms.ValidationError("Choose an answer." if options else "Write an answer.")
        if options and answer and answer not in options:
            raise forms.ValidationError("Choose one of the offered answers.")
        return answer


@page_login_required
@require_POST
def run_answer(request, execution_id):
    """Answer the run's open question (``execution_respond``); the run continues. An htmx
    request gets the cards part back (with the error and its status code when refused)."""
    from django.contrib import messages

    execution = _run_or_404(request.user, execution_id)
    form = AnswerForm(request.POST, question=_question(execution) or {})
    status_code, error = 200, None
    if not form.is_valid():
        status_code = 400
        error = {"message": "Nothing was sent: the answer has errors.",
                 "details": {name: list(problems) for name, problems in form.errors.items()}}
    elif not _may_steer(request.user, execution):
        status_code = 403
        error = {"message": "Your role in this workspace may not answer for this run.", "details": {}}
    else:
        try:
            services.execution_respond(execution=execution, user=request.user,
                                       user_response=form.cleaned_data["answer"])
        except RiverError as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            status_code = exc.status_code
            error = {"message": exc.message,
                     "details": {("answer" if name == "user_response" else name): problems
                                 for name, problems in details.items()}}
    if not request.headers.get("HX-Request"):
        if error is not None:
            messages.error(request, error["message"])
        return redirect(reverse("run-page", args=[execution.pk]))
    execution.refresh_from_db()
    context = _parts_context(request, execution, ["cards"], answer_error=error,
                             answer=request.POST.get("answer", "") if error else "")
    response = render(request, "runs/_parts.html", {**context, "parts": ["cards"]}, status=status_code)
    response["X-River-Card"] = "1"  # approvals.js lets htmx swap 4xx responses that carry it
    return response


@page_login_required
@require_POST
def run_cancel(request, execution_id):
    """Cancel the run (``execution_cancel``); back to its page either way, with a message."""
    from django.contrib import messages

    execution = _run_or_404(request.user, execution_id)
    if request.POST.get("confirm") != "yes":
        messages.error(request, "The run was not cancelled: confirm the cancellation first.")
    elif not _may_steer(request.user, execution):
        messages.error(request, "Your role in this workspace may not cancel runs.")
    else:
        try:
            services.execution_cancel(execution=execution, user=request.user)
        except RiverError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Run #{execution.pk} was cancelled.")
    return redirect(reverse("run-page", args=[execution.pk]))


urlpatterns = [
    path("runs/<int:execution_id>/", run_page, name="run-page"),
    path("runs/<int:execution_id>/parts", run_parts, name="run-parts"),
    path("runs/<int:execution_id>/steps/<int:step_number>/why", run_step_why, name="run-step-why"),
    path("runs/<int:execution_id>/answer", run_answer, name="run-answer"),
    path("runs/<int:execution_id>/cancel", run_cancel, name="run-cancel"),
]

