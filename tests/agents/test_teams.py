"""Teams of agents (docs/sessions.md): a parent in the same workspace, transfer flags,
and cycles refused when configured, through the API (400 naming ``parent_agent``) and
the admin (a form error on the field). Every change is audited."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from agents.services import TEAM_MAX_DEPTH, agent_create, agent_team_update
from governance.models import AuditLogEntry
from rivercore.errors import InvalidInput


def _agent(workspace, owner, name: str) -> Agent:
    return agent_create(workspace=workspace, owner=owner, name=name, business_function="customer_support")


@pytest.fixture
def tree(workspace, owner):
    """root -> child -> grandchild."""
    root, child, grandchild = (_agent(workspace, owner, name) for name in ("Root", "Child", "Grandchild"))
    agent_team_update(agent=child, actor=owner, parent_agent_id=root.pk)
    agent_team_update(agent=grandchild, actor=owner, parent_agent_id=child.pk)
    return root, child, grandchild


def test_the_api_sets_a_parent_and_the_flags_and_audits_it(workspace, owner, tree, api_client_for):
    root, _child, _grandchild = tree
    helper = _agent(workspace, owner, "Helper")
    client = api_client_for(owner)
    response = client.patch(f"/api/v1/agents/{helper.pk}/", {"parent_agent": str(root.pk),
                                                             "disallow_transfer_to_parent": True})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["parent_agent"] == str(root.pk) and body["disallow_transfer_to_parent"] is True
    assert body["disallow_transfer_to_peers"] is False
    entry = AuditLogEntry.objects.filter(event_type="agent_team_changed", agent_id=helper.pk).get()
    assert entry.details["after"]["parent_agent"] == str(root.pk)
    assert client.patch(f"/api/v1/agents/{helper.pk}/", {"parent_agent": None}).json()["parent_agent"] is None

    created = client.post("/api/v1/agents/", {"workspace": workspace.pk, "name": "Sub", "business_function":
                                              "customer_support", "parent_agent": str(root.pk)})
    assert created.status_code == 201 and created.json()["parent_agent"] == str(root.pk)


@pytest.mark.parametrize("case", ["self", "cycle", "other_workspace", "unknown"])
def test_a_bad_parent_is_a_400_naming_parent_agent_and_nothing_changes(workspace, other_workspace, owner, outsider,
                                                                       tree, api_client_for, case):
    root, child, grandchild = tree
    parent = {"self": root.pk, "cycle": grandchild.pk,
              "other_workspace": _agent(other_workspace, outsider, "Theirs").pk,
              "unknown": "00000000-0000-0000-0000-000000000000"}[case]
    response = api_client_for(owner).patch(f"/api/v1/agents/{root.pk}/", {"parent_agent": str(parent),
                                                                          "name": "Renamed"})
    assert response.status_code == 400, response.content
    assert "parent_agent" in response.json()["error"]["details"]
    root.refresh_from_db()
    assert root.parent_agent_id is None and root.name == "Root"  # the rename was rolled back with it


def test_a_refused_parent_on_create_leaves_no_agent(workspace, owner, tree, api_client_for):
    response = api_client_for(owner).post("/api/v1/agents/", {
        "workspace": workspace.pk, "name": "Orphan", "business_function": "customer_support",
        "parent_agent": "00000000-0000-0000-0000-000000000000"})
    assert response.status_code == 400 and "parent_agent" in response.json()["error"]["details"]
    assert not Agent.objects.filter(name="Orphan").exists()


def test_a_team_deeper_than_the_limit_is_refused(workspace, owner):
    agents = [_agent(workspace, owner, f"Level {n}") for n in range(TEAM_MAX_DEPTH + 2)]
    for parent, child in zip(agents, agents[1:TEAM_MAX_DEPTH + 1], strict=False):
        agent_team_update(agent=child, actor=owner, parent_agent_id=parent.pk)
    with pytest.raises(InvalidInput) as refused:
        agent_team_update(agent=agents[-1], actor=owner, parent_agent_id=agents[TEAM_MAX_DEPTH].pk)
    assert "levels deep" in refused.value.details["parent_agent"][0]


def test_an_outsider_cannot_touch_the_team(tree, outsider, api_client_for):
    root, child, _grandchild = tree
    response = api_client_for(outsider).patch(f"/api/v1/agents/{child.pk}/", {"parent_agent": None})
    assert response.status_code == 404
    child.refresh_from_db()
    assert child.parent_agent_id == root.pk


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser(username="root", password="x", email="root@example.com")
    client.force_login(user)
    return client


def test_the_admin_refuses_a_cycle_on_the_parent_field(admin_client, tree, owner):
    root, _child, grandchild = tree
    response = admin_client.post(f"/admin/agents/agent/{root.pk}/change/", {
        "workspace": root.workspace_id, "name": root.name, "description": "", "business_function":
        root.business_function, "domain": "", "owner": owner.pk, "parent_agent": grandchild.pk,
        "versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200  # the form again, with the error
    assert "would make a cycle" in response.content.decode()
    root.refresh_from_db()
    assert root.parent_agent_id is None


def test_the_admin_places_an_agent_in_a_team_through_the_service(admin_client, workspace, owner, tree):
    root = tree[0]
    helper = _agent(workspace, owner, "Helper")
    response = admin_client.post(f"/admin/agents/agent/{helper.pk}/change/", {
        "workspace": workspace.pk, "name": "Helper", "description": "", "business_function": "customer_support",
        "domain": "", "owner": owner.pk, "parent_agent": root.pk, "disallow_transfer_to_peers": "on",
        "versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    helper.refresh_from_db()
    assert helper.parent_agent_id == root.pk and helper.disallow_transfer_to_peers is True
    assert AuditLogEntry.objects.filter(event_type="agent_team_changed", agent_id=helper.pk).exists()
    assert admin_client.get("/admin/executions/session/").status_code == 200
