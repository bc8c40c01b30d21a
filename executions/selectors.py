"""Reads for executions, always scoped to the caller's workspaces."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import (
    Count,
    DurationField,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from agents.selectors import agent_ids_named
from common.people import person_label
from common.search import CompiledSearch, query_words, ranked, text_match
from executions.models import (
    SEARCHED_FIELDS,
    SEARCHED_LOOKUPS,
    Execution,
    ExecutionEvent,
    ExecutionReplay,
    ExecutionSegment,
    ExecutionStep,
    Session,
    SessionMessage,
)
from rivercore.contracts import StepStatus
from rivercore.errors import NotFound
from rivercore.events import RunEventType, event_message
from rivercore.outcome import Outcome
from tenancy.selectors import user_ids_named, workspaces_for_user


def executions_for_user(*, user) -> QuerySet[Execution]:
    return Execution.objects.filter(workspace__in=workspaces_for_user(user=user))


@dataclass(frozen=True, kw_only=True)
class ExecutionFilters:
    """What a list of runs may be narrowed by; the runs page and ``GET /api/v1/executions/``
    both parse their query into this, already validated. ``since`` is inclusive and
    ``until`` exclusive (a day's filter passes the next day's midnight)."""

    status: str | None = None
    agent_id: uuid.UUID | None = None
    trigger_type: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    session_id: int | None = None
    outcomes: tuple[str, ...] | None = None  # any of these (rivercore.outcome.Outcome values)
    requester_id: int | None = None
    text: str | None = None  # words of the prompt or the answer (common/search.py), or the run's id

    @property
    def any(self) -> bool:
        return any(value is not None for value in
                   (self.status, self.agent_id, self.trigger_type, self.since, self.until, self.session_id,
                    self.outcomes, self.requester_id, self.text))


# The orders a list of runs may take: the key a page or the API is given (``-`` first for
# descending) and the columns it sorts on, the run's id last so pages never overlap.
# Nothing else reaches order_by.
EXECUTION_SORTS = {
    "id": ("pk",),
    "status": ("status", "pk"),
    "outcome": ("outcome", "pk"),
    "agent": ("agent__name", "pk"),
    "trigger": ("trigger_type", "pk"),
    "started": ("queued_at", "pk"),
    "turns": ("turn_count", "pk"),
    "tokens": ("total_tokens_sort", "pk"),
    "cost": ("cost_usd", "pk"),
}
EXECUTION_SORT_DEFAULT = "-id"


def execution_sort_valid(key: str) -> bool:
    return key.removeprefix("-") in EXECUTION_SORTS


def executions_sorted(runs: QuerySet[Execution], *, sort: str = EXECUTION_SORT_DEFAULT) -> QuerySet[Execution]:
    """``runs`` in the order ``sort`` names (a key of ``EXECUTION_SORTS``, ``-`` first for
    descending). The caller has checked the key (``execution_sort_valid``); an unknown
    one is a ValueError, never passed on."""
    name = sort.removeprefix("-")
    if name not in EXECUTION_SORTS:
        raise ValueError(f"unknown sort key {sort!r}")
    if name == "tokens":
        runs = runs.annotate(total_tokens_sort=F("tokens_input") + F("tokens_output"))
    prefix = "-" if sort.startswith("-") else ""
    return runs.order_by(*(f"{prefix}{column}" for column in EXECUTION_SORTS[name]))


def _run_id_in(text: str) -> int | None:
    """The run id a query names (``123`` or ``#123``), else None."""
    digits = text.strip().removeprefix("#")
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 18 else None


def _text_condition(text: str, *, named: tuple[list, list] = ([], [])) -> Q:
    """Runs whose prompt or answer hold every word of ``text``, or whose id it is, or
    (for the search box) whose agent or requester is one of ``named`` (agent ids, user
    ids: ``_named_in``). The agents and people are read first (small, separate queries)
    and passed as ids, so the planner sees plain index conditions it can combine with
    the GIN index's."""
    words = query_words(text)
    condition = Q(pk__in=[])
    if words:
        condition |= text_match(SEARCHED_FIELDS, SEARCHED_LOOKUPS, words, stored="search_vector")
    run_id = _run_id_in(text)
    if run_id is not None:
        condition |= Q(pk=run_id)
    agents, people = named
    if agents:
        condition |= Q(agent_id__in=agents)
    if people:
        condition |= Q(requester_id__in=people)
    return condition


def _named_in(words: list[str], *, workspace) -> tuple[list, list]:
    """The ids of ``workspace``'s agents and people whose names hold ``words``."""
    if not words:
        return [], []
    return (list(agent_ids_named(workspace=workspace, words=words)),
            list(user_ids_named(workspace=workspace, words=words)))


def executions_filter(*, user, workspace=None, filters: ExecutionFilters) -> QuerySet[Execution]:
    """The user's runs (only ``workspace``'s when given) narrowed by ``filters``; the one
    place a list of runs is filtered, so the page and the API can never disagree."""
    runs = executions_for_user(user=user)
    if workspace is not None:
        runs = runs.filter(workspace=workspace)
    if filters.status is not None:
        runs = runs.filter(status=filters.status)
    if filters.agent_id is not None:
        runs = runs.filter(agent_id=filters.agent_id)
    if filters.trigger_type is not None:
        runs = runs.filter(trigger_type=filters.trigger_type)
    if filters.since is not None:
        runs = runs.filter(queued_at__gte=filters.since)
    if filters.until is not None:
        runs = runs.filter(queued_at__lt=filters.until)
    if filters.session_id is not None:
        runs = runs.filter(session_id=filters.session_id)
    if filters.outcomes is not None:
        runs = runs.filter(outcome__in=filters.outcomes)
    if filters.requester_id is not None:
        runs = runs.filter(requester_id=filters.requester_id)
    if filters.text is not None:
        runs = runs.filter(_text_condition(filters.text))
    return runs


# How many of the newest matching runs the search box ranks; older matches are reached
# from the runs list's text filter ("all matching runs").
SEARCH_CANDIDATES = 200


def executions_search(*, user, workspace, text: str, limit: int) -> list[Execution]:
    """The search box's runs: ``workspace``'s runs (only if the user may read it) whose
    prompt or answer hold every word of ``text``, whose agent's name or requester's name
    or username does, or whose id it is; at most ``limit``, best match first
    (``SearchRank`` on PostgreSQL) among the newest ``SEARCH_CANDIDATES`` matches. Words
    alone (the usual search) run a query compiled once (common.search.CompiledSearch)."""
    words = query_words(text)
    named = _named_in(words, workspace=workspace)
    if words and _run_id_in(text) is None and not any(named):
        return _RUNS_MATCHING.rows(user=user, workspace_id=workspace.pk, words=words, limit=limit)
    return list(_runs_matching(user=user, workspace_id=workspace.pk, words=words, limit=limit,
                               condition=_text_condition(text, named=named)))


def _runs_matching(*, user, workspace_id: int, words, limit: int, condition: Q | None = None) -> QuerySet[Execution]:
    if condition is None:
        condition = text_match(SEARCHED_FIELDS, SEARCHED_LOOKUPS, words, stored="search_vector")
    # The stored vector is cheap to test, so the planner may walk the primary key backwards
    # when the words are common (the newest matches come first) and read the GIN index's
    # bitmap when they are rare; both end within milliseconds (docs/benchmarks.md, "Search").
    candidates = executions_for_user(user=user).filter(workspace_id=workspace_id).filter(condition).order_by(
        "-pk").values("pk")[:SEARCH_CANDIDATES]
    rows = Execution.objects.filter(pk__in=Subquery(candidates)).select_related("agent", "requester").only(
        "pk", "status", "outcome", "input_prompt", "result", "queued_at", "workspace_id", "agent_id", "agent__name",
        "requester_id", "requester__username", "requester__first_name", "requester__last_name")
    rows = ranked(rows, SEARCHED_FIELDS, words, stored="search_vector") if words else rows.order_by("-pk")
    return rows[:limit]


_RUNS_MATCHING = CompiledSearch(_runs_matching)


# The columns a row of the runs page shows; nothing else is read from the table.
EXECUTION_LIST_FIELDS = ("pk", "status", "trigger_type", "trigger_source", "trigger_id", "input_prompt", "queued_at",
                         "started_at", "finished_at", "turn_count", "tokens_input", "tokens_output", "cost_usd",
                         "cost_unknown", "parent_execution_id", "agent_id", "agent__name", "workspace_id",
                         "outcome")


def execution_list_rows(runs: QuerySet[Execution], *, sort: str = EXECUTION_SORT_DEFAULT) -> QuerySet[Execution]:
    """``runs`` as the runs page lists them: in ``sort``'s order (``executions_sorted``;
    newest first by default), only the shown columns, the agent's name joined and each
    run's active time (waits excluded): one query for a page of rows."""
    return executions_with_active_time(executions_sorted(
        runs.select_related("agent").only(*EXECUTION_LIST_FIELDS), sort=sort))


def execution_replays_filter(*, workspace, filters: ExecutionFilters) -> QuerySet[ExecutionReplay]:
    """``workspace``'s replays (docs/replay.md) by agent and creation time, newest first;
    a replay has no status, trigger or session, so those filters do not apply."""
    replays = ExecutionReplay.objects.filter(workspace=workspace)
    if filters.agent_id is not None:
        replays = replays.filter(agent_id=filters.agent_id)
    if filters.since is not None:
        replays = replays.filter(created_at__gte=filters.since)
    if filters.until is not None:
        replays = replays.filter(created_at__lt=filters.until)
    return replays.select_related("agent").only(
        "pk", "kind", "replay_of_id", "agent_version", "summary", "created_at", "agent_id", "agent__name"
    ).order_by("-pk")


def execution_daily_totals(*, workspace, since: dt.datetime) -> QuerySet:
    """``workspace``'s runs queued since ``since``, grouped by local day, status and
    outcome: ``{"day", "status", "outcome", "runs", "tokens", "cost", "cost_unknown"}``
    rows (the overview)."""
    return (
        Execution.objects.filter(workspace=workspace, queued_at__gte=since)
        .annotate(day=TruncDate("queued_at"))
        .values("day", "status", "outcome")
        .annotate(
            runs=Count("id"),
            tokens=Sum(F("tokens_input") + F("tokens_output")),
            cost=Sum("cost_usd"),
            cost_unknown=Count("id", filter=Q(cost_unknown=True)),
        )
        .order_by()
    )


def execution_get_for_user(*, user, execution_id) -> Execution:
    """The run if it belongs to one of the user's workspaces; otherwise 404."""
    try:
        return executions_for_user(user=user).select_related("agent", "workspace", "agent_version", "requester").get(
            pk=int(execution_id))
    except (Execution.DoesNotExist, TypeError, ValueError):
        raise NotFound("Execution not found.") from None


def executions_recent(*, user, workspace, limit: int) -> list[Execution]:
    """The workspace's latest runs the user sees, newest first, with their agent."""
    runs = executions_filter(user=user, workspace=workspace, filters=ExecutionFilters())
    return list(runs.select_related("agent", "agent_version").order_by("-queued_at", "-pk")[:limit])


def execution_tool_calls(*, execution: Execution) -> list[ExecutionStep]:
    """The run's recorded tool calls (the calls governance was asked about), in order."""
    return list(ExecutionStep.objects.filter(execution=execution, step_type=ExecutionStep.StepType.TOOL_CALL)
                .order_by("step_number"))


def execution_children_named(*, execution: Execution) -> list[Execution]:
    """``execution_children`` with each child's agent name (the run page's cause part)."""
    return list(execution_children(execution=execution).select_related("agent").only(
        "pk", "status", "parent_call_id", "agent__name"))


def execution_children(*, execution: Execution) -> QuerySet[Execution]:
    """The runs ``execution`` delegated to (docs/delegation.md), oldest first. They are
    in its workspace by construction, so whoever may read the parent may read them."""
    return Execution.objects.filter(parent_execution_id=execution.pk, workspace_id=execution.workspace_id).exclude(
        parent_call_id="").order_by("pk").only("pk", "agent_id", "status", "parent_call_id")


class _JsonBytes(Func):
    """Bytes of a JSON column as stored text (octet_length on PostgreSQL)."""

    output_field = IntegerField()
    template = "LENGTH(CAST(%(expressions)s AS TEXT))"

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="octet_length(%(expressions)s::text)", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra)


