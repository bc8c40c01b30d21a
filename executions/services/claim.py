"""Claiming a run and loading what its segment starts from, in one statement.

On PostgreSQL the lease's compare-and-set and the load are one round trip: an UPDATE in a
``WITH`` clause whose RETURNING row is joined to the run's workspace, agent and agent
version, with the roles of the user it acts as (capped, for a trigger's service
identity, by its responsible person's, read in the same statement), the memories its request reads, and the existence of
policies, data sources, steps and events read by subqueries. Elsewhere (SQLite) the claim and the load are the ORM's
two queries. Either way a fresh run's segment reads nothing else before its first turn."""

from __future__ import annotations

import functools
import json
import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.models import Agent, AgentMemory, AgentVersion
from executions.models import Execution, ExecutionEvent, ExecutionSegment, ExecutionStep, LLMProvider
from executions.services.load import MEMORY_LIMIT, execution_for_segment
from governance.models import Policy
from rivercore.events import RunEventType
from rivercore.types.agents import MemoryEntry
from rivercore.types.governance import PolicyScope
from tenancy.models import Membership, OrganizationMember, ServicePrincipal, Workspace


def execution_claim(*, execution_id: int, now=None) -> str | None:
    """Compare-and-set: take the lease on a queued run, or a running one whose lease
    expired, and open the run's next segment (``ExecutionSegment``). Returns the lease
    token, or None when another worker holds the run."""
    token = uuid.uuid4().hex
    now = now or timezone.now()
    with transaction.atomic():
        # The lease the run held before (a worker that died holding it): its segment ends there.
        lost_at = Execution.objects.filter(pk=execution_id).values_list("lease_expires_at", flat=True).first()
        claimed = (
            Execution.objects.filter(pk=execution_id)
            .filter(Q(status=Execution.Status.QUEUED) | Q(status=Execution.Status.RUNNING, lease_expires_at__lt=now))
            .update(
                status=Execution.Status.RUNNING, lease_token=token,
                lease_expires_at=now + timedelta(seconds=settings.RIVER_LEASE_SECONDS),
                attempts=F("attempts") + 1, started_at=Coalesce(F("started_at"), now),
                published_at=None,  # the message that brought us here is consumed
            )
        )
        if claimed != 1:
            return None
        _segment_open(execution_id, now=now, lost_at=lost_at)
    return token


def _segment_open(execution_id: int, *, now, lost_at) -> None:
    """The ORM's form of what the PostgreSQL claim does in its statement: a segment
    still open (its worker died, the lease ran out) ends ``interrupted`` where its lease
    ran out (never later than now), and the next segment starts now."""
    ExecutionSegment.objects.filter(execution_id=execution_id, ended_at__isnull=True).update(
        # No lease to go by (a release whose segment end was lost): nothing is vouched for.
        ended_at=F("started_at") if lost_at is None else min(lost_at, now),
        ended_as=ExecutionSegment.EndedAs.INTERRUPTED)
    last = (ExecutionSegment.objects.filter(execution_id=execution_id).order_by("-number")
            .values_list("number", flat=True).first())
    ExecutionSegment.objects.create(execution_id=execution_id, number=(last or 0) + 1, started_at=now)


def execution_claim_load(*, execution_id: int) -> tuple[str, Execution] | None:
    """Claim the run (``execution_claim``) and load it for its segment, with
    ``last_step`` and ``last_seq`` (None when it has none) and ``started_event``: the
    ``run_started`` event's stored row when the claim wrote it (PostgreSQL, a run with no
    event yet), else None and the segment's first flush writes it. None when not claimed."""
    if connection.vendor != "postgresql":
        now = timezone.now()
        token = execution_claim(execution_id=execution_id, now=now)
        if token is None:
            return None
        execution = execution_for_segment(execution_id, queryset=Execution.objects.annotate(
            last_step=Subquery(ExecutionStep.objects.filter(execution_id=OuterRef("pk"))
                               .order_by("-step_number").values("step_number")[:1]),
            last_seq=Subquery(ExecutionEvent.objects.filter(execution_id=OuterRef("pk"))
                              .order_by("-seq").values("seq")[:1]),
            has_providers=Exists(LLMProvider.objects.filter(
                organization_id=OuterRef("workspace__organization_id"), enabled=True)),
        ))
        execution.started_event = None
        execution.segment_started_at = now
        execution.active_before_ms = sum(_ms(end - start) for start, end in ExecutionSegment.objects.filter(
            execution_id=execution_id, ended_at__isnull=False).values_list("started_at", "ended_at"))
        return token, execution
    token = uuid.uuid4().hex
    now = timezone.now()
    params = {"id": execution_id, "token": token, "now": now, "running": Execution.Status.RUNNING,
              "queued": Execution.Status.QUEUED, "expires": now + timedelta(seconds=settings.RIVER_LEASE_SECONDS),
              "org_admin": OrganizationMember.OrgRole.ADMIN.value, "org_scope": PolicyScope.ORGANIZATION.value,
              "workspace_scope": PolicyScope.WORKSPACE.value, "started_type": RunEventType.RUN_STARTED.value,
              "interrupted": ExecutionSegment.EndedAs.INTERRUPTED.value}
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_LOAD_SQL, params)
        row = cursor.fetchone()
    if row is None:
        return None
    execution = _execution_from_row(row)
    execution.segment_started_at = now
    execution.active_before_ms = int(execution.active_before_ms or 0)
    if execution.started_event is not None:
        payload = execution.started_event
        execution.started_event = ExecutionEvent(execution_id=execution.pk, seq=1, event_type=RUN_STARTED,
                                               payload=json.loads(payload) if isinstance(payload, str) else payload,
                                               created_at=now)
        execution.last_seq = 1
    return token, execution


