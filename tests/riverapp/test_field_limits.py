"""Every string the API accepts has a length limit, documented in the schema and enforced."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from agents.models import Agent
from rivercore import limits
from tenancy.models import OrganizationMember
from tests.factories import make_agent

UNBOUNDED_FORMATS = {"date-time", "date", "uuid"}


def _unbounded_strings(node, where: str, components: dict, seen: set, found: list) -> None:
    if isinstance(node, list):
        for item in node:
            _unbounded_strings(item, where, components, seen, found)
        return
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            seen.add(name)
            _unbounded_strings(components[name], name, components, seen, found)
        return
    if (
        node.get("type") == "string" and "enum" not in node and not node.get("readOnly")
        and node.get("format") not in UNBOUNDED_FORMATS and "maxLength" not in node
    ):
        found.append(where)
    for key, value in node.items():
        if key == "properties":
            for name, child in value.items():
                _unbounded_strings(child, f"{where}.{name}", components, seen, found)
        elif key != "enum":
            _unbounded_strings(value, where, components, seen, found)


def test_every_string_in_every_request_body_and_query_has_a_documented_max_length(db):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    found: list[str] = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                _unbounded_strings(body, f"{method.upper()} {path}", components, set(), found)
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    _unbounded_strings(parameter["schema"], f"{method.upper()} {path} ?{parameter['name']}",
                                       components, set(), found)
    assert found == []


@pytest.fixture
def client(owner, org, api_client_for):
    OrganizationMember.objects.create(organization=org, user=owner, role=OrganizationMember.OrgRole.ADMIN)
    return api_client_for(owner)


def _cases(workspace, org, agent):
    agent_body = {"workspace": workspace.pk, "name": "A", "business_function": "customer_support"}
    version_body = {"goal": "g", "instructions": "i", "action_level": "read_only"}
    source_body = {"workspace": workspace.pk, "name": "S", "type": "sqlite", "connection_config": {"path": "x.db"}}
    policy_body = {"name": "P", "scope": "workspace", "workspace_id": workspace.pk,
                   "conditions": {"expression": "cost.tokens > 5"}, "enforcement": "block"}
    return [
        ("/api/v1/agents/", agent_body, "name", limits.NAME),
        ("/api/v1/agents/", agent_body, "description", limits.DESCRIPTION),
        ("/api/v1/agents/", agent_body, "domain", limits.NAME),
        (f"/api/v1/agents/{agent.pk}/versions/", version_body, "goal", limits.GOAL),
        (f"/api/v1/agents/{agent.pk}/versions/", version_body, "instructions", limits.PROMPT),
        (f"/api/v1/agents/{agent.pk}/versions/", version_body, "system_prompt", limits.PROMPT),
        ("/api/v1/data-sources/", source_body, "name", limits.NAME),
        ("/api/v1/data-sources/", source_body, "description", limits.DESCRIPTION),
        ("/api/v1/policies/", policy_body, "name", limits.NAME),
        ("/api/v1/policies/", policy_body, "description", limits.DESCRIPTION),
        ("/api/v1/tokens/", {}, "name", 100),
        ("/api/v1/llm-providers/", {"organization": org.pk, "provider_name": "p"}, "api_key", limits.SECRET),
        (f"/api/v1/agents/{agent.pk}/run", {}, "input_prompt", limits.PROMPT),
    ]


CASE_IDS = ["agent.name", "agent.description", "agent.domain", "version.goal", "version.instructions",
            "version.system_prompt", "source.name", "source.description", "policy.name", "policy.description",
            "token.name", "provider.api_key", "run.input_prompt"]


@pytest.mark.django_db
@pytest.mark.parametrize("index", range(len(CASE_IDS)), ids=CASE_IDS)
def test_one_character_over_the_limit_is_a_400_naming_the_field_and_writes_nothing(
    client, owner, workspace, org, index
):
    agent = make_agent(workspace=workspace, owner=owner)
    url, body, field, limit = _cases(workspace, org, agent)[index]
    before = Agent.objects.count()
    response = client.post(url, {**body, field: "x" * (limit + 1)}, format="json")
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["error"]["details"]
    assert Agent.objects.count() == before

    at_limit = client.post(url, {**body, field: "x" * limit}, format="json")
    assert field not in (at_limit.json().get("error") or {}).get("details", {}), at_limit.content[:300]


@pytest.mark.django_db
def test_tool_lists_and_approval_rules_are_bounded_too(client, owner, workspace):
    agent = make_agent(workspace=workspace, owner=owner)
    url = f"/api/v1/agents/{agent.pk}/versions/"
    body = {"goal": "g", "instructions": "i", "action_level": "read_only"}
    too_many = client.post(url, {**body, "tools": ["query_data"] * (limits.LIST_ITEMS + 1)}, format="json")
    assert too_many.status_code == 400 and "tools" in too_many.json()["error"]["details"]
    long_role = client.post(
        url, {**body, "approval_rules": {"approver_roles": ["r" * (limits.IDENTIFIER + 1)]}}, format="json"
    )
    assert long_role.status_code == 400 and "approval_rules" in long_role.json()["error"]["details"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", [123, 1.5, True, ["a"], {"a": 1}])
def test_a_string_field_given_another_type_is_a_400_naming_it(client, value):
    response = client.post("/api/v1/tokens/", {"name": value}, format="json")
    assert response.status_code == 400
    assert "name" in response.json()["error"]["details"]


@pytest.mark.django_db
def test_an_unknown_key_in_a_token_request_is_a_400_naming_it(client):
    response = client.post("/api/v1/tokens/", {"name": "ci", "scope": "all"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"scope": ["Unknown or read-only field."]}


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "limit"), [("priority", limits.PROVIDER_PRIORITY),
                                              ("rate_limit_rpm", limits.RATE_LIMIT_RPM)])
def test_provider_numbers_beyond_their_limit_are_a_400_not_a_database_error(client, org, field, limit):
    created = client.post("/api/v1/llm-providers/", {"organization": org.pk, "provider_name": "p"}, format="json")
    url = f"/api/v1/llm-providers/{created.json()['id']}/"
    for value in (limit + 1, 9_999_999_999_999_999):
        response = client.patch(url, {field: value}, format="json")
        assert response.status_code == 400
        assert field in response.json()["error"]["details"]
    assert client.patch(url, {field: limit}, format="json").status_code == 200
