"""Conversations in the browser (docs/ui.md, "Conversations"): the list of the user's sessions in
the current workspace (/sessions/), a new conversation with an agent, and the
conversation page (/sessions/<id>/) with its composer, rename and archive.

The conversation is server-rendered from the session's entries (``_conversation``);
``static/session.js`` follows ``/ws/sessions/<id>/`` from the last stored event, shows
the streamed pieces of the answer being written, and fetches the conversation part again
(``session_part``) when an event changes it. Messages and files go through the REST API
(``POST /api/v1/artifacts/``, ``POST /api/v1/sessions/{id}/messages``); without
JavaScript the composer posts text to ``session_send``.

A session is its creator's: every view looks it up with ``session_get_for_user`` (anyone
else, a member of the same workspace included, gets a 404). Writes go through the
sessions services.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from agents.selectors import agent_choices, agent_in_workspace
from executions.models import Execution, Session
from executions.selectors import (
    session_active_execution,
    session_get_for_user,
    session_last_event_id,
    session_messages_latest,
    sessions_filter,
)
from executions.services import sessions as services
from rivercore import limits
from rivercore.errors import NotFound, RiverError
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import workspace_permissions
from web.context import current_workspace
from web.page_tools import mark_invalid_fields, page_login_required
from web.results import results_for_runs
from web.run import run_cards

SESSIONS_PER_PAGE = 25
# The latest entries a conversation page shows (older ones: the API's message list).
ENTRIES_SHOWN = 100
WAITING = {Execution.Status.AWAITING_APPROVAL, Execution.Status.AWAITING_INTERACTION}


def _session_or_404(user, session_id) -> Session:
    try:
        return session_get_for_user(user=user, session_id=session_id)
    except NotFound as exc:
        raise Http404(exc.message) from None


class SessionFilters(forms.Form):
    agent = forms.ChoiceField(required=False)
    archived = forms.ChoiceField(required=False, label="Show",
                                 choices=[("", "Open conversations"), ("1", "Archived conversations")])

    def __init__(self, *args, agents: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Any agent"), *agents]


class NewSessionForm(forms.Form):
    agent = forms.ChoiceField(label="Talk to", help_text="An active agent of this workspace.")

    def __init__(self, *args, agents: list[tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [("", "Choose an agent"), *agents]


def _list_page(request, *, new_form: NewSessionForm | None = None, status: int = 200):
    workspace = current_workspace(request)
    listed_agents = agent_choices(workspace=workspace) if workspace else []
    filters = SessionFilters(request.GET or None, agents=listed_agents)
    data: dict = {}
    filters_ok = True
    if filters.is_bound:
        if filters.is_valid():
            data = filters.cleaned_data
        else:
            status, filters_ok = 400, False
            mark_invalid_fields(filters)
    page = None
    may_start = workspace is not None and AGENT_EXECUTE in workspace_permissions(user=request.user,
                                                                                 workspace=workspace)
    if new_form is None and may_start:
        new_form = NewSessionForm(agents=agent_choices(workspace=workspace, runnable_only=True),
                                  initial={"agent": request.GET.get("agent", "")})
    if workspace is not None and filters_ok:
        rows = sessions_filter(user=request.user, workspace=workspace, archived=data.get("archived") == "1",
                               agent_id=data.get("agent") or None)
        page = Paginator(rows, SESSIONS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "sessions/list.html", {
        "workspace": workspace, "filters": filters, "page": page, "query": query.urlencode(),
        "new_form": new_form if may_start else None, "filtered": bool(data.get("agent")),
        "archived": data.get("archived") == "1",
    }, status=status)


@page_login_required
@require_GET
def sessions_list(request):
    return _list_page(request)


@page_login_required
@require_POST
def session_new(request):
    """Open a conversation with the chosen agent (``session_create``) and go to it."""
    workspace = current_workspace(request)
    if workspace is None:
        raise Http404("No workspace.")
    form = NewSessionForm(request.POST, agents=agent_choices(workspace=workspace, runnable_only=True))
    if AGENT_EXECUTE not in workspace_permissions(user=request.user, workspace=workspace):
        messages.error(request, "Your role in this workspace may not talk to agents.")
        return redirect(reverse("sessions-list"))
    if form.is_valid():
        agent = agent_in_workspace(workspace_id=workspace.pk, agent_id=form.cleaned_data["agent"])
        if agent is None:  # deleted since the form was shown
            form.add_error("agent", "Choose an agent of this workspace.")
        else:
            try:
                session = services.session_create(workspace=workspace, agent=agent, user=request.user)
            except RiverError as exc:
                form.add_error("agent", exc.message)
            else:
                return redirect(reverse("session-page", args=[session.pk]))
    mark_invalid_fields(form, prefix="new-")
    return _list_page(request, new_form=form, status=400)


def _conversation(user, session: Session) -> dict:
    """The conversation part: the latest entries in order, the run answering now (its
    pieces stream into it) and its approval and question cards. A fixed number of
    queries whatever the session's length."""
    rows = session_messages_latest(session_id=session.pk, limit=ENTRIES_SHOWN)
    entries = []
    for row in rows:
        refs = row.references if isinstance(row.references, dict) else {}
        entries.append({
            "row": row,
            "files": [str(ref.get("name") or "") for ref in refs.get("attachments") or []],
            "handoff": refs.get("handoff") if isinstance(refs.get("handoff"), dict) else None,
        })
    context: dict = {"cards": [], "question": None}
    active = session_active_execution(session=session)
    active_result = _attach_results(entries, active)
    if active is not None and active.status in WAITING:
        context.update(run_cards(user, active))
    may_steer = AGENT_EXECUTE in workspace_permissions(user=user, workspace=session.workspace)
    return {**context, "session": session, "entries": entries, "active": active, "execution": active,
            "may_steer": may_steer, "older": len(rows) == ENTRIES_SHOWN, "active_result": active_result}


