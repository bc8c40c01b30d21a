"""The pages of evaluations (docs/changing-safely.md, docs/ui.md): each version's latest
evaluation next to Deploy, the gate's refusal and an admin's audited override, the
gate's minimums, the evaluation page, and the run page's pin button."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.evaluation_models import PromotionGate, TestSetPin
from agents.evaluations import promotion_gate_set
from agents.models import Agent
from executions.selectors import agent_runs_recent
from executions.services.evaluation import evaluation_run, evaluation_start
from governance.models import AuditLogEntry
from tests.executions import durable_support
from tests.executions.evaluation_support import ScriptedModel, agent_for_history, history, version_with

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


@pytest.fixture
def agent(workspace, owner, editor):
    made = agent_for_history(workspace=workspace, owner=owner)
    history(agent=made, owner=owner, approver=editor)
    Agent.objects.filter(pk=made.pk).update(status=Agent.Status.PAUSED)
    made.refresh_from_db()
    return made


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def evaluated(agent, version, owner):
    evaluation = evaluation_start(agent=agent, version=version, actor=owner, days=14)
    evaluation_run(evaluation_id=evaluation.pk, llm=ScriptedModel())
    evaluation.refresh_from_db()
    return evaluation


def test_the_agent_page_shows_each_versions_latest_evaluation_next_to_deploy(agent, owner):
    v2 = version_with(agent, "Again.")
    evaluation = evaluated(agent, v2, owner)

    page = signed_in(owner).get(f"/agents/{agent.pk}/").content.decode()

    assert "Latest evaluation" in page
    assert f"/evaluations/{evaluation.pk}/" in page
    assert "Approvals 100%" in page and "Rejections 0%" in page and "Edits 0%" in page
    assert "Deploy version 2" in page and "Evaluate version 2" in page
    assert "Not evaluated" in page  # version 1


def test_the_gate_refuses_a_deploy_from_the_page_and_an_admin_overrides_it(agent, owner, workspace):
    v2 = version_with(agent, "Again.")
    evaluated(agent, v2, owner)
    promotion_gate_set(workspace=workspace, actor=owner, min_rejections=0.5)
    client = signed_in(owner)

    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert "Below the gate: rejections 0.000 is below the minimum 0.500" in page
    assert "Override and deploy" in page

    refused = client.post(f"/agents/{agent.pk}/versions/2/deploy", follow=True).content.decode()
    assert "was not deployed" in refused and "rejections 0.000 is below the minimum 0.500" in refused
    agent.refresh_from_db()
    assert agent.current_version.version == 1

    client.post(f"/agents/{agent.pk}/versions/2/deploy-override", {"override_reason": "Incident 7 fix"})
    agent.refresh_from_db()
    assert agent.current_version.version == 2
    assert AuditLogEntry.objects.get(event_type="version_deploy_override").details["reason"] == "Incident 7 fix"


def test_an_editor_sees_no_override_and_cannot_post_one(agent, owner, editor, workspace):
    version_with(agent, "Again.")
    promotion_gate_set(workspace=workspace, actor=owner, min_rejections=0.5)

    page = signed_in(editor).get(f"/agents/{agent.pk}/").content.decode()
    response = signed_in(editor).post(f"/agents/{agent.pk}/versions/2/deploy-override", {"override_reason": "x"})

    assert "Override and deploy" not in page and "Save the gate" not in page
    assert response.status_code == 403
    assert not AuditLogEntry.objects.filter(event_type="version_deploy_override").exists()


def test_an_admin_sets_the_gate_in_percent(agent, owner, workspace):
    client = signed_in(owner)

    client.post(f"/agents/{agent.pk}/promotion-gate", {"min_approvals": "80", "min_rejections": "", "min_edits": "50"})

    assert PromotionGate.objects.get(workspace=workspace).minimums() == {"approvals": 0.8, "edits": 0.5}
    bad = client.post(f"/agents/{agent.pk}/promotion-gate", {"min_approvals": "180"}, follow=True).content.decode()
    assert "was not saved" in bad
    assert PromotionGate.objects.get(workspace=workspace).minimums() == {"approvals": 0.8, "edits": 0.5}


def test_the_evaluation_page_shows_scores_and_runs(agent, owner):
    evaluation = evaluated(agent, version_with(agent, "Again."), owner)

    page = signed_in(owner).get(f"/evaluations/{evaluation.pk}/").content.decode()

    assert "agreement with rejections" in page
    assert "would still propose it" in page and "proposes the original form" in page
    assert 'hx-trigger="every 2s"' not in page  # finished: no polling


def test_a_running_evaluation_polls_for_progress(agent, owner):
    evaluation = evaluation_start(agent=agent, version=agent.current_version, actor=owner, days=14)

    page = signed_in(owner).get(f"/evaluations/{evaluation.pk}/").content.decode()
    partial = signed_in(owner).get(f"/evaluations/{evaluation.pk}/", HTTP_HX_REQUEST="true").content.decode()

    assert 'hx-trigger="every 2s"' in page
    assert partial.startswith('<div id="evaluation-body"')


def test_outsiders_get_404_and_members_403(agent, owner, outsider, member):
    evaluation = evaluated(agent, agent.current_version, owner)
    run_id = evaluation.runs.first().execution_id

    assert signed_in(outsider).get(f"/evaluations/{evaluation.pk}/").status_code == 404
    assert signed_in(outsider).post(f"/agents/{agent.pk}/versions/1/evaluate", {"days": 3}).status_code == 404
    assert signed_in(outsider).post(f"/runs/{run_id}/pin", {"label": "bad"}).status_code == 404
    assert signed_in(member).post(f"/agents/{agent.pk}/versions/1/evaluate", {"days": 3}).status_code == 403
    assert signed_in(member).post(f"/runs/{run_id}/pin", {"label": "bad"}).status_code == 403
    assert signed_in(member).post(f"/agents/{agent.pk}/promotion-gate", {"min_edits": "1"}).status_code == 403
    assert not TestSetPin.objects.exists() and not PromotionGate.objects.exists()


def test_the_run_page_pins_and_unpins(agent, owner):
    run = agent_runs_recent(agent_id=agent.pk, limit=1)[0]
    client = signed_in(owner)

    assert "Pin to the test set" in client.get(f"/runs/{run.pk}/").content.decode()
    client.post(f"/runs/{run.pk}/pin", {"label": "bad", "note": "<script>x</script>"})
    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert TestSetPin.objects.get(agent=agent, execution_id=run.pk).label == "bad"
    assert "bad example" in page and "<script>x</script>" not in page and "&lt;script&gt;" in page
    client.post(f"/runs/{run.pk}/pin", {"unpin": "1"})
    assert not TestSetPin.objects.exists()
