"""Segregation of duties follows the person behind the run (issue 24 §1b): whatever
path started a run (a click, the API, a trigger's key, schedule, webhook or threshold,
a pipeline, a session message) its requester is the person answerable for it, and that
person's attempt to approve the run's actions is refused with 403
``self_approval_forbidden`` while another approver decides it. The workspace's
self-approval switch still lifts the rule. Delegation and hand-offs, whose tools run in
the engine's threads and need committed rows, are in ``test_requester_rule_chained``."""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django.apps import apps as django_apps
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from executions import services as execution_services
from executions import tasks as execution_tasks
from executions.models import Execution
from executions.services import sessions
from governance.models import ApprovalRequest, AuditLogEntry
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL
from triggers import tasks as trigger_tasks
from triggers.apikeys import api_key_issue, trigger_invoke
from triggers.metrics import metrics_ingest
from triggers.schedule import schedule_slot_fire
from triggers.services import trigger_create
from triggers.webhooks import webhook_endpoint_create

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}


@pytest.fixture(autouse=True)
def _no_broker():
    """No broker: a run's task message is dropped (the test drives the run itself); a
    pipeline's hand-off task runs at once, after the commit that wrote it."""
    approval_tools.reset()
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"), \
            mock.patch.object(trigger_tasks.pipeline_handoff, "delay",
                              side_effect=lambda handoff_id: trigger_tasks.pipeline_handoff(handoff_id)):
        yield
    approval_tools.reset()


@pytest.fixture
def gated(workspace, owner):
    """An act_with_approval agent whose refunds admins and editors approve."""
    return make_agent(workspace=workspace, owner=owner, name="Refunds", tools=[WRITE_TOOL],
                      action_level="act_with_approval", require_approval_for=[WRITE_TOOL],
                      approver_roles=["admin", "editor"])


