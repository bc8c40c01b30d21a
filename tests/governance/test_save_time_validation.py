"""Save-time validation: hostile policy conditions, auto-approve conditions and
numeric settings are a 400 naming the field (API) or a form error (admin), never a
500 and never a half-written row. The grammar itself turns any text into a tree or
an ExpressionError."""

from __future__ import annotations

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.models import AgentVersion
from governance import expressions
from governance.models import Policy
from tests.factories import make_agent

DEEP = 5000
HOSTILE_EXPRESSIONS = {
    "non_ascii_name": "tâble.name == 'x'",
    "non_ascii_digit": "rows > \u0663",
    "superscript": "rows\u00b2 > 1",
    "fullwidth_operator": "rows \uff1e 1",
    "deep_parentheses": "(" * DEEP + "rows > 1" + ")" * DEEP,
    "deep_not": "NOT " * DEEP + "rows > 1",
    "deep_minus": "rows > " + "-" * DEEP + "1",
    "deep_lists": "tool.name IN " + "[" * DEEP + "]" * DEEP,
    "deep_calls": "lower(" * 40 + "tool.name" + ")" * 40 + " == 'a'",
    "huge_integer": "rows > " + "9" * 5000,
    "huge_float": "rows > 1e999",
    "long_chain": " OR ".join(["rows > 1"] * 2000),
    "unknown_name": "secrets.password == 'x'",
    "unknown_function": "eval('1') == 1",
    "nul_outside_string": "rows > 1\x00",
    "nul_in_string": "tool.name == 'a\x00b'",
    "empty": "",
    "only_spaces": "   ",
    "python_syntax": "__import__('os').system('id')",
    "lone_value": "42",
}


@pytest.mark.parametrize("source", HOSTILE_EXPRESSIONS.values(), ids=HOSTILE_EXPRESSIONS.keys())
def test_grammar_refuses_hostile_input_with_a_position(source):
    with pytest.raises(expressions.ExpressionError) as caught:
        expressions.expression_validate(source)
    assert isinstance(caught.value.position, int)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300) | st.text(alphabet="()[]-NOT ornad,'\"0123456789.e", max_size=400))
def test_any_text_parses_or_raises_an_expression_error(source):
    try:
        tree = expressions.expression_validate(source)
    except expressions.ExpressionError:
        return
    try:
        expressions.matches(tree, {"rows": 3, "tool": {"name": "x"}})
    except expressions.ExpressionError:
        pass


def test_a_long_flat_chain_stays_shallow_and_evaluates():
    source = " OR ".join(f"tool.name == 't{i}'" for i in range(150))
    assert expressions.matches(source, {"tool": {"name": "t149"}}) is True
    assert expressions.matches(source, {"tool": {"name": "nope"}}) is False


# --- policies over the API and in the admin --------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("source", HOSTILE_EXPRESSIONS.values(), ids=HOSTILE_EXPRESSIONS.keys())
def test_policy_api_answers_400_naming_conditions(workspace, owner, api_client_for, source):
    body = {"name": "p", "scope": "workspace", "workspace_id": workspace.pk, "enforcement": "block",
            "conditions": {"expression": source}}

    response = api_client_for(owner).post("/api/v1/policies/", body, format="json")

    assert response.status_code == 400, response.content[:300]
    # The field at fault: `conditions`, or a path inside it when the edge's parser refuses
    # the body first (a NUL byte is named where it is, e.g. `conditions.expression`).
    fields = response.json()["error"]["details"]
    assert any(field == "conditions" or field.startswith("conditions.") for field in fields), fields
    assert not Policy.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("conditions", [
    {"rows_gt": 10**40}, {"tool_in": [["nested"]]}, {"tool_in": [{"a": 1}]}, {"tâble": 1}, {"rows_gt": {"x": 1}},
    {}, [], "rows > ", 5, {"expression": 5}, {"expression": "rows > 1", "rows_gt": 2},
])
def test_policy_api_refuses_bad_keyed_conditions(workspace, owner, api_client_for, conditions):
    body = {"name": "p", "scope": "workspace", "workspace_id": workspace.pk, "enforcement": "block",
            "conditions": conditions}

    response = api_client_for(owner).post("/api/v1/policies/", body, format="json")

    assert response.status_code == 400, response.content[:300]
    # The field at fault: `conditions`, or a path inside it when the edge's parser refuses
    # the body first (a NUL byte is named where it is, e.g. `conditions.expression`).
    fields = response.json()["error"]["details"]
    assert any(field == "conditions" or field.startswith("conditions.") for field in fields), fields
    assert not Policy.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("text", [
    '{"expression": "' + "(" * 200 + 'rows > 1' + ")" * 200 + '"}',
    "[" * DEEP + "]" * DEEP,
    '{"expression": "rows > ' + "9" * 5000 + '"}',
    '{"expression": "t\u00e2ble.name == 1"}',
    '{"expression": "rows > 1 \\u0000"}',
])
def test_policy_admin_form_shows_an_error_not_a_500(org, workspace, text):
    from django.contrib.auth import get_user_model

    admin_user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123")
    browser = Client()
    browser.force_login(admin_user)

    response = browser.post("/admin/governance/policy/add/", {
        "organization": org.pk, "workspace": workspace.pk, "scope": "workspace", "name": "p",
        "enforcement": "block", "enabled": "on", "conditions": text, "policy_type": "",
    })

    assert response.status_code == 200  # the form again, with its errors
    assert response.context["adminform"].form.errors.get("conditions")
    assert not Policy.objects.exists()


