"""The trigger Edit page (`/triggers/<id>/edit`) and a schedule's next run times: every
type's fields through the API's update service (its errors at the field, its audit
entry), outsiders 404, members without `agent:create` 403, and the next three run times
in the schedule's own time zone, right across a daylight-saving change."""

from __future__ import annotations

import json
import types
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.shortcuts import resolve_url
from django.test import Client

from governance.models import AuditLogEntry
from tests.factories import make_agent
from triggers.models import Trigger
from triggers.schedule import schedule_slot_latest, schedule_slots_next
from triggers.services import TRIGGER_UPDATED, trigger_create
from triggers.types import ScheduledConfig, config_public
from triggers.webhooks import webhook_endpoint_create

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Triage")


@pytest.fixture
def upstream(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Upstream")


@pytest.fixture
def schedule(owner, workspace, agent):
    return trigger_create(actor=owner, workspace=workspace, agent=agent, name="Mornings", trigger_type="scheduled",
                          prompt="Daily digest", config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})


@pytest.fixture
def endpoints(owner, workspace):
    for slug in ("zendesk", "github"):
        webhook_endpoint_create(workspace=workspace, slug=slug, created_by=owner)


def _make(kind, *, owner, workspace, agent, upstream):
    configs = {
        "manual": {},
        "scheduled": {"cron": "0 8 * * *", "timezone": "UTC"},
        "event": {"endpoint": "zendesk", "event_type": "ticket.created"},
        "api": {"rate_limit_per_minute": 10},
        "threshold": {"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 60},
        "workflow": {"upstream_agent": str(upstream.pk)},
    }
    return trigger_create(actor=owner, workspace=workspace, agent=agent, name=f"A {kind}", trigger_type=kind,
                          prompt="Look", config=configs[kind])


def _form(trigger, **overrides) -> dict:
    """What the edit form posts when nothing is touched, with ``overrides``."""
    config = config_public(trigger.config)
    data = {"name": trigger.name, "prompt": trigger.prompt, "run_as_role": "analyst", "enabled": "on"}
    if trigger.type == "scheduled":
        data.update(cron=config["cron"], timezone=config["timezone"])
    elif trigger.type == "event":
        data.update(endpoint=config["endpoint"], event_type=config["event_type"], condition=config["condition"])
    elif trigger.type == "api":
        schema = config["input_schema"]
        data.update(input_schema=json.dumps(schema) if schema else "",
                    rate_limit_per_minute=config["rate_limit_per_minute"] or "")
    elif trigger.type == "threshold":
        data.update(expression=config["expression"], cooldown_seconds=config["cooldown_seconds"])
    elif trigger.type == "workflow":
        data.update(upstream_agent=config["upstream_agent"], on_statuses=config["on_statuses"])
        if config.get("on_outcomes"):
            data["on_outcomes"] = config["on_outcomes"]
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def _audits():
    return AuditLogEntry.objects.filter(event_type=TRIGGER_UPDATED).order_by("id")


# --- the page ---------------------------------------------------------------------------


def test_the_detail_page_links_to_edit_for_those_who_may_edit(owner, member, schedule):
    link = f'href="/triggers/{schedule.pk}/edit"'
    assert link in _client(owner).get(f"/triggers/{schedule.pk}/").content.decode()
    assert link not in _client(member).get(f"/triggers/{schedule.pk}/").content.decode()


def test_the_edit_page_shows_the_current_values(owner, schedule):
    response = _client(owner).get(f"/triggers/{schedule.pk}/edit")
    page = response.content.decode()
    assert response.status_code == 200
    assert 'value="0 8 * * 1-5"' in page and 'value="Europe/Berlin"' in page and "Daily digest" in page
    assert '<ol class="next-runs" id="next-runs"' in page and page.count("<time datetime=") == 3
    assert '<option value="Europe/Berlin">' in page  # the time zone list
    assert 'name="agent"' not in page  # a trigger keeps its agent


def test_editing_a_schedule_changes_its_beat_entry_and_is_audited(owner, schedule):
    from django_celery_beat.models import PeriodicTask

    response = _client(owner).post(f"/triggers/{schedule.pk}/edit",
                                   _form(schedule, cron="30  6 * * *", timezone="America/New_York"))
    assert response.status_code == 302 and response["Location"] == f"/triggers/{schedule.pk}/"
    schedule.refresh_from_db()
    assert schedule.config == {"trigger_type": "scheduled", "cron": "30 6 * * *", "timezone": "America/New_York"}
    task = PeriodicTask.objects.get(name=f"trigger:{schedule.pk}")
    assert (task.crontab.minute, task.crontab.hour, str(task.crontab.timezone)) == ("30", "6", "America/New_York")
    entry = _audits().get()
    assert entry.actor == owner and entry.workspace_id == schedule.workspace_id and entry.agent_id == schedule.agent_id
    assert entry.details["trigger"] == str(schedule.pk)
    assert entry.details["changes"] == {"config": {
        "from": {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"},
        "to": {"cron": "30 6 * * *", "timezone": "America/New_York"}}}


EDITS = {
    "manual": ({"name": "Renamed", "prompt": "Look again at {{ payload.id }}"},
               lambda t: t.name == "Renamed" and t.prompt == "Look again at {{ payload.id }}"),
    "event": ({"endpoint": "github", "event_type": "issue.opened", "condition": "payload.priority == 'high'"},
              lambda t: t.config["endpoint"] == "github" and t.config["event_type"] == "issue.opened"
              and t.config["condition"] == "payload.priority == 'high'"),
    "api": ({"input_schema": '{"type": "object", "required": ["id"]}', "rate_limit_per_minute": "5"},
            lambda t: t.config["input_schema"] == {"type": "object", "required": ["id"]}
            and t.config["rate_limit_per_minute"] == 5),
    "threshold": ({"expression": "avg(latency_ms) > 500 for 10m", "cooldown_seconds": "120"},
                  lambda t: t.config["expression"] == "avg(latency_ms) > 500 for 10m"
                  and t.config["cooldown_seconds"] == 120),
    "workflow": ({"on_statuses": ["completed", "failed"], "on_outcomes": ["answered"]},
                 lambda t: sorted(t.config["on_statuses"]) == ["completed", "failed"]
                 and t.config["on_outcomes"] == ["answered"]),
}


@pytest.mark.parametrize("kind", sorted(EDITS))
def test_each_type_is_edited(kind, owner, workspace, agent, upstream, endpoints):
    trigger = _make(kind, owner=owner, workspace=workspace, agent=agent, upstream=upstream)
    overrides, edited = EDITS[kind]
    response = _client(owner).post(f"/triggers/{trigger.pk}/edit", _form(trigger, **overrides))
    assert response.status_code == 302, response.content.decode()[:2000]
    trigger.refresh_from_db()
    assert edited(trigger)
    assert _audits().count() == 1


def test_a_workflow_keeps_its_upstream_and_clears_its_outcomes(owner, workspace, agent, upstream):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Chain", trigger_type="workflow",
                             config={"upstream_agent": str(upstream.pk), "on_outcomes": ["answered"]})
    _client(owner).post(f"/triggers/{trigger.pk}/edit", _form(trigger, on_outcomes=None))
    trigger.refresh_from_db()
    assert trigger.config["on_outcomes"] is None and trigger.config["upstream_agent"] == str(upstream.pk)


def test_the_run_as_role_and_enabled_are_edited(owner, schedule):
    from django_celery_beat.models import PeriodicTask

    _client(owner).post(f"/triggers/{schedule.pk}/edit", _form(schedule, run_as_role="viewer", enabled=None))
    schedule = Trigger.objects.get(pk=schedule.pk)
    assert not schedule.enabled and not PeriodicTask.objects.get(name=f"trigger:{schedule.pk}").enabled
    changes = _audits().get().details["changes"]
    assert changes["enabled"] == {"from": True, "to": False}
    assert changes["run_as_role"] == {"from": "analyst", "to": "viewer"}


def test_saving_without_a_change_changes_nothing(owner, editor, schedule):
    response = _client(editor).post(f"/triggers/{schedule.pk}/edit", _form(schedule))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.run_as.responsible == owner  # not re-bound to the editor
    assert not _audits().exists()


# --- validation: the service's errors at their field --------------------------------------

INVALID = [
    ("scheduled", "cron", "61 8 * * *", "is not a valid cron expression"),
    ("scheduled", "cron", "every morning", "a cron expression has five fields"),
    ("scheduled", "cron", "0 8 * *", "a cron expression has five fields"),
    ("scheduled", "cron", "0 0 30 2 *", "never runs"),
    ("scheduled", "timezone", "Mars/Olympus", "is not an IANA time zone"),
    ("scheduled", "name", "", "This field is required."),
    ("scheduled", "prompt", "Hi {{ os.system }}", ""),
    ("event", "condition", "import os", "not a valid condition"),
    ("event", "event_type", "ticket created!", "an event type is letters"),
    ("event", "endpoint", "nowhere", "Select a valid choice"),
    ("api", "input_schema", "{oops", "This is not valid JSON"),
    ("api", "input_schema", '{"type": 5}', ""),
    ("api", "rate_limit_per_minute", "0", ""),
    ("threshold", "expression", "cpu >", ""),
    ("threshold", "cooldown_seconds", "-1", ""),
    ("workflow", "on_statuses", "running", "Select a valid choice"),
    ("workflow", "on_outcomes", "meh", "Select a valid choice"),
]


@pytest.mark.parametrize(("kind", "field", "value", "message"), INVALID)
def test_an_invalid_field_is_named_and_nothing_changes(kind, field, value, message, owner, workspace, agent,
                                                      upstream, endpoints):
    trigger = _make(kind, owner=owner, workspace=workspace, agent=agent, upstream=upstream)
    before = (trigger.name, trigger.prompt, config_public(trigger.config))
    response = _client(owner).post(f"/triggers/{trigger.pk}/edit", _form(trigger, **{field: value}))
    page = response.content.decode()
    assert response.status_code == 400
    assert f'id="id_{field}_error"' in page
    assert message in page
    assert 'aria-invalid="true"' in page
    trigger.refresh_from_db()
    assert (trigger.name, trigger.prompt, config_public(trigger.config)) == before
    assert not _audits().exists()


def test_the_page_gives_the_apis_message(owner, api_client_for, schedule):
    page = _client(owner).post(f"/triggers/{schedule.pk}/edit", _form(schedule, cron="61 8 * * *"))
    api = api_client_for(owner).patch(f"/api/v1/triggers/{schedule.pk}/",
                                      {"config": {"cron": "61 8 * * *", "timezone": "UTC"}}, format="json")
    message = api.json()["error"]["details"]["config.cron"][0]
    assert api.status_code == 400 and message.replace("'", "&#x27;") in page.content.decode()


def test_a_name_taken_in_the_workspace_is_refused_at_the_name(owner, workspace, agent, schedule):
    trigger_create(actor=owner, workspace=workspace, agent=agent, name="Evenings", trigger_type="manual")
    response = _client(owner).post(f"/triggers/{schedule.pk}/edit", _form(schedule, name="Evenings"))
    assert response.status_code == 400 and 'id="id_name_error"' in response.content.decode()
    assert "A trigger with this name exists" in response.content.decode()


def test_a_pipeline_cannot_follow_its_own_agent(owner, workspace, agent, upstream):
    trigger = _make("workflow", owner=owner, workspace=workspace, agent=agent, upstream=upstream)
    page = _client(owner).get(f"/triggers/{trigger.pk}/edit").content.decode()
    assert f'value="{agent.pk}"' not in page  # not offered
    response = _client(owner).post(f"/triggers/{trigger.pk}/edit", _form(trigger, upstream_agent=str(agent.pk)))
    assert response.status_code == 400 and 'id="id_upstream_agent_error"' in response.content.decode()


# --- who may ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post"])
def test_an_outsider_gets_404(outsider, schedule, method):
    response = getattr(_client(outsider), method)(f"/triggers/{schedule.pk}/edit", _form(schedule, name="Mine"))
    assert response.status_code == 404
    schedule.refresh_from_db()
    assert schedule.name == "Mornings"


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_member_who_may_not_manage_triggers_gets_403(member, schedule, method):
    response = getattr(_client(member), method)(f"/triggers/{schedule.pk}/edit", _form(schedule, name="Mine"))
    assert response.status_code == 403
    schedule.refresh_from_db()
    assert schedule.name == "Mornings" and not _audits().exists()


def test_an_unknown_or_malformed_id_is_404(owner):
    assert _client(owner).get("/triggers/00000000-0000-0000-0000-000000000000/edit").status_code == 404
    assert _client(owner).get("/triggers/not-a-uuid/edit").status_code == 404


def test_an_editor_may_not_edit_an_admin_trigger_but_may_disable_it(owner, editor, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Admin job", trigger_type="manual",
                             run_as_role="admin")
    client = _client(editor)
    assert "You may still disable it" in client.get(f"/triggers/{trigger.pk}/edit").content.decode()
    refused = client.post(f"/triggers/{trigger.pk}/edit", _form(trigger, prompt="Borrowed", run_as_role="admin"))
    assert refused.status_code == 403 and 'id="id_run_as_role_error"' in refused.content.decode()
    trigger.refresh_from_db()
    assert trigger.prompt == ""
    disabled = client.post(f"/triggers/{trigger.pk}/edit", _form(trigger, run_as_role="admin", enabled=None))
    assert disabled.status_code == 302
    trigger.refresh_from_db()
    assert not trigger.enabled and trigger.run_as.responsible == owner


def test_an_editor_takes_over_an_admin_trigger_by_lowering_its_role(owner, editor, workspace, agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Admin job", trigger_type="manual",
                             run_as_role="admin")
    response = _client(editor).post(f"/triggers/{trigger.pk}/edit",
                                    _form(trigger, prompt="Mine now", run_as_role="editor"))
    assert response.status_code == 302
    trigger.refresh_from_db()
    assert trigger.prompt == "Mine now" and trigger.run_as.responsible == editor
    changes = _audits().get().details["changes"]
    assert changes["run_as_role"] == {"from": "admin", "to": "editor"}
    assert changes["responsible"] == {"from": owner.pk, "to": editor.pk}


def test_the_apis_patch_writes_the_same_audit_entry(owner, api_client_for, schedule):
    response = api_client_for(owner).patch(f"/api/v1/triggers/{schedule.pk}/", {"prompt": "Via the API"},
                                           format="json")
    assert response.status_code == 200
    entry = _audits().get()
    assert entry.actor == owner and entry.details["changes"] == {"prompt": {"from": "Daily digest",
                                                                            "to": "Via the API"}}


# --- hostile input ------------------------------------------------------------------------


def test_hostile_input_is_refused_or_kept_as_text(owner, schedule):
    client = _client(owner)
    nul = client.post(f"/triggers/{schedule.pk}/edit", _form(schedule, name="a\x00b"))
    assert nul.status_code == 400
    huge = client.post(f"/triggers/{schedule.pk}/edit", _form(schedule, prompt="x" * 20_001, cron="1" * 5000))
    assert huge.status_code == 400 and 'id="id_prompt_error"' in huge.content.decode()
    script = client.post(f"/triggers/{schedule.pk}/edit", _form(schedule, name="<script>alert(1)</script>"))
    assert script.status_code == 302
    page = client.get(f"/triggers/{schedule.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_fields_a_trigger_keeps_are_ignored(owner, workspace, schedule, upstream, other_workspace):
    response = _client(owner).post(f"/triggers/{schedule.pk}/edit", _form(
        schedule, agent=str(upstream.pk), type="api", workspace=str(other_workspace.pk), prompt="Changed"))
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.agent_id, schedule.type, schedule.workspace_id) == (schedule.agent.pk, "scheduled",
                                                                         workspace.pk)
    assert schedule.prompt == "Changed"


def test_the_edit_form_needs_its_csrf_token(owner, schedule):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(f"/triggers/{schedule.pk}/edit", _form(schedule, name="Forged")).status_code == 403


# --- next run times -----------------------------------------------------------------------


def test_the_next_three_runs_cross_a_daylight_saving_change():
    """New York moves to summer time on Sunday 8 March 2026: 09:00 stays 09:00 there, so
    in UTC it moves from 14:00 to 13:00."""
    config = ScheduledConfig(cron="0 9 * * *", timezone="America/New_York")
    now = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    slots = schedule_slots_next(config=config, now=now)
    assert [slot.isoformat() for slot in slots] == [
        "2026-03-07T09:00:00-05:00", "2026-03-08T09:00:00-04:00", "2026-03-09T09:00:00-04:00"]
    assert [slot.astimezone(UTC).hour for slot in slots] == [14, 13, 13]
    # They are the slots the scheduler fires: each is the latest slot at its own time.
    assert all(schedule_slot_latest(config=config, now=slot) == slot for slot in slots)


def test_the_autumn_change_in_berlin():
    config = ScheduledConfig(cron="0 12 * * *", timezone="Europe/Berlin")
    slots = schedule_slots_next(config=config, now=datetime(2026, 10, 24, 12, 30, tzinfo=ZoneInfo("UTC")))
    assert [slot.strftime("%d %H:%M %Z") for slot in slots] == ["25 12:00 CET", "26 12:00 CET", "27 12:00 CET"]
    assert [slot.astimezone(UTC).hour for slot in slots] == [11, 11, 11]


@pytest.fixture
def frozen(monkeypatch):
    """The pages' clock at Saturday 7 March 2026, 12:00 UTC."""
    import web.triggers

    fixed = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(web.triggers, "timezone", types.SimpleNamespace(now=lambda: fixed))


def test_the_preview_gives_the_next_three_runs_in_the_zone(owner, frozen):
    response = _client(owner).get("/triggers/schedule-preview", {"cron": "0 9 * * *", "timezone": "America/New_York"})
    body = response.json()
    assert response.status_code == 200 and body["valid"] is True
    assert [run["text"] for run in body["next"]] == [
        "Sat 7 Mar 2026, 09:00 EST", "Sun 8 Mar 2026, 09:00 EDT", "Mon 9 Mar 2026, 09:00 EDT"]
    assert [run["at"] for run in body["next"]][1] == "2026-03-08T09:00:00-04:00"
    assert body["words"] == "At 09:00"


def test_the_detail_page_shows_the_next_three_runs(owner, workspace, agent, frozen):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="NY", trigger_type="scheduled",
                             config={"cron": "0 9 * * *", "timezone": "America/New_York"})
    page = _client(owner).get(f"/triggers/{trigger.pk}/").content.decode()
    assert '<time datetime="2026-03-08T09:00:00-04:00">Sun 8 Mar 2026, 09:00 EDT</time>' in page
    assert "Sat 7 Mar 2026, 09:00 EST" in page and "Mon 9 Mar 2026, 09:00 EDT" in page


