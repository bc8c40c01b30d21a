"""The overview page: its figures come from the database, per workspace, in a fixed
number of queries, and every figure links to the list behind it."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from executions.models import Execution, ExecutionReplay
from governance.models import ApprovalRequest
from tests.factories import make_agent
from web.overview import overview_for_workspace

pytestmark = pytest.mark.django_db

NOW = timezone.make_aware(dt.datetime(2026, 3, 18, 15, 0))
# 13 today: session, user, the frame (workspaces, counts), the figures (the average run time
# over the week's segments is one aggregate of its own, whatever the number of runs).
OVERVIEW_MAX_QUERIES = 13


_OUTCOME_OF = {Execution.Status.COMPLETED: "answered", Execution.Status.FAILED: "failed",
               Execution.Status.CANCELLED: "cancelled"}


def _runs(agent, *, when, status, count=1, cost="0", tokens=(0, 0), cost_unknown=False, outcome=None):
    version = agent.current_version
    outcome = outcome or _OUTCOME_OF.get(status)
    Execution.objects.bulk_create([
        Execution(workspace=agent.workspace, agent=agent, agent_version=version, status=status, outcome=outcome,
                  queued_at=when,
                  cost_usd=Decimal(cost), tokens_input=tokens[0], tokens_output=tokens[1], cost_unknown=cost_unknown)
        for _ in range(count)
    ])


def _approval(workspace, *, waited: dt.timedelta, resolved_by, status=ApprovalRequest.Status.APPROVED):
    created = NOW - dt.timedelta(days=1)
    return ApprovalRequest.objects.create(
        workspace=workspace, execution_id=1, tool_name="write_back", status=status, expires_at=NOW,
        created_at=created, resolved_at=created + waited, resolved_by=resolved_by,
    )


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Helper")


def test_figures_count_today_the_week_success_tokens_and_cost(agent, owner):
    today = NOW.replace(hour=9)
    three_days_ago = NOW - dt.timedelta(days=3)
    ten_days_ago = NOW - dt.timedelta(days=10)
    _runs(agent, when=today, status=Execution.Status.COMPLETED, count=3, cost="0.50", tokens=(100, 20))
    _runs(agent, when=today, status=Execution.Status.RUNNING, count=1)
    _runs(agent, when=three_days_ago, status=Execution.Status.FAILED, count=1, cost="0.25", tokens=(10, 5))
    _runs(agent, when=three_days_ago, status=Execution.Status.COMPLETED, count=1, cost_unknown=True)
    _runs(agent, when=ten_days_ago, status=Execution.Status.COMPLETED, count=5, cost="1")
    _runs(agent, when=NOW - dt.timedelta(days=20), status=Execution.Status.FAILED, count=7)  # outside the charts

    ov = overview_for_workspace(workspace=agent.workspace, now=NOW)

    assert ov.runs_today == 4
    assert ov.runs_week == 6
    assert (ov.answered_week, ov.finished_week, ov.failed_week) == (4, 5, 1)
    assert ov.success_rate == pytest.approx(0.8)
    assert ov.tokens_week == 3 * 120 + 15
    assert ov.cost_week == Decimal("1.75")
    assert ov.cost_unknown_week == 1
    chart = ov.chart_data()
    assert len(chart["days"]) == 14 and chart["days"][-1] == "2026-03-18"
    by_status = {series["status"]: series["counts"] for series in chart["runs"]}
    assert set(by_status) == {"completed", "failed", "running"}
    assert by_status["completed"][-1] == 3 and by_status["completed"][-4] == 1 and by_status["completed"][-11] == 5
    assert sum(by_status["failed"]) == 1
    assert chart["cost"][-1] == 1.5 and chart["cost"][-11] == 5.0


def test_agents_by_status_and_health_leave_archived_agents_out_of_health(workspace, owner):
    make_agent(workspace=workspace, owner=owner, name="A")
    degraded = make_agent(workspace=workspace, owner=owner, name="B", status=Agent.Status.PAUSED)
    Agent.objects.filter(pk=degraded.pk).update(health=Agent.Health.DEGRADED)
    archived = make_agent(workspace=workspace, owner=owner, name="C", status=Agent.Status.ARCHIVED)
    Agent.objects.filter(pk=archived.pk).update(health=Agent.Health.CRITICAL)

    ov = overview_for_workspace(workspace=workspace, now=NOW)

    assert ov.agents_by_status == {"active": 1, "paused": 1, "archived": 1}
    assert ov.agents_by_health == {"healthy": 1, "degraded": 1}


def test_median_time_to_approval_counts_only_peoples_decisions(workspace, owner):
    for minutes in (2, 4, 10, 60):
        _approval(workspace, waited=dt.timedelta(minutes=minutes), resolved_by=owner)
    _approval(workspace, waited=dt.timedelta(days=2), resolved_by=None, status=ApprovalRequest.Status.EXPIRED)

    ov = overview_for_workspace(workspace=workspace, now=NOW)

    assert ov.approvals_decided == 4
    assert ov.median_approval == dt.timedelta(minutes=7)  # between 4 and 10
    _approval(workspace, waited=dt.timedelta(minutes=30), resolved_by=owner)
    assert overview_for_workspace(workspace=workspace, now=NOW).median_approval == dt.timedelta(minutes=10)


def test_replays_are_never_runs_so_they_never_count(agent, owner):
    _runs(agent, when=NOW, status=Execution.Status.COMPLETED)
    original = Execution.objects.get()
    ExecutionReplay.objects.create(workspace=agent.workspace, agent=agent, replay_of=original,
                                   kind=ExecutionReplay.Kind.REPLAY, created_at=NOW)
    ov = overview_for_workspace(workspace=agent.workspace, now=NOW)
    assert ov.runs_today == 1


def test_the_page_shows_the_current_workspace_and_links_each_figure(client, agent, owner):
    _runs(agent, when=timezone.now(), status=Execution.Status.COMPLETED, count=2, cost="0.40")
    client.force_login(owner)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    today = timezone.localdate().isoformat()
    week = (timezone.localdate() - dt.timedelta(days=6)).isoformat()
    assert f'href="/runs/?since={today}"' in html
    assert f'href="/runs/?status=completed&amp;since={week}"' in html
    assert f'href="/runs/?status=failed&amp;since={week}"' in html
    assert 'href="/agents/?health=degraded"' in html
    assert 'href="/agents/?status=active"' in html
    assert 'href="/approvals/"' in html
    assert "$0.80" in html
    embedded = re.search(r'<script id="overview-data" type="application/json">(.*?)</script>', html).group(1)
    data = json.loads(embedded)
    assert data["runs"][0]["status"] == "completed" and data["runs"][0]["counts"][-1] == 2
    assert 'src="/static/overview.js"' in html and 'src="/static/vendor/chart.umd.min.js"' in html


def test_an_empty_workspace_says_what_to_do_next(client, owner):
    client.force_login(owner)
    html = client.get("/").content.decode()
    assert "No runs in the last 14 days" in html
    assert "No agents in this workspace yet" in html
    assert "overview.js" not in html


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_another_organizations_user_sees_none_of_our_figures(client, agent, outsider):
    _runs(agent, when=timezone.now(), status=Execution.Status.FAILED, count=9, cost="3.21")
    client.force_login(outsider)
    response = client.get("/")
    html = response.content.decode()
    assert response.context["workspace"].name == "Elsewhere"
    assert response.context["ov"].runs_today == 0
    assert "$3.21" not in html and "Helper" not in html and "Support" not in html


def test_a_user_without_a_workspace_gets_a_welcome(client, django_user_model):
    lonely = django_user_model.objects.create_user(username="lonely", password="pw-lonely-123")
    client.force_login(lonely)
    assert "not a member of any workspace" in client.get("/").content.decode()


def test_bounded_queries_at_ten_thousand_runs(client, agent, owner):
    statuses = [Execution.Status.COMPLETED, Execution.Status.FAILED, Execution.Status.CANCELLED,
                Execution.Status.AWAITING_APPROVAL]
    now = timezone.now()
    version = agent.current_version
    Execution.objects.bulk_create([
        Execution(workspace=agent.workspace, agent=agent, agent_version=version, status=statuses[n % 4],
                  queued_at=now - dt.timedelta(hours=n % (24 * 20)), cost_usd=Decimal("0.01"), tokens_input=10)
        for n in range(10_000)
    ], batch_size=2000)
    for minutes in range(50):
        _approval(agent.workspace, waited=dt.timedelta(minutes=minutes), resolved_by=owner)
    client.force_login(owner)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/")
    assert response.status_code == 200
    assert len(queries) <= OVERVIEW_MAX_QUERIES, [q["sql"][:120] for q in queries]
    assert response.context["ov"].runs_week > 2000


def test_blocked_rejected_and_unanswered_runs_are_not_successes_and_cancelled_ones_are_not_counted(agent):
    """The issue's overview: completed runs that were blocked, rejected or unanswered
    said "98%, Failed 0". Only answered runs count as successes; a cancel is left out."""
    today = NOW.replace(hour=9)
    _runs(agent, when=today, status=Execution.Status.COMPLETED, outcome="blocked", count=22)
    _runs(agent, when=today, status=Execution.Status.COMPLETED, outcome="rejected")
    _runs(agent, when=today, status=Execution.Status.COMPLETED, outcome="no_answer")
    _runs(agent, when=today, status=Execution.Status.COMPLETED, count=1)
    _runs(agent, when=today, status=Execution.Status.CANCELLED, count=3)

    ov = overview_for_workspace(workspace=agent.workspace, now=NOW)

    assert (ov.answered_week, ov.finished_week, ov.unanswered_week) == (1, 25, 24)
    assert ov.success_rate == pytest.approx(1 / 25)
