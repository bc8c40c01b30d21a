"""The runs list (/runs/): the current workspace's runs, filtered, paginated, newest
first, in a bounded number of queries; its live row fragment is tenant-scoped."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from executions.models import Execution, ExecutionReplay
from tests.factories import make_agent
from web.context import SESSION_KEY
from web.runs import RUNS_PER_PAGE

pytestmark = pytest.mark.django_db


def signed_in(user, workspace=None) -> Client:
    client = Client()
    client.force_login(user)
    if workspace is not None:
        session = client.session
        session[SESSION_KEY] = workspace.pk
        session.save()
    return client


def _runs(agent, count: int, **fields) -> list[Execution]:
    version = agent.versions.get()
    now = timezone.now()
    rows = [Execution(workspace=agent.workspace, agent=agent, agent_version=version,
                      queued_at=now - dt.timedelta(minutes=count - i), **fields) for i in range(count)]
    return Execution.objects.bulk_create(rows)


def _row_ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-run-id="(\d+)"', html)]


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Ticket triage")


def test_anonymous_visitors_are_sent_to_sign_in():
    response = Client().get("/runs/?status=failed")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=/runs/")


def test_a_member_sees_the_workspaces_runs_newest_first_with_their_columns(agent, member):
    older, newer = _runs(agent, 2, status=Execution.Status.COMPLETED, turn_count=3, tokens_input=1200,
                         tokens_output=34, started_at=timezone.now() - dt.timedelta(seconds=75),
                         finished_at=timezone.now())
    response = signed_in(member).get("/runs/")
    html = response.content.decode()
    assert response.status_code == 200
    assert _row_ids(html) == [newer.pk, older.pk]
    assert "Ticket triage" in html and "Completed" in html and "1,234" in html and "1 min 15 s" in html
    assert f'data-workspace="{agent.workspace_id}"' in html


def test_filters_by_status_agent_trigger_and_days(agent, workspace, owner, member):
    other_agent = make_agent(workspace=workspace, owner=owner, name="Billing")
    failed = _runs(agent, 1, status=Execution.Status.FAILED)[0]
    done = _runs(agent, 1, status=Execution.Status.COMPLETED, trigger_type="scheduled")[0]
    billing = _runs(other_agent, 1, status=Execution.Status.COMPLETED)[0]
    Execution.objects.filter(pk=failed.pk).update(queued_at=timezone.now() - dt.timedelta(days=5))
    client = signed_in(member)

    def ids(**params) -> set[int]:
        response = client.get("/runs/", params)
        assert response.status_code == 200, response.content
        return set(_row_ids(response.content.decode()))

    assert ids(status="failed") == {failed.pk}
    assert ids(agent=str(other_agent.pk)) == {billing.pk}
    assert ids(trigger_type="scheduled") == {done.pk}
    today = timezone.localdate()
    assert ids(since=str(today - dt.timedelta(days=1))) == {done.pk, billing.pk}
    assert ids(until=str(today - dt.timedelta(days=4))) == {failed.pk}
    assert ids(status="completed", agent=str(agent.pk)) == {done.pk}


@pytest.mark.parametrize(("params", "field"), [
    ({"status": "exploded"}, "status"),
    ({"agent": "not-an-agent"}, "agent"),
    ({"trigger_type": "telepathy"}, "trigger_type"),
    ({"since": "yesterday"}, "since"),
    ({"since": "2026-02-02", "until": "2026-02-01"}, "until"),
])
def test_a_bad_filter_is_a_400_naming_the_field(agent, member, params, field):
    _runs(agent, 1)
    response = signed_in(member).get("/runs/", params)
    html = response.content.decode()
    assert response.status_code == 400
    assert f'id="id_{field}-error"' in html and 'aria-invalid="true"' in html
    assert _row_ids(html) == []


def test_another_workspaces_agent_is_not_a_valid_filter(agent, member, other_workspace, outsider):
    foreign = make_agent(workspace=other_workspace, owner=outsider, name="Foreign")
    _runs(foreign, 1)
    assert signed_in(member).get("/runs/", {"agent": str(foreign.pk)}).status_code == 400


def test_the_list_shows_the_current_workspace_only(agent, member, other_workspace, outsider, owner, workspace):
    mine = _runs(agent, 1)[0]
    foreign = _runs(make_agent(workspace=other_workspace, owner=outsider, name="Foreign"), 1)[0]
    assert _row_ids(signed_in(member).get("/runs/").content.decode()) == [mine.pk]
    assert _row_ids(signed_in(outsider).get("/runs/").content.decode()) == [foreign.pk]


def test_pages_of_twenty_five(agent, member):
    runs = _runs(agent, RUNS_PER_PAGE + 3)
    client = signed_in(member)
    first = client.get("/runs/", {"status": "queued"}).content.decode()
    second = client.get("/runs/", {"status": "queued", "page": 2}).content.decode()
    assert len(_row_ids(first)) == RUNS_PER_PAGE and _row_ids(second) == [r.pk for r in runs[:3]][::-1]
    assert "Page 2 of 2" in second and "status=queued&amp;page=1" in second


def test_replays_are_not_runs_unless_asked_for(agent, member):
    run = _runs(agent, 1, status=Execution.Status.COMPLETED)[0]
    replay = ExecutionReplay.objects.create(workspace=agent.workspace, agent=agent, replay_of=run,
                                            kind=ExecutionReplay.Kind.REPLAY, summary="replayed the same way")
    client = signed_in(member)
    assert "replayed the same way" not in client.get("/runs/").content.decode()
    html = client.get("/runs/", {"replays": "only"}).content.decode()
    assert f"Replay #{replay.pk}" in html and "replayed the same way" in html and f'href="/runs/{run.pk}/"' in html


def test_empty_states_say_what_to_do(agent, member):
    client = signed_in(member)
    assert "Run now" in client.get("/runs/").content.decode()
    _runs(agent, 1, status=Execution.Status.COMPLETED)
    assert "No runs match these filters" in client.get("/runs/", {"status": "failed"}).content.decode()


def test_ten_thousand_runs_cost_the_same_queries_as_ten(agent, member):
    client = signed_in(member)
    _runs(agent, 10)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/runs/", {"status": "queued"}).status_code == 200
    _runs(agent, 10_000)
    with CaptureQueriesContext(connection) as many:
        response = client.get("/runs/", {"status": "queued", "page": 7})
    assert response.status_code == 200 and len(_row_ids(response.content.decode())) == RUNS_PER_PAGE
    assert len(many) == len(few) <= 12


def test_the_row_fragment_is_the_members_and_404_for_others(agent, member, outsider):
    run = _runs(agent, 1, status=Execution.Status.AWAITING_APPROVAL)[0]
    response = signed_in(member).get(f"/runs/{run.pk}/row")
    assert response.status_code == 200 and "Awaiting approval" in response.content.decode()
    assert response.content.decode().lstrip().startswith("<tr")
    assert signed_in(outsider).get(f"/runs/{run.pk}/row").status_code == 404
    assert Client().get(f"/runs/{run.pk}/row").status_code == 302
