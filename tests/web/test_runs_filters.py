"""The runs page (/runs/) and ``GET /api/v1/executions/`` filter through one selector
(``executions_filter``), so the same query picks the same runs on both; bad values are a
400 naming the field on both, never a 500."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.utils import timezone

from executions.models import Execution, Session
from tests.factories import make_agent
from web.context import SESSION_KEY

pytestmark = pytest.mark.django_db


def _page(user, workspace) -> Client:
    client = Client()
    client.force_login(user)
    session = client.session
    session[SESSION_KEY] = workspace.pk
    session.save()
    return client


def _run(agent, *, days_ago: int = 0, **fields) -> Execution:
    return Execution.objects.create(workspace=agent.workspace, agent=agent, agent_version=agent.versions.get(),
                                    queued_at=timezone.now() - dt.timedelta(days=days_ago), **fields)


def _page_ids(response) -> set[int]:
    return {int(n) for n in re.findall(r'data-run-id="(\d+)"', response.content.decode())}


def _api_ids(response) -> set[int]:
    return {row["id"] for row in response.json()["results"]}


@pytest.fixture
def runs(workspace, owner):
    triage = make_agent(workspace=workspace, owner=owner, name="Triage")
    billing = make_agent(workspace=workspace, owner=owner, name="Billing")
    chat = Session.objects.create(workspace=workspace, agent=triage, created_by=owner)
    return {
        "triage": triage, "billing": billing, "chat": chat,
        "old_failed": _run(triage, days_ago=10, status=Execution.Status.FAILED),
        "scheduled": _run(billing, days_ago=3, status=Execution.Status.COMPLETED, trigger_type="scheduled",
                          result={"summary": "Refunds grew by a tenth."}, turn_count=7),
        "in_chat": _run(triage, status=Execution.Status.COMPLETED, session=chat, requester=owner,
                        input_prompt="Which refunds were late?", turn_count=2),
    }


def _cases(runs) -> list[tuple[str, set[int]]]:
    today = timezone.localdate()
    return [
        ("status=failed", {runs["old_failed"].pk}),
        (f"agent={runs['billing'].pk}", {runs["scheduled"].pk}),
        ("trigger_type=scheduled", {runs["scheduled"].pk}),
        (f"since={today - dt.timedelta(days=4)}", {runs["scheduled"].pk, runs["in_chat"].pk}),
        (f"until={today - dt.timedelta(days=3)}", {runs["old_failed"].pk, runs["scheduled"].pk}),
        (f"since={today - dt.timedelta(days=3)}&until={today - dt.timedelta(days=3)}", {runs["scheduled"].pk}),
        (f"session={runs['chat'].pk}", {runs["in_chat"].pk}),
        (f"status=completed&agent={runs['triage'].pk}", {runs["in_chat"].pk}),
        ("since=0001-01-01&until=9999-12-31", {runs["old_failed"].pk, runs["scheduled"].pk, runs["in_chat"].pk}),
        (f"requester={runs['in_chat'].requester_id}", {runs["in_chat"].pk}),
        ("q=refunds", {runs["scheduled"].pk, runs["in_chat"].pk}),
        ("q=REFUND+late", {runs["in_chat"].pk}),
        (f"q=%23{runs['old_failed'].pk}", {runs["old_failed"].pk}),
        ("q=refunds&sort=-turns", {runs["scheduled"].pk, runs["in_chat"].pk}),
    ]


def test_the_page_and_the_api_pick_the_same_runs_for_the_same_filters(runs, workspace, owner, api_client_for):
    page, api = _page(owner, workspace), api_client_for(owner)
    for query, expected in _cases(runs):
        on_page = page.get(f"/runs/?{query}")
        on_api = api.get(f"/api/v1/executions/?{query}&workspace={workspace.pk}")
        assert (query, on_page.status_code, on_api.status_code) == (query, 200, 200)
        assert (query, _page_ids(on_page)) == (query, expected)
        assert (query, _api_ids(on_api)) == (query, expected)


@pytest.mark.parametrize(("query", "field"), [
    ("trigger_type=telepathy", "trigger_type"),
    ("trigger_type=", "trigger_type"),
    ("since=2026-13-01", "since"),
    ("since=", "since"),
    ("until=yesterday", "until"),
    ("since=2026-3-1", "since"),
    ("since=03/01/2026", "since"),
    ("since=%D9%A2%D9%A0%D9%A2%D9%A6-03-01", "since"),
    ("since=2026-W09-1", "since"),
    ("since=2026-03-02&until=2026-03-01", "until"),
    ("session=%D9%A3", "session"),
    ("session=", "session"),
    ("session=99999999999999999999", "session"),
    ("status=sleeping", "status"),
    ("sort=id;drop", "sort"),
    ("sort=input_prompt", "sort"),
    ("sort=", "sort"),
    ("q=", "q"),
    ("q=" + "x" * 201, "q"),
    ("requester=me", "requester"),
])
def test_the_api_refuses_a_bad_filter_naming_it(runs, workspace, owner, api_client_for, query, field):
    response = api_client_for(owner).get(f"/api/v1/executions/?{query}")
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]


@pytest.mark.parametrize(("query", "field"), [
    ("trigger_type=telepathy", "trigger_type"),
    ("since=2026-13-01", "since"),
    ("since=2026-3-1", "since"),
    ("until=03/01/2026", "until"),
    ("since=%D9%A2%D9%A0%D9%A2%D9%A6-03-01", "since"),
    ("since=2026-03-02&until=2026-03-01", "until"),
    ("session=%D9%A3", "session"),
    ("session=12abc", "session"),
    ("status=sleeping", "status"),
    ("sort=-cost_usd", "sort"),
    ("sort=agent__workspace__name", "sort"),
    ("q=" + "x" * 201, "q"),
    ("requester=99999", "requester"),
])
def test_the_page_refuses_a_bad_filter_marking_its_field(runs, workspace, owner, query, field):
    response = _page(owner, workspace).get(f"/runs/?{query}")
    html = response.content.decode()
    assert response.status_code == 400
    assert re.search(rf'name="{field}"[^>]*aria-invalid="true"', html)
    assert _page_ids(response) == set()


def test_another_workspaces_session_id_filters_to_nothing(runs, other_workspace, outsider, api_client_for):
    chat = runs["chat"].pk
    assert _page_ids(_page(outsider, other_workspace).get(f"/runs/?session={chat}")) == set()
    response = api_client_for(outsider).get(f"/api/v1/executions/?session={chat}")
    assert response.status_code == 200 and response.json()["count"] == 0


def test_another_workspaces_agent_is_a_404_on_the_api_and_refused_on_the_page(runs, other_workspace, outsider,
                                                                               api_client_for):
    agent = runs["triage"].pk
    assert api_client_for(outsider).get(f"/api/v1/executions/?agent={agent}").status_code == 404
    assert _page(outsider, other_workspace).get(f"/runs/?agent={agent}").status_code == 400


@pytest.mark.parametrize("sort", ["turns", "-turns", "started", "-started", "agent", "-tokens", "cost", "-status"])
def test_the_page_and_the_api_sort_alike(runs, workspace, owner, api_client_for, sort):
    page = _page(owner, workspace).get(f"/runs/?sort={sort}")
    api = api_client_for(owner).get(f"/api/v1/executions/?sort={sort}&workspace={workspace.pk}")
    page_order = [int(n) for n in re.findall(r'data-run-id="(\d+)"', page.content.decode())]
    assert page_order == [row["id"] for row in api.json()["results"]]
    if sort == "-turns":
        assert page_order[:2] == [runs["scheduled"].pk, runs["in_chat"].pk]


def test_a_sorted_column_says_so_and_its_link_keeps_the_filters(runs, workspace, owner):
    html = _page(owner, workspace).get("/runs/?status=completed&sort=turns").content.decode()
    assert re.search(r'aria-sort="ascending"><a class="sort-link" href="\?status=completed&amp;sort=-turns"', html)


def test_another_workspaces_run_is_never_found_by_text(runs, other_workspace, outsider, api_client_for):
    assert _page_ids(_page(outsider, other_workspace).get("/runs/?q=refunds")) == set()
    response = api_client_for(outsider).get(f"/api/v1/executions/?q=%23{runs['in_chat'].pk}")
    assert response.status_code == 200 and response.json()["count"] == 0
