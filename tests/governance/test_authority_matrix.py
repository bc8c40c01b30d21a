"""The authority matrix (issue 24 §6): every way a run starts × the responsible person's
role × what happens to that person before the run's next segment (unchanged, demoted to
each lower role, removed). In each cell the run pauses on a write while the person holds
their role; then the person changes, and the cell checks what the run may do (at most
their current role, nothing once removed), that the requester can never approve it and
another admin can, and what the path does next time (the person's next start, the key's
next invocation, the trigger's next firing). Delegation and hand-off, whose tools need
committed rows, are in ``test_authority_matrix_chained``; the rules themselves are in
docs/security.md ("Who a run acts as", "Triggers and keys act with a person's current
authority")."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from executions import services as execution_services
from executions.models import Execution
from executions.services.start import person_run_request
from governance.models import Notification
from governance.notifications import TRIGGER_OWNER_REMOVED
from tenancy.models import Membership
from tenancy.permissions import role_rank
from tests.factories import ScriptedLLM, make_agent, text_reply
from tests.governance.approval_tools import WRITE_TOOL
from tests.governance.authority_matrix import (
    CELL_IDS,
    CELLS,
    Cell,
    assert_cell,
    assert_run_holds_at_most_the_persons_current_role,
    person_with_role,
)
from tests.governance.test_requester_rule import _no_broker, paused_on_refund  # noqa: F401 - autouse fixture
from triggers.apikeys import api_key_issue
from triggers.metrics import metrics_ingest
from triggers.models import Trigger, TriggerFiring
from triggers.schedule import schedule_slot_fire
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db

MONDAY_8AM = datetime(2026, 3, 2, 8, 0, 2, tzinfo=ZoneInfo("Europe/Berlin"))


@pytest.fixture
def gated(workspace, owner):
    """An act_with_approval agent of the admin ``owner`` whose refunds admins and editors approve."""
    return make_agent(workspace=workspace, owner=owner, name="Refunds", tools=[WRITE_TOOL],
                      action_level="act_with_approval", require_approval_for=[WRITE_TOOL],
                      approver_roles=["admin", "editor"])


def _started_by_the_person(gated, person) -> Execution:
    [execution] = Execution.objects.filter(agent=gated, requester=person).order_by("-pk")[:1]
    return execution


def _trigger_paused(trigger: Trigger, *, owner) -> None:
    """The trigger's last firing paused it (``owner_removed``), started nothing and told
    the workspace's admins."""
    firing = TriggerFiring.objects.filter(trigger=trigger).latest("pk")
    assert (firing.outcome, firing.reason, firing.execution_id) == ("skipped", "owner_removed", None)
    trigger.refresh_from_db()
    assert trigger.enabled is False
    assert Notification.objects.filter(kind=TRIGGER_OWNER_REMOVED, user=owner).count() == 1


def _next_firing_as_expected(trigger: Trigger, cell: Cell, *, owner, runs_before: int) -> None:
    """A trigger's next firing: a run acting with the person's current role while they
    may still run agents; otherwise the trigger pauses and starts nothing."""
    if cell.may_execute:
        firing = TriggerFiring.objects.filter(trigger=trigger).latest("pk")
        assert firing.outcome == "started", (firing.reason, firing.detail)
        assert_run_holds_at_most_the_persons_current_role(firing.execution_id, cell)
        assert Execution.objects.count() == runs_before + 1
    else:
        _trigger_paused(trigger, owner=owner)
        assert Execution.objects.count() == runs_before


