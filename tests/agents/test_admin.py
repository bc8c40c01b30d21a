"""The Django admin of tenancy, agents, executions and triggers."""

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent, AgentVersion
from agents.services import agent_version_create
from governance.models import AuditLogEntry
from tests.agents.conftest import version_body


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser(username="root", password="x", email="root@example.com")
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "model",
    [
        "tenancy/organization",
        "tenancy/organizationmember",
        "tenancy/workspace",
        "tenancy/membership",
        "tenancy/accesstoken",
        "agents/agent",
        "agents/agentversion",
        "agents/agentmemory",
        "executions/execution",
        "executions/executionstep",
        "executions/executionevent",
        "executions/llmprovider",
        "triggers/trigger",
    ],
)
def test_changelist_loads(admin_client, deployed_agent, model):
    assert admin_client.get(f"/admin/{model}/").status_code == 200


def test_version_page_is_read_only(admin_client, deployed_agent):
    version = deployed_agent.current_version
    url = f"/admin/agents/agentversion/{version.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b'name="goal"' not in page.content
    assert admin_client.post(url, {"goal": "Changed"}).status_code == 403
    version.refresh_from_db()
    assert version.goal == "Resolve support tickets."


def _version_form(agent, **overrides):
    form = {
        "agent": str(agent.pk),
        "goal": "Answer questions.",
        "instructions": "Query, then explain.",
        "system_prompt": "",
        "action_level": "read_only",
        "governance_level": "standard",
        "model_config": "{}",
        "tools": '["execute_query", "explain_results"]',
        "approval_rules": "{}",
        "notification_config": "{}",
    }
    form.update(overrides)
    return form


def test_admin_adds_a_version_through_the_service(admin_client, deployed_agent):
    response = admin_client.post("/admin/agents/agentversion/add/", _version_form(deployed_agent))
    assert response.status_code == 302
    assert AgentVersion.objects.get(agent=deployed_agent, version=2).goal == "Answer questions."


def test_admin_refuses_an_unknown_tool(admin_client, agent):
    response = admin_client.post("/admin/agents/agentversion/add/", _version_form(agent, tools='["rm_rf"]'))
    assert response.status_code == 200
    assert b"Unknown tool: rm_rf" in response.content
    assert not AgentVersion.objects.exists()


def test_admin_refuses_approval_for_a_tool_the_version_lacks(admin_client, agent):
    form = _version_form(agent, approval_rules='{"require_approval_for": ["write_back"]}')
    response = admin_client.post("/admin/agents/agentversion/add/", form)
    assert response.status_code == 200
    assert b"require_approval_for: write_back is not among the version" in response.content
    assert not AgentVersion.objects.exists()


def test_admin_lifecycle_action_is_checked_and_audited(admin_client, deployed_agent, agent):
    admin_client.post("/admin/agents/agent/", {"action": "activate", "_selected_action": [str(deployed_agent.pk)]})
    deployed_agent.refresh_from_db()
    assert deployed_agent.status == Agent.Status.ACTIVE
    assert AuditLogEntry.objects.filter(event_type="agent_lifecycle_changed", agent_id=deployed_agent.pk).exists()


def test_admin_action_refuses_illegal_transition(admin_client, agent, owner):
    agent_version_create(agent=agent, actor=owner, **version_body())  # created, not deployed
    admin_client.post("/admin/agents/agent/", {"action": "activate", "_selected_action": [str(agent.pk)]})
    agent.refresh_from_db()
    assert agent.status == Agent.Status.DRAFT


def test_trigger_admin_shows_config_and_validates_it_in_plain_words(admin_client, deployed_agent, owner, workspace):
    from triggers.services import trigger_create

    trigger = trigger_create(actor=owner, workspace=workspace, agent=deployed_agent, name="Mornings",
                             trigger_type="scheduled", prompt="Daily digest",
                             config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})
    url = f"/admin/triggers/trigger/{trigger.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert "0 8 * * 1-5" in html and "Europe/Berlin" in html
    response = admin_client.post(url, {
        "name": "Mornings", "enabled": "on", "prompt": "Daily digest",
        "config": '{"cron": "every morning", "timezone": "Mars/Olympus"}',
        "firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200
    page = response.content.decode()
    assert "Cron: a cron expression has five fields" in page
    assert "Timezone: &#x27;Mars/Olympus&#x27; is not an IANA time zone" in page
    trigger.refresh_from_db()
    assert trigger.config["cron"] == "0 8 * * 1-5"


def test_token_admin_never_shows_the_digest(admin_client, owner):
    from tenancy.services import token_issue

    issued = token_issue(user=owner, name="laptop")
    html = admin_client.get(f"/admin/tenancy/accesstoken/{issued.token.pk}/change/").content.decode()
    assert issued.token.digest not in html
    assert issued.plaintext not in html
    assert "laptop" in html