def execution_storage_usage(*, workspace_id: int) -> tuple[int, int]:
    """(runs with a stored result, stored JSON bytes of run results and step outputs)
    of one workspace."""
    runs = Execution.objects.filter(workspace_id=workspace_id).exclude(result={})
    results = runs.aggregate(size=Coalesce(Sum(_JsonBytes("result")), Value(0)))["size"]
    outputs = ExecutionStep.objects.filter(execution__workspace_id=workspace_id, output__isnull=False).aggregate(
        size=Coalesce(Sum(_JsonBytes("output")), Value(0))
    )["size"]
    return runs.count(), int(results) + int(outputs)


def sessions_for_user(*, user) -> QuerySet[Session]:
    """A user's own sessions, in the workspaces they still belong to. A session is
    personal: anyone else, a member of the same workspace included, gets a 404."""
    if not getattr(user, "is_authenticated", False):
        return Session.objects.none()
    return Session.objects.filter(created_by=user, workspace__in=workspaces_for_user(user=user))


def session_get_for_user(*, user, session_id) -> Session:
    try:
        return sessions_for_user(user=user).select_related("workspace", "agent").get(pk=int(session_id))
    except (Session.DoesNotExist, TypeError, ValueError):
        raise NotFound("Session not found.") from None


def session_events(*, session_id: int, after: int, limit: int = 1000) -> QuerySet[ExecutionEvent]:
    """The events of the session's runs after ``after``, oldest first. Their order is
    the events' ids: one run of a session is active at a time, so the ids of a session's
    events grow in the order the conversation happened."""
    return (ExecutionEvent.objects.filter(execution__session_id=session_id, pk__gt=after)
            .select_related(None).only("pk", "execution_id", "seq", "event_type", "payload", "created_at")
            .order_by("pk")[:limit])


