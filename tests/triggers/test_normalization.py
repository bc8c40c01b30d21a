"""Every way a run starts produces the same ExecutionRequest: a person's run from the
agent's page, an API invoke with a key and a signed webhook event differ only in the
trigger fields' values, never in the request's shape."""

import json

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from executions.models import Execution
from executions.services.load import request_build
from triggers.apikeys import api_key_issue
from triggers.services import trigger_create
from triggers.webhooks import webhook_endpoint_create

pytestmark = pytest.mark.django_db


def shape(value):
    """The keys of a dumped model, recursively (the values' types for leaves)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return type(value).__name__ if value is not None else "null"


def test_manual_api_and_event_runs_share_one_request_shape(owner, member, workspace, active_agent):
    page = Client()
    page.force_login(member)
    page.post(f"/agents/{active_agent.pk}/", {"prompt": "Look at ticket 1", "payload": '{"id": 1}'})

    trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Orders", trigger_type="api",
                   prompt="Look at ticket {{ payload.id }}")
    key = api_key_issue(created_by=owner, workspace=workspace, name="k").plaintext
    api_trigger = active_agent.triggers.get(name="Orders")
    APIClient().post(f"/api/v1/triggers/{api_trigger.pk}/invoke", {"id": 1}, format="json", HTTP_X_API_KEY=key)

    issued = webhook_endpoint_create(workspace=workspace, slug="desk", created_by=owner)
    trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Tickets", trigger_type="event",
                   prompt="Look at ticket {{ payload.id }}", config={"endpoint": "desk", "event_type": "t.created"})
    body = json.dumps({"type": "t.created", "timestamp": "2026-01-01T00:00:00Z", "data": {"id": 1}})
    sent_at = timezone.now()
    APIClient().post(f"/api/v1/hooks/{issued.endpoint.pk}", data=body.encode(), content_type="application/json",
                     HTTP_WEBHOOK_ID="msg_1", HTTP_WEBHOOK_TIMESTAMP=str(int(sent_at.timestamp())),
                     HTTP_WEBHOOK_SIGNATURE=Webhook(issued.secret).sign("msg_1", sent_at, body))

    runs = {run.trigger_type: run for run in Execution.objects.all()}
    assert set(runs) == {"manual", "api", "event"}
    requests = {kind: request_build(run) for kind, run in runs.items()}
    dumped = {kind: request.model_dump(mode="json") for kind, request in requests.items()}
    for field in ("execution_id", "trigger_context", "user_context", "agent_config", "input_prompt"):
        assert len({json.dumps(shape(d[field]) if field != "trigger_context" else sorted(d[field]), sort_keys=True)
                    for d in dumped.values()}) == 1, field
    assert {d["input_prompt"] for d in dumped.values()} == {"Look at ticket 1"}
    sources = {kind: d["trigger_context"]["trigger_source"] for kind, d in dumped.items()}
    assert sources == {"manual": "ui", "api": "api:Orders", "event": "webhook:desk"}
    assert dumped["manual"]["trigger_context"]["triggered_by"] == str(member.pk)
    for kind in ("api", "event"):
        assert dumped[kind]["trigger_context"]["trigger_payload"]["id"] == 1
        assert dumped[kind]["trigger_context"]["triggered_by"] != str(owner.pk)  # the trigger's identity


def test_scheduled_threshold_and_workflow_runs_share_the_same_request_shape(
        owner, workspace, active_agent, make_trigger, django_capture_on_commit_callbacks):
    """The other three types end in the same request as a person's run: only the trigger
    fields' values differ."""
    from datetime import timedelta

    from django.utils import timezone

    from executions import services as execution_services
    from tests.factories import ScriptedLLM, make_agent, text_reply
    from triggers.metrics import metrics_ingest
    from triggers.pipelines import pipeline_handoff_process
    from triggers.schedule import schedule_slot_fire

    person = execution_services.execution_start(agent=active_agent, request=execution_services.person_run_request(
        agent=active_agent, user=owner, prompt="Look at ticket 1"))
    scheduled = make_trigger(name="Daily", trigger_type="scheduled", prompt="Look at ticket 1",
                             config={"cron": "* * * * *", "timezone": "Europe/Berlin"})
    schedule_slot_fire(trigger_id=scheduled.pk)
    make_trigger(name="Hot", trigger_type="threshold", prompt="Look at ticket 1",
                 config={"expression": "cpu_percent > 90 for 5m", "cooldown_seconds": 900})
    now = timezone.now()
    metrics_ingest(workspace=workspace, now=now, samples=[
        {"name": "cpu_percent", "value": 95, "timestamp": (now - timedelta(minutes=6)).isoformat()},
        {"name": "cpu_percent", "value": 97, "timestamp": now.isoformat()}])
    upstream_agent = make_agent(workspace=workspace, owner=owner, name="Collector")
    make_trigger(name="Next", trigger_type="workflow", prompt="Look at ticket 1",
                 config={"upstream_agent": str(upstream_agent.pk), "on_statuses": ["completed"]})
    upstream = execution_services.execution_start(agent=upstream_agent, request=execution_services.person_run_request(
        agent=upstream_agent, user=owner, prompt="Collect"))
    execution_services.execution_run_segment(execution_id=upstream.pk, llm=ScriptedLLM([text_reply("Collected.")]))
    with django_capture_on_commit_callbacks(execute=False):
        execution_services.execution_post_process(execution_id=upstream.pk)
    from triggers.models import PipelineHandoff

    for handoff in PipelineHandoff.objects.all():
        pipeline_handoff_process(handoff_id=handoff.pk)

    runs = {run.trigger_type: run for run in Execution.objects.filter(agent=active_agent)}
    assert set(runs) == {"manual", "scheduled", "threshold", "workflow"}, set(runs)
    assert runs["manual"].pk == person.pk
    dumped = {kind: request_build(run).model_dump(mode="json") for kind, run in runs.items()}
    for field in ("execution_id", "user_context", "agent_config", "input_prompt"):
        assert len({json.dumps(shape(d[field]), sort_keys=True) for d in dumped.values()}) == 1, field
    assert len({json.dumps(sorted(d["trigger_context"]), sort_keys=True) for d in dumped.values()}) == 1
    assert {d["input_prompt"] for d in dumped.values()} == {"Look at ticket 1"}
    sources = {kind: d["trigger_context"]["trigger_source"] for kind, d in dumped.items()}
    assert sources["scheduled"] == "cron:Daily" and sources["workflow"] == "workflow:Next"
    assert sources["threshold"].startswith("threshold:")
    for kind in ("scheduled", "threshold", "workflow"):
        assert dumped[kind]["trigger_context"]["triggered_by"] != str(owner.pk)  # the trigger's own identity