def paused_on_refund(execution_id: int) -> ApprovalRequest:
    """Run the started run's segment: it proposes a refund and pauses for approval."""
    status = execution_services.execution_run_segment(
        execution_id=execution_id, llm=ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")]))
    assert status == Execution.Status.AWAITING_APPROVAL
    return ApprovalRequest.objects.get(execution_id=execution_id)


def resolve(user, approval, body=None):
    client = APIClient()
    client.force_authenticate(user)
    with mock.patch.object(execution_tasks.run_segment, "delay"):
        return client.post(f"/api/v1/approvals/{approval.pk}/resolve", body or {"status": "approved"},
                           format="json")


def assert_requester_refused_and_other_decides(approval: ApprovalRequest, *, requester, other) -> None:
    """The run's requester gets 403 self_approval_forbidden and nothing changes; another
    approver's decision goes through."""
    refused = resolve(requester, approval)
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "self_approval_forbidden"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.resolved_by_id is None
    assert not AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_approved").exists()
    assert approval_tools.CALLS == []

    decided = resolve(other, approval)
    assert decided.status_code == 200, decided.content
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by_id == other.pk


# --- a person starts the run ------------------------------------------------------------


def test_a_run_started_on_the_agent_page_is_the_clickers(gated, editor, owner):
    browser = Client()
    browser.force_login(editor)
    response = browser.post(f"/agents/{gated.pk}/", {"prompt": "Refund ticket 7", "payload": ""})
    assert response.status_code == 302, response.content
    execution = Execution.objects.get(agent=gated)
    assert execution.requester_id == execution.requested_by_id == editor.pk

    approval = paused_on_refund(execution.pk)

    assert approval.run_started_by_id == editor.pk
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_manual_trigger_fired_from_the_page_is_the_clickers_not_the_triggers_author(gated, owner, editor):
    preset = trigger_create(actor=owner, workspace=gated.workspace, agent=gated, name="Refund preset",
                            trigger_type="manual", prompt="Refund ticket {{ payload.ticket }}")
    browser = Client()
    browser.force_login(editor)
    response = browser.post(f"/agents/{gated.pk}/", {"preset": str(preset.pk), "payload": '{"ticket": 7}'})
    assert response.status_code == 302, response.content
    execution = Execution.objects.get(agent=gated)
    assert execution.requester_id == editor.pk

    approval = paused_on_refund(execution.pk)

    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_run_started_through_the_api_is_the_token_owners(gated, editor, owner, api_client_for):
    response = api_client_for(editor).post(f"/api/v1/agents/{gated.pk}/run", {"input_prompt": "Refund 7"},
                                           format="json")
    assert response.status_code == 202, response.content
    execution_id = response.json()["execution_id"]
    assert Execution.objects.get(pk=execution_id).requester_id == editor.pk

    approval = paused_on_refund(execution_id)

    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_session_message_is_the_senders(gated, editor, owner):
    session = sessions.session_create(workspace=gated.workspace, agent=gated, user=editor)
    _message, execution = sessions.session_message_send(session=session, user=editor, content="Refund ticket 7")
    assert execution.requester_id == editor.pk

    approval = paused_on_refund(execution.pk)

    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


# --- a trigger starts the run: it acts as the trigger's identity, its person answers ------


def test_the_issues_attack_an_editors_own_key_on_their_api_trigger_cannot_approve_the_write(
        gated, editor, owner):
    """The editor creates an API trigger on an act_with_approval agent, invokes it with
    their own key and tries to approve the resulting write: refused."""
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext

    firing = trigger_invoke(plaintext_key=key, trigger_id=trigger.pk, payload={"ticket": 7})

    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.requested_by_id == trigger.run_as.user_id  # acts as the trigger's identity
    assert execution.requester_id == editor.pk  # answers to the editor
    approval = paused_on_refund(execution.pk)
    assert approval.run_started_by_id == editor.pk
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_the_issues_attack_through_http_the_key_then_the_browser(gated, editor, owner):
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext
    invoked = APIClient().post(f"/api/v1/triggers/{trigger.pk}/invoke", {"ticket": 7}, format="json",
                               HTTP_X_API_KEY=key)
    assert invoked.status_code == 202, invoked.content
    [execution_id] = invoked.json()["executions"]
    approval = paused_on_refund(execution_id)
    browser = Client()
    browser.force_login(editor)

    with mock.patch.object(execution_tasks.run_segment, "delay"):
        response = browser.post(f"/approvals/{approval.pk}/resolve", {"decision": "approved"},
                                HTTP_HX_REQUEST="true")

    assert response.status_code == 403
    assert b"requester" in response.content
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_scheduled_run_is_the_triggers_responsible_persons(gated, editor, owner):
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Nightly refunds",
                             trigger_type="scheduled", prompt="Refund ticket 7", run_as_role="editor",
                             config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})
    monday_8am = datetime(2026, 3, 2, 8, 0, tzinfo=ZoneInfo("Europe/Berlin"))

    firing = schedule_slot_fire(trigger_id=trigger.pk, now=monday_8am + timedelta(seconds=2))

    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.requested_by_id == trigger.run_as.user_id and execution.requester_id == editor.pk
    approval = paused_on_refund(execution.pk)
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_webhook_run_is_the_triggers_responsible_persons(gated, editor, owner):
    issued = webhook_endpoint_create(workspace=gated.workspace, slug="desk", created_by=owner)
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund on event",
                             trigger_type="event", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor",
                             config={"endpoint": "desk", "event_type": "refund.asked", "condition": ""})
    body = json.dumps({"type": "refund.asked", "timestamp": timezone.now().isoformat(), "data": {"ticket": 7}})
    at = timezone.now()
    delivered = APIClient().post(
        f"/api/v1/hooks/{issued.endpoint.pk}", data=body, content_type="application/json",
        HTTP_WEBHOOK_ID="msg_1", HTTP_WEBHOOK_TIMESTAMP=str(int(at.timestamp())),
        HTTP_WEBHOOK_SIGNATURE=Webhook(issued.secret).sign("msg_1", at, body))
    assert delivered.status_code == 202, delivered.content
    [execution_id] = delivered.json()["executions"]

    execution = Execution.objects.get(pk=execution_id)
    assert execution.trigger_id == trigger.pk and execution.requester_id == editor.pk
    approval = paused_on_refund(execution_id)
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_threshold_run_is_the_triggers_responsible_persons(gated, editor, owner):
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="cpu-hot",
                             trigger_type="threshold", prompt="CPU is {{ payload.value }}", run_as_role="editor",
                             config={"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900})
    now = timezone.now()
    samples = [{"name": "cpu_percent", "value": value, "timestamp": (now - timedelta(minutes=ago)).isoformat()}
               for ago, value in ((6, 95), (4, 97), (0, 99))]

    [firing] = metrics_ingest(workspace=gated.workspace, samples=samples, now=now).firings

    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.trigger_id == trigger.pk and execution.requester_id == editor.pk
    approval = paused_on_refund(execution.pk)
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


def test_a_pipeline_stage_is_the_upstream_runs_requesters_not_the_stage_triggers(
        gated, workspace, owner, editor, django_capture_on_commit_callbacks):
    """The owner wrote the workflow trigger; the editor started the upstream run. The
    stage answers to the editor, so the editor cannot approve its write."""
    collect = make_agent(workspace=workspace, owner=owner, name="Collect")
    trigger_create(actor=owner, workspace=workspace, agent=gated, name="after-collect", trigger_type="workflow",
                   prompt="Refund from run {{ payload.upstream.execution_id }}", run_as_role="editor",
                   config={"upstream_agent": str(collect.pk)})
    upstream = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=editor, prompt="Collect refunds"))
    execution_services.execution_run_segment(execution_id=upstream.pk,
                                             llm=ScriptedLLM([text_reply("Ticket 7 needs a refund.")]))
    with django_capture_on_commit_callbacks(execute=True):
        execution_services.execution_post_process(execution_id=upstream.pk)

    stage = Execution.objects.get(agent=gated)
    assert stage.trigger_type == "workflow" and stage.requester_id == editor.pk
    approval = paused_on_refund(stage.pk)
    assert approval.run_started_by_id == editor.pk
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)


# --- what the rule shows, and what lifts it ---------------------------------------------


