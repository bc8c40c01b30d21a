"""Agent lifecycle: legal and illegal moves, activation preconditions, audit trail."""

import pytest

from agents.models import Agent
from agents.services import agent_transition, agent_version_create, agent_version_deploy
from governance.models import AuditLogEntry, WorkspaceSettings
from rivercore.errors import InvalidInput
from tests.agents.conftest import version_body


def _lifecycle(client, agent, action):
    return client.post(f"/api/v1/agents/{agent.pk}/{action}")


def test_draft_agent_activates_pauses_resumes_and_archives(api_client_for, editor, deployed_agent):
    client = api_client_for(editor)
    steps = [("activate", "active"), ("pause", "paused"), ("activate", "active"), ("archive", "archived")]
    for action, status in steps:
        response = _lifecycle(client, deployed_agent, action)
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == status
    deployed_agent.refresh_from_db()
    assert deployed_agent.status == Agent.Status.ARCHIVED


def test_each_lifecycle_change_is_audited(api_client_for, editor, deployed_agent):
    client = api_client_for(editor)
    _lifecycle(client, deployed_agent, "activate")
    _lifecycle(client, deployed_agent, "pause")
    entries = AuditLogEntry.objects.filter(event_type="agent_lifecycle_changed", agent_id=deployed_agent.pk)
    assert [(e.details["from"], e.details["to"]) for e in entries.order_by("seq", "id")] == [
        ("draft", "active"),
        ("active", "paused"),
    ]
    assert {e.actor for e in entries} == {editor}
    assert {e.workspace_id for e in entries} == {deployed_agent.workspace_id}


def test_archived_agent_cannot_be_reactivated(api_client_for, owner, deployed_agent):
    client = api_client_for(owner)
    assert _lifecycle(client, deployed_agent, "archive").status_code == 200
    response = _lifecycle(client, deployed_agent, "activate")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_transition"
    assert error["details"] == {"from": "archived", "to": "active"}
    deployed_agent.refresh_from_db()
    assert deployed_agent.status == Agent.Status.ARCHIVED


def test_draft_agent_cannot_be_paused(api_client_for, owner, deployed_agent):
    response = _lifecycle(api_client_for(owner), deployed_agent, "pause")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"from": "draft", "to": "paused"}


def test_refused_transition_writes_no_audit_entry(api_client_for, owner, deployed_agent):
    _lifecycle(api_client_for(owner), deployed_agent, "pause")
    assert not AuditLogEntry.objects.filter(event_type="agent_lifecycle_changed").exists()


def test_activation_needs_a_deployed_version(api_client_for, owner, agent):
    response = _lifecycle(api_client_for(owner), agent, "activate")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "no_deployed_version"
    agent.refresh_from_db()
    assert agent.status == Agent.Status.DRAFT


def _approval_version(agent, owner):
    version = agent_version_create(
        agent=agent,
        actor=owner,
        **version_body(
            action_level="act_with_approval",
            tools=["execute_query", "write_back"],
            approval_rules={"require_approval_for": ["write_back"]},
        ),
    )
    return agent_version_deploy(agent=agent, version=version, actor=owner)


def test_act_with_approval_needs_an_approval_channel(api_client_for, owner, agent, no_approval_channels):
    _approval_version(agent, owner)
    response = _lifecycle(api_client_for(owner), agent, "activate")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "no_approval_channel"
    agent.refresh_from_db()
    assert agent.status == Agent.Status.DRAFT


def test_act_with_approval_activates_once_a_channel_is_on(api_client_for, owner, agent, no_approval_channels):
    _approval_version(agent, owner)
    no_approval_channels.approval_notification_config = {
        "in_app": {"enabled": False},
        "email": {"enabled": True, "recipients": ["approvers@example.com"]},
        "slack": {"enabled": False},
    }
    no_approval_channels.save()
    response = _lifecycle(api_client_for(owner), agent, "activate")
    assert response.status_code == 200
    assert response.json()["status"] == "active"


def test_read_only_agent_activates_without_approval_channels(
    api_client_for, owner, deployed_agent, no_approval_channels
):
    assert _lifecycle(api_client_for(owner), deployed_agent, "activate").status_code == 200


def test_active_agent_cannot_switch_to_approval_version_without_a_channel(owner, deployed_agent, workspace):
    WorkspaceSettings.objects.create(
        workspace=workspace,
        approval_notification_config={"in_app": {"enabled": False}},
    )
    agent_transition(agent=deployed_agent, target=Agent.Status.ACTIVE, actor=owner)
    with pytest.raises(InvalidInput) as refused:
        _approval_version(deployed_agent, owner)
    assert refused.value.code == "no_approval_channel"
    deployed_agent.refresh_from_db()
    assert deployed_agent.current_version.version == 1


def test_analyst_cannot_change_the_lifecycle(api_client_for, member, deployed_agent):
    assert _lifecycle(api_client_for(member), deployed_agent, "activate").status_code == 403
    deployed_agent.refresh_from_db()
    assert deployed_agent.status == Agent.Status.DRAFT


@pytest.mark.parametrize("action", ["activate", "pause", "archive"])
def test_outsider_gets_404_on_lifecycle(api_client_for, outsider, deployed_agent, action):
    assert _lifecycle(api_client_for(outsider), deployed_agent, action).status_code == 404
    deployed_agent.refresh_from_db()
    assert deployed_agent.status == Agent.Status.DRAFT


def test_archived_agent_takes_no_new_versions(api_client_for, owner, deployed_agent):
    agent_transition(agent=deployed_agent, target=Agent.Status.ARCHIVED, actor=owner)
    response = api_client_for(owner).post(
        f"/api/v1/agents/{deployed_agent.pk}/versions/", version_body(), format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "agent_archived"


@pytest.mark.parametrize(
    "source,target,legal",
    [
        ("draft", "active", True),
        ("draft", "archived", True),
        ("draft", "paused", False),
        ("active", "paused", True),
        ("active", "archived", True),
        ("active", "draft", False),
        ("paused", "active", True),
        ("paused", "archived", True),
        ("archived", "active", False),
        ("archived", "paused", False),
        ("archived", "draft", False),
    ],
)
def test_transition_table(owner, deployed_agent, source, target, legal):
    Agent.objects.filter(pk=deployed_agent.pk).update(status=source)
    if legal:
        assert agent_transition(agent=deployed_agent, target=target, actor=owner).status == target
    else:
        with pytest.raises(InvalidInput) as refused:
            agent_transition(agent=deployed_agent, target=target, actor=owner)
        assert refused.value.code == "invalid_transition"
        deployed_agent.refresh_from_db()
        assert deployed_agent.status == source
