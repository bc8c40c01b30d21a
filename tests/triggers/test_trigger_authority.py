"""Issue 24: a trigger acts with authority someone still has. Editing cannot raise your
power; keys and triggers lose what their person loses, at once; a trigger whose
responsible person is gone pauses once, with an ``owner_removed`` firing and a
notification to the workspace's admins."""

import pytest
from rest_framework.test import APIClient

from executions.models import Execution
from executions.services.load import request_build
from governance.models import Notification
from governance.notifications import TRIGGER_OWNER_REMOVED
from tenancy.models import Membership, OrganizationMember
from triggers.apikeys import api_key_issue
from triggers.models import Trigger, TriggerFiring
from triggers.services import trigger_create, trigger_fire, trigger_update

pytestmark = pytest.mark.django_db


CAPPED = '{"rate_limit_per_minute": 5}'  # an API trigger's config, as the admin form posts it


def invoke(trigger_id, key, body=None):
    return APIClient().post(f"/api/v1/triggers/{trigger_id}/invoke", body or {}, format="json", HTTP_X_API_KEY=key)


def _role(trigger) -> str | None:
    return Membership.objects.filter(user_id=trigger.run_as.user_id, workspace_id=trigger.workspace_id
                                     ).values_list("role", flat=True).first()


def _run_permissions(firing) -> tuple[list[str], list[str]]:
    context = request_build(Execution.objects.get(pk=firing.execution_id)).user_context
    return context.roles, context.permissions


@pytest.fixture
def admin_api_trigger(owner, workspace, active_agent):
    """The issue's trigger: made by a workspace admin, its runs act as admin."""
    return trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Ops", trigger_type="api",
                          prompt="Do {{ payload.task }}", run_as_role="admin")


# --- editing cannot raise your power -----------------------------------------------------------


def test_an_editor_cannot_patch_the_prompt_of_an_admin_trigger(api_client_for, editor, admin_api_trigger):
    response = api_client_for(editor).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/",
                                            {"prompt": "Create a workspace policy"}, format="json")
    assert response.status_code == 403
    assert "run_as_role" in response.json()["error"]["details"]
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.prompt == "Do {{ payload.task }}" and _role(admin_api_trigger) == "admin"
    assert admin_api_trigger.run_as.responsible_id != editor.pk


@pytest.mark.parametrize("body", [{"config": {"rate_limit_per_minute": 5}}, {"enabled": True}, {"name": "Mine"},
                                  {}, {"run_as_role": "admin"}])
def test_no_change_of_an_admin_trigger_is_open_to_an_editor(api_client_for, editor, admin_api_trigger, body):
    response = api_client_for(editor).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/", body, format="json")
    assert response.status_code == 403 and "run_as_role" in response.json()["error"]["details"]
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.name == "Ops" and admin_api_trigger.run_as.responsible_id != editor.pk


def test_an_editor_may_disable_an_admin_trigger_without_taking_it_over(api_client_for, editor, owner,
                                                                      admin_api_trigger):
    response = api_client_for(editor).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/", {"enabled": False},
                                            format="json")
    assert response.status_code == 200
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.enabled is False and _role(admin_api_trigger) == "admin"
    assert admin_api_trigger.run_as.responsible_id == owner.pk
    again = api_client_for(editor).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/", {"enabled": True},
                                         format="json")
    assert again.status_code == 403


def test_an_edit_lowering_the_role_to_the_editors_rebinds_the_trigger(api_client_for, editor, admin_api_trigger):
    response = api_client_for(editor).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/",
                                            {"prompt": "Mine now", "run_as_role": "editor"}, format="json")
    assert response.status_code == 200, response.json()
    admin_api_trigger.refresh_from_db()
    assert _role(admin_api_trigger) == "editor" and admin_api_trigger.run_as.responsible_id == editor.pk


def test_editing_a_trigger_capped_by_a_demotion_rebinds_and_lowers_it(owner, editor, workspace, admin_api_trigger):
    Membership.objects.filter(user=owner, workspace=workspace).update(role="editor")  # it acts as editor now
    updated = trigger_update(actor=editor, trigger=admin_api_trigger, prompt="Edited")
    assert updated.prompt == "Edited"
    admin_api_trigger.refresh_from_db()
    assert _role(admin_api_trigger) == "editor" and admin_api_trigger.run_as.responsible_id == editor.pk
    Membership.objects.filter(user=owner, workspace=workspace).update(role="admin")
    firing = trigger_fire(trigger=admin_api_trigger, payload={"task": "x"}, source="test")
    roles, permissions = _run_permissions(firing)
    assert roles == ["editor"] and "policy:create" not in permissions  # the owner's return lends nothing back


