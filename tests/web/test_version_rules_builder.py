"""An agent version's approval rules on the new-version page: who may approve, the
escalation time and the auto-approve conditions, each condition with the condition
builder and validated as typed by the check a saved version gets (the API's messages);
errors land on the row and field they name, and nothing is half saved."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from agents.models import AgentVersion
from datasources.models import DataSource
from governance.checker import auto_approve_condition_validate
from governance.expressions import ExpressionError
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

RULE = {"tool": "write_back", "condition": "confidence_score >= 0.9"}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Ticket fixer", tools=["write_back", "execute_query"],
                      require_approval_for=["write_back"], auto_approve_conditions=[RULE])


def _post(agent, rows: list[dict], **overrides) -> dict:
    data = {"goal": "Help.", "instructions": "Be careful.", "action_level": "act_with_approval",
            "governance_level": "standard", "tools": ["write_back", "execute_query"],
            "require_approval_for": ["write_back"], "approver_roles": ["admin"],
            "escalation_timeout_minutes": "120", "max_turns": "15", "token_budget": "100000",
            "auto-TOTAL_FORMS": str(len(rows)), "auto-INITIAL_FORMS": "0"}
    for index, row in enumerate(rows):
        data[f"auto-{index}-tool"] = row.get("tool", "")
        data[f"auto-{index}-condition"] = row.get("condition", "")
    data.update(overrides)
    return data


def _api_message(condition: str) -> str:
    with pytest.raises(ExpressionError) as caught:
        auto_approve_condition_validate(condition)
    return str(caught.value)


def test_the_page_shows_the_rules_with_the_shared_builder(owner, agent, workspace):
    DataSource.objects.create(workspace=workspace, name="Tickets db", type="postgresql", connection_config={},
                              schema_cache=[{"table_name": "tickets", "columns": [{"column_name": "priority",
                                                                                  "data_type": "text"}]}])
    page = _client(owner).get(f"/agents/{agent.pk}/versions/new/").content.decode()
    assert 'name="auto-0-condition"' in page and "confidence_score &gt;= 0.9" in page
    assert 'name="auto-1-condition"' in page  # one blank row to add another
    assert '<option value="write_back" selected>' in page
    assert page.count("data-condition-builder") == 2
    assert "condition_builder.js" in page and "version_rules.js" in page
    data = json.loads(re.search(r'<script id="auto-approve-builder-data" type="application/json">(.*?)</script>',
                                page, re.S).group(1))
    assert "write_back" in data["tools"] and data["tables"] == [{"name": "tickets", "columns": ["priority"]}]
    assert 'name="approver_roles" value="admin"' in page and 'value="1440"' in page


def test_saving_stores_the_conditions_and_rules_through_the_service(owner, agent):
    rows = [RULE, {"tool": "write_back", "condition": "args.table_name == 'tickets'"}, {}]
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, rows))
    assert response.status_code == 302
    rules = AgentVersion.objects.get(agent=agent, version=2).rules
    assert [r.model_dump() for r in rules.auto_approve_conditions] == rows[:2]
    assert rules.approver_roles == ["admin"] and rules.escalation_timeout_minutes == 120


def test_removing_every_condition_saves_none(owner, agent):
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, [{"condition": ""}]))
    assert response.status_code == 302
    assert AgentVersion.objects.get(agent=agent, version=2).rules.auto_approve_conditions == []


@pytest.mark.parametrize("condition", ["true", "1 == 1", "confidence_score == null", "tool.nme == 'x'",
                                       "confidence_score >="])
def test_a_refused_condition_is_shown_on_its_row_with_the_apis_message(owner, agent, condition):
    rows = [RULE, {"tool": "write_back", "condition": condition}]
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, rows))
    page = response.content.decode()
    assert response.status_code == 400
    error = re.search(r'<span class="field-error" id="id_auto-1-condition_error">(.*?)</span>', page, re.S)
    assert error is not None and _api_message(condition)[:40] in error.group(1).replace("&#x27;", "'")
    assert 'id="id_auto-0-condition_error"' not in page
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()


def test_a_condition_for_a_tool_the_version_lacks_names_the_tool(owner, agent):
    rows = [{"tool": "delegate_to_agent", "condition": "confidence_score > 0.5"}]
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, rows))
    assert response.status_code == 400
    assert re.search(r'id="id_auto-0-tool_error">delegate_to_agent is not among', response.content.decode())


@pytest.mark.parametrize("overrides, field", [
    ({"approver_roles": ["root"]}, "approver_roles"),
    ({"approver_roles": []}, "approver_roles"),
    ({"escalation_timeout_minutes": "0"}, "escalation_timeout_minutes"),
    ({"escalation_timeout_minutes": "1e9"}, "escalation_timeout_minutes"),
    ({"auto-0-tool": "rm -rf"}, "auto-0-tool"),
    ({"auto-0-condition": "x" * 4001}, "auto-0-condition"),
])
def test_hostile_fields_are_form_errors(owner, agent, overrides, field):
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, [RULE], **overrides))
    assert response.status_code == 400 and f'id="id_{field}_error"' in response.content.decode()
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()


@pytest.mark.parametrize("management", [{"auto-TOTAL_FORMS": "100000"}, {"auto-TOTAL_FORMS": "x"},
                                        {"auto-TOTAL_FORMS": None}])
def test_a_tampered_row_count_is_a_400_not_a_500(owner, agent, management):
    data = {key: value for key, value in {**_post(agent, [RULE]), **management}.items() if value is not None}
    response = _client(owner).post(f"/agents/{agent.pk}/versions/new/", data)
    assert response.status_code == 400 and 'class="form-errors"' in response.content.decode()
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()


def test_a_tool_without_a_condition_and_the_reverse_are_errors(owner, agent):
    rows = [{"tool": "write_back", "condition": " "}, {"tool": "", "condition": "confidence_score > 0.5"}]
    page = _client(owner).post(f"/agents/{agent.pk}/versions/new/", _post(agent, rows)).content.decode()
    assert 'id="id_auto-0-condition_error"' in page and 'id="id_auto-1-tool_error"' in page


def test_validate_endpoint_answers_with_the_apis_error(owner, agent, api_client_for):
    client = _client(owner)
    url = f"/agents/{agent.pk}/versions/validate-condition"
    assert client.get(url, {"expression": "confidence_score >= 0.8 AND tool.name == 'write_back'"}).json() == {
        "valid": True}
    response = client.get(url, {"expression": "true"})
    body = response.json()
    assert response.status_code == 400 and body["valid"] is False
    assert body["error"]["details"] == {"condition": [_api_message("true")]}
    # The API refuses the same condition with the same words.
    api = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/versions/", {
        "goal": "Help.", "instructions": "Be careful.", "action_level": "automated", "tools": ["write_back"],
        "approval_rules": {"auto_approve_conditions": [{"tool": "write_back", "condition": "true"}]}}, format="json")
    assert api.status_code == 400
    assert api.json()["error"]["details"]["approval_rules"]["auto_approve_conditions.0.condition"] == [
        _api_message("true")]
    too_long = client.get(url, {"expression": "a" * 4001})
    assert too_long.status_code == 400 and "condition" in too_long.json()["error"]["details"]


def test_validate_endpoint_needs_the_right_to_edit_the_agent(member, outsider, agent):
    url = f"/agents/{agent.pk}/versions/validate-condition?expression=confidence_score+%3E+1"
    assert _client(member).get(url).status_code == 403
    assert _client(outsider).get(url).status_code == 404
    assert _client(member).post(f"/agents/{agent.pk}/versions/new/", _post(agent, [RULE])).status_code == 403
    assert _client(outsider).post(f"/agents/{agent.pk}/versions/new/", _post(agent, [RULE])).status_code == 404
    assert Client().get(url).status_code == 302


def test_policies_and_versions_share_one_builder_script():
    from pathlib import Path

    static = Path(__file__).resolve().parents[2] / "static"
    for page in ("policies.js", "version_rules.js"):
        text = (static / page).read_text()
        assert "River.conditions" in text or "conditions.builder" in text
        assert "function quote" not in text and "function fill" not in text


def test_a_new_agents_approval_rules_errors_land_on_their_fields(editor):
    response = _client(editor).post("/agents/new/", {
        "name": "Refunds", "business_function": "finance", "goal": "Check.", "instructions": "Look.",
        "action_level": "read_only", "governance_level": "standard", "tools": ["execute_query"],
        "require_approval_for": ["write_back"], "approver_roles": ["admin"], "escalation_timeout_minutes": "60",
        "max_turns": "10", "token_budget": "50000"})
    page = response.content.decode()
    assert response.status_code == 400
    assert re.search(r'id="id_require_approval_for_error">write_back is not among', page)
    assert 'id="id_approver_roles_error"' not in page
