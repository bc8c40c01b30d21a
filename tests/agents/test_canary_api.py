"""The canary's API: start, read, stop, promote; who may; what is refused and why."""

from __future__ import annotations

import pytest

from agents.models import Agent, AgentCanary
from agents.services import agent_version_create
from governance.models import AuditLogEntry
from tests.agents.conftest import version_body


@pytest.fixture
def two_versions(deployed_agent, owner):
    """An active agent with v1 deployed and v2 saved beside it."""
    agent_version_create(agent=deployed_agent, actor=owner, **version_body(goal="Resolve tickets faster."))
    Agent.objects.filter(pk=deployed_agent.pk).update(status=Agent.Status.ACTIVE)
    deployed_agent.refresh_from_db()
    return deployed_agent


def _url(agent, version=2, tail=""):
    return f"/api/v1/agents/{agent.pk}/versions/{version}/canary{tail}"


def test_start_read_and_promote(two_versions, owner, api_client_for):
    client = api_client_for(owner)
    started = client.post(_url(two_versions), {"percent": 10, "margin": 0.2, "min_runs": 5}, format="json")
    assert started.status_code == 201, started.content
    body = started.json()
    assert (body["version"], body["base_version"], body["percent"], body["status"]) == (2, 1, 10, "running")
    assert (body["margin"], body["min_runs"]) == (0.2, 5)
    assert body["figures"]["verdict"] == "too_few_runs"
    assert body["figures"]["canary"]["runs"] == 0 and body["run_ids"] == {"canary": [], "current": []}
    two_versions.refresh_from_db()
    assert two_versions.canary_id == body["id"]
    entry = AuditLogEntry.objects.get(event_type="canary_started")
    assert entry.details["percent"] == 10 and entry.details["version"] == 2 and entry.actor_id == owner.pk

    assert client.get(f"/api/v1/agents/{two_versions.pk}/canary").json()["id"] == body["id"]

    promoted = client.post(_url(two_versions, tail="/promote"), format="json")
    assert promoted.status_code == 200, promoted.content
    assert promoted.json()["status"] == "promoted"
    two_versions.refresh_from_db()
    assert two_versions.current_version.version == 2 and two_versions.canary_id is None
    audit = AuditLogEntry.objects.get(event_type="canary_promoted")
    assert audit.details["figures"]["status"] == "promoted" and audit.actor_id == owner.pk
    assert AuditLogEntry.objects.filter(event_type="agent_version_deployed", details__version=2).count() == 1
    # Promoted once: a second promotion has no running canary to promote.
    assert client.post(_url(two_versions, tail="/promote"), format="json").status_code == 404


def test_stop_ends_it_and_keeps_the_deployed_version(two_versions, owner, api_client_for):
    client = api_client_for(owner)
    assert client.post(_url(two_versions), {"percent": 50}, format="json").status_code == 201
    stopped = client.delete(_url(two_versions))
    assert stopped.status_code == 200, stopped.content
    assert stopped.json()["status"] == "stopped" and stopped.json()["ended_by"] == "owner"
    two_versions.refresh_from_db()
    assert two_versions.current_version.version == 1 and two_versions.canary_id is None
    assert AuditLogEntry.objects.filter(event_type="canary_stopped").count() == 1
    assert client.delete(_url(two_versions)).status_code == 404


