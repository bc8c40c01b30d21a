"""Agent versions: numbering, validation with field errors, immutability, deploy."""

import pytest

from agents.models import AgentVersion
from agents.services import agent_create, agent_version_create
from datasources.models import DataSource
from tests.agents.conftest import version_body


def _post_version(client, agent, **overrides):
    return client.post(f"/api/v1/agents/{agent.pk}/versions/", version_body(**overrides), format="json")


def test_versions_number_themselves(api_client_for, editor, agent):
    client = api_client_for(editor)
    first = _post_version(client, agent)
    second = _post_version(client, agent, goal="Resolve tickets faster.")
    assert (first.status_code, second.status_code) == (201, 201)
    assert [first.json()["version"], second.json()["version"]] == [1, 2]
    listed = client.get(f"/api/v1/agents/{agent.pk}/versions/").json()
    assert [row["version"] for row in listed["results"]] == [2, 1]
    assert AgentVersion.objects.get(agent=agent, version=1).created_by == editor


def test_version_defaults_come_from_the_typed_configs(api_client_for, owner, agent):
    body = _post_version(api_client_for(owner), agent).json()
    assert body["model_config"]["max_turns"] == 15
    assert body["model_config"]["token_budget"] == 100000
    assert body["approval_rules"]["escalation_timeout_minutes"] == 1440
    assert body["governance_level"] == "standard"


def test_unknown_tool_is_refused_naming_tools(api_client_for, owner, agent):
    response = _post_version(api_client_for(owner), agent, tools=["execute_query", "launch_rockets"])
    assert response.status_code == 400
    assert "launch_rockets" in str(response.json()["error"]["details"]["tools"])
    assert not AgentVersion.objects.exists()


def test_approval_for_a_tool_outside_the_list_is_refused(api_client_for, owner, agent):
    response = _post_version(
        api_client_for(owner),
        agent,
        action_level="act_with_approval",
        approval_rules={"require_approval_for": ["write_back"]},
    )
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert "require_approval_for" in details["approval_rules"]
    assert not AgentVersion.objects.exists()


def test_model_config_is_checked_field_by_field(api_client_for, owner, agent):
    response = _post_version(api_client_for(owner), agent, model_config={"max_turns": 0, "colour": "blue"})
    assert response.status_code == 400
    details = response.json()["error"]["details"]["model_config"]
    assert "max_turns" in details
    assert "colour" in details


def test_bad_action_level_names_the_field(api_client_for, owner, agent):
    response = _post_version(api_client_for(owner), agent, action_level="yolo")
    assert response.status_code == 400
    assert "action_level" in response.json()["error"]["details"]


def test_missing_goal_names_the_field(api_client_for, owner, agent):
    body = version_body()
    del body["goal"]
    response = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/versions/", body, format="json")
    assert response.status_code == 400
    assert "goal" in response.json()["error"]["details"]


def test_data_sources_must_belong_to_the_agents_workspace(api_client_for, owner, agent, other_workspace):
    ours = DataSource.objects.create(workspace=agent.workspace, name="Tickets", type="sqlite")
    theirs = DataSource.objects.create(workspace=other_workspace, name="Secrets", type="sqlite")
    client = api_client_for(owner)

    refused = _post_version(client, agent, data_sources=[ours.pk, theirs.pk])
    assert refused.status_code == 400
    assert "data_sources" in refused.json()["error"]["details"]
    assert not AgentVersion.objects.exists()

    accepted = _post_version(client, agent, data_sources=[ours.pk])
    assert accepted.status_code == 201
    assert accepted.json()["data_sources"] == [ours.pk]


def test_analyst_cannot_create_a_version(api_client_for, member, agent):
    assert _post_version(api_client_for(member), agent).status_code == 403
    assert not AgentVersion.objects.exists()


def test_outsider_gets_404_creating_a_version(api_client_for, outsider, agent):
    assert _post_version(api_client_for(outsider), agent).status_code == 404


def test_saved_version_refuses_to_change(agent, owner):
    version = agent_version_create(agent=agent, actor=owner, **version_body())
    version.goal = "Something else"
    with pytest.raises(ValueError, match="immutable"):
        version.save()
    version.refresh_from_db()
    assert version.goal == "Resolve support tickets."


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_version_has_no_write_endpoint(api_client_for, owner, agent, method):
    agent_version_create(agent=agent, actor=owner, **version_body())
    response = getattr(api_client_for(owner), method)(
        f"/api/v1/agents/{agent.pk}/versions/1/", {"goal": "Changed"}, format="json"
    )
    assert response.status_code == 405
    assert AgentVersion.objects.get(agent=agent, version=1).goal == "Resolve support tickets."


def test_deploy_sets_the_current_version(api_client_for, editor, agent):
    client = api_client_for(editor)
    _post_version(client, agent)
    _post_version(client, agent, goal="Second take.")
    response = client.post(f"/api/v1/agents/{agent.pk}/versions/1/deploy")
    assert response.status_code == 200
    assert response.json()["current_version"] == 1
    agent.refresh_from_db()
    assert agent.current_version.version == 1


def test_deploying_a_missing_version_is_a_404(api_client_for, owner, agent):
    assert api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/versions/7/deploy").status_code == 404


def test_analyst_cannot_deploy(api_client_for, member, owner, agent):
    agent_version_create(agent=agent, actor=owner, **version_body())
    assert api_client_for(member).post(f"/api/v1/agents/{agent.pk}/versions/1/deploy").status_code == 403
    agent.refresh_from_db()
    assert agent.current_version is None


def test_outsider_gets_404_deploying(api_client_for, outsider, owner, agent):
    agent_version_create(agent=agent, actor=owner, **version_body())
    assert api_client_for(outsider).post(f"/api/v1/agents/{agent.pk}/versions/1/deploy").status_code == 404
    agent.refresh_from_db()
    assert agent.current_version is None


def test_version_numbers_are_per_agent(workspace, owner, agent):
    other = agent_create(workspace=workspace, owner=owner, name="Second", business_function="sales")
    agent_version_create(agent=agent, actor=owner, **version_body())
    assert agent_version_create(agent=other, actor=owner, **version_body()).version == 1
