"""Reads for executions, always scoped to the caller's workspaces."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.db.models import Count, F, Func, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, TruncDate

from executions.models import Execution, ExecutionEvent, ExecutionReplay, ExecutionStep, Session, SessionMessage
from rivercore.contracts import StepStatus
from rivercore.errors import NotFound
from rivercore.events import event_message
from rivercore.outcome import Outcome
from tenancy.selectors import workspaces_for_user


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

    @property
    def any(self) -> bool:
        return any(value is not None for value in
                   (self.status, self.agent_id, self.trigger_type, self.since, self.until, self.session_id,
                    self.outcomes))


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
    return runs


# The columns a row of the runs page shows; nothing else is read from the table.
EXECUTION_LIST_FIELDS = ("pk", "status", "trigger_type", "trigger_source", "trigger_id", "input_prompt", "queued_at",
                         "started_at", "finished_at", "turn_count", "tokens_input", "tokens_output", "cost_usd",
                         "cost_unknown", "parent_execution_id", "agent_id", "agent__name", "workspace_id",
                         "outcome")


def execution_list_rows(runs: QuerySet[Execution]) -> QuerySet[Execution]:
    """``runs`` as the runs page lists them: newest first, only the shown columns, the
    agent's name joined (one query for a page of rows)."""
    return runs.select_related("agent").only(*EXECUTION_LIST_FIELDS).order_by("-pk")


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


def execution_question_open(*, execution_id: int) -> dict | None:
    """The pending interaction step's ``{"input", "step_number"}`` (the question an
    ``ask_user`` call left open), or None."""
    return (ExecutionStep.objects.filter(execution_id=execution_id, step_type=ExecutionStep.StepType.INTERACTION,
                                         status=StepStatus.PENDING.value)
            .order_by("-step_number").values("input", "step_number").first())


def execution_observations_latest(*, execution_id: int, tool_names: list[str], limit: int) -> list[dict]:
    """``{"tool_name", "output"}`` of the run's latest completed observations of these
    tools, newest first, at most ``limit``."""
    return list(ExecutionStep.objects.filter(execution_id=execution_id, step_type=ExecutionStep.StepType.OBSERVATION,
                                             tool_name__in=tool_names, status=StepStatus.COMPLETED.value)
                .order_by("-step_number").values("tool_name", "output")[:limit])


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