_MODELS = ((Execution, "c"), (Workspace, "w"), (Agent, "a"), (AgentVersion, "v"))
_EXTRAS = ("member_role", "org_admin", "run_as_principal", "responsible_role", "responsible_org_admin",
           "has_policies", "has_sources", "memories", "has_providers", "last_step", "last_seq", "started_event",
           "active_before_ms")
RUN_STARTED = RunEventType.RUN_STARTED.value


def _ms(duration) -> int:
    return max(int(duration.total_seconds() * 1000), 0) if duration is not None else 0


def _columns(model, alias: str) -> str:
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


def _isoformat(column: str) -> str:
    """SQL for a UTC timestamp as JSON text exactly as Python's ``isoformat()`` writes it
    (PostgreSQL's own JSON form drops trailing zeros of the microseconds)."""
    return f"""to_jsonb(to_char({column} AT TIME ZONE 'UTC', CASE
            WHEN date_part('microseconds', {column})::bigint %% 1000000 = 0 THEN 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'
            ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"' END))"""


def _claim_load_sql() -> str:
    table = Execution._meta.db_table
    binding = AgentVersion.data_sources.through._meta.db_table
    principal, user = ServicePrincipal._meta.db_table, get_user_model()._meta.db_table
    segment = ExecutionSegment._meta.db_table
    return f"""
WITH c AS (
    UPDATE {table}
    SET status = %(running)s, lease_token = %(token)s, lease_expires_at = %(expires)s, attempts = attempts + 1,
        started_at = COALESCE(started_at, %(now)s), published_at = NULL
    WHERE id = %(id)s AND (status = %(queued)s OR (status = %(running)s AND lease_expires_at < %(now)s))
    RETURNING *
), prior AS (
    -- The run as it was before this statement (every part of it reads the snapshot taken
    -- before c's update): the lease a worker that died still held.
    SELECT lease_expires_at FROM {table} WHERE id = %(id)s
), started AS (
    -- A run with no event yet starts here: its run_started event (the same fields as
    -- rivercore.events.run_started_event, the time as Python's isoformat() writes it)
    -- is written by this statement.
    INSERT INTO {ExecutionEvent._meta.db_table} (execution_id, seq, event_type, payload, created_at)
    SELECT c.id, 1, %(started_type)s, jsonb_build_object(
        'execution_id', c.id, 'agent_id', c.agent_id::text, 'trigger_type', c.trigger_type,
        'started_at', {_isoformat("c.started_at")}), %(now)s
    FROM c WHERE NOT EXISTS (SELECT 1 FROM {ExecutionEvent._meta.db_table} x WHERE x.execution_id = c.id)
    RETURNING payload
), lost AS (
    -- A segment still open (its worker died) ends interrupted where its lease ran out.
    UPDATE {segment} SET ended_at = LEAST(COALESCE((SELECT lease_expires_at FROM prior), started_at), %(now)s),
        ended_as = %(interrupted)s
    WHERE execution_id = (SELECT id FROM c) AND ended_at IS NULL
), opened AS (
    -- The segment this claim starts.
    INSERT INTO {segment} (execution_id, number, started_at, ended_as)
    SELECT c.id, COALESCE((SELECT max(s.number) FROM {segment} s WHERE s.execution_id = c.id), 0) + 1, %(now)s, ''
    FROM c
)
SELECT {", ".join(_columns(model, alias) for model, alias in _MODELS)},
    (SELECT m.role FROM {Membership._meta.db_table} m
     WHERE m.user_id = c.requested_by_id AND m.workspace_id = c.workspace_id LIMIT 1),
    EXISTS (SELECT 1 FROM {OrganizationMember._meta.db_table} o
            WHERE o.user_id = c.requested_by_id AND o.organization_id = w.organization_id AND o.role = %(org_admin)s),
    -- A trigger's service identity is capped by its responsible person's standing now
    -- (tenancy.selectors.role_annotations: the same three values, read by roles_annotated).
    EXISTS (SELECT 1 FROM {principal} sp WHERE sp.user_id = c.requested_by_id),
    (SELECT (SELECT rm.role FROM {Membership._meta.db_table} rm JOIN {user} ru ON ru.id = rm.user_id
             WHERE rm.user_id = sp.responsible_id AND ru.is_active AND rm.workspace_id = c.workspace_id LIMIT 1)
     FROM {principal} sp WHERE sp.user_id = c.requested_by_id LIMIT 1),
    (SELECT EXISTS (SELECT 1 FROM {OrganizationMember._meta.db_table} ro JOIN {user} ru ON ru.id = ro.user_id
                    WHERE ro.user_id = sp.responsible_id AND ru.is_active AND ro.organization_id = w.organization_id
                    AND ro.role = %(org_admin)s)
     FROM {principal} sp WHERE sp.user_id = c.requested_by_id LIMIT 1),
    EXISTS (SELECT 1 FROM {Policy._meta.db_table} p WHERE p.enabled AND p.organization_id = w.organization_id
            AND (p.scope = %(org_scope)s OR (p.scope = %(workspace_scope)s AND p.workspace_id = c.workspace_id))),
    EXISTS (SELECT 1 FROM {binding} b WHERE b.agentversion_id = c.agent_version_id),
    -- The memories the run's request reads (those written before it first started, the
    -- latest MEMORY_LIMIT, oldest first), or NULL when there are none.
    (SELECT jsonb_agg(jsonb_build_object(
        'execution_id', m.execution_id, 'completed_at', {_isoformat("m.created_at")}, 'summary', m.summary,
        'learnings', m.learnings, 'flagged_items', m.flagged_items) ORDER BY m.created_at, m.id)
     FROM (SELECT * FROM {AgentMemory._meta.db_table} am WHERE am.agent_id = c.agent_id AND am.created_at < c.started_at
           ORDER BY am.created_at DESC, am.id DESC LIMIT {MEMORY_LIMIT}) m),
    EXISTS (SELECT 1 FROM {LLMProvider._meta.db_table} lp
            WHERE lp.organization_id = w.organization_id AND lp.enabled),
    (SELECT max(s.step_number) FROM {ExecutionStep._meta.db_table} s WHERE s.execution_id = c.id),
    (SELECT max(e.seq) FROM {ExecutionEvent._meta.db_table} e WHERE e.execution_id = c.id),
    (SELECT payload FROM started),
    -- Milliseconds the run's earlier segments ran (the open one as "lost" ends it).
    (SELECT COALESCE(sum(extract(epoch FROM LEAST(COALESCE(s.ended_at, (SELECT lease_expires_at FROM prior),
                                                          s.started_at), %(now)s) - s.started_at)), 0) * 1000
     FROM {segment} s WHERE s.execution_id = c.id)::bigint
FROM c
JOIN {Workspace._meta.db_table} w ON w.id = c.workspace_id
JOIN {Agent._meta.db_table} a ON a.id = c.agent_id
JOIN {AgentVersion._meta.db_table} v ON v.id = c.agent_version_id
"""


