"""/api/v1/triggers/: create, read, edit, enable/disable, delete, firings; validation
errors name the field's path; editors manage, viewers read, outsiders get 404."""

import pytest

from tenancy.models import Membership, ServicePrincipal
from tests.factories import make_agent
from triggers.models import Trigger, TriggerFiring
from triggers.services import trigger_fire

pytestmark = pytest.mark.django_db


def body(workspace, agent, **overrides):
    data = {"workspace": workspace.pk, "agent": str(agent.pk), "name": "Mornings", "type": "schedule",
            "prompt": "Daily digest for {{ payload.team }}",
            "config": {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"}}
    data.update(overrides)
    return data


def test_editor_creates_a_schedule_trigger_with_a_service_identity(api_client_for, editor, workspace, active_agent):
    response = api_client_for(editor).post("/api/v1/triggers/", body(workspace, active_agent, run_as_role="editor"))
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["type"] == "schedule"
    assert data["config"] == {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"}
    trigger = Trigger.objects.get(pk=data["id"])
    assert trigger.type == "scheduled"  # stored under the engine contract's name
    assert trigger.created_by == editor
    principal = trigger.run_as
    assert data["run_as"] == {"user": principal.user_id, "username": principal.user.username, "role": "editor",
                              "responsible": editor.pk}
    assert principal.user.username.startswith("trigger-") and not principal.user.has_usable_password()
    assert Membership.objects.get(user=principal.user, workspace=workspace).role == "editor"


def test_run_as_role_defaults_to_analyst(api_client_for, owner, workspace, active_agent):
    response = api_client_for(owner).post("/api/v1/triggers/", body(workspace, active_agent))
    assert response.status_code == 201
    assert response.json()["run_as"]["role"] == "analyst"


def test_run_as_role_may_not_exceed_the_creators(api_client_for, editor, workspace, active_agent):
    response = api_client_for(editor).post("/api/v1/triggers/", body(workspace, active_agent, run_as_role="admin"))
    assert response.status_code == 403
    assert "run_as_role" in response.json()["error"]["details"]
    assert not Trigger.objects.exists() and not ServicePrincipal.objects.exists()


def test_raising_the_role_later_is_held_to_the_same_ceiling(api_client_for, editor, owner, workspace, active_agent):
    created = api_client_for(owner).post("/api/v1/triggers/", body(workspace, active_agent, run_as_role="admin"))
    assert created.status_code == 201
    trigger_id = created.json()["id"]
    refused = api_client_for(editor).patch(f"/api/v1/triggers/{trigger_id}/", {"run_as_role": "admin"})
    assert refused.status_code == 403 and "run_as_role" in refused.json()["error"]["details"]
    lowered = api_client_for(editor).patch(f"/api/v1/triggers/{trigger_id}/", {"run_as_role": "viewer"})
    assert lowered.status_code == 200 and lowered.json()["run_as"]["role"] == "viewer"


@pytest.mark.parametrize(("type_", "config", "path"), [
    ("schedule", {"cron": "61 * * * *", "timezone": "UTC"}, "config.cron"),
    ("schedule", {"cron": "* * * * * *", "timezone": "UTC"}, "config.cron"),
    ("schedule", {"cron": "0 8 * * *", "timezone": "Mars/Olympus"}, "config.timezone"),
    ("schedule", {"timezone": "UTC"}, "config.cron"),
    ("event", {"endpoint": "zendesk", "event_type": "ticket.created", "condition": "payload.priority =="},
     "config.condition"),
    ("event", {"endpoint": "zendesk", "event_type": "ticket.created", "condition": "tool.name == 'x'"},
     "config.condition"),
    ("event", {"endpoint": "Bad Slug!", "event_type": "ticket.created"}, "config.endpoint"),
    ("api", {"input_schema": {"type": "banana"}}, "config.input_schema"),
    ("api", {"input_schema": {"$ref": "https://example.com/schema.json"}}, "config.input_schema"),
    ("api", {"rate_limit_per_minute": 0}, "config.rate_limit_per_minute"),
    ("threshold", {"expression": "cpu_percent > 90"}, "config.expression"),
    ("threshold", {"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": -1}, "config.cooldown_seconds"),
    ("workflow", {"upstream_agent": "not-a-uuid"}, "config.upstream_agent"),
    ("workflow", {"upstream_agent": "00000000-0000-0000-0000-000000000001", "on_statuses": ["running"]},
     "config.on_statuses"),
    ("manual", {"surprise": 1}, "config.surprise"),
])
def test_bad_config_is_a_400_naming_the_path(api_client_for, owner, workspace, active_agent, type_, config, path):
    response = api_client_for(owner).post("/api/v1/triggers/", body(workspace, active_agent, type=type_,
                                                                      config=config))
    assert response.status_code == 400, response.json()
    assert path in response.json()["error"]["details"], response.json()
    assert not Trigger.objects.exists()


def test_workflow_upstream_must_be_another_agent_of_the_workspace(api_client_for, owner, outsider, workspace,
                                                                  other_workspace, active_agent):
    client = api_client_for(owner)
    itself = client.post("/api/v1/triggers/", body(workspace, active_agent, type="workflow",
                                                   config={"upstream_agent": str(active_agent.pk)}))
    assert itself.status_code == 400 and "config.upstream_agent" in itself.json()["error"]["details"]
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Theirs")
    foreign = client.post("/api/v1/triggers/", body(workspace, active_agent, type="workflow",
                                                    config={"upstream_agent": str(theirs.pk)}))
    assert foreign.status_code == 400 and "config.upstream_agent" in foreign.json()["error"]["details"]
    upstream = make_agent(workspace=workspace, owner=owner, name="Stage 1")
    ok = client.post("/api/v1/triggers/", body(workspace, active_agent, type="workflow",
                                               config={"upstream_agent": str(upstream.pk)}))
    assert ok.status_code == 201, ok.json()
    assert ok.json()["config"] == {"upstream_agent": str(upstream.pk), "on_statuses": ["completed"],
                                   "on_outcomes": None}


def test_all_six_types_are_accepted(api_client_for, owner, workspace, active_agent, zendesk):
    upstream = make_agent(workspace=workspace, owner=owner, name="Upstream")
    configs = {
        "manual": {},
        "schedule": {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"},
        "event": {"endpoint": "zendesk", "event_type": "ticket.created", "condition": "payload.priority == 'high'"},
        "api": {"input_schema": {"type": "object", "required": ["id"]}, "rate_limit_per_minute": 60},
        "threshold": {"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900},
        "workflow": {"upstream_agent": str(upstream.pk), "on_statuses": ["completed", "failed"]},
    }
    client = api_client_for(owner)
    for type_, config in configs.items():
        response = client.post("/api/v1/triggers/", body(workspace, active_agent, type=type_, name=type_,
                                                         config=config))
        assert response.status_code == 201, (type_, response.json())
        assert response.json()["type"] == type_
        shown = response.json()["config"]
        assert {key: shown[key] for key in config} == config
    assert Trigger.objects.count() == 6


def test_unknown_type_bad_prompt_and_bad_agent_name_their_fields(api_client_for, owner, workspace, active_agent,
                                                                 outsider, other_workspace):
    client = api_client_for(owner)
    assert "type" in client.post("/api/v1/triggers/", body(workspace, active_agent, type="scheduled")).json()[
        "error"]["details"]
    assert "prompt" in client.post("/api/v1/triggers/", body(workspace, active_agent,
                                                             prompt="{{ settings.SECRET_KEY }}")).json()[
        "error"]["details"]
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Theirs")
    response = client.post("/api/v1/triggers/", body(workspace, theirs))
    assert response.status_code == 400 and "agent" in response.json()["error"]["details"]
    assert not Trigger.objects.exists()


def test_names_are_unique_per_workspace(api_client_for, owner, workspace, active_agent):
    client = api_client_for(owner)
    assert client.post("/api/v1/triggers/", body(workspace, active_agent)).status_code == 201
    again = client.post("/api/v1/triggers/", body(workspace, active_agent))
    assert again.status_code == 400 and "name" in again.json()["error"]["details"]


def test_analyst_may_not_create_and_viewer_reads(api_client_for, member, viewer, workspace, active_agent,
                                                 make_trigger):
    refused = api_client_for(member).post("/api/v1/triggers/", body(workspace, active_agent))
    assert refused.status_code == 403
    trigger = make_trigger()
    client = api_client_for(viewer)
    assert [row["id"] for row in client.get("/api/v1/triggers/").json()["results"]] == [str(trigger.pk)]
    assert client.get(f"/api/v1/triggers/{trigger.pk}/").status_code == 200
    assert client.patch(f"/api/v1/triggers/{trigger.pk}/", {"enabled": False}).status_code == 403
    assert client.delete(f"/api/v1/triggers/{trigger.pk}/").status_code == 403
    assert client.get(f"/api/v1/triggers/{trigger.pk}/firings/").status_code == 200


def test_outsider_gets_404_everywhere(api_client_for, outsider, workspace, active_agent, make_trigger):
    trigger = make_trigger()
    client = api_client_for(outsider)
    assert client.post("/api/v1/triggers/", body(workspace, active_agent)).status_code == 404
    assert client.get("/api/v1/triggers/").json()["results"] == []
    assert client.get(f"/api/v1/triggers/{trigger.pk}/").status_code == 404
    assert client.patch(f"/api/v1/triggers/{trigger.pk}/", {"enabled": False}).status_code == 404
    assert client.delete(f"/api/v1/triggers/{trigger.pk}/").status_code == 404
    assert client.get(f"/api/v1/triggers/{trigger.pk}/firings/").status_code == 404
    trigger.refresh_from_db()
    assert trigger.enabled


def test_patch_disables_and_edits_and_refuses_immutable_fields(api_client_for, owner, make_trigger, zendesk):
    trigger = make_trigger(trigger_type="event", config={"endpoint": "zendesk", "event_type": "ticket.created"})
    client = api_client_for(owner)
    response = client.patch(f"/api/v1/triggers/{trigger.pk}/", {
        "enabled": False, "name": "Tickets", "prompt": "Triage {{ payload.id }}",
        "config": {"endpoint": "zendesk", "event_type": "ticket.updated", "condition": "payload.priority == 'high'"}})
    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["enabled"] is False and data["name"] == "Tickets"
    assert data["config"]["event_type"] == "ticket.updated"
    for field in ("type", "agent", "workspace"):
        refused = client.patch(f"/api/v1/triggers/{trigger.pk}/", {field: "manual"})
        assert refused.status_code == 400 and field in refused.json()["error"]["details"]
    bad = client.patch(f"/api/v1/triggers/{trigger.pk}/", {"config": {"endpoint": "zendesk"}})
    assert bad.status_code == 400 and "config.event_type" in bad.json()["error"]["details"]


def test_delete_removes_the_trigger_and_retires_its_identity(api_client_for, owner, make_trigger):
    trigger = make_trigger()
    principal = trigger.run_as
    assert api_client_for(owner).delete(f"/api/v1/triggers/{trigger.pk}/").status_code == 204
    assert not Trigger.objects.filter(pk=trigger.pk).exists()
    principal.refresh_from_db()
    principal.user.refresh_from_db()
    assert principal.retired_at is not None and principal.user.is_active is False
    assert not Membership.objects.filter(user=principal.user).exists()


def test_firings_are_listed_newest_first_and_paginated(api_client_for, owner, make_trigger):
    trigger = make_trigger()
    for n in range(3):
        trigger_fire(trigger=trigger, payload={"n": n}, source="manual:test", dedupe_key=f"k{n}")
    trigger_fire(trigger=trigger, payload={"n": 0}, source="manual:test", dedupe_key="k0")
    response = api_client_for(owner).get(f"/api/v1/triggers/{trigger.pk}/firings/", {"page_size": 2})
    data = response.json()
    assert data["count"] == 4
    newest = data["results"][0]
    assert newest["outcome"] == "skipped" and newest["reason"] == "duplicate" and newest["execution"] is None
    assert data["results"][1]["outcome"] == "started" and data["results"][1]["execution"] is not None
    assert TriggerFiring.objects.filter(outcome="started").count() == 3