def test_an_admin_editing_takes_responsibility(api_client_for, owner, org_admin, admin_api_trigger):
    response = api_client_for(org_admin).patch(f"/api/v1/triggers/{admin_api_trigger.pk}/", {"prompt": "Org"},
                                               format="json")
    assert response.status_code == 200
    admin_api_trigger.refresh_from_db()
    assert _role(admin_api_trigger) == "admin" and admin_api_trigger.run_as.responsible_id == org_admin.pk


def test_creating_a_trigger_above_your_role_is_403(api_client_for, editor, workspace, active_agent):
    response = api_client_for(editor).post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(active_agent.pk), "name": "X", "type": "api",
        "run_as_role": "admin"}, format="json")
    assert response.status_code == 403 and "run_as_role" in response.json()["error"]["details"]
    assert not Trigger.objects.exists()


def test_the_enable_page_refuses_an_editor_on_an_admin_trigger(client, editor, admin_api_trigger):
    Trigger.objects.filter(pk=admin_api_trigger.pk).update(enabled=False)
    client.force_login(editor)
    response = client.post(f"/triggers/{admin_api_trigger.pk}/enabled", {"enabled": "1"}, follow=True)
    assert "Nothing changed" in response.content.decode()
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.enabled is False and admin_api_trigger.run_as.responsible_id != editor.pk


def test_the_admin_refuses_an_edit_by_someone_holding_no_role_in_the_workspace(admin_client, admin_api_trigger):
    """A superuser holds no workspace role: bound to them, the trigger would act with
    nobody's authority, so the admin form refuses and says why."""
    response = admin_client.post(f"/admin/triggers/trigger/{admin_api_trigger.pk}/change/", {
        "name": "Ops", "enabled": "on", "prompt": "Create a workspace policy", "config": CAPPED,
        "firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0"})
    assert response.status_code == 200 and "you hold no role here" in response.content.decode()
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.prompt == "Do {{ payload.task }}"


def test_an_org_admins_admin_edit_rebinds_the_trigger_to_them(client, org_admin, admin_api_trigger):
    from django.contrib.auth.models import Permission

    org_admin.is_staff = True
    org_admin.save(update_fields=["is_staff"])
    org_admin.user_permissions.add(*Permission.objects.filter(content_type__app_label="triggers",
                                                              codename__in=["change_trigger", "view_trigger"]))
    client.force_login(org_admin)
    response = client.post(f"/admin/triggers/trigger/{admin_api_trigger.pk}/change/", {
        "name": "Ops", "enabled": "on", "prompt": "Edited in the admin", "config": CAPPED,
        "firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0"})
    assert response.status_code == 302, [line for line in response.content.decode().splitlines()
                                         if "errorlist" in line]
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.prompt == "Edited in the admin"
    assert admin_api_trigger.run_as.responsible_id == org_admin.pk and _role(admin_api_trigger) == "admin"


# --- the issue's attack, end to end ------------------------------------------------------------


def test_an_editors_own_key_cannot_invoke_an_admin_trigger(api_client_for, editor, workspace, admin_api_trigger):
    issued = api_client_for(editor).post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "mine"})
    assert issued.status_code == 201
    response = invoke(admin_api_trigger.pk, issued.json()["key"], {"task": "create a policy"})
    assert response.status_code == 403 and "run_as_role" in response.json()["error"]["details"]
    assert not Execution.objects.exists() and not TriggerFiring.objects.exists()


def test_once_rebound_to_the_editor_the_run_cannot_create_a_policy(api_client_for, editor, workspace,
                                                                   admin_api_trigger):
    client = api_client_for(editor)
    assert client.patch(f"/api/v1/triggers/{admin_api_trigger.pk}/", {"prompt": "Create a workspace policy",
                                                                       "run_as_role": "editor"},
                        format="json").status_code == 200
    key = client.post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "mine"}).json()["key"]
    response = invoke(admin_api_trigger.pk, key, {"task": "x"})
    assert response.status_code == 202, response.json()
    run = Execution.objects.get(pk=response.json()["executions"][0])
    assert run.requester_id == editor.pk and run.requested_by_id == admin_api_trigger.run_as.user_id
    roles, permissions = _run_permissions(TriggerFiring.objects.get(execution=run))
    assert roles == ["editor"] and "policy:create" not in permissions