# --- agent versions: approval rules and numeric settings -------------------------------------


def _version_body(**overrides):
    body = {"goal": "Help.", "instructions": "Be careful.", "action_level": "act_with_approval",
            "tools": ["write_back", "execute_query"]}
    body.update(overrides)
    return body


BAD_RULES = {
    "escalation_zero": ({"escalation_timeout_minutes": 0}, "escalation_timeout_minutes"),
    "escalation_over_30_days": ({"escalation_timeout_minutes": 43201}, "escalation_timeout_minutes"),
    "escalation_huge": ({"escalation_timeout_minutes": 10**30}, "escalation_timeout_minutes"),
    "escalation_boolean": ({"escalation_timeout_minutes": True}, "escalation_timeout_minutes"),
    "escalation_text": ({"escalation_timeout_minutes": "a day"}, "escalation_timeout_minutes"),
    "escalation_negative": ({"escalation_timeout_minutes": -5}, "escalation_timeout_minutes"),
    "auto_true": ({"auto_approve_conditions": [{"tool": "write_back", "condition": "true"}]},
                  "auto_approve_conditions.0.condition"),
    "auto_empty": ({"auto_approve_conditions": [{"tool": "write_back", "condition": ""}]},
                   "auto_approve_conditions"),
    "auto_tautology": ({"auto_approve_conditions": [{"tool": "write_back", "condition": "1 == 1"}]},
                       "auto_approve_conditions.0.condition"),
    "auto_holds_on_nothing": ({"auto_approve_conditions": [
        {"tool": "write_back", "condition": "confidence_score == null"}]}, "auto_approve_conditions.0.condition"),
    "auto_unknown_name": ({"auto_approve_conditions": [{"tool": "write_back", "condition": "user.is_admin"}]},
                          "auto_approve_conditions.0.condition"),
    "auto_policy_name": ({"auto_approve_conditions": [{"tool": "write_back", "condition": "rows < 5"}]},
                         "auto_approve_conditions.0.condition"),
    "auto_non_ascii": ({"auto_approve_conditions": [{"tool": "write_back", "condition": "cönfidence > 1"}]},
                       "auto_approve_conditions.0.condition"),
    "auto_deep": ({"auto_approve_conditions": [
        {"tool": "write_back", "condition": "(" * 300 + "confidence_score > 0.9" + ")" * 300}]},
        "auto_approve_conditions.0.condition"),
    "auto_huge_number": ({"auto_approve_conditions": [
        {"tool": "write_back", "condition": "confidence_score > " + "9" * 400}]},
        "auto_approve_conditions.0.condition"),
    "auto_tool_not_in_version": ({"auto_approve_conditions": [
        {"tool": "delete_data_source", "condition": "confidence_score > 0.9"}]}, "auto_approve_conditions.0.tool"),
    "auto_condition_too_long": ({"auto_approve_conditions": [
        {"tool": "write_back", "condition": "confidence_score > 0.9 AND " * 400 + "true"}]},
        "auto_approve_conditions"),
    "unknown_role": ({"approver_roles": ["superhero"]}, "approver_roles"),
    "require_unknown_tool": ({"require_approval_for": ["delete_data_source"]}, "require_approval_for"),
    "extra_key": ({"approve_everything": True}, "approve_everything"),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("rules", "field"), BAD_RULES.values(), ids=BAD_RULES.keys())
def test_version_api_refuses_bad_approval_rules_naming_the_field(workspace, owner, api_client_for, rules, field):
    agent = make_agent(workspace=workspace, owner=owner)
    before = AgentVersion.objects.count()

    response = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/", _version_body(approval_rules=rules), format="json"
    )

    assert response.status_code == 400, response.content[:300]
    details = response.json()["error"]["details"]
    assert field in str(details)
    assert AgentVersion.objects.count() == before


