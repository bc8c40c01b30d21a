"""Fixtures of the catalog pages' tests: signed-in clients, a viewer, an active agent."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import make_agent


@pytest.fixture
def client_for():
    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def viewer(workspace):
    user = get_user_model().objects.create_user(username="viewer", password="pw-viewer")
    Membership.objects.create(workspace=workspace, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Triage", tools=["execute_query"])


@pytest.fixture
def runs_of():
    """``runs_of(agent, n, status, outcome=None)`` bulk-creates n runs of the agent's current
    version; a terminal run's outcome defaults to the one its status implies (a completed
    run: answered)."""
    from executions.models import Execution
    from rivercore.outcome import outcome_of

    def make(agent, count: int, status: str = "completed", outcome: str | None = None):
        if outcome is None and status in Execution.TERMINAL:
            outcome = "answered" if status == "completed" else outcome_of(status, []).value
        Execution.objects.bulk_create([
            Execution(workspace_id=agent.workspace_id, agent=agent, agent_version_id=agent.current_version_id,
                      status=status, outcome=outcome, input_prompt="x") for _ in range(count)], batch_size=2000)

    return make