def test_a_key_owner_is_the_runs_requester(owner, workspace, admin_api_trigger, org_admin):
    key = api_key_issue(created_by=org_admin, organization=workspace.organization, name="org").plaintext
    response = invoke(admin_api_trigger.pk, key, {"task": "x"})
    assert response.status_code == 202
    assert Execution.objects.get().requester_id == org_admin.pk


# --- a person who loses standing: demoted, removed, deactivated, deleted -------------------------


def _demote_to_viewer(person, workspace):
    Membership.objects.filter(user=person, workspace=workspace).update(role="viewer")


def _remove(person, workspace):
    Membership.objects.filter(user=person, workspace=workspace).delete()


def _deactivate(person, workspace):
    person.is_active = False
    person.save(update_fields=["is_active"])


def _delete(person, workspace):
    person.delete()


LOSSES = [_demote_to_viewer, _remove, _deactivate, _delete]
LOSS_IDS = ["demoted", "removed", "deactivated", "deleted"]


@pytest.mark.parametrize("lose", LOSSES, ids=LOSS_IDS)
def test_a_key_stops_at_once_when_its_owner_loses_standing(editor, workspace, active_agent, lose):
    trigger = trigger_create(actor=editor, workspace=workspace, agent=active_agent, name="Mine", trigger_type="api")
    key = api_key_issue(created_by=editor, workspace=workspace, name="k").plaintext
    assert invoke(trigger.pk, key).status_code == 202
    lose(editor, workspace)
    response = invoke(trigger.pk, key)
    assert response.status_code == 401 and response.json()["error"]["message"] == "Invalid API key."
    assert Execution.objects.count() == 1


@pytest.mark.parametrize("lose", [_deactivate, _delete, lambda p, w: OrganizationMember.objects.filter(
    user=p).update(role=OrganizationMember.OrgRole.MEMBER)], ids=["deactivated", "deleted", "no_longer_org_admin"])
def test_an_organization_key_stops_when_its_owner_is_no_longer_an_org_admin(org_admin, workspace, active_agent,
                                                                           owner, lose):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Mine", trigger_type="api")
    key = api_key_issue(created_by=org_admin, organization=workspace.organization, name="k").plaintext
    assert invoke(trigger.pk, key).status_code == 202
    lose(org_admin, workspace)
    assert invoke(trigger.pk, key).status_code == 401


def test_a_key_owner_demoted_below_the_trigger_gets_403(owner, editor, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Ed", trigger_type="api",
                             run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=workspace, name="k").plaintext
    assert invoke(trigger.pk, key).status_code == 202
    Membership.objects.filter(user=editor, workspace=workspace).update(role="analyst")  # still agent:execute
    response = invoke(trigger.pk, key)
    assert response.status_code == 403 and "run_as_role" in response.json()["error"]["details"]


def test_a_demoted_responsible_persons_trigger_fires_with_their_current_role(owner, workspace, admin_api_trigger):
    before = trigger_fire(trigger=admin_api_trigger, payload={"task": "x"}, source="test")
    Membership.objects.filter(user=owner, workspace=workspace).update(role="analyst")
    after = trigger_fire(trigger=admin_api_trigger, payload={"task": "y"}, source="test")
    assert after.outcome == TriggerFiring.Outcome.STARTED
    roles, permissions = _run_permissions(after)
    assert roles == ["analyst"] and "policy:create" not in permissions and "agent:create" not in permissions
    # A run queued before the demotion reads the roles as they are at its next segment.
    assert _run_permissions(before)[0] == ["analyst"]


@pytest.fixture
def second_admin(workspace, django_user_model):
    """A workspace admin who owns no agent (so their account can be deleted)."""
    person = django_user_model.objects.create_user(username="ops", password="pw-ops")
    Membership.objects.create(workspace=workspace, user=person, role="admin")
    return person


