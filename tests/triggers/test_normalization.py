"""Every way a run starts produces the same ExecutionRequest: a person's run from the
agent's page, an API invoke with a key and a signed webhook event differ only in the
trigger fields' values, never in the request's shape."""

import json
import time

import pytest
from django.test import Client
from rest_framework.test import APIClient

from executions.models import Execution
from executions.services.start import request_build
from triggers.apikeys import api_key_issue
from triggers.services import trigger_create
from triggers.webhooks import signature_compute, webhook_endpoint_create

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
    body = json.dumps({"id": 1, "type": "t.created"}).encode()
    t = int(time.time())
    signature = signature_compute(secret=issued.secret, timestamp=t, body=body)
    APIClient().post(f"/api/v1/hooks/{issued.endpoint.pk}", data=body, content_type="application/json",
                     HTTP_X_RIVER_SIGNATURE=f"t={t},v1={signature}")

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
