"""The Policies pages: only those who may manage policies, outsiders 404, the API's
validation errors next to the field, every change audited through the services, and the
test panel deciding a run's recorded calls with the gate's checker."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from executions.models import Execution, ExecutionStep
from governance.models import AuditLogEntry, Policy
from governance.services import policy_create
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides) -> dict:
    data = {"name": "No invoice writes", "description": "", "expression": "args.table_name == 'invoices'",
            "policy_type": "", "enforcement": "block", "enabled": "on"}
    data.update(overrides)
    return data


@pytest.fixture
def policy(owner, workspace):
    return policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Night writes",
                         conditions={"expression": "time.hour >= 22"}, enforcement="require_approval")


def test_admin_sees_the_list_and_the_nav_link(owner, policy):
    response = _client(owner).get("/policies/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Night writes" in body and "time.hour &gt;= 22" in body
    assert 'href="/policies/"' in body


@pytest.mark.parametrize("path", ["/policies/", "/policies/new/", "/policies/validate?expression=rows"])
def test_member_who_may_not_manage_policies_gets_403(member, editor, path):
    for user in (member, editor):
        assert _client(user).get(path).status_code == 403
    assert 'href="/policies/"' not in _client(member).get("/runs/").content.decode()


def test_member_gets_403_on_a_policy_of_their_workspace(member, policy):
    assert _client(member).get(f"/policies/{policy.pk}/").status_code == 403
    assert _client(member).post(f"/policies/{policy.pk}/delete").status_code == 403
    assert Policy.objects.filter(pk=policy.pk).exists()


@pytest.mark.parametrize("suffix", ["", "delete", "enabled"])
def test_outsider_gets_404(outsider, policy, suffix):
    client = _client(outsider)
    assert client.get(f"/policies/{policy.pk}/{suffix}").status_code in (404, 405)
    assert client.post(f"/policies/{policy.pk}/{suffix}", _form()).status_code == 404
    assert "Night writes" not in client.get("/policies/").content.decode()
    policy.refresh_from_db()
    assert policy.enabled and policy.name == "Night writes"


def test_create_goes_through_the_service_and_is_audited(owner, workspace):
    response = _client(owner).post("/policies/new/", _form())
    assert response.status_code == 302
    created = Policy.objects.get(name="No invoice writes")
    assert created.workspace_id == workspace.pk and created.policy_type == "content"
    entry = AuditLogEntry.objects.get(event_type="policy_created", policy_id=created.pk)
    assert entry.actor == owner and entry.details["conditions"] == {"expression": "args.table_name == 'invoices'"}


def test_invalid_condition_is_shown_next_to_the_field_with_the_apis_reason(owner):
    response = _client(owner).post("/policies/new/", _form(expression="tool.nme == 'x'"))
    assert response.status_code == 400
    body = response.content.decode()
    assert "unknown name &#x27;tool.nme&#x27;" in body and 'id="id_expression_error"' in body
    assert not Policy.objects.exists()


def test_blank_name_is_refused_naming_the_field(owner):
    response = _client(owner).post("/policies/new/", _form(name=""))
    assert response.status_code == 400
    assert 'id="id_name_error"' in response.content.decode()


def test_edit_records_the_change_and_history_shows_it(owner, policy):
    client = _client(owner)
    response = client.post(f"/policies/{policy.pk}/", _form(name="Night writes", expression="time.hour >= 21",
                                                            enforcement="block"))
    assert response.status_code == 302
    policy.refresh_from_db()
    assert policy.conditions == {"expression": "time.hour >= 21"} and policy.enforcement == "block"
    entry = AuditLogEntry.objects.get(event_type="policy_updated", policy_id=policy.pk)
    assert entry.details["changes"]["enforcement"] == {"from": "require_approval", "to": "block"}
    page = client.get(f"/policies/{policy.pk}/").content.decode()
    history = page.split('id="history-title"')[1]
    assert "require_approval → block" in history
    assert "<code>time.hour &gt;= 22</code> → <code>time.hour &gt;= 21</code>" in history


def test_disable_and_delete_with_a_confirm_step(owner, policy):
    client = _client(owner)
    assert client.post(f"/policies/{policy.pk}/enabled", {"enabled": "0"}).status_code == 302
    policy.refresh_from_db()
    assert not policy.enabled
    confirm = client.get(f"/policies/{policy.pk}/delete")
    assert confirm.status_code == 200 and "Delete policy" in confirm.content.decode()
    assert Policy.objects.filter(pk=policy.pk).exists()
    assert client.post(f"/policies/{policy.pk}/delete").status_code == 302
    assert not Policy.objects.filter(pk=policy.pk).exists()
    events = list(AuditLogEntry.objects.filter(policy_id=policy.pk).order_by("id").values_list("event_type", flat=True))
    assert events == ["policy_created", "policy_updated", "policy_deleted"]


def test_validate_endpoint_answers_with_the_apis_errors(owner, api_client_for, workspace):
    client = _client(owner)
    ok = client.get("/policies/validate", {"expression": "rows > 100"})
    assert ok.status_code == 200 and ok.json() == {"valid": True, "policy_type": "data_export_limit"}
    bad = client.get("/policies/validate", {"expression": "rows > 100", "policy_type": "tool_restriction"})
    api = api_client_for(owner).post("/api/v1/policies/", {
        "name": "x", "scope": "workspace", "workspace_id": workspace.pk, "enforcement": "block",
        "conditions": {"expression": "rows > 100"}, "policy_type": "tool_restriction"}, format="json")
    assert bad.status_code == 400 and api.status_code == 400
    assert bad.json()["error"] == api.json()["error"]
    assert "only known after a query" in bad.json()["error"]["details"]["conditions"][0]
    syntax = client.get("/policies/validate", {"expression": "tool.name == "}).json()
    assert syntax["valid"] is False and syntax["error"]["details"]["position"] == 13


def test_test_panel_reports_which_recorded_calls_match(owner, outsider, workspace):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back", "run_sql"])
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.versions.get(),
                                   queued_at=timezone.now(), input_prompt="Close tickets")
    ExecutionStep.objects.create(execution=run, step_number=1, step_type="tool_call", tool_name="run_sql",
                                 input={"sql": "select 1"})
    ExecutionStep.objects.create(execution=run, step_number=2, step_type="tool_call", tool_name="write_back",
                                 input={"table_name": "Tickets", "operation": "update", "data": {"status": "x"}})
    query = {"run": run.pk, "expression": "args.table_name == 'tickets'", "enforcement": "block"}
    body = _client(owner).get("/policies/test", query).json()
    assert [(c["tool"], c["matched"], c["decision"]) for c in body["calls"]] == [
        ("run_sql", False, "PROCEED"), ("write_back", True, "BLOCKED")]
    assert _client(outsider).get("/policies/test", query).status_code == 404
    assert not Policy.objects.exists()


def test_builder_offers_the_catalogs_tables_and_columns_the_tools_and_agents(transactional_db):
    from django.contrib.auth import get_user_model

    from demo.seed import ADMIN_USERNAME, demo_seed

    demo_seed()
    page = _client(get_user_model().objects.get(username=ADMIN_USERNAME)).get("/policies/new/")
    assert page.status_code == 200
    builder = page.context["builder"]
    tickets = next(table for table in builder["tables"] if table["name"] == "tickets")
    assert "priority" in tickets["columns"]
    assert "write_back" in builder["tools"] and "act_with_approval" in builder["action_levels"]
    assert {agent["name"] for agent in builder["agents"]} >= {"Support Analyst", "L1 Support Specialist"}
    assert 'id="policy-builder-data"' in page.content.decode()


def test_organization_policy_is_listed_and_only_an_org_admin_may_change_it(owner, org_admin, workspace):
    policy = policy_create(actor=org_admin, scope="organization", workspace_id=workspace.pk, name="Org rule",
                           conditions={"expression": "tool.name == 'write_back'"}, enforcement="warn")
    assert "Org rule" in _client(owner).get("/policies/").content.decode()
    refused = _client(owner).post(f"/policies/{policy.pk}/", _form(name="Renamed"))
    assert refused.status_code == 400 and "Only organization admins" in refused.content.decode()
    policy.refresh_from_db()
    assert policy.name == "Org rule"
    assert not AuditLogEntry.objects.filter(event_type="policy_updated", policy_id=policy.pk).exists()