def test_a_zone_named_by_its_offset_is_shown_as_utc_offset(owner, frozen):
    body = _client(owner).get("/triggers/schedule-preview", {"cron": "0 9 * * *", "timezone": "Asia/Dubai"}).json()
    assert body["next"][0]["text"] == "Sun 8 Mar 2026, 09:00 UTC+04"


@pytest.mark.parametrize(("query", "field"), [
    ({"cron": "every morning", "timezone": "UTC"}, "config.cron"),
    ({"cron": "0 0 30 2 *", "timezone": "UTC"}, "config.cron"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "config.timezone"),
    ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "config.timezone"),
    ({"cron": "*" * 100_000, "timezone": "UTC"}, "config.cron"),
    ({"cron": "0 9 * * *", "timezone": "UTC\u202e"}, "config.timezone"),
    ({"cron": "٠ ٩ * * *", "timezone": "UTC"}, "config.cron"),
    ({"timezone": "UTC"}, "config.cron"),
])
def test_the_preview_names_the_field_of_a_bad_schedule(owner, query, field):
    response = _client(owner).get("/triggers/schedule-preview", query)
    body = response.json()
    assert response.status_code == 400 and body["valid"] is False
    assert body["error"]["details"][field]


def test_a_nul_byte_in_the_preview_query_is_a_400(owner):
    assert _client(owner).get("/triggers/schedule-preview", {"cron": "0 9 * * *\x00"}).status_code == 400


def test_the_preview_needs_sign_in():
    response = Client().get("/triggers/schedule-preview", {"cron": "0 9 * * *"})
    assert response.status_code == 302 and response["Location"].startswith(resolve_url(settings.LOGIN_URL))