def test_with_self_approval_allowed_the_requester_may_decide(gated, editor):
    workspace = gated.workspace
    workspace.allow_self_approval = True
    workspace.save(update_fields=["allow_self_approval"])
    trigger = trigger_create(actor=editor, workspace=workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=workspace, name="Mine").plaintext
    firing = trigger_invoke(plaintext_key=key, trigger_id=trigger.pk, payload={"ticket": 7})
    approval = paused_on_refund(firing.execution_id)

    decided = resolve(editor, approval)

    assert decided.status_code == 200, decided.content
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by_id == editor.pk


def test_the_requesters_badge_inbox_and_list_leave_out_their_own_runs_requests(gated, editor, owner,
                                                                                api_client_for):
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext
    approval = paused_on_refund(trigger_invoke(plaintext_key=key, trigger_id=trigger.pk,
                                               payload={"ticket": 7}).execution_id)
    editor_browser, owner_browser = Client(), Client()
    editor_browser.force_login(editor)
    owner_browser.force_login(owner)

    assert editor_browser.get("/nav/counts").json()["approvals"] == 0
    assert owner_browser.get("/nav/counts").json()["approvals"] == 1
    assert str(approval.pk) not in [row["id"] for row in
                                    api_client_for(editor).get("/api/v1/approvals/?status=pending").json()["results"]]
    assert str(approval.pk).encode() not in editor_browser.get("/approvals/").content
    assert str(approval.pk).encode() in owner_browser.get("/approvals/").content


def test_the_api_names_the_requester_of_the_run_and_of_its_approval(gated, editor, owner, api_client_for):
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext
    execution_id = trigger_invoke(plaintext_key=key, trigger_id=trigger.pk, payload={"ticket": 7}).execution_id
    approval = paused_on_refund(execution_id)
    client = api_client_for(owner)
    person = {"id": editor.pk, "username": "editor", "display_name": "editor"}

    run = client.get(f"/api/v1/executions/{execution_id}/").json()
    listed = client.get("/api/v1/executions/").json()["results"]
    request = client.get(f"/api/v1/approvals/{approval.pk}/").json()

    assert run["requester"] == person and run["requested_by"] == trigger.run_as.user_id
    assert next(row for row in listed if row["id"] == execution_id)["requester"] == person
    assert request["requester"] == person


def test_the_run_page_and_the_card_show_the_requester_and_the_identity_it_acts_as(gated, editor, owner):
    editor.first_name, editor.last_name = "Eda", "Ito"
    editor.save(update_fields=["first_name", "last_name"])
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext
    execution_id = trigger_invoke(plaintext_key=key, trigger_id=trigger.pk, payload={"ticket": 7}).execution_id
    approval = paused_on_refund(execution_id)
    browser = Client()
    browser.force_login(owner)

    page = browser.get(f"/runs/{execution_id}/")
    card = browser.get(f"/approvals/{approval.pk}/")

    assert page.status_code == 200 and card.status_code == 200
    assert page.context["requester"] == "Eda Ito"
    assert page.context["acting_as"] == trigger.run_as.label
    html = page.content.decode()
    assert "Requested by" in html and "Eda Ito" in html and 'acting as <span class="run-acting-as">' in html
    card_html = card.content.decode()
    assert "Requested by" in card_html and "Eda Ito" in card_html


def test_a_run_the_person_started_by_hand_shows_no_acting_as(gated, editor):
    execution = execution_services.execution_start(agent=gated, request=execution_services.person_run_request(
        agent=gated, user=editor, prompt="Refund 7"))
    browser = Client()
    browser.force_login(editor)

    page = browser.get(f"/runs/{execution.pk}/")

    assert page.context["requester"] == "editor" and page.context["acting_as"] is None
    assert "acting as" not in page.content.decode()


def test_requests_opened_before_the_rule_name_the_runs_requester_after_the_migration(gated, editor, owner):
    """A request opened while the gate still named the identity the run acted as is
    re-pointed at the run's requester by executions 0012."""
    trigger = trigger_create(actor=editor, workspace=gated.workspace, agent=gated, name="Refund hook",
                             trigger_type="api", prompt="Refund ticket {{ payload.ticket }}", run_as_role="editor")
    key = api_key_issue(created_by=editor, workspace=gated.workspace, name="Mine").plaintext
    approval = paused_on_refund(trigger_invoke(plaintext_key=key, trigger_id=trigger.pk,
                                               payload={"ticket": 7}).execution_id)
    ApprovalRequest.objects.filter(pk=approval.pk).update(run_started_by_id=trigger.run_as.user_id)
    orphan = ApprovalRequest.objects.create(workspace=gated.workspace, execution_id=2**40, tool_name=WRITE_TOOL,
                                            run_started_by=owner, expires_at=timezone.now() + timedelta(hours=1))
    migration = importlib.import_module("executions.migrations.0012_approvals_follow_requester")

    migration.approvals_follow_requester(django_apps, None)

    approval.refresh_from_db()
    orphan.refresh_from_db()
    assert approval.run_started_by_id == editor.pk
    assert orphan.run_started_by_id == owner.pk  # no run to read: left as it was
    assert_requester_refused_and_other_decides(approval, requester=editor, other=owner)
