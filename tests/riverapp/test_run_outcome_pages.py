"""The outcome on the pages: the runs list shows it as a badge and filters by it, the run
page shows it beside the status; only ``answered`` is green."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from executions.models import Execution
from rivercore.outcome import Outcome
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def runs(workspace, owner) -> dict[str, Execution]:
    agent = make_agent(workspace=workspace, owner=owner, name="Ticket triage")
    version = agent.versions.get()
    now = timezone.now()
    made = {}
    for outcome in (Outcome.ANSWERED, Outcome.BLOCKED, Outcome.REJECTED, Outcome.NO_ANSWER):
        made[outcome.value] = Execution.objects.create(
            workspace=workspace, agent=agent, agent_version=version, status=Execution.Status.COMPLETED,
            outcome=outcome.value, queued_at=now, started_at=now, finished_at=now)
    return made


def _row(html: str, run: Execution) -> str:
    found = re.search(rf'<tr id="run-row-{run.pk}".*?</tr>', html, re.S)
    assert found is not None
    return found.group(0)


def test_the_runs_list_shows_each_outcome_and_only_answered_is_green(runs, member):
    html = signed_in(member).get("/runs/").content.decode()
    assert 'data-sort="outcome">Outcome</a></th>' in html  # the column, a sort link
    answered = _row(html, runs["answered"])
    assert 'data-outcome="answered"' in answered and "badge badge-ok run-outcome-badge" in answered
    for name in ("blocked", "rejected", "no_answer"):
        row = _row(html, runs[name])
        assert f'data-outcome="{name}"' in row
        assert "badge-ok" not in row, name  # a completed status is not green by itself


def test_the_runs_list_filters_by_outcome(runs, member):
    html = signed_in(member).get("/runs/?outcome=blocked").content.decode()
    assert [int(n) for n in re.findall(r'data-run-id="(\d+)"', html)] == [runs["blocked"].pk]


def test_an_unknown_outcome_filter_is_a_400_naming_the_field(runs, member):
    response = signed_in(member).get("/runs/?outcome=success")
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="id_outcome-error"' in html and 'data-run-id="' not in html


def test_the_run_page_shows_the_outcome_beside_the_status(runs, owner):
    blocked = signed_in(owner).get(f"/runs/{runs['blocked'].pk}/").content.decode()
    assert "Blocked by a policy" in blocked and "badge-ok" not in blocked.split('id="run-part-head"')[1][:600]
    answered = signed_in(owner).get(f"/runs/{runs['answered'].pk}/").content.decode()
    assert "badge badge-ok run-outcome-badge" in answered


def test_an_outsider_cannot_filter_our_runs_by_outcome(runs, outsider):
    html = signed_in(outsider).get("/runs/?outcome=answered").content.decode()
    assert 'data-run-id="' not in html