# --- a person starts the run and it acts as them -------------------------------------------


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_page_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated):
    person = person_with_role(workspace=workspace, role=cell.role)
    browser = Client()
    browser.force_login(person)
    started = browser.post(f"/agents/{gated.pk}/", {"prompt": "Refund ticket 7", "payload": ""})
    assert started.status_code == 302, started.content
    execution = _started_by_the_person(gated, person)
    assert execution.requested_by_id == person.pk

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    again = browser.post(f"/agents/{gated.pk}/", {"prompt": "Refund ticket 8", "payload": ""})
    expected = 302 if cell.may_execute else (404 if cell.now is None else 403)
    assert again.status_code == expected
    assert Execution.objects.count() == (2 if cell.may_execute else 1)


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_api_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated, api_client_for):
    person = person_with_role(workspace=workspace, role=cell.role)
    client = api_client_for(person)
    started = client.post(f"/api/v1/agents/{gated.pk}/run", {"input_prompt": "Refund 7"}, format="json")
    assert started.status_code == 202, started.content
    execution = Execution.objects.get(pk=started.json()["execution_id"])
    assert execution.requested_by_id == person.pk

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    again = client.post(f"/api/v1/agents/{gated.pk}/run", {"input_prompt": "Refund 8"}, format="json")
    expected = 202 if cell.may_execute else (404 if cell.now is None else 403)
    assert again.status_code == expected, again.content
    assert Execution.objects.count() == (2 if cell.may_execute else 1)


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_session_message_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated,
                                                                                     api_client_for):
    person = person_with_role(workspace=workspace, role=cell.role)
    client = api_client_for(person)
    opened = client.post("/api/v1/sessions/", {"workspace": workspace.pk, "agent": str(gated.pk)}, format="json")
    assert opened.status_code == 201, opened.content
    session_id = opened.json()["id"]
    sent = client.post(f"/api/v1/sessions/{session_id}/messages", {"content": "Refund ticket 7"}, format="json")
    assert sent.status_code == 202, sent.content
    execution = Execution.objects.get(pk=sent.json()["execution_id"])
    assert execution.requested_by_id == person.pk

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    again = client.post(f"/api/v1/sessions/{session_id}/messages", {"content": "And 8"}, format="json")
    expected = 202 if cell.may_execute else (404 if cell.now is None else 403)
    assert again.status_code == expected, again.content


# --- a trigger starts the run: it acts as the trigger's identity, the person answers ------


def _invoke(trigger, key):
    return APIClient().post(f"/api/v1/triggers/{trigger.pk}/invoke", {"ticket": 7}, format="json",
                            HTTP_X_API_KEY=key)


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_key_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated):
    """The person's key on their own API trigger (acting with their role), and on the
    admin's API trigger acting with the same role, which the key may invoke only while
    its owner holds that role."""
    person = person_with_role(workspace=workspace, role=cell.role)
    own = trigger_create(actor=person, workspace=workspace, agent=gated, name="Mine", trigger_type="api",
                         prompt="Refund ticket {{ payload.ticket }}", run_as_role=cell.role)
    admins = trigger_create(actor=owner, workspace=workspace, agent=gated, name="Admin's", trigger_type="api",
                            prompt="Refund ticket {{ payload.ticket }}", run_as_role=cell.role)
    key = api_key_issue(created_by=person, workspace=workspace, name="Mine").plaintext
    assert _invoke(admins, key).status_code == 202
    invoked = _invoke(own, key)
    assert invoked.status_code == 202, invoked.content
    [execution_id] = invoked.json()["executions"]
    execution = Execution.objects.get(pk=execution_id)
    assert execution.requested_by_id == own.run_as.user_id

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    own_again, admins_again = _invoke(own, key), _invoke(admins, key)
    if not cell.may_execute:  # removed, or demoted below agent:execute: the key is dead
        assert own_again.status_code == admins_again.status_code == 401
        assert own_again.json()["error"]["message"] == "Invalid API key."
        assert Execution.objects.count() == 2
        return
    assert own_again.status_code == 202, own_again.content
    assert_run_holds_at_most_the_persons_current_role(own_again.json()["executions"][0], cell)
    if role_rank(cell.role) > role_rank(cell.now):  # the admin's trigger acts above the key's owner now
        assert admins_again.status_code == 403 and "run_as_role" in admins_again.json()["error"]["details"]
        assert Execution.objects.count() == 3
    else:
        assert admins_again.status_code == 202
        assert Execution.objects.count() == 4


