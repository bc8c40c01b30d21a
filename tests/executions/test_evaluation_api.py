"""The evaluation, promotion gate and test-set endpoints (docs/changing-safely.md):
202 then progress and scores, the gate's 409 naming the scores, an admin's audited
override, role rules, outsiders and hostile input."""

from __future__ import annotations

import pytest

from agents.evaluation_models import Evaluation, PromotionGate, TestSetPin
from agents.models import Agent
from executions.services.evaluation import evaluation_run
from governance.models import AuditLogEntry
from tests.executions import durable_support
from tests.executions.evaluation_support import LEARNED, ScriptedModel, agent_for_history, history, version_with

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


@pytest.fixture
def agent(workspace, owner):
    made = agent_for_history(workspace=workspace, owner=owner)
    # paused: deploying needs no approval channel, only the promotion gate is under test
    Agent.objects.filter(pk=made.pk).update(status=Agent.Status.PAUSED)
    made.refresh_from_db()
    return made


@pytest.fixture
def runs(agent, owner, editor):
    Agent.objects.filter(pk=agent.pk).update(status=Agent.Status.ACTIVE)
    agent.refresh_from_db()
    made = history(agent=agent, owner=owner, approver=editor)
    Agent.objects.filter(pk=agent.pk).update(status=Agent.Status.PAUSED)
    agent.refresh_from_db()
    return made


def evaluate_url(agent, version: int) -> str:
    return f"/api/v1/agents/{agent.pk}/versions/{version}/evaluate"


def deploy_url(agent, version: int) -> str:
    return f"/api/v1/agents/{agent.pk}/versions/{version}/deploy"