def _instance(model, values):
    """A model instance from its concrete columns, converted as the ORM converts them."""
    attnames, converters = _converters(model)
    converted = list(values)
    for index, (col, functions) in converters:
        value = converted[index]
        for function in functions:
            value = function(value, col, connection)
        converted[index] = value
    return model.from_db(connection.alias, attnames, converted)


@functools.cache
def _converters(model) -> tuple[list[str], list[tuple[int, tuple]]]:
    """The model's column names, and the ORM's converters for the columns that have any
    (worked out once per process, not per row)."""
    fields = model._meta.concrete_fields
    found = []
    for index, field in enumerate(fields):
        col = field.get_col(model._meta.db_table)
        functions = tuple(connection.ops.get_db_converters(col) + field.get_db_converters(connection))
        if functions:
            found.append((index, (col, functions)))
    return [field.attname for field in fields], found


def _execution_from_row(row) -> Execution:
    instances, at = [], 0
    for model, _alias in _MODELS:
        width = len(model._meta.concrete_fields)
        instances.append(_instance(model, row[at:at + width]))
        at += width
    execution, workspace, agent, version = instances
    execution.workspace, execution.agent, execution.agent_version = workspace, agent, version
    agent.workspace = workspace
    for name, value in zip(_EXTRAS, row[at:], strict=True):
        setattr(execution, name, value)
    memories = json.loads(execution.memories) if isinstance(execution.memories, str) else execution.memories
    execution.memories = [MemoryEntry.model_validate(entry) for entry in memories or ()]
    execution.has_memory = bool(execution.memories)
    return execution


_CLAIM_LOAD_SQL = _claim_load_sql()