def _deliver(endpoint_id, secret, message_id):
    body = json.dumps({"type": "refund.asked", "timestamp": timezone.now().isoformat(), "data": {"ticket": 7}})
    at = timezone.now()
    return APIClient().post(
        f"/api/v1/hooks/{endpoint_id}", data=body, content_type="application/json",
        HTTP_WEBHOOK_ID=message_id, HTTP_WEBHOOK_TIMESTAMP=str(int(at.timestamp())),
        HTTP_WEBHOOK_SIGNATURE=Webhook(secret).sign(message_id, at, body))


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_webhook_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated):
    from triggers.webhooks import webhook_endpoint_create

    person = person_with_role(workspace=workspace, role=cell.role)
    issued = webhook_endpoint_create(workspace=workspace, slug="desk", created_by=owner)
    trigger = trigger_create(actor=person, workspace=workspace, agent=gated, name="Refund on event",
                             trigger_type="event", prompt="Refund ticket {{ payload.ticket }}",
                             run_as_role=cell.role,
                             config={"endpoint": "desk", "event_type": "refund.asked", "condition": ""})
    delivered = _deliver(issued.endpoint.pk, issued.secret, "msg_1")
    assert delivered.status_code == 202, delivered.content
    [execution_id] = delivered.json()["executions"]
    execution = Execution.objects.get(pk=execution_id)
    assert execution.requested_by_id == trigger.run_as.user_id

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    again = _deliver(issued.endpoint.pk, issued.secret, "msg_2")
    assert again.status_code == 202, again.content
    _next_firing_as_expected(trigger, cell, owner=owner, runs_before=1)


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_schedule_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated):
    person = person_with_role(workspace=workspace, role=cell.role)
    trigger = trigger_create(actor=person, workspace=workspace, agent=gated, name="Morning refunds",
                             trigger_type="scheduled", prompt="Refund ticket 7", run_as_role=cell.role,
                             config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})
    firing = schedule_slot_fire(trigger_id=trigger.pk, now=MONDAY_8AM)
    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.requested_by_id == trigger.run_as.user_id

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    schedule_slot_fire(trigger_id=trigger.pk, now=MONDAY_8AM + timedelta(days=1))
    _next_firing_as_expected(trigger, cell, owner=owner, runs_before=1)


