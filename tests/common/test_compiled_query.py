"""common.compiled: a queryset compiled once returns what the ORM returns, for any value."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from common.compiled import CompiledQuery
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