def evaluated(client, agent, version: int) -> dict:
    """POST evaluate (202), run its task as a worker would, GET the result."""
    response = client.post(evaluate_url(agent, version), {"days": 14}, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    evaluation_id = response.json()["id"]
    queued = client.get(f"/api/v1/evaluations/{evaluation_id}").json()
    assert queued["progress"] == {"runs_done": 0, "runs_total": 0} and queued["scores"] is None
    assert evaluation_run(evaluation_id=evaluation_id, llm=ScriptedModel()) == "done"
    done = client.get(f"/api/v1/evaluations/{evaluation_id}")
    assert done.status_code == 200
    return done.json()


def set_gate(client, workspace, **minimums):
    response = client.patch("/api/v1/promotion-gate/", {"workspace": workspace.pk, **minimums}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_evaluate_answers_202_then_scores_and_runs(api_client_for, owner, agent, runs):
    client = api_client_for(owner)
    learned = version_with(agent, LEARNED)

    body = evaluated(client, agent, learned.version)

    assert body["status"] == "done"
    assert body["progress"] == {"runs_done": 4, "runs_total": 4}
    assert body["scores"] == {"approvals": 1.0, "rejections": 1.0, "edits": 1.0}
    assert {run["execution_id"] for run in body["runs"]} == {run.pk for run in runs.values()}
    assert all(
        {
            "answer",
            "approved",
            "rejected",
            "edited",
            "new_writes",
            "approvals_added",
            "cost_usd",
            "turns",
            "different_read",
        }
        <= set(run)
        for run in body["runs"]
    )


def test_a_version_that_reverses_a_rejected_write_is_refused_by_the_gate(api_client_for, owner, workspace, agent, runs):
    client = api_client_for(owner)
    learned = version_with(agent, LEARNED)
    reckless = version_with(agent, "Record what you are asked to, again.")
    set_gate(client, workspace, min_rejections="0.9")
    assert evaluated(client, agent, learned.version)["scores"]["rejections"] == 1.0
    assert evaluated(client, agent, reckless.version)["scores"]["rejections"] == 0.0

    refused = client.post(deploy_url(agent, reckless.version), {}, format="json")

    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "promotion_gate"
    assert error["details"]["scores.rejections"] == ["0.000 is below the minimum 0.900"]
    agent.refresh_from_db()
    assert agent.current_version.version == 1
    assert client.post(deploy_url(agent, learned.version), {}, format="json").status_code == 200


def test_no_evaluation_while_a_gate_is_set_is_refused(api_client_for, owner, workspace, agent):
    client = api_client_for(owner)
    fresh = version_with(agent, LEARNED)
    set_gate(client, workspace, min_approvals=0.5)

    refused = client.post(deploy_url(agent, fresh.version), {}, format="json")

    assert refused.status_code == 409
    assert "scores" in refused.json()["error"]["details"]


def test_without_a_gate_deploy_is_unchanged(api_client_for, owner, agent):
    fresh = version_with(agent, LEARNED)

    assert api_client_for(owner).post(deploy_url(agent, fresh.version)).status_code == 200


def test_an_admin_override_is_audited_with_scores_and_reason(api_client_for, owner, workspace, agent, runs):
    client = api_client_for(owner)
    reckless = version_with(agent, "Again.")
    set_gate(client, workspace, min_rejections=0.9, min_edits=0.5)
    evaluation = evaluated(client, agent, reckless.version)

    response = client.post(
        deploy_url(agent, reckless.version), {"override_reason": "Hotfix for ticket 42"}, format="json"
    )

    assert response.status_code == 200, response.content
    entry = AuditLogEntry.objects.get(event_type="version_deploy_override")
    assert entry.actor == owner and str(entry.agent_id) == str(agent.pk)
    assert entry.details["reason"] == "Hotfix for ticket 42"
    assert entry.details["scores"] == {"approvals": 1.0, "rejections": 0.0, "edits": 0.0}
    assert entry.details["minimums"] == {"rejections": 0.9, "edits": 0.5}
    assert entry.details["evaluation"] == evaluation["id"]
    assert set(entry.details["shortfalls"]) == {"scores.rejections", "scores.edits"}


def test_an_editor_may_deploy_but_not_override(api_client_for, owner, editor, workspace, agent, runs):
    set_gate(api_client_for(owner), workspace, min_rejections=0.9)
    reckless = version_with(agent, "Again.")
    evaluated(api_client_for(editor), agent, reckless.version)

    response = api_client_for(editor).post(
        deploy_url(agent, reckless.version), {"override_reason": "please"}, format="json"
    )

    assert response.status_code == 403
    assert not AuditLogEntry.objects.filter(event_type="version_deploy_override").exists()
    agent.refresh_from_db()
    assert agent.current_version.version == 1


def test_a_blank_override_is_no_override(api_client_for, owner, workspace, agent):
    set_gate(api_client_for(owner), workspace, min_approvals=0.5)
    fresh = version_with(agent, "Again.")

    response = api_client_for(owner).post(deploy_url(agent, fresh.version), {"override_reason": "   "}, format="json")

    assert response.status_code == 409


@pytest.mark.parametrize(
    "body, field",
    [
        ({"override_reason": "x" * 1001}, "override_reason"),
        ({"override_reason": 5}, "override_reason"),
        ({"override_reason": "a\x00b"}, "override_reason"),
        ({"force": True}, "force"),
    ],
)
def test_hostile_deploy_bodies_are_400_naming_the_field(api_client_for, owner, workspace, agent, body, field):
    set_gate(api_client_for(owner), workspace, min_approvals=0.5)
    fresh = version_with(agent, "Again.")

    response = api_client_for(owner).post(deploy_url(agent, fresh.version), body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]


@pytest.mark.parametrize("days", [0, 91, -1, "many", None, True, 1.5, "1" * 40])
def test_days_out_of_bounds_is_400_naming_days(api_client_for, owner, agent, days):
    response = api_client_for(owner).post(evaluate_url(agent, 1), {"days": days}, format="json")

    assert response.status_code == 400, response.content
    assert "days" in response.json()["error"]["details"]
    assert not Evaluation.objects.exists()


def test_evaluate_refuses_unknown_fields_and_versions(api_client_for, owner, agent):
    client = api_client_for(owner)
    assert client.post(evaluate_url(agent, 1), {"days": 3, "llm": "x"}, format="json").status_code == 400
    assert client.post(evaluate_url(agent, 99), {}, format="json").status_code == 404
    assert client.post(evaluate_url(agent, "<b>1</b>"), {}, format="json").status_code == 404
    assert client.get("/api/v1/evaluations/not-a-uuid").status_code == 404


def test_outsider_gets_404_everywhere(api_client_for, owner, outsider, workspace, agent, runs):
    evaluation_id = api_client_for(owner).post(evaluate_url(agent, 1), {}, format="json").json()["id"]
    client = api_client_for(outsider)

    assert client.post(evaluate_url(agent, 1), {}, format="json").status_code == 404
    assert client.get(f"/api/v1/evaluations/{evaluation_id}").status_code == 404
    assert client.get(f"/api/v1/agents/{agent.pk}/test-set/").status_code == 404
    pin = {"execution": runs["Record gamma"].pk, "label": "bad"}
    assert client.post(f"/api/v1/agents/{agent.pk}/test-set/", pin, format="json").status_code == 404
    assert client.get(f"/api/v1/promotion-gate/?workspace={workspace.pk}").status_code == 404
    assert (
        client.patch("/api/v1/promotion-gate/", {"workspace": workspace.pk, "min_edits": 0}, format="json").status_code
        == 404
    )
    assert client.post(deploy_url(agent, 1), {"override_reason": "mine"}, format="json").status_code == 404
    assert not PromotionGate.objects.exists() and not TestSetPin.objects.exists()


def test_a_member_without_the_role_gets_403(api_client_for, member, workspace, agent, runs):
    client = api_client_for(member)

    assert client.post(evaluate_url(agent, 1), {}, format="json").status_code == 403
    assert (
        client.post(
            f"/api/v1/agents/{agent.pk}/test-set/", {"execution": runs["Record gamma"].pk}, format="json"
        ).status_code
        == 403
    )
    assert (
        client.patch("/api/v1/promotion-gate/", {"workspace": workspace.pk, "min_edits": 0}, format="json").status_code
        == 403
    )
    # members read
    assert client.get(f"/api/v1/promotion-gate/?workspace={workspace.pk}").status_code == 200
    assert client.get(f"/api/v1/agents/{agent.pk}/test-set/").status_code == 200


def test_an_editor_may_not_change_the_gate(api_client_for, editor, workspace):
    response = api_client_for(editor).patch(
        "/api/v1/promotion-gate/", {"workspace": workspace.pk, "min_edits": 0}, format="json"
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    "field, value",
    [
        ("min_approvals", 1.5),
        ("min_rejections", -0.1),
        ("min_edits", "NaN"),
        ("min_edits", "high"),
        ("min_edits", [1]),
        ("min_everything", 1),
        ("workspace", "<script>"),
    ],
)
def test_gate_input_is_checked(api_client_for, owner, workspace, field, value):
    body = {"workspace": workspace.pk, field: value}

    response = api_client_for(owner).patch("/api/v1/promotion-gate/", body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not PromotionGate.objects.exists()


def test_gate_round_trip_and_audit(api_client_for, owner, workspace):
    client = api_client_for(owner)
    assert set_gate(client, workspace, min_approvals="0.75", min_edits=None) == {
        "workspace": workspace.pk,
        "min_approvals": 0.75,
        "min_rejections": None,
        "min_edits": None,
    }
    assert set_gate(client, workspace, min_rejections=1) == {
        "workspace": workspace.pk,
        "min_approvals": 0.75,
        "min_rejections": 1.0,
        "min_edits": None,
    }
    entries = AuditLogEntry.objects.filter(event_type="promotion_gate_updated").order_by("created_at")
    assert [e.details["after"] for e in entries] == [{"approvals": 0.75}, {"approvals": 0.75, "rejections": 1.0}]


def test_pin_and_unpin_a_run(api_client_for, owner, agent, runs):
    client = api_client_for(owner)
    url = f"/api/v1/agents/{agent.pk}/test-set/"
    gamma = runs["Record gamma"]

    created = client.post(url, {"execution": gamma.pk, "label": "bad", "note": "<b>rejected</b>"}, format="json")

    assert created.status_code == 201, created.content
    assert client.get(url).json()[0] | {"created_at": None} == {
        "execution": gamma.pk,
        "label": "bad",
        "note": "<b>rejected</b>",
        "pinned_by": owner.pk,
        "created_at": None,
    }
    assert AuditLogEntry.objects.filter(event_type="test_set_pinned", execution_id=gamma.pk).exists()
    assert client.delete(url, {"execution": gamma.pk}, format="json").status_code == 204
    assert client.get(url).json() == []


@pytest.mark.parametrize(
    "body, field",
    [
        ({"execution": "x"}, "execution"),
        ({}, "execution"),
        ({"execution": 1, "label": "great"}, "label"),
        ({"execution": 1, "note": "n" * 501}, "note"),
        ({"execution": 2**64}, "execution"),
    ],
)
def test_pin_input_is_checked(api_client_for, owner, agent, body, field):
    response = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/test-set/", body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]


def test_another_agents_run_cannot_be_pinned(api_client_for, owner, workspace, agent, runs):
    other = agent_for_history(workspace=workspace, owner=owner)

    response = api_client_for(owner).post(
        f"/api/v1/agents/{other.pk}/test-set/", {"execution": runs["Record gamma"].pk}, format="json"
    )

    assert response.status_code == 400
    assert "execution" in response.json()["error"]["details"]


def test_the_task_is_sent_after_commit_and_a_broker_outage_is_no_500(
    api_client_for, owner, agent, monkeypatch, django_capture_on_commit_callbacks
):
    from celery import current_app

    task = current_app.tasks["executions.evaluate_version"]
    sent = []
    monkeypatch.setattr(task, "delay", lambda *args, **kwargs: sent.append(args))
    client = api_client_for(owner)
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(evaluate_url(agent, 1), {}, format="json")
    assert sent == [(first.json()["id"],)]

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(task, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        second = client.post(evaluate_url(agent, 1), {}, format="json")
    assert second.status_code == 202
    assert Evaluation.objects.get(pk=second.json()["id"]).status == "queued"
