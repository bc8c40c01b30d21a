"""/api/v1/policies/: CRUD, validation with positions, tenancy, audit."""

import pytest

from governance.models import AuditLogEntry, Policy

URL = "/api/v1/policies/"


def _body(workspace, **overrides):
    body = {
        "name": "After hours",
        "scope": "workspace",
        "workspace_id": workspace.pk,
        "conditions": {"expression": "time.hour >= 18 OR time.hour < 6"},
        "enforcement": "require_approval",
    }
    body.update(overrides)
    return body


@pytest.fixture
def created(api_client_for, owner, workspace):
    response = api_client_for(owner).post(URL, _body(workspace), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_create_infers_type_and_audits(created, workspace, owner):
    assert created["policy_type"] == "time_window"
    assert created["expression"] == "time.hour >= 18 OR time.hour < 6"
    assert created["workspace_id"] == workspace.pk
    entry = AuditLogEntry.objects.get(event_type="policy_created")
    assert str(entry.policy_id) == created["id"]
    assert entry.actor == owner and entry.workspace_id == workspace.pk


def test_keyed_form_is_stored_as_its_expression(api_client_for, owner, workspace):
    body = _body(workspace, name="PII export", conditions={"rows_gt": 10000, "table_classification": "pii"})
    data = api_client_for(owner).post(URL, body, format="json").json()
    assert data["conditions"] == {"expression": "rows > 10000 AND table.classification == 'pii'"}
    assert data["policy_type"] == "data_export_limit"


def test_spec_path_without_slash_accepts_post(api_client_for, owner, workspace):
    response = api_client_for(owner).post("/api/v1/policies", _body(workspace), format="json")
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("conditions", "position", "reason"),
    [
        ({"expression": "time.hour >= 18 OR"}, 18, "expected a value"),
        ({"expression": "tool.name = 'write_back'"}, 10, "use '==' to compare"),
        ({"expression": "time.hours > 3"}, 0, "unknown name 'time.hours'"),
        ("cost.tokens > 100000 AND (", 26, "expected a value"),
    ],
)
def test_bad_condition_is_400_with_position(api_client_for, owner, workspace, conditions, position, reason):
    response = api_client_for(owner).post(URL, _body(workspace, conditions=conditions), format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["position"] == position
    assert reason in error["details"]["reason"]
    assert error["details"]["conditions"][0].startswith(f"position {position}: ")
    assert not Policy.objects.exists()
    assert not AuditLogEntry.objects.exists()


def test_query_names_need_the_data_export_type(api_client_for, owner, workspace):
    body = _body(workspace, conditions={"expression": "rows > 5"}, policy_type="budget")
    response = api_client_for(owner).post(URL, body, format="json")
    assert response.status_code == 400
    assert "only known after a query" in response.json()["error"]["details"]["conditions"][0]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"enforcement": "shout"}, "enforcement"), ({"scope": "galaxy"}, "scope"), ({"name": ""}, "name"),
     ({"policy_type": "vibes"}, "policy_type"), ({"conditions": {"Bad Key": 1}}, "conditions")],
)
def test_bad_fields_are_named(api_client_for, owner, workspace, overrides, field):
    response = api_client_for(owner).post(URL, _body(workspace, **overrides), format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]


def test_read_update_delete(api_client_for, owner, created):
    client = api_client_for(owner)
    detail = f"{URL}{created['id']}/"
    assert client.get(detail).json()["name"] == "After hours"
    response = client.patch(detail, {"conditions": {"expression": "cost.tokens > 5000"}, "enforcement": "block"},
                            format="json")
    assert response.status_code == 200
    assert response.json()["policy_type"] == "budget"  # re-inferred from the new condition
    assert response.json()["enforcement"] == "block"
    updated = AuditLogEntry.objects.get(event_type="policy_updated")
    assert updated.details["changes"]["enforcement"] == {"from": "require_approval", "to": "block"}
    bad = client.patch(detail, {"conditions": {"expression": "cost.tokens >"}}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["details"]["position"] == 13
    assert client.patch(detail, {"scope": "organization"}, format="json").status_code == 400
    assert client.delete(detail).status_code == 204
    assert not Policy.objects.exists()
    assert AuditLogEntry.objects.filter(event_type="policy_deleted", policy_id=created["id"]).exists()
    assert client.get(detail).status_code == 404


def test_list_is_tenant_scoped(api_client_for, owner, outsider, member, created, other_workspace):
    api_client_for(outsider).post(URL, _body(other_workspace, name="Theirs"), format="json")
    names = [p["name"] for p in api_client_for(member).get(URL).json()["results"]]
    assert names == ["After hours"]
    assert [p["name"] for p in api_client_for(outsider).get(URL).json()["results"]] == ["Theirs"]


def test_outsider_gets_404(api_client_for, outsider, created, workspace):
    client = api_client_for(outsider)
    detail = f"{URL}{created['id']}/"
    assert client.get(detail).status_code == 404
    assert client.patch(detail, {"name": "mine"}, format="json").status_code == 404
    assert client.delete(detail).status_code == 404
    assert client.post(URL, _body(workspace), format="json").status_code == 404
    assert Policy.objects.get(pk=created["id"]).name == "After hours"


def test_analyst_gets_403(api_client_for, member, created, workspace):
    client = api_client_for(member)
    assert client.get(f"{URL}{created['id']}/").status_code == 200
    assert client.post(URL, _body(workspace), format="json").status_code == 403
    assert client.patch(f"{URL}{created['id']}/", {"name": "x"}, format="json").status_code == 403
    assert client.delete(f"{URL}{created['id']}/").status_code == 403


def test_organization_scope_needs_an_org_admin(api_client_for, owner, org_admin, org, workspace):
    body = _body(workspace, scope="organization", workspace_id=None, organization_id=org.pk, name="Org wide")
    assert api_client_for(owner).post(URL, body, format="json").status_code == 403
    response = api_client_for(org_admin).post(URL, body, format="json")
    assert response.status_code == 201
    assert response.json()["workspace_id"] is None
    # Workspace members see it; only org admins change it.
    detail = f"{URL}{response.json()['id']}/"
    assert api_client_for(owner).get(detail).status_code == 200
    assert api_client_for(owner).delete(detail).status_code == 403
    assert api_client_for(org_admin).delete(detail).status_code == 204


def test_unauthenticated_is_401(api_client_for):
    assert api_client_for(None).get(URL).status_code == 401


def test_list_filters_by_workspace(api_client_for, owner, org_admin, org, workspace, other_workspace, created):
    body = _body(workspace, scope="organization", workspace_id=None, organization_id=org.pk, name="Org wide")
    api_client_for(org_admin).post(URL, body, format="json")
    client = api_client_for(owner)
    names = [p["name"] for p in client.get(URL, {"workspace_id": workspace.pk}).json()["results"]]
    assert names == ["After hours", "Org wide"]
    assert [p["name"] for p in client.get(URL, {"scope": "organization"}).json()["results"]] == ["Org wide"]
    assert client.get(URL, {"workspace_id": other_workspace.pk}).status_code == 404
