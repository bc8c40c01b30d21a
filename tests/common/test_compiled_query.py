"""common.compiled: a queryset compiled once returns what the ORM returns, for any value."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent, AgentMemory
from common.compiled import CompiledInsert, CompiledQuery
from tests.factories import make_agent

AGENT = CompiledQuery(
    lambda name, agent_id: Agent.objects.select_related("workspace", "current_version")
    .filter(name=name, pk=agent_id)[:1],
    name="\x00stand-in", agent_id=uuid.UUID(int=27),
)


def test_it_builds_the_instances_the_orm_builds(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Refunds", tools=["get_workspace_info"])
    make_agent(workspace=workspace, owner=owner, name="Other", tools=["get_workspace_info"])
    found = AGENT.first(name="Refunds", agent_id=agent.pk)
    with CaptureQueriesContext(connection) as queries:
        assert found == agent and found.workspace == workspace  # joined, no query
        assert found.current_version.tools == ["get_workspace_info"]  # a JSON column, converted
    assert not queries.captured_queries
    assert AGENT.first(name="Other", agent_id=agent.pk) is None  # each value is its own parameter
    assert AGENT.first(name="Refunds", agent_id=uuid.uuid4()) is None


def test_a_stand_in_the_query_does_not_hold_is_refused(db):
    query = CompiledQuery(lambda name: Agent.objects.filter(name="fixed")[:1], name="\x00unused")
    with pytest.raises(ValueError, match="name"):
        query.first(name="x")


AGENTS = CompiledQuery(
    lambda workspace_id: Agent.objects.filter(workspace_id=workspace_id).order_by("name"),
    workspace_id=-(2**62) + 5,
)


def test_all_returns_every_row_in_order_for_each_value(workspace, other_workspace, owner):
    make_agent(workspace=workspace, owner=owner, name="Refunds", tools=["get_workspace_info"])
    make_agent(workspace=workspace, owner=owner, name="Billing", tools=["get_workspace_info"])
    assert [a.name for a in AGENTS.all(workspace_id=workspace.pk)] == ["Billing", "Refunds"]
    assert AGENTS.all(workspace_id=other_workspace.pk) == []


MEMORIES = CompiledQuery(
    lambda execution_id: AgentMemory.objects.exclude(execution_id=execution_id).order_by("execution_id"),
    execution_id=-(2**62) + 9,
)


def test_a_big_integer_column_s_value_is_sent_in_the_form_the_orm_sends(workspace, owner):
    """On PostgreSQL, Django sends a ``BigIntegerField`` lookup value as psycopg's ``Int8``
    (an ``int`` of another type): the stand-in is found in that form, and each real value
    is sent in it."""
    agent = make_agent(workspace=workspace, owner=owner, name="Refunds", tools=["get_workspace_info"])
    for run in (7, 2**40, 9):
        AgentMemory.objects.create(agent=agent, execution_id=run, summary=f"run {run}")
    assert [m.execution_id for m in MEMORIES.all(execution_id=2**40)] == [7, 9]
    assert [m.execution_id for m in MEMORIES.all(execution_id=7)] == [9, 2**40]
    assert [m.execution_id for m in MEMORIES.all(execution_id=-1)] == [7, 9, 2**40]


def test_an_insert_writes_the_row_save_writes_and_reads_back_the_key(workspace, owner):
    """``CompiledInsert`` against ``save(force_insert=True)``: the same columns and values
    (a JSON column, a foreign key given as an instance, a time, empty optionals),
    the generated key set on the instance, and the instance marked saved."""
    from governance.models import AuditLogEntry

    insert = CompiledInsert(AuditLogEntry)
    fields = {"organization_id": workspace.organization_id, "workspace_id": workspace.pk, "event_type": "probe",
              "actor": owner, "actor_label": "owner", "execution_id": 2**40, "agent_id": uuid.uuid4(),
              "details": {"nested": [1, "two", {"three": None}], "text": "caf\u00e9"}, "key_id": "k1",
              "created_at": timezone.now()}  # the default is taken when an instance is made: one for both
    saved = AuditLogEntry(**fields, content_hash="a" * 64)
    saved.save(force_insert=True)
    compiled = AuditLogEntry(**fields, content_hash="b" * 64)
    with CaptureQueriesContext(connection) as queries:
        assert insert.insert(compiled) is compiled
    assert len(queries.captured_queries) == 1
    assert compiled.pk is not None and compiled.pk != saved.pk and not compiled._state.adding
    rows = {row.pop("id"): row for row in AuditLogEntry.objects.filter(pk__in=[saved.pk, compiled.pk]).values()}
    assert rows[compiled.pk].pop("content_hash") == "b" * 64 and rows[saved.pk].pop("content_hash") == "a" * 64
    assert rows[compiled.pk] == rows[saved.pk]
    assert rows[compiled.pk]["details"] == fields["details"] and rows[compiled.pk]["actor_id"] == owner.pk
    second = AuditLogEntry(**{**fields, "event_type": "probe-2", "policy_id": None}, content_hash="d" * 64)
    insert.insert(second)  # compiled once, used again
    assert AuditLogEntry.objects.get(pk=second.pk).event_type == "probe-2"


def test_a_model_with_a_field_sent_through_its_own_placeholder_is_refused(db, monkeypatch):
    """``insert`` sends each value as a plain parameter; a field that wraps its parameter in
    a placeholder of its own would be written wrong, so the model is refused when the
    INSERT is first built, and nothing is written."""
    from governance.models import AuditLogEntry

    field = AuditLogEntry._meta.get_field("details")
    monkeypatch.setattr(field, "get_placeholder", lambda value, compiler, connection: "(%s)::jsonb", raising=False)
    before = AuditLogEntry.objects.count()
    with pytest.raises(ValueError, match="not sent as a plain parameter"):
        CompiledInsert(AuditLogEntry).insert(AuditLogEntry(organization_id=1, event_type="probe", details={}))
    assert AuditLogEntry.objects.count() == before
