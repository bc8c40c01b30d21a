"""Agents over REST: list, create, read, edit; tenant isolation and permissions."""

import pytest

from agents.models import Agent
from agents.services import agent_create


def test_editor_creates_an_agent_in_their_workspace(api_client_for, editor, workspace):
    response = api_client_for(editor).post(
        "/api/v1/agents/",
        {"workspace": workspace.pk, "name": "Triage", "business_function": "customer_support", "domain": "Support"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    agent = Agent.objects.get(pk=body["id"])
    assert agent.owner == editor
    assert agent.workspace == workspace
    assert body["status"] == "draft"
    assert body["current_version"] is None


def test_analyst_cannot_create_an_agent(api_client_for, member, workspace):
    response = api_client_for(member).post(
        "/api/v1/agents/",
        {"workspace": workspace.pk, "name": "Triage", "business_function": "customer_support"},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert not Agent.objects.exists()


def test_outsider_cannot_create_an_agent_in_our_workspace(api_client_for, outsider, workspace):
    response = api_client_for(outsider).post(
        "/api/v1/agents/",
        {"workspace": workspace.pk, "name": "Sneaky", "business_function": "custom"},
        format="json",
    )
    assert response.status_code == 404
    assert not Agent.objects.exists()


def test_create_with_bad_business_function_names_the_field(api_client_for, editor, workspace):
    response = api_client_for(editor).post(
        "/api/v1/agents/", {"workspace": workspace.pk, "name": "X", "business_function": "astrology"}, format="json"
    )
    assert response.status_code == 400
    assert "business_function" in response.json()["error"]["details"]


def test_create_without_a_name_names_the_field(api_client_for, editor, workspace):
    response = api_client_for(editor).post(
        "/api/v1/agents/", {"workspace": workspace.pk, "business_function": "custom"}, format="json"
    )
    assert response.status_code == 400
    assert "name" in response.json()["error"]["details"]


def test_list_shows_only_the_callers_workspaces(api_client_for, agent, outsider, other_workspace):
    theirs = agent_create(workspace=other_workspace, owner=outsider, name="Theirs", business_function="sales")
    response = api_client_for(outsider).get("/api/v1/agents/")
    assert response.status_code == 200
    ids = [row["id"] for row in response.json()["results"]]
    assert ids == [str(theirs.pk)]


def test_list_filters_by_status_and_workspace(api_client_for, owner, workspace, agent):
    archived = agent_create(workspace=workspace, owner=owner, name="Old", business_function="custom")
    Agent.objects.filter(pk=archived.pk).update(status=Agent.Status.ARCHIVED)
    client = api_client_for(owner)

    by_status = client.get("/api/v1/agents/", {"status": "archived"}).json()
    assert [row["id"] for row in by_status["results"]] == [str(archived.pk)]

    in_workspace = client.get("/api/v1/agents/", {"workspace": workspace.pk}).json()
    assert in_workspace["count"] == 2
    elsewhere = client.get("/api/v1/agents/", {"workspace": workspace.pk + 1000}).json()
    assert elsewhere["count"] == 0


def test_list_with_unknown_status_is_a_400(api_client_for, owner, agent):
    response = api_client_for(owner).get("/api/v1/agents/", {"status": "sleeping"})
    assert response.status_code == 400
    assert "status" in response.json()["error"]["details"]


def test_member_reads_an_agent(api_client_for, member, agent):
    response = api_client_for(member).get(f"/api/v1/agents/{agent.pk}/")
    assert response.status_code == 200
    assert response.json()["name"] == "Triage"


@pytest.mark.parametrize("suffix", ["", "versions/", "versions/1/"])
def test_outsider_gets_404_reading(api_client_for, outsider, deployed_agent, suffix):
    response = api_client_for(outsider).get(f"/api/v1/agents/{deployed_agent.pk}/{suffix}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_malformed_agent_id_is_a_404(api_client_for, owner):
    assert api_client_for(owner).get("/api/v1/agents/not-a-uuid/").status_code == 404


def test_editor_renames_an_agent(api_client_for, editor, agent):
    response = api_client_for(editor).patch(
        f"/api/v1/agents/{agent.pk}/", {"name": "Ticket triage", "domain": "EMEA support"}, format="json"
    )
    assert response.status_code == 200
    agent.refresh_from_db()
    assert (agent.name, agent.domain) == ("Ticket triage", "EMEA support")


def test_patch_cannot_change_status(api_client_for, owner, agent):
    response = api_client_for(owner).patch(f"/api/v1/agents/{agent.pk}/", {"status": "active"}, format="json")
    assert response.status_code == 400
    assert "status" in response.json()["error"]["details"]
    agent.refresh_from_db()
    assert agent.status == Agent.Status.DRAFT


def test_analyst_cannot_edit_an_agent(api_client_for, member, agent):
    response = api_client_for(member).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Mine"}, format="json")
    assert response.status_code == 403
    agent.refresh_from_db()
    assert agent.name == "Triage"


def test_outsider_gets_404_editing(api_client_for, outsider, agent):
    response = api_client_for(outsider).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Mine"}, format="json")
    assert response.status_code == 404


def test_agents_cannot_be_deleted(api_client_for, owner, agent):
    response = api_client_for(owner).delete(f"/api/v1/agents/{agent.pk}/")
    assert response.status_code == 405
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_anonymous_is_refused(client, agent):
    assert client.get("/api/v1/agents/").status_code == 401