def session_event_message(row: ExecutionEvent) -> dict:
    """A session's event as every client reads it (REST and ``/ws/sessions/<id>/``): the
    run event shape (``event_message``: type, the run's ``seq``, ``execution_id``,
    ``created_at``, the payload's fields) plus ``session_seq``, the event's place in the
    session's stream (its id: increasing, with gaps), the cursor ``after=`` takes."""
    return {**event_message(event_type=row.event_type, seq=row.seq, execution_id=row.execution_id,
                            created_at=row.created_at, payload=row.payload), "session_seq": row.pk}


# Runs a success rate counts: finished by themselves (a cancelled run was stopped by a person).
SUCCESS_RATE_COUNTED = sorted(Execution.TERMINAL - {Execution.Status.CANCELLED})


def success_rate(*, answered: int, finished: int) -> float | None:
    """River's one success rate (docs/engine.md, "Outcome"): runs whose outcome is
    ``answered`` over runs that finished by themselves (every terminal status but
    ``cancelled``); None when none finished. The overview, the agents list and the
    metrics' documented query all count this way."""
    return answered / finished if finished else None


def _count_of(runs: QuerySet[Execution]) -> Subquery:
    counted = runs.order_by().values("agent_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def agents_with_run_stats(agents, *, since) -> QuerySet:
    """Agents annotated, in the same query, with their latest run (``last_run_id``,
    ``last_run_at``, ``last_run_status``, ``last_run_outcome``) and, for runs queued since
    ``since``, how many finished by themselves (``runs_finished``) and how many of those
    answered (``runs_answered``; ``success_rate``). Each is a subquery on the index
    (agent, -queued_at)."""
    latest = Execution.objects.filter(agent_id=OuterRef("pk")).order_by("-queued_at", "-id")
    recent = Execution.objects.filter(agent_id=OuterRef("pk"), queued_at__gte=since)
    return agents.annotate(
        last_run_id=Subquery(latest.values("pk")[:1]),
        last_run_at=Subquery(latest.values("queued_at")[:1]),
        last_run_status=Subquery(latest.values("status")[:1]),
        last_run_outcome=Subquery(latest.values("outcome")[:1]),
        runs_finished=_count_of(recent.filter(status__in=SUCCESS_RATE_COUNTED)),
        runs_answered=_count_of(recent.filter(status__in=SUCCESS_RATE_COUNTED, outcome=Outcome.ANSWERED)),
    )


def agent_runs_recent(*, agent_id, limit: int) -> list[Execution]:
    """The agent's latest runs, newest first (index agent, -queued_at)."""
    return list(Execution.objects.filter(agent_id=agent_id).select_related("requested_by", "agent_version")
                .order_by("-queued_at", "-id")[:limit])


def questions_for_user(*, user, workspace, limit: int = 50) -> list[dict]:
    """The open ``ask_user`` questions of the runs ``user`` is answerable for in
    ``workspace`` (their requester), oldest first: the run, its agent and the question."""
    if not getattr(user, "pk", None) or workspace is None:
        return []
    waiting = (Execution.objects.filter(workspace=workspace, requester_id=user.pk,
                                        status=Execution.Status.AWAITING_INTERACTION)
               .select_related("agent").only("pk", "agent__name", "context_snapshot", "queued_at")
               .order_by("queued_at", "pk")[:limit])
    questions = []
    for run in waiting:
        pending = (run.context_snapshot or {}).get("pending") or {}
        interaction = pending.get("interaction") or {}
        questions.append({
            "execution_id": run.pk, "agent_name": run.agent.name, "call_id": pending.get("call_id", ""),
            "message": str(interaction.get("message") or ""), "options": interaction.get("options") or [],
        })
    return questions


def execution_events_first(*, execution_id: int, limit: int) -> QuerySet[ExecutionEvent]:
    """The run's first ``limit`` stored events, in order (the run page embeds them)."""
    return ExecutionEvent.objects.filter(execution_id=execution_id).order_by("seq")[:limit]


def execution_events_after(*, execution_id: int, after: int, limit: int = 200) -> QuerySet[ExecutionEvent]:
    """The run's stored events after ``seq`` ``after``, in order, at most ``limit`` (an MCP
    or A2A caller's progress, docs/mcp.md)."""
    return ExecutionEvent.objects.filter(execution_id=execution_id, seq__gt=after).order_by("seq")[:limit]


def execution_question_open(*, execution_id: int) -> dict | None:
    """The pending interaction step's ``{"input", "step_number"}`` (the question an
    ``ask_user`` call left open), or None."""
    return (ExecutionStep.objects.filter(execution_id=execution_id, step_type=ExecutionStep.StepType.INTERACTION,
                                         status=StepStatus.PENDING.value)
            .order_by("-step_number").values("input", "step_number").first())


def sessions_filter(*, user, workspace, archived: bool, agent_id=None) -> QuerySet[Session]:
    """``workspace``'s open (or archived) conversations the user may see, newest activity
    first, with their agent's name: the conversations page's rows."""
    rows = sessions_for_user(user=user).filter(workspace=workspace, archived_at__isnull=not archived)
    if agent_id:
        rows = rows.filter(agent_id=agent_id)
    return rows.select_related("agent").only(
        "pk", "title", "updated_at", "archived_at", "active_execution_id", "agent__name", "agent_id",
    ).order_by("-updated_at", "-pk")


def session_messages_latest(*, session_id: int, limit: int) -> list[SessionMessage]:
    """The conversation's last ``limit`` entries, oldest first, with their agent's name."""
    rows = list(SessionMessage.objects.filter(session_id=session_id).select_related("agent")
                .only("pk", "sequence", "role", "state", "content", "references", "execution_id", "agent__name",
                      "agent_id", "created_at", "reply_to_id")
                .order_by("-sequence")[:limit])
    rows.reverse()
    return rows


def session_active_execution(*, session: Session) -> Execution | None:
    """The run answering in the conversation now (in the session's workspace), or None."""
    if not session.active_execution_id:
        return None
    return (Execution.objects.select_related("agent", "workspace")
            .filter(pk=session.active_execution_id, workspace_id=session.workspace_id).first())


def session_last_event_id(*, session_id: int) -> int:
    """The id of the newest event of the conversation's runs (0 for none): where its
    socket resumes."""
    return (ExecutionEvent.objects.filter(execution__session_id=session_id).order_by("-pk")
            .values_list("pk", flat=True).first() or 0)


# --- run time: segments and the waits between them -------------------------------------

class WaitKind:
    """What a run waited for between two of its segments (or before its first)."""

    QUEUED = "queued"  # for a worker, before its first segment
    APPROVAL = "approval"
    PERSON = "person"  # an answer to ask_user
    DELEGATED_RUN = "delegated_run"
    RETRY = "retry"  # its segment was interrupted (infrastructure error, worker lost)


_WAIT_AFTER = {
    ExecutionSegment.EndedAs.AWAITING_APPROVAL: WaitKind.APPROVAL,
    ExecutionSegment.EndedAs.AWAITING_INTERACTION: WaitKind.PERSON,
    ExecutionSegment.EndedAs.AWAITING_CHILD: WaitKind.DELEGATED_RUN,
    ExecutionSegment.EndedAs.INTERRUPTED: WaitKind.RETRY,
}
_WAIT_LABELS = {WaitKind.QUEUED: "a worker", WaitKind.APPROVAL: "approval", WaitKind.PERSON: "an answer",
                WaitKind.DELEGATED_RUN: "a delegated run", WaitKind.RETRY: "a retry"}


def _ms(start: dt.datetime, end: dt.datetime) -> int:
    return max(int((end - start).total_seconds() * 1000), 0)


@dataclass(frozen=True)
class RunSegmentTime:
    number: int
    started_at: dt.datetime
    ended_at: dt.datetime | None  # None while it runs
    ended_as: str  # ExecutionSegment.EndedAs, "" while it runs
    active_ms: int

    kind = "segment"


@dataclass(frozen=True)
class RunWaitTime:
    wait_kind: str  # WaitKind
    started_at: dt.datetime
    ended_at: dt.datetime | None  # None while the run still waits
    duration_ms: int
    decided_by: str | None = None  # who approved, rejected or answered, by name
    resolution: str | None = None  # approved, rejected, edited, answered, expired, cancelled

    kind = "wait"

    @property
    def waited_for(self) -> str:
        return _WAIT_LABELS.get(self.wait_kind, self.wait_kind)


@dataclass(frozen=True)
class RunTime:
    """A run's time: ``active_ms`` is what its segments took (the run's time in every
    figure), ``waited_ms`` the rest since it was queued (the queue, approvals, answers,
    delegated runs, retries). ``recorded`` is False for a run from before segments were
    recorded: its one segment is then its first start to its end, waits included."""

    active_ms: int
    waited_ms: int
    segments: list[RunSegmentTime]
    waits: list[RunWaitTime]
    recorded: bool

    @property
    def timeline(self) -> list[RunSegmentTime | RunWaitTime]:
        """Segments and waits in the order they happened."""
        return sorted([*self.segments, *self.waits], key=lambda entry: (entry.started_at, entry.kind != "wait"))


def execution_run_time(*, execution: Execution, now: dt.datetime | None = None) -> RunTime:
    """The run's segments (each start and end, as recorded) and the waits between them,
    with who decided an approval or answered a question. At most three queries: the
    segments, and when the run waited for a person, its resolving events and their names.
    Callers have already scoped ``execution`` to the user."""
    now = now or timezone.now()
    end_of_run = execution.finished_at or now
    rows = list(ExecutionSegment.objects.filter(execution_id=execution.pk).order_by("number")
                .values_list("number", "started_at", "ended_at", "ended_as"))
    recorded = bool(rows)
    if not rows and execution.started_at is not None:  # a run from before segments were recorded
        rows = [(1, execution.started_at, execution.finished_at,
                 ExecutionSegment.EndedAs.ENDED if execution.finished_at else "")]
    segments: list[RunSegmentTime] = []
    waits: list[RunWaitTime] = []
    if rows and execution.queued_at is not None and rows[0][1] > execution.queued_at:
        waits.append(RunWaitTime(wait_kind=WaitKind.QUEUED, started_at=execution.queued_at, ended_at=rows[0][1],
                                 duration_ms=_ms(execution.queued_at, rows[0][1])))
    elif not rows and execution.queued_at is not None:  # never started yet (or ended before it did)
        waits.append(RunWaitTime(wait_kind=WaitKind.QUEUED, started_at=execution.queued_at,
                                 ended_at=execution.finished_at, duration_ms=_ms(execution.queued_at, end_of_run)))
    for index, (number, started, ended, ended_as) in enumerate(rows):
        following = rows[index + 1][1] if index + 1 < len(rows) else None
        open_end = following or (end_of_run if execution.status == Execution.Status.RUNNING
                                 or execution.is_terminal else started)
        segments.append(RunSegmentTime(number=number, started_at=started, ended_at=ended, ended_as=ended_as,
                                       active_ms=_ms(started, ended or open_end)))
        kind = _WAIT_AFTER.get(ended_as)
        if kind is None or ended is None:
            continue
        wait_end = following or execution.finished_at
        waits.append(RunWaitTime(wait_kind=kind, started_at=ended, ended_at=wait_end,
                                 duration_ms=_ms(ended, wait_end or now)))
    waits = _waits_decided(execution, waits)
    active = sum(segment.active_ms for segment in segments)
    return RunTime(active_ms=active, waited_ms=sum(wait.duration_ms for wait in waits), segments=segments,
                   waits=waits, recorded=recorded)


_RESOLVED_BY = {RunEventType.APPROVAL_RESOLVED.value: "resolved_by",
                RunEventType.INTERACTION_RESOLVED.value: "answered_by"}
_WAIT_RESOLVED_BY = {WaitKind.APPROVAL: RunEventType.APPROVAL_RESOLVED.value,
                     WaitKind.PERSON: RunEventType.INTERACTION_RESOLVED.value}


def _waits_decided(execution: Execution, waits: list[RunWaitTime]) -> list[RunWaitTime]:
    """Each approval or question wait with its resolution and who gave it: the
    resolving event stored while the run waited (``approval_resolved``,
    ``interaction_resolved``)."""
    if not any(wait.wait_kind in _WAIT_RESOLVED_BY for wait in waits):
        return waits
    events = list(ExecutionEvent.objects.filter(execution_id=execution.pk, event_type__in=list(_RESOLVED_BY))
                  .order_by("seq").values_list("event_type", "payload", "created_at"))
    people: dict[str, str] = {}
    ids = {str(payload.get(_RESOLVED_BY[kind])) for kind, payload, _ in events
           if isinstance(payload, dict) and str(payload.get(_RESOLVED_BY[kind]) or "").isdigit()}
    if ids:
        people = {str(pk): person_label(user) for pk, user in
                  get_user_model().objects.in_bulk([int(pk) for pk in ids]).items()}
    decided = []
    for wait in waits:
        wanted = _WAIT_RESOLVED_BY.get(wait.wait_kind)
        match = next((payload for kind, payload, at in events if kind == wanted and isinstance(payload, dict)
                      and at >= wait.started_at and (wait.ended_at is None or at <= wait.ended_at)), None)
        if match is None:
            decided.append(wait)
            continue
        who = people.get(str(match.get(_RESOLVED_BY[wanted]) or ""))
        decided.append(RunWaitTime(wait_kind=wait.wait_kind, started_at=wait.started_at, ended_at=wait.ended_at,
                                   duration_ms=wait.duration_ms, decided_by=who,
                                   resolution=str(match.get("resolution") or "") or None))
    return decided


def executions_average_active_ms(*, runs: QuerySet[Execution]) -> int | None:
    """The average run time of the finished runs among ``runs``, in milliseconds, from
    their segments (waits excluded); None when none of them has a recorded segment.
    One query."""
    totals = (ExecutionSegment.objects.filter(execution__in=runs.filter(status__in=Execution.TERMINAL).order_by()
                                              .values("pk"), ended_at__isnull=False)
              .aggregate(active=Sum(F("ended_at") - F("started_at")), runs=Count("execution_id", distinct=True)))
    if not totals["runs"] or totals["active"] is None:
        return None
    return max(int(totals["active"].total_seconds() * 1000 / totals["runs"]), 0)


def workspace_average_active_ms(*, workspace, since: dt.datetime) -> int | None:
    """``executions_average_active_ms`` of ``workspace``'s runs queued since ``since``."""
    return executions_average_active_ms(runs=Execution.objects.filter(workspace=workspace, queued_at__gte=since))


def executions_with_active_time(runs: QuerySet[Execution]) -> QuerySet[Execution]:
    """``runs`` annotated in the same query with what ``execution_active_ms`` needs: the
    summed length of their ended segments (``segments_active``), the start of a segment
    still open (``segment_open_since``) and whether any was recorded (``segments_recorded``)."""
    segments = ExecutionSegment.objects.filter(execution_id=OuterRef("pk"))
    ended = (segments.filter(ended_at__isnull=False).order_by().values("execution_id")
             .annotate(total=Sum(F("ended_at") - F("started_at"))).values("total"))
    return runs.annotate(
        segments_active=Subquery(ended, output_field=DurationField()),
        segment_open_since=Subquery(segments.filter(ended_at__isnull=True).order_by("-number").values("started_at")[:1]),
        segments_recorded=Exists(segments),
    )


def execution_active_ms(run: Execution, *, now: dt.datetime | None = None) -> int | None:
    """The run's time in milliseconds, waits excluded: its segments, the running one up to
    now. A run annotated by ``executions_with_active_time`` costs no query; any other one
    reads its segments (``execution_run_time``). None before it started."""
    if not hasattr(run, "segments_recorded"):
        return execution_run_time(execution=run, now=now).active_ms if run.started_at else None
    if not run.segments_recorded:  # from before segments were recorded: first start to end
        if run.started_at is None:
            return None
        return _ms(run.started_at, run.finished_at or now or timezone.now())
    active = int(run.segments_active.total_seconds() * 1000) if run.segments_active else 0
    if run.segment_open_since is not None and run.status == Execution.Status.RUNNING:
        active += _ms(run.segment_open_since, now or timezone.now())
    return max(active, 0)


# What a text search of conversations reads (the search box): the title and the summary.
SESSION_SEARCHED_FIELDS = ("title", "summary")


def sessions_search(*, user, workspace, text: str, limit: int) -> list[Session]:
    """The search box's conversations: the user's own in ``workspace`` (a conversation is
    personal) whose title or summary hold every word of ``text``, best match first."""
    words = query_words(text)
    if not words:
        return []
    return _SESSIONS_MATCHING.rows(user=user, workspace_id=workspace.pk, words=words, limit=limit)


def _sessions_matching(*, user, workspace_id: int, words, limit: int) -> QuerySet[Session]:
    rows = sessions_for_user(user=user).filter(workspace_id=workspace_id).filter(
        text_match(SESSION_SEARCHED_FIELDS, SESSION_SEARCHED_FIELDS, words)).select_related("agent")
    return ranked(rows, SESSION_SEARCHED_FIELDS, words, tiebreak="-updated_at")[:limit]


_SESSIONS_MATCHING = CompiledSearch(_sessions_matching)


QUERY_TOOL, CHART_TOOL = "execute_query", "recommend_visualization"


def execution_query_results(*, execution_ids: list[int], step_number: int | None = None) -> dict[int, dict]:
    """Per run, a completed ``execute_query`` observation (the run's latest, or the one at
    ``step_number``) as ``{"step_number", "query", "result", "advice"}``: the SQL from its
    arguments, the stored (already capped) result, and the ``recommend_visualization``
    answer that followed it before the run's next query, if any. Two queries for any
    number of runs; the caller has scoped ``execution_ids`` to the user."""
    marks = (ExecutionStep.objects.filter(execution_id__in=execution_ids,
                                          step_type=ExecutionStep.StepType.OBSERVATION,
                                          tool_name__in=[QUERY_TOOL, CHART_TOOL], status=StepStatus.COMPLETED.value)
             .order_by("execution_id", "step_number").values_list("execution_id", "tool_name", "step_number"))
    by_run: dict[int, list[tuple[str, int]]] = {}
    for run_id, tool, number in marks:
        by_run.setdefault(run_id, []).append((tool, number))
    chosen: dict[int, tuple[int, int | None]] = {}
    for run_id, steps in by_run.items():
        queries = [n for tool, n in steps if tool == QUERY_TOOL and (step_number is None or n == step_number)]
        if not queries:
            continue
        query_step = queries[-1]
        later = [n for tool, n in steps if tool == QUERY_TOOL and n > query_step]
        charts = [n for tool, n in steps if tool == CHART_TOOL and query_step < n < (later[0] if later else n + 1)]
        chosen[run_id] = (query_step, charts[-1] if charts else None)
    if not chosen:
        return {}
    wanted = Q()
    for run_id, numbers in chosen.items():
        wanted |= Q(execution_id=run_id, step_number__in=[n for n in numbers if n is not None])
    rows = ExecutionStep.objects.filter(wanted).values("execution_id", "step_number", "input", "output")
    found = {(row["execution_id"], row["step_number"]): row for row in rows}
    results: dict[int, dict] = {}
    for run_id, (query_step, chart_step) in chosen.items():
        row = found.get((run_id, query_step))
        result = (row["output"] or {}).get("result") if row and isinstance(row["output"], dict) else None
        if not isinstance(result, dict):
            continue
        arguments = row["input"] if isinstance(row["input"], dict) else {}
        chart = found.get((run_id, chart_step)) if chart_step is not None else None
        advice = (chart["output"] or {}).get("result") if chart and isinstance(chart["output"], dict) else None
        results[run_id] = {"step_number": query_step, "query": str(arguments.get("query") or ""), "result": result,
                           "advice": advice if isinstance(advice, dict) else None}
    return results
