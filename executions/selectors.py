"""Reads for executions, always scoped to the caller's workspaces."""

from __future__ import annotations

from django.db.models import Count, Func, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from executions.models import Execution, ExecutionEvent, ExecutionStep, Session
from rivercore.errors import NotFound
from rivercore.events import event_message
from rivercore.outcome import Outcome
from tenancy.selectors import workspaces_for_user


def executions_for_user(*, user) -> QuerySet[Execution]:
    return Execution.objects.filter(workspace__in=workspaces_for_user(user=user))


def execution_get_for_user(*, user, execution_id) -> Execution:
    """The run if it belongs to one of the user's workspaces; otherwise 404."""
    try:
        return executions_for_user(user=user).select_related("agent", "workspace", "agent_version", "requester").get(
            pk=int(execution_id))
    except (Execution.DoesNotExist, TypeError, ValueError):
        raise NotFound("Execution not found.") from None


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
