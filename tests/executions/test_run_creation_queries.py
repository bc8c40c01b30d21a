"""Starting a run over the API costs a fixed, small number of statements, whatever the
caller's standing: the token, the agent with the caller's roles (one query, compiled
once per process: common.compiled) and the run's INSERT. The number is pinned here so
a change that adds a lookup to the hot path is noticed."""

from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions.models import Execution
from tests.factories import make_agent


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=["get_workspace_info"])


def _start(client, agent):
    with mock.patch("executions.tasks.run_segment.delay"), CaptureQueriesContext(connection) as queries:
        response = client.post(f"/api/v1/agents/{agent.pk}/run", {"input_prompt": "hi"}, format="json")
    assert response.status_code == 202, response.content
    return [q["sql"] for q in queries.captured_queries]


@pytest.mark.parametrize("who", ["member", "org_admin"])
def test_a_run_started_over_the_api_costs_three_statements(who, agent, api_client_for, request):
    client = api_client_for(request.getfixturevalue(who))
    first = _start(client, agent)  # marks the token used: one UPDATE more
    assert len(first) == 4 and first[1].startswith("UPDATE")
    again = _start(client, agent)
    assert [sql.split()[0] for sql in again] == ["SELECT", "SELECT", "INSERT"], again
    assert Execution.objects.filter(agent=agent).count() == 2


def test_the_compiled_lookups_still_refuse_an_outsider_and_a_viewer(agent, outsider, member, workspace,
                                                                     api_client_for):
    from tenancy.models import Membership

    assert api_client_for(outsider).post(f"/api/v1/agents/{agent.pk}/run", {}, format="json").status_code == 404
    Membership.objects.filter(user=member, workspace=workspace).update(role="viewer")
    assert api_client_for(member).post(f"/api/v1/agents/{agent.pk}/run", {}, format="json").status_code == 403
    assert not Execution.objects.exists()
