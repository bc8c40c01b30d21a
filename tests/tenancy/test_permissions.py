"""Roles grant the permissions tenancy.permissions maps, and the API enforces them."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from tenancy.models import Membership
from tenancy.permissions import ALL_PERMISSIONS, ROLE_PERMISSIONS, Role
from tenancy.selectors import workspace_permissions


def _user_with_role(workspace, role):
    user = get_user_model().objects.create_user(username=f"u-{role}", password="x")
    Membership.objects.create(workspace=workspace, user=user, role=role)
    return user


@pytest.mark.parametrize("role", list(Role))
def test_workspace_detail_lists_the_roles_permissions(api_client_for, workspace, role):
    user = _user_with_role(workspace, role)
    body = api_client_for(user).get(f"/api/v1/workspaces/{workspace.pk}/").json()
    assert body["roles"] == [role.value]
    assert set(body["permissions"]) == set(ROLE_PERMISSIONS[role])


def test_roles_are_nested():
    assert ROLE_PERMISSIONS[Role.VIEWER] < ROLE_PERMISSIONS[Role.ANALYST] < ROLE_PERMISSIONS[Role.EDITOR]
    assert ROLE_PERMISSIONS[Role.ADMIN] == ALL_PERMISSIONS


def test_org_admin_holds_every_permission(org_admin, workspace):
    assert workspace_permissions(user=org_admin, workspace=workspace) == ALL_PERMISSIONS


@pytest.mark.parametrize(
    "role,allowed",
    [(Role.VIEWER, False), (Role.ANALYST, False), (Role.EDITOR, True), (Role.ADMIN, True)],
)
def test_agent_create_follows_the_role_map(api_client_for, workspace, role, allowed):
    user = _user_with_role(workspace, role)
    response = api_client_for(user).post(
        "/api/v1/agents/",
        {"workspace": workspace.pk, "name": f"Agent of {role}", "business_function": "custom"},
        format="json",
    )
    assert response.status_code == (201 if allowed else 403)
    assert Agent.objects.filter(name=f"Agent of {role}").exists() is allowed


def test_org_admin_creates_agents_without_a_workspace_role(api_client_for, org_admin, workspace):
    response = api_client_for(org_admin).post(
        "/api/v1/agents/",
        {"workspace": workspace.pk, "name": "Org agent", "business_function": "custom"},
        format="json",
    )
    assert response.status_code == 201


@pytest.mark.parametrize("role", list(Role))
def test_every_role_may_read_agents(api_client_for, workspace, owner, role):
    agent = Agent.objects.create(workspace=workspace, owner=owner, name="Readable", business_function="custom")
    user = _user_with_role(workspace, role)
    assert api_client_for(user).get(f"/api/v1/agents/{agent.pk}/").status_code == 200


def test_workspace_admin_is_not_an_llm_provider_admin(api_client_for, owner, org):
    response = api_client_for(owner).post(
        "/api/v1/llm-providers/", {"organization": org.pk, "provider_name": "openai"}, format="json"
    )
    assert response.status_code == 403
