"""POST /api/v1/execute/continue is single-use: a paused state resumes once. A replay,
sequential or concurrent, gets 409 and runs nothing (no tool, no model call)."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from executions.models import ContinuationUse
from rivercore.tools import Tool, ToolCategory, ToolError, ToolErrorKind, get_tool, register
from tenancy.services import token_issue
from tests.executions import engine_support as support
from tests.executions.test_execute_api import body_for


@pytest.fixture(autouse=True)
def _reset_calls():
    support.CALLS.clear()


@pytest.fixture
def model(fake_openai, settings):
    server = fake_openai()
    settings.RIVER_LLM_MODEL = "fake-model"
    settings.RIVER_LLM_BASE_URL = server.base_url
    return server


def _paused(model, client, workspace, user) -> dict:
    model.tool_call("test_write", {"text": "original"}, call_id="w1")
    data = body_for(workspace, user, tools=["test_write"], action_level="act_with_approval",
                    require_approval_for=["test_write"])
    body = client.post("/api/v1/execute", data, format="json").json()
    assert body["status"] == "awaiting_approval", body
    return body


# The approver the caller names: never the run's user, whatever ids the database hands
# out (a literal "1" was the run's own user whenever the users table started empty, and
# segregation of duties then refused the continuation with 403).
APPROVER = "approver-of-record"


def _continuation(paused: dict, **resolution) -> dict:
    return {"execution_id": paused["execution_id"], "continuation_type": "approval_resolved",
            "approval_resolution": {"resolved_by": APPROVER, **resolution},
            "serialized_state": paused["serialized_state"]}


@pytest.mark.django_db
def test_replaying_an_approval_continuation_is_409_and_writes_nothing_more(model, org_admin, workspace,
                                                                           api_client_for):
    client = api_client_for(org_admin)
    paused = _paused(model, client, workspace, org_admin)
    model.text("Written.")
    first = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"), format="json")
    assert first.status_code == 200 and first.json()["status"] == "success"
    model_calls = model.calls

    replay = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"), format="json")

    assert replay.status_code == 409
    assert replay.json()["error"]["code"] == "continuation_used"
    assert support.CALLS == [("test_write", {"text": "original"})]  # the write ran once
    assert model.calls == model_calls  # the model was not asked again
    assert ContinuationUse.objects.filter(execution_id=paused["execution_id"]).count() == 1


@pytest.mark.django_db
def test_a_rejected_state_cannot_be_replayed_as_approved(model, org_admin, workspace, api_client_for):
    client = api_client_for(org_admin)
    paused = _paused(model, client, workspace, org_admin)
    model.text("Not writing.")
    rejected = client.post("/api/v1/execute/continue",
                           _continuation(paused, status="rejected", resolution_comment="no"), format="json")
    assert rejected.status_code == 200

    for resolution in ({"status": "approved"}, {"status": "edited_approved", "modified_args": {"text": "sneaky"}}):
        replay = client.post("/api/v1/execute/continue", _continuation(paused, **resolution), format="json")
        assert replay.status_code == 409

    assert support.CALLS == []


@pytest.mark.django_db
def test_a_refused_continuation_is_not_used_up(model, org_admin, workspace, api_client_for):
    """A 400 (arguments that do not fit the tool) consumes nothing: the same state
    may still be resumed once, correctly."""
    client = api_client_for(org_admin)
    paused = _paused(model, client, workspace, org_admin)

    bad = client.post("/api/v1/execute/continue",
                      _continuation(paused, status="edited_approved", modified_args={"text": ""}), format="json")
    assert bad.status_code == 400
    assert ContinuationUse.objects.count() == 0

    model.text("Written.")
    good = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"), format="json")
    assert good.status_code == 200
    assert support.CALLS == [("test_write", {"text": "original"})]


@pytest.mark.django_db
def test_each_new_pause_issues_a_new_single_use_state(model, org_admin, workspace, api_client_for):
    """The state a continuation returns when the run pauses again is a new one; it
    resumes once too, while the first stays used."""
    client = api_client_for(org_admin)
    paused = _paused(model, client, workspace, org_admin)
    model.tool_call("test_write", {"text": "second"}, call_id="w2")
    again = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"), format="json").json()
    assert again["status"] == "awaiting_approval"
    assert again["serialized_state"] != paused["serialized_state"]

    model.text("Both written.")
    assert client.post("/api/v1/execute/continue", _continuation(again, status="approved"),
                       format="json").status_code == 200
    assert client.post("/api/v1/execute/continue", _continuation(again, status="approved"),
                       format="json").status_code == 409
    assert client.post("/api/v1/execute/continue", _continuation(paused, status="approved"),
                       format="json").status_code == 409
    assert support.CALLS == [("test_write", {"text": "original"}), ("test_write", {"text": "second"})]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="concurrent replays need row-level locking (PostgreSQL)")
def test_concurrent_replays_one_wins_the_rest_get_409(model, org_admin, workspace):
    token = token_issue(user=org_admin).plaintext
    main = APIClient()
    main.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    paused = _paused(model, main, workspace, org_admin)
    model.text("Written once.")
    racers = 8
    barrier = threading.Barrier(racers)
    codes: list[int] = []
    lock = threading.Lock()

    def replay() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            barrier.wait(timeout=20)
            response = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"),
                                   format="json")
            with lock:
                codes.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=replay) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(codes) == [200] + [409] * (racers - 1)
    assert support.CALLS == [("test_write", {"text": "original"})]
    assert ContinuationUse.objects.count() == 1


@pytest.mark.django_db
def test_an_approved_write_that_fails_ends_the_stateless_run_failed(model, org_admin, workspace, api_client_for):
    """The stateless driver runs the same engine rule: the approved call's failure is
    the run's outcome (failed, with the call's error), not a success the model writes."""
    client = api_client_for(org_admin)
    model.tool_call("approval_test_failing_write", {"text": "refund"}, call_id="f1")
    data = body_for(workspace, org_admin, tools=["approval_test_failing_write"], action_level="act_with_approval",
                    require_approval_for=["approval_test_failing_write"])
    paused = client.post("/api/v1/execute", data, format="json").json()
    assert paused["status"] == "awaiting_approval", paused
    model.text("Refund done!")
    asked = model.calls

    done = client.post("/api/v1/execute/continue", _continuation(paused, status="approved"), format="json")

    body = done.json()
    assert done.status_code == 200
    assert body["status"] == "failed"
    assert body["error"]["details"]["approved_call_failed"] is True
    assert "ledger is locked for good" in body["error"]["message"]
    assert body["result"]["summary"] == ""
    assert model.calls == asked  # the model was not asked to carry on


def _failing_write(ctx, args: support.TextIn) -> support.TextOut:
    raise ToolError(ToolErrorKind.FAILED, "the ledger is locked for good")


if get_tool("approval_test_failing_write") is None:
    register(Tool(name="approval_test_failing_write", description="A write that always fails.",
                  category=ToolCategory.EXECUTION, input_model=support.TextIn, output_model=support.TextOut,
                  handler=_failing_write, permission="data_source:update", writes=True))