def _attach_results(entries: list[dict], active: Execution | None) -> dict | None:
    """Each answer's query result (table, chart, SQL: web/results.py), read for all the
    answers at once, and the ended active run's (when no entry shows it yet)."""
    answered = [entry["row"].execution_id for entry in entries
                if entry["row"].role != "user" and entry["row"].execution_id and not entry["handoff"]]
    extra = active.pk if active is not None and active.is_terminal and active.pk not in answered else None
    results = results_for_runs(execution_ids=answered + ([extra] if extra is not None else []))
    for entry in entries:
        entry["result"] = results.get(entry["row"].execution_id) if entry["row"].role != "user" else None
    return results.get(extra) if extra is not None else None


def _last_session_seq(session: Session) -> int:
    return session_last_event_id(session_id=session.pk)


@page_login_required
@require_GET
def session_page(request, session_id):
    session = _session_or_404(request.user, session_id)
    context = _conversation(request.user, session)
    context.update({"last_session_seq": _last_session_seq(session), "rename_error": None,
                    "attachments_max": services.ATTACHMENTS_MAX})
    return render(request, "sessions/session.html", context)


@page_login_required
@require_GET
def session_part(request, session_id):
    """The conversation part again, for session.js."""
    session = _session_or_404(request.user, session_id)
    return render(request, "sessions/_conversation.html", _conversation(request.user, session))


class MessageForm(forms.Form):
    content = forms.CharField(max_length=limits.PROMPT, strip=True, label="Your message")


@page_login_required
@require_POST
def session_send(request, session_id):
    """The composer without JavaScript: text only (files are uploaded by session.js)."""
    session = _session_or_404(request.user, session_id)
    form = MessageForm(request.POST)
    if request.FILES:
        messages.error(request, "Nothing was sent: attaching files needs JavaScript.")
    elif not form.is_valid():
        messages.error(request, "Nothing was sent: " + " ".join(form.errors.get("content", ["the message is empty"])))
    elif AGENT_EXECUTE not in workspace_permissions(user=request.user, workspace=session.workspace):
        messages.error(request, "Your role in this workspace may not talk to agents.")
    else:
        try:
            services.session_message_send(session=session, user=request.user, content=form.cleaned_data["content"])
        except RiverError as exc:
            messages.error(request, f"Nothing was sent: {exc.message}")
    return redirect(reverse("session-page", args=[session.pk]))


class RenameForm(forms.Form):
    title = forms.CharField(max_length=limits.NAME, strip=True, required=False, label="Name")


@page_login_required
@require_POST
def session_rename(request, session_id):
    session = _session_or_404(request.user, session_id)
    form = RenameForm(request.POST)
    if form.is_valid():
        services.session_update(session=session, title=form.cleaned_data["title"])
        messages.success(request, "The conversation was renamed.")
        return redirect(reverse("session-page", args=[session.pk]))
    context = _conversation(request.user, session)
    context.update({"last_session_seq": _last_session_seq(session), "rename_error": " ".join(form.errors["title"]),
                    "rename_value": request.POST.get("title", "")[:1000], "attachments_max": services.ATTACHMENTS_MAX})
    return render(request, "sessions/session.html", context, status=400)


@page_login_required
@require_POST
def session_archive(request, session_id):
    """Archive (``archived=1``) or open again (``archived=0``)."""
    session = _session_or_404(request.user, session_id)
    archived = request.POST.get("archived") == "1"
    services.session_update(session=session, archived=archived)
    messages.success(request, "The conversation was archived." if archived else "The conversation is open again.")
    return redirect(reverse("session-page", args=[session.pk]))


urlpatterns = [
    path("sessions/", sessions_list, name="sessions-list"),
    path("sessions/new", session_new, name="session-new"),
    path("sessions/<int:session_id>/", session_page, name="session-page"),
    path("sessions/<int:session_id>/conversation", session_part, name="session-part"),
    path("sessions/<int:session_id>/send", session_send, name="session-send"),
    path("sessions/<int:session_id>/rename", session_rename, name="session-rename"),
    path("sessions/<int:session_id>/archive", session_archive, name="session-archive"),
]
