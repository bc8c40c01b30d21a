"""POST /api/v1/generate-agent through the router (the offline planner here)."""

from rivercore.contracts import GenerateAgentResponse

PROMPT = "Create an agent that monitors support tickets every hour and drafts responses for high-priority issues"


def _body(workspace, user):
    return {
        "prompt": PROMPT,
        "user_context": {"user_id": user.pk, "org_id": workspace.organization_id, "workspace_id": workspace.pk,
                         "roles": ["editor"], "permissions": ["agent:create"]},
        "available_data_sources": [{"data_source_id": 1, "name": "Support desk", "type": "sqlite"}],
        "available_tools": ["classify_intent", "execute_query", "write_back", "ask_user"],
    }


def test_editor_gets_a_suggested_configuration(editor, workspace, api_client_for):
    response = api_client_for(editor).post("/api/v1/generate-agent", _body(workspace, editor), format="json")
    assert response.status_code == 200, response.content
    suggestion = GenerateAgentResponse.model_validate(response.json())
    assert suggestion.agent_config.category == "customer_support"
    assert {t.tool_name for t in suggestion.agent_config.suggested_tools} <= {
        "classify_intent", "execute_query", "write_back", "ask_user"}
    assert 0.0 <= suggestion.confidence_score <= 1.0


def test_analyst_may_not_generate_agents(member, workspace, api_client_for):
    response = api_client_for(member).post("/api/v1/generate-agent", _body(workspace, member), format="json")
    assert response.status_code == 403


def test_outsider_gets_404(outsider, workspace, api_client_for):
    response = api_client_for(outsider).post("/api/v1/generate-agent", _body(workspace, outsider), format="json")
    assert response.status_code == 404


def test_missing_prompt_is_a_400_naming_it(editor, workspace, api_client_for):
    body = _body(workspace, editor)
    del body["prompt"]
    response = api_client_for(editor).post("/api/v1/generate-agent", body, format="json")
    assert response.status_code == 400
    assert "prompt" in response.json()["error"]["details"]
