"""GET /api/v1/audit/ (filtered, tenant-scoped) and GET /api/v1/audit/verify."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from governance.audit import audit_anchor, audit_maintenance, audit_record, audit_verify
from governance.models import AuditLogEntry


@pytest.fixture
def entries(org, workspace, other_org, other_workspace):
    policy_id, agent_id = uuid.uuid4(), uuid.uuid4()
    return {
        "ws": audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="policy_created",
                           policy_id=policy_id),
        "run": audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="governance_decision",
                            execution_id=42, agent_id=agent_id),
        "org": audit_record(organization_id=org.pk, event_type="policy_created"),
        "theirs": audit_record(organization_id=other_org.pk, workspace_id=other_workspace.pk,
                               event_type="policy_created"),
        "policy_id": policy_id,
        "agent_id": agent_id,
    }


def _ids(response):
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_entries_carry_their_key_id_and_macs(api_client_for, org_admin, org, entries):
    audit_verify(organization_id=org.pk)  # seals the pending entries
    rows = api_client_for(org_admin).get("/api/v1/audit/").json()["results"]
    assert {row["key_id"] for row in rows} == {"tests"}
    assert all(len(row["content_hash"]) == 64 and len(row["entry_hash"]) == 64 for row in rows)
    assert sorted(row["seq"] for row in rows) == [1, 2, 3]


def test_member_sees_their_workspace_entries_only(api_client_for, member, entries):
    assert _ids(api_client_for(member).get("/api/v1/audit/")) == {entries["ws"].pk, entries["run"].pk}


def test_org_admin_sees_the_organization(api_client_for, org_admin, entries):
    assert _ids(api_client_for(org_admin).get("/api/v1/audit/")) == {
        entries["ws"].pk, entries["run"].pk, entries["org"].pk
    }


def test_outsider_sees_none_of_ours(api_client_for, outsider, entries):
    assert _ids(api_client_for(outsider).get("/api/v1/audit/")) == {entries["theirs"].pk}


def test_filters(api_client_for, org_admin, entries):
    client = api_client_for(org_admin)
    assert _ids(client.get("/api/v1/audit/", {"event_type": "governance_decision"})) == {entries["run"].pk}
    assert _ids(client.get("/api/v1/audit/", {"execution_id": 42})) == {entries["run"].pk}
    assert _ids(client.get("/api/v1/audit/", {"agent_id": str(entries["agent_id"])})) == {entries["run"].pk}
    assert _ids(client.get("/api/v1/audit/", {"policy_id": str(entries["policy_id"])})) == {entries["ws"].pk}
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    assert _ids(client.get("/api/v1/audit/", {"since": future})) == set()
    assert len(_ids(client.get("/api/v1/audit/", {"since": past, "until": future}))) == 3


@pytest.mark.parametrize(
    ("param", "value"), [
        ("since", "yesterday"), ("until", "2024-13-45T99:00:00"), ("execution_id", "x"), ("execution_id", "9" * 30),
        ("agent_id", "not-a-uuid"), ("event_type", "a\x00b"), ("event_type", "x" * 61), ("workspace_id", "\x00"),
    ]
)
def test_bad_filters_are_400(api_client_for, org_admin, entries, param, value):
    response = api_client_for(org_admin).get("/api/v1/audit/", {param: value})
    assert response.status_code == 400
    assert param in response.json()["error"]["details"]


def test_verify_reports_each_verdict_for_org_admins(api_client_for, org_admin, org, entries):
    client = api_client_for(org_admin)
    data = client.get("/api/v1/audit/verify").json()
    assert data["ok"] is True
    [report] = data["organizations"]
    assert {key: report[key] for key in ("organization_id", "verdict", "ok", "entries_checked", "first_broken")} \
        == {"organization_id": org.pk, "verdict": "ok", "ok": True, "entries_checked": 3, "first_broken": None}
    audit_anchor(organization_id=org.pk)
    with audit_maintenance():
        AuditLogEntry.objects.filter(organization_id=org.pk, seq=3).delete()
    report = client.get("/api/v1/audit/verify", {"organization_id": org.pk}).json()["organizations"][0]
    assert (report["verdict"], report["ok"], report["anchors_checked"]) == ("truncated after anchor 1", False, 1)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
            AuditLogEntry.objects.filter(pk=entries["run"].pk).update(execution_id=43)
            cursor.execute("SET LOCAL session_replication_role = origin")
        report = client.get("/api/v1/audit/verify").json()["organizations"][0]
        assert report["verdict"] == "broken at entry 2"
        assert report["first_broken"]["reason"] == "hash mismatch"


def test_verify_never_reports_another_organization(api_client_for, org_admin, other_org, entries):
    data = api_client_for(org_admin).get("/api/v1/audit/verify").json()
    assert other_org.pk not in {report["organization_id"] for report in data["organizations"]}
    response = api_client_for(org_admin).get("/api/v1/audit/verify", {"organization_id": other_org.pk})
    assert response.status_code == 404


@pytest.mark.parametrize("value", ["x", "1e3", "\x00", "9" * 40])
def test_verify_with_a_bad_organization_id_is_a_400_or_404(api_client_for, org_admin, entries, value):
    response = api_client_for(org_admin).get("/api/v1/audit/verify", {"organization_id": value})
    assert response.status_code in (400, 404)
    if response.status_code == 400:
        assert "organization_id" in response.json()["error"]["details"]


def test_verify_refuses_non_admins(api_client_for, member, outsider, org, entries):
    assert api_client_for(member).get("/api/v1/audit/verify").status_code == 403
    assert api_client_for(member).get("/api/v1/audit/verify", {"organization_id": org.pk}).status_code == 403
    assert api_client_for(outsider).get("/api/v1/audit/verify", {"organization_id": org.pk}).status_code == 404
