"""``POST /executions/{id}/replay`` and ``/agents/{id}/replay`` refuse unknown fields
like the rest of the API, naming each."""

from __future__ import annotations

import pytest

from executions import services
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def execution(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner)
    return services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="hello"))


@pytest.mark.parametrize("body", [{"agent_versoin": 2}, {"policies": [], "dry_run": True}, {"\u200fpolicies": []}])
def test_execution_replay_refuses_unknown_fields(api_client_for, owner, execution, body):
    response = api_client_for(owner).post(f"/api/v1/executions/{execution.pk}/replay", body, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    unknown = [key for key in body if key not in {"policies", "agent_version"}]
    assert list(error["details"]) == unknown
    assert not execution.replays.exists()


def test_agent_batch_replay_refuses_unknown_fields(api_client_for, owner, execution):
    response = api_client_for(owner).post(f"/api/v1/agents/{execution.agent_id}/replay",
                                          {"agent_version": 1, "last": 3}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == ["last"]


def test_run_refuses_unknown_fields(api_client_for, owner, execution):
    response = api_client_for(owner).post(f"/api/v1/agents/{execution.agent_id}/run",
                                          {"input_prompt": "hi", "prompt": "typo"}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == ["prompt"]
