"""Generating an agent configuration through the router."""

from __future__ import annotations

import json
import uuid

import pytest

from executions.routing import router_build
from rivercore.contracts import GenerateAgentRequest, GenerateAgentResponse
from rivercore.generate import GenerationFailed, agent_generate
from rivercore.router import ProviderConfig, offline_provider
from rivercore.types.agents import Tier

USER = {"user_id": 4421, "org_id": 12, "workspace_id": 37, "roles": ["org_editor"],
        "permissions": ["agent:create", "data_source:view"]}
SPEC_EXAMPLE = {
    "prompt": "Create an agent that monitors Zendesk tickets and drafts responses for high-priority issues",
    "user_context": USER,
    "available_data_sources": [
        {"data_source_id": 14, "name": "Zendesk Production", "type": "zendesk",
         "description": "Primary customer support desk"}],
    "available_tools": ["classify_intent", "execute_query", "write_back", "ask_user"],
    "workspace_templates": [],
}


def generate(payload: dict, llm=None) -> GenerateAgentResponse:
    request = GenerateAgentRequest.model_validate(payload)
    response = agent_generate(request=request, llm=llm or router_build([offline_provider()]))
    # The wire shape validates on its own, as the endpoint will return it.
    return GenerateAgentResponse.model_validate(json.loads(response.model_dump_json()))


def test_the_specs_example_gets_a_sensible_configuration():
    response = generate(SPEC_EXAMPLE)
    config = response.agent_config
    assert config.category == "customer_support"
    assert config.action_level == "act_with_approval"  # it drafts responses
    assert [(t.trigger_type, t.trigger_config) for t in config.suggested_triggers] == [
        ("scheduled", {"cron": "*/15 * * * *"})]  # it monitors
    assert [(s.data_source_id, s.access_level) for s in config.suggested_data_sources] == [(14, "read_write")]
    tools = [t.tool_name for t in config.suggested_tools]
    assert set(tools) <= set(SPEC_EXAMPLE["available_tools"])
    assert {"classify_intent", "execute_query", "write_back"} <= set(tools)
    assert [(p.conditions, p.enforcement) for p in config.suggested_policies] == [
        ({"tool": "write_back"}, "require_approval")]
    assert any(w.startswith("Write access") for w in response.warnings)
    assert "Zendesk" in config.name
    assert 0.5 <= response.confidence_score <= 0.9
    assert "offline planner" in response.reasoning


def test_a_daily_report_is_read_only_and_scheduled_daily():
    response = generate({
        "prompt": "Build an agent that reports failed charges by status every day for the finance team",
        "user_context": USER,
        "available_data_sources": [
            {"data_source_id": 3, "name": "Billing Warehouse", "type": "postgresql"},
            {"data_source_id": 4, "name": "Zendesk Production", "type": "zendesk"}],
        "available_tools": ["classify_intent", "generate_query", "execute_query", "explain_results",
                            "recommend_visualization", "write_back"],
    })
    config = response.agent_config
    assert config.category == "finance"
    assert config.action_level == "read_only"
    assert config.suggested_triggers[0].trigger_config == {"cron": "0 8 * * *"}
    assert "write_back" not in [t.tool_name for t in config.suggested_tools]
    assert config.suggested_policies == []
    # Neither source is named, and there is more than one: nothing is guessed.
    assert config.suggested_data_sources == []
    assert any("names no available data source" in w for w in response.warnings)


def test_a_recommending_agent_gets_the_recommend_level():
    response = generate({**SPEC_EXAMPLE, "prompt": "An assistant that suggests which sales leads to call next"})
    assert response.agent_config.action_level == "recommend"
    assert response.agent_config.category == "sales"


def test_a_models_suggestions_are_kept_within_the_workspace(fake_openai):
    server = fake_openai()
    suggestion = {
        "agent_config": {
            "name": "Ticket Agent", "description": "d", "category": "customer_support", "goal": "g",
            "instructions": "i", "action_level": "act_with_approval",
            "suggested_data_sources": [
                {"data_source_id": 14, "name": "Zendesk Production", "access_level": "read_write", "reasoning": "r"},
                {"data_source_id": 99, "name": "Someone else's DB", "access_level": "read_only", "reasoning": "r"}],
            "suggested_tools": [{"tool_name": "write_back", "reasoning": "r"},
                                {"tool_name": "delete_data_source", "reasoning": "r"}],
        },
        "reasoning": "because", "confidence_score": 0.8, "warnings": [],
    }
    server.text("```json\n" + json.dumps(suggestion) + "\n```")
    llm = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.REASONING: "openai/m"},
                                 base_url=server.base_url)])
    response = generate(SPEC_EXAMPLE, llm=llm)
    assert [t.tool_name for t in response.agent_config.suggested_tools] == ["write_back"]
    assert [s.data_source_id for s in response.agent_config.suggested_data_sources] == [14]
    assert response.warnings == ["Left out tools this workspace cannot use: delete_data_source.",
                                 "Left out data sources this workspace does not have: Someone else's DB."]
    sent = server.requests[0]["messages"]
    assert sent[0]["content"].startswith("RIVER-TOOL-TASK generate_agent")
    assert json.loads(sent[1]["content"])["available_tools"] == SPEC_EXAMPLE["available_tools"]
    assert "user_context" not in json.loads(sent[1]["content"])


def test_an_invalid_model_reply_is_a_generation_failure(fake_openai):
    server = fake_openai()
    server.text('{"agent_config": {"name": "x"}, "reasoning": "r", "confidence_score": 3}')
    llm = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "openai/m"},
                                 base_url=server.base_url)])
    with pytest.raises(GenerationFailed) as caught:
        generate(SPEC_EXAMPLE, llm=llm)
    assert caught.value.status_code == 502
    assert "confidence_score" in caught.value.details["fields"]


def test_no_reachable_model_is_a_generation_failure(fake_openai):
    server = fake_openai()
    server.always("error", 503)
    llm = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "openai/m"},
                                 base_url=server.base_url, max_retries=0)])
    with pytest.raises(GenerationFailed):
        generate(SPEC_EXAMPLE, llm=llm)
