"""The canary panel of an agent's page: the figures with their counts, the live
partial, and the start/stop/promote controls with the same rules as the API."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.canary import agent_canary_start
from agents.models import AgentCanary, AgentVersion
from executions.models import Execution
from governance.models import AuditLogEntry
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Ticket fixer", tools=["get_workspace_info"])
    AgentVersion.objects.create(
        agent=agent,
        version=2,
        goal="<b>Faster</b>",
        instructions="Be quick.",
        action_level="automated",
        tools=["get_workspace_info"],
    )
    return agent


def _runs(agent, canary, *, arm: bool, outcome: str, count: int) -> None:
    for _ in range(count):
        Execution.objects.create(
            workspace_id=agent.workspace_id,
            agent=agent,
            canary=canary,
            canary_arm=arm,
            agent_version=canary.version if arm else canary.base_version,
            status="completed" if outcome != "failed" else "failed",
            outcome=outcome,
        )


def test_the_page_shows_the_running_canarys_figures_and_polls(agent, owner):
    canary = agent_canary_start(agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10, min_runs=3)
    _runs(agent, canary, arm=True, outcome="answered", count=2)
    _runs(agent, canary, arm=True, outcome="failed", count=1)
    _runs(agent, canary, arm=False, outcome="answered", count=9)
    page = _client(owner).get(f"/agents/{agent.pk}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Version <strong>v2</strong> takes <strong>10%</strong> of new runs" in html
    assert "33.3% (1 of 3)" in html and "0.0% (0 of 9)" in html  # failed, with the counts behind it
    assert re.search(r'hx-get="/agents/[^"]+/canary/panel" hx-trigger="every 5s"', html)
    assert "Promote v2" in html and "Stop the canary" in html
    assert "Start the canary" not in html  # one at a time

    partial = _client(owner).get(f"/agents/{agent.pk}/canary/panel")
    assert partial.status_code == 200 and 'id="canary-figures"' in partial.content.decode()
    assert "<html" not in partial.content.decode()


def test_start_stop_and_promote_from_the_page(agent, owner):
    client = _client(owner)
    response = client.post(
        f"/agents/{agent.pk}/canary/start", {"version": 2, "percent": 20, "margin": 5, "min_runs": 10}
    )
    assert response.status_code == 302
    canary = AgentCanary.objects.get()
    assert (canary.percent, canary.margin, canary.min_runs, canary.status) == (20, 0.05, 10, "running")

    assert client.post(f"/agents/{agent.pk}/canary/stop").status_code == 302
    canary.refresh_from_db()
    assert canary.status == "stopped" and canary.figures["status"] == "stopped"
    html = client.get(f"/agents/{agent.pk}/").content.decode()
    assert "stopped" in html and "hx-trigger" not in html.split('id="canary"')[1].split("</section>")[0]

    client.post(f"/agents/{agent.pk}/canary/start", {"version": 2, "percent": 10, "margin": 10, "min_runs": 30})
    assert client.post(f"/agents/{agent.pk}/canary/promote").status_code == 302
    agent.refresh_from_db()
    assert agent.current_version.version == 2 and agent.canary_id is None
    assert AuditLogEntry.objects.filter(event_type="canary_promoted").count() == 1


def test_bad_form_values_start_nothing_and_say_why(agent, owner):
    client = _client(owner)
    response = client.post(
        f"/agents/{agent.pk}/canary/start", {"version": 1, "percent": 80, "margin": 5, "min_runs": 10}, follow=True
    )
    assert not AgentCanary.objects.exists()
    html = response.content.decode()
    assert "No canary was started" in html and "Share of new runs" in html


def test_a_member_may_look_but_not_act_and_an_outsider_gets_404(agent, owner, member, outsider):
    canary = agent_canary_start(agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10)
    looking = _client(member).get(f"/agents/{agent.pk}/")
    assert looking.status_code == 200 and "Promote v2" not in looking.content.decode()
    for action in ("stop", "promote"):
        assert _client(member).post(f"/agents/{agent.pk}/canary/{action}").status_code == 403
        assert _client(outsider).post(f"/agents/{agent.pk}/canary/{action}").status_code == 404
    assert (
        _client(member)
        .post(f"/agents/{agent.pk}/canary/start", {"version": 2, "percent": 10, "margin": 5, "min_runs": 5})
        .status_code
        == 403
    )
    assert _client(outsider).get(f"/agents/{agent.pk}/canary/panel").status_code == 404
    canary.refresh_from_db()
    assert canary.status == "running"


def test_a_rolled_back_canary_shows_why(agent, owner):
    from executions.canary import canary_check

    canary = agent_canary_start(
        agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10, min_runs=3, margin=0.1
    )
    _runs(agent, canary, arm=True, outcome="failed", count=3)
    _runs(agent, canary, arm=False, outcome="answered", count=3)
    assert canary_check(canary_id=canary.pk) == "rolled_back"
    html = _client(owner).get(f"/agents/{agent.pk}/").content.decode()
    assert "rolled back" in html and "failed 100.0% (3 of 3) against 0.0% (0 of 3)" in html
    assert "Start the canary" in html