def test_one_canary_at_a_time_and_no_deploy_meanwhile(two_versions, owner, api_client_for):
    client = api_client_for(owner)
    assert client.post(_url(two_versions), {"percent": 10}, format="json").status_code == 201
    again = client.post(_url(two_versions), {"percent": 20}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "canary_running"
    deploy = client.post(f"/api/v1/agents/{two_versions.pk}/versions/2/deploy", format="json")
    assert deploy.status_code == 409 and deploy.json()["error"]["code"] == "canary_running"
    assert AgentCanary.objects.filter(status="running").count() == 1


def test_the_deployed_version_is_no_canary(two_versions, owner, api_client_for):
    response = api_client_for(owner).post(_url(two_versions, version=1), {"percent": 10}, format="json")
    assert response.status_code == 400
    assert "version" in response.json()["error"]["details"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "percent"),
        ({"percent": 0}, "percent"),
        ({"percent": 51}, "percent"),
        ({"percent": "ten"}, "percent"),
        ({"percent": [10]}, "percent"),
        ({"percent": 10, "margin": 1.5}, "margin"),
        ({"percent": 10, "margin": "<b>x</b>"}, "margin"),
        ({"percent": 10, "min_runs": 0}, "min_runs"),
        ({"percent": 10, "min_runs": 10**12}, "min_runs"),
        ({"percent": 10, "seed": 4}, "seed"),
        ({"percent": 10, "note\x00": 1}, "note\\u0000"),  # the edge names a NUL in a key escaped
    ],
)
def test_bad_input_is_a_400_naming_the_field(two_versions, owner, api_client_for, body, field):
    response = api_client_for(owner).post(_url(two_versions), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not AgentCanary.objects.exists()


def test_an_outsider_gets_404_and_a_member_403(two_versions, owner, outsider, member, api_client_for):
    for user, expected in ((outsider, 404), (member, 403)):
        client = api_client_for(user)
        assert client.post(_url(two_versions), {"percent": 10}, format="json").status_code == expected
    assert not AgentCanary.objects.exists()
    assert api_client_for(owner).post(_url(two_versions), {"percent": 10}, format="json").status_code == 201
    outsider_client, member_client = api_client_for(outsider), api_client_for(member)
    assert outsider_client.get(f"/api/v1/agents/{two_versions.pk}/canary").status_code == 404
    assert outsider_client.get(_url(two_versions)).status_code == 404
    assert outsider_client.delete(_url(two_versions)).status_code == 404
    assert outsider_client.post(_url(two_versions, tail="/promote")).status_code == 404
    assert member_client.get(f"/api/v1/agents/{two_versions.pk}/canary").status_code == 200  # members read
    assert member_client.delete(_url(two_versions)).status_code == 403
    assert member_client.post(_url(two_versions, tail="/promote")).status_code == 403
    assert AgentCanary.objects.get().status == "running"


def test_unknown_version_and_no_canary_are_404(two_versions, owner, api_client_for):
    client = api_client_for(owner)
    assert client.post(_url(two_versions, version=9), {"percent": 10}, format="json").status_code == 404
    assert client.post(_url(two_versions, version="x"), {"percent": 10}, format="json").status_code == 404
    assert client.get(f"/api/v1/agents/{two_versions.pk}/canary").status_code == 404


def test_an_approval_version_needs_a_channel_on_an_active_agent(
    two_versions, owner, api_client_for, no_approval_channels
):
    agent_version_create(
        agent=two_versions,
        actor=owner,
        **version_body(
            action_level="act_with_approval",
            tools=["write_back"],
            approval_rules={"require_approval_for": ["write_back"], "approver_roles": ["admin"]},
        ),
    )
    response = api_client_for(owner).post(_url(two_versions, version=3), {"percent": 10}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "no_approval_channel"


def test_promotion_follows_the_deploy_rules(two_versions, owner):
    """Promotion is a deploy: what a deploy refuses, a promotion refuses, and the canary
    keeps running."""
    from agents.canary import agent_canary_promote, agent_canary_start

    canary = agent_canary_start(
        agent=two_versions, version=two_versions.versions.get(version=2), actor=owner, percent=10
    )
    Agent.objects.filter(pk=two_versions.pk).update(status=Agent.Status.ARCHIVED)
    with pytest.raises(Exception) as refused:
        agent_canary_promote(canary=canary, actor=owner)
    assert getattr(refused.value, "code", "") == "agent_archived"
    canary.refresh_from_db()
    assert canary.status == "running"


def test_the_promotion_gate_refuses_a_promotion_unless_an_admin_overrides(two_versions, owner, api_client_for):
    """Promotion deploys through the deploy service, so a gate with no finished evaluation of
    v2 refuses it (the canary keeps running); an admin's reason lets it through, audited."""
    from agents.evaluation_models import PromotionGate

    PromotionGate.objects.create(workspace=two_versions.workspace, min_rejections="0.9")
    client = api_client_for(owner)
    assert client.post(_url(two_versions), {"percent": 10}, format="json").status_code == 201
    refused = client.post(_url(two_versions, tail="/promote"), format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "promotion_gate"
    two_versions.refresh_from_db()
    assert two_versions.current_version.version == 1 and two_versions.canary_id is not None
    assert not AuditLogEntry.objects.filter(event_type="canary_promoted").exists()

    promoted = client.post(_url(two_versions, tail="/promote"), {"override_reason": "Reviewed by hand."},
                           format="json")
    assert promoted.status_code == 200, promoted.content
    two_versions.refresh_from_db()
    assert two_versions.current_version.version == 2 and two_versions.canary_id is None
    override = AuditLogEntry.objects.get(event_type="version_deploy_override")
    assert override.details["reason"] == "Reviewed by hand." and override.actor_id == owner.pk