BAD_MODEL_CONFIG = {
    "max_turns_zero": {"max_turns": 0},
    "max_turns_huge": {"max_turns": 10**20},
    "token_budget_huge": {"token_budget": 10**12},
    "token_budget_boolean": {"token_budget": True},
    "timeout_zero": {"timeout_seconds": 0},
    "timeout_a_year": {"timeout_seconds": 31_536_000},
    "llm_timeout_float": {"llm_timeout_seconds": 1.5},
    "llm_timeout_infinite": {"llm_timeout_seconds": "Infinity"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("config", BAD_MODEL_CONFIG.values(), ids=BAD_MODEL_CONFIG.keys())
def test_version_api_refuses_out_of_range_numbers(workspace, owner, api_client_for, config):
    agent = make_agent(workspace=workspace, owner=owner)
    before = AgentVersion.objects.count()

    response = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/", _version_body(model_config=config), format="json"
    )

    assert response.status_code == 400, response.content[:300]
    assert next(iter(config)) in str(response.json()["error"]["details"]["model_config"])
    assert AgentVersion.objects.count() == before


@pytest.mark.django_db
def test_a_sound_auto_approve_condition_is_accepted(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner)
    rules = {"require_approval_for": ["write_back"], "escalation_timeout_minutes": 43200,
             "auto_approve_conditions": [{"tool": "write_back",
                                          "condition": "confidence_score > 0.95 AND args.table_name == 'notes'"}]}

    response = api_client_for(owner).post(
        f"/api/v1/agents/{agent.pk}/versions/", _version_body(approval_rules=rules), format="json"
    )

    assert response.status_code == 201, response.content[:300]


@pytest.mark.django_db
@pytest.mark.parametrize("rules", [
    '{"escalation_timeout_minutes": 0}',
    '{"auto_approve_conditions": [{"tool": "write_back", "condition": "true"}]}',
    "[" * DEEP + "]" * DEEP,
    '{"escalation_timeout_minutes": ' + "9" * 5000 + "}",
])
def test_version_admin_form_shows_an_error_not_a_500(workspace, owner, rules):
    from django.contrib.auth import get_user_model

    agent = make_agent(workspace=workspace, owner=owner)
    before = AgentVersion.objects.count()
    admin_user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123")
    browser = Client()
    browser.force_login(admin_user)

    response = browser.post("/admin/agents/agentversion/add/", {
        "agent": str(agent.pk), "goal": "g", "instructions": "i", "action_level": "act_with_approval",
        "governance_level": "standard", "model_config": "{}", "tools": '["write_back"]',
        "approval_rules": rules, "notification_config": "{}",
    })

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors
    assert AgentVersion.objects.count() == before


_json_leaf = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
              | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
_rules = st.fixed_dictionaries({}, optional={
    "require_approval_for": _json | st.lists(st.sampled_from(["write_back", "execute_query", "x"]), max_size=3),
    "auto_approve_conditions": _json | st.lists(st.fixed_dictionaries(
        {"tool": st.sampled_from(["write_back", "execute_query", ""]), "condition": st.text(max_size=60)}),
        max_size=2),
    "approver_roles": _json | st.lists(st.sampled_from(["admin", "editor", "root"]), max_size=2),
    "escalation_timeout_minutes": _json,
})
_model_config = st.fixed_dictionaries({}, optional={
    name: _json for name in ("max_turns", "token_budget", "timeout_seconds", "llm_timeout_seconds",
                             "preferred_tier")})


@pytest.mark.django_db
def test_version_api_never_fails_with_a_server_error_on_any_json(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner)
    client = api_client_for(owner)
    url = f"/api/v1/agents/{agent.pk}/versions/"

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(rules=_rules | _json, model_config=_model_config | _json)
    def post(rules, model_config):
        before = AgentVersion.objects.count()
        response = client.post(url, _version_body(approval_rules=rules, model_config=model_config), format="json")
        assert response.status_code in (201, 400), response.content[:300]
        if response.status_code == 400:
            assert response.json()["error"]["details"]
            assert AgentVersion.objects.count() == before

    post()


@pytest.mark.django_db
def test_policy_api_never_fails_with_a_server_error_on_any_conditions(workspace, owner, api_client_for):
    client = api_client_for(owner)
    grammar_soup = st.text(alphabet="()[]-,'\" .<>=!0123456789eE_abcdnortwxyzINOTAND", max_size=120)

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(conditions=_json | st.fixed_dictionaries({"expression": grammar_soup | st.text(max_size=80)}),
           policy_type=st.none() | st.sampled_from(["content", "data_export_limit", "nope"]))
    def post(conditions, policy_type):
        before = Policy.objects.count()
        body = {"name": "p", "scope": "workspace", "workspace_id": workspace.pk, "enforcement": "block",
                "conditions": conditions, "policy_type": policy_type}
        response = client.post("/api/v1/policies/", body, format="json")
        assert response.status_code in (201, 400), response.content[:300]
        if response.status_code == 400:
            assert Policy.objects.count() == before

    post()