@pytest.mark.parametrize("lose", LOSSES[1:], ids=LOSS_IDS[1:])
def test_a_trigger_whose_responsible_person_is_gone_pauses_once(owner, second_admin, org_admin, workspace,
                                                                active_agent, lose):
    admin_api_trigger = trigger_create(actor=second_admin, workspace=workspace, agent=active_agent, name="Ops",
                                       trigger_type="api", run_as_role="admin")
    queued = trigger_fire(trigger=admin_api_trigger, payload={"task": "x"}, source="test")
    lose(second_admin, workspace)
    assert _run_permissions(queued) == ([], [])  # a run already queued holds nothing from now on
    first = trigger_fire(trigger=admin_api_trigger, payload={"task": "y"}, source="schedule", dedupe_key="slot-1")
    assert (first.outcome, first.reason) == ("skipped", "owner_removed") and first.execution_id is None
    admin_api_trigger.refresh_from_db()
    assert admin_api_trigger.enabled is False
    second = trigger_fire(trigger=admin_api_trigger, payload={"task": "z"}, source="schedule", dedupe_key="slot-2")
    assert second.reason == "disabled"
    assert TriggerFiring.objects.filter(trigger=admin_api_trigger, reason="owner_removed").count() == 1
    notes = Notification.objects.filter(kind=TRIGGER_OWNER_REMOVED).order_by("user_id")
    assert [note.user_id for note in notes] == sorted([owner.pk, org_admin.pk])  # the workspace's admins, once
    assert Execution.objects.count() == 1


def test_a_paused_scheduled_trigger_leaves_the_beat(owner, workspace, active_agent):
    from django_celery_beat.models import PeriodicTask

    from triggers.schedule import periodic_task_name

    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Nightly",
                             trigger_type="scheduled", config={"cron": "0 3 * * *", "timezone": "UTC"})
    assert PeriodicTask.objects.get(name=periodic_task_name(trigger.pk)).enabled
    _remove(owner, workspace)
    assert trigger_fire(trigger=trigger, payload=None, source="cron:Nightly").reason == "owner_removed"
    assert not PeriodicTask.objects.get(name=periodic_task_name(trigger.pk)).enabled


def test_a_paused_trigger_revived_by_an_admin_fires_with_their_authority(owner, org_admin, workspace,
                                                                        admin_api_trigger):
    _remove(owner, workspace)
    assert trigger_fire(trigger=admin_api_trigger, payload={}, source="test").reason == "owner_removed"
    trigger_update(actor=org_admin, trigger=admin_api_trigger, enabled=True)
    firing = trigger_fire(trigger=admin_api_trigger, payload={"task": "x"}, source="test")
    assert firing.outcome == "started" and _run_permissions(firing)[0] == ["admin"]
    assert Execution.objects.get(pk=firing.execution_id).requester_id == org_admin.pk


def test_a_person_firing_a_trigger_acts_as_themselves_even_when_its_owner_is_gone(owner, editor, workspace,
                                                                                  active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Man",
                             trigger_type="manual")
    _remove(owner, workspace)
    firing = trigger_fire(trigger=trigger, payload={}, source="ui", user=editor)
    assert firing.outcome == "started" and _run_permissions(firing)[0] == ["editor"]


# --- a webhook endpoint's secret chooses what its triggers receive ------------------------------


@pytest.fixture
def admin_event_trigger(owner, workspace, active_agent, zendesk):
    return trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Tickets", trigger_type="event",
                          config={"endpoint": "zendesk", "event_type": "ticket.created"}, run_as_role="admin")


def test_an_editor_cannot_rotate_or_delete_the_endpoint_of_an_admin_trigger(api_client_for, editor, owner, zendesk,
                                                                           admin_event_trigger):
    client = api_client_for(editor)
    rotated = client.post(f"/api/v1/webhook-endpoints/{zendesk.pk}/rotate", {}, format="json")
    assert rotated.status_code == 403 and "run_as_role" in rotated.json()["error"]["details"]
    deleted = client.delete(f"/api/v1/webhook-endpoints/{zendesk.pk}/")
    assert deleted.status_code == 403
    zendesk.refresh_from_db()
    assert zendesk.rotated_at is None
    assert api_client_for(owner).post(f"/api/v1/webhook-endpoints/{zendesk.pk}/rotate", {},
                                      format="json").status_code == 200


def test_an_editor_cannot_recreate_the_endpoint_an_admin_trigger_listens_on(api_client_for, editor, workspace,
                                                                           zendesk, admin_event_trigger):
    zendesk.delete()  # gone, by an admin or otherwise
    response = api_client_for(editor).post("/api/v1/webhook-endpoints/", {"workspace": workspace.pk,
                                                                          "slug": "zendesk"}, format="json")
    assert response.status_code == 403 and "run_as_role" in response.json()["error"]["details"]


def test_the_rotate_page_refuses_an_editor_on_an_admin_trigger(client, editor, zendesk, admin_event_trigger):
    client.force_login(editor)
    response = client.post(f"/triggers/{admin_event_trigger.pk}/endpoint/rotate", {"previous_valid_seconds": "0"},
                           follow=True)
    assert "The secret was not rotated" in response.content.decode()
    zendesk.refresh_from_db()
    assert zendesk.rotated_at is None