def _hot_cpu(workspace, now):
    samples = [{"name": "cpu_percent", "value": value, "timestamp": (now - timedelta(minutes=ago)).isoformat()}
               for ago, value in ((6, 95), (4, 97), (0, 99))]
    return metrics_ingest(workspace=workspace, samples=samples, now=now).firings


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_threshold_run_holds_the_persons_current_role_and_never_their_approval(cell, workspace, owner, gated):
    person = person_with_role(workspace=workspace, role=cell.role)
    trigger = trigger_create(actor=person, workspace=workspace, agent=gated, name="cpu-hot",
                             trigger_type="threshold", prompt="CPU is {{ payload.value }}", run_as_role=cell.role,
                             config={"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900})
    now = timezone.now()
    [firing] = _hot_cpu(workspace, now)
    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.requested_by_id == trigger.run_as.user_id

    assert_cell(cell=cell, execution=execution, approval=paused_on_refund(execution.pk), person=person,
                approver=owner, workspace=workspace)

    TriggerFiring.objects.filter(trigger=trigger).update(fired_at=now - timedelta(hours=1))  # cooled down
    _hot_cpu(workspace, timezone.now())
    _next_firing_as_expected(trigger, cell, owner=owner, runs_before=1)


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_pipeline_run_holds_the_persons_current_role_and_never_their_approval(
        cell, workspace, owner, gated, django_capture_on_commit_callbacks):
    """The person's workflow trigger runs Refunds after Collect; the person started Collect."""
    person = person_with_role(workspace=workspace, role=cell.role)
    collect = make_agent(workspace=workspace, owner=owner, name="Collect")
    trigger = trigger_create(actor=person, workspace=workspace, agent=gated, name="after-collect",
                             trigger_type="workflow", prompt="Refund from run {{ payload.upstream.execution_id }}",
                             run_as_role=cell.role, config={"upstream_agent": str(collect.pk)})

    def collect_run(by):
        upstream = execution_services.execution_start(
            request=person_run_request(agent=collect, user=by, prompt="Collect refunds"), agent=collect)
        execution_services.execution_run_segment(execution_id=upstream.pk,
                                                 llm=ScriptedLLM([text_reply("Ticket 7 needs a refund.")]))
        with django_capture_on_commit_callbacks(execute=True):
            execution_services.execution_post_process(execution_id=upstream.pk)

    collect_run(person)
    stage = Execution.objects.get(agent=gated)
    assert stage.trigger_type == "workflow" and stage.requested_by_id == trigger.run_as.user_id

    assert_cell(cell=cell, execution=stage, approval=paused_on_refund(stage.pk), person=person,
                approver=owner, workspace=workspace)

    collect_run(owner)  # the next upstream run, by someone who still may
    runs = Execution.objects.filter(agent=gated)
    if cell.may_execute:
        assert_run_holds_at_most_the_persons_current_role(runs.latest("pk").pk, cell)
        assert runs.count() == 2
    else:
        _trigger_paused(trigger, owner=owner)
        assert runs.count() == 1


# --- a viewer starts nothing -----------------------------------------------------------------


def test_a_viewer_cannot_start_a_run_on_the_agent_page(workspace, gated):
    viewer = person_with_role(workspace=workspace, role="viewer")
    browser = Client()
    browser.force_login(viewer)
    assert browser.post(f"/agents/{gated.pk}/", {"prompt": "Refund 7", "payload": ""}).status_code == 403
    assert not Execution.objects.exists()


def test_a_viewer_cannot_start_a_run_through_the_api(workspace, gated, api_client_for):
    viewer = person_with_role(workspace=workspace, role="viewer")
    response = api_client_for(viewer).post(f"/api/v1/agents/{gated.pk}/run", {"input_prompt": "Refund 7"},
                                           format="json")
    assert response.status_code == 403
    assert not Execution.objects.exists()


def test_a_viewer_can_neither_open_a_session_nor_message_one(workspace, gated, api_client_for, owner):
    viewer = person_with_role(workspace=workspace, role="viewer")
    client = api_client_for(viewer)
    opened = client.post("/api/v1/sessions/", {"workspace": workspace.pk, "agent": str(gated.pk)}, format="json")
    assert opened.status_code == 403
    theirs = execution_services.sessions.session_create(workspace=workspace, agent=gated, user=viewer)
    sent = client.post(f"/api/v1/sessions/{theirs.pk}/messages", {"content": "Refund 7"}, format="json")
    assert sent.status_code == 403
    assert not Execution.objects.exists()


def test_a_viewer_can_neither_get_a_key_nor_use_one(workspace, owner, gated, api_client_for):
    viewer = person_with_role(workspace=workspace, role="viewer")
    issued = api_client_for(viewer).post("/api/v1/api-keys/", {"workspace": workspace.pk, "name": "mine"})
    assert issued.status_code == 403
    trigger = trigger_create(actor=owner, workspace=workspace, agent=gated, name="Viewer's", trigger_type="api",
                             run_as_role="viewer")
    key = api_key_issue(created_by=viewer, workspace=workspace, name="slipped through").plaintext
    assert _invoke(trigger, key).status_code == 401
    assert not Execution.objects.exists()


@pytest.mark.parametrize("trigger_type, config", [
    ("api", {}),
    ("event", {"endpoint": "desk", "event_type": "refund.asked"}),
    ("schedule", {"cron": "0 8 * * 1-5", "timezone": "UTC"}),
    ("threshold", {"expression": "cpu_percent > 90 for 5m"}),
    ("workflow", None),
])
def test_a_viewer_cannot_create_a_trigger_of_any_kind(workspace, owner, gated, api_client_for, trigger_type,
                                                      config):
    viewer = person_with_role(workspace=workspace, role="viewer")
    if config is None:
        config = {"upstream_agent": str(make_agent(workspace=workspace, owner=owner, name="Collect").pk)}
    response = api_client_for(viewer).post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(gated.pk), "name": "Mine", "type": trigger_type,
        "run_as_role": "viewer", "config": config}, format="json")
    assert response.status_code == 403, response.content
    assert not Trigger.objects.exists()


def test_a_trigger_whose_responsible_person_is_a_viewer_starts_nothing(workspace, owner, gated):
    """The trigger was made when its person could run agents; they are a viewer now, who
    could start no run by hand, so the trigger pauses as if they were gone."""
    person = person_with_role(workspace=workspace, role="editor")
    trigger = trigger_create(actor=person, workspace=workspace, agent=gated, name="Morning refunds",
                             trigger_type="scheduled", prompt="Refund ticket 7", run_as_role="viewer",
                             config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})
    assert schedule_slot_fire(trigger_id=trigger.pk, now=MONDAY_8AM).outcome == "started"
    Membership.objects.filter(user=person, workspace=workspace).update(role="viewer")

    schedule_slot_fire(trigger_id=trigger.pk, now=MONDAY_8AM + timedelta(days=1))

    _trigger_paused(trigger, owner=owner)
    assert Execution.objects.count() == 1
