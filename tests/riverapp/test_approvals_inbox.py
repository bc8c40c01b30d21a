"""The approvals inbox (/approvals/): the current workspace's requests the user may
decide, filters, the live list fragment, bounded queries."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.models import ApprovalRequest
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _requests(workspace, agent, count: int, **fields) -> list[ApprovalRequest]:
    now = timezone.now()
    defaults = {"tool_name": "write_back", "approver_roles": ["admin"], "risk_context": "Writes to tickets."}
    return ApprovalRequest.objects.bulk_create([
        ApprovalRequest(workspace=workspace, execution_id=1000 + i, agent_id=agent.pk, proposed_payload={"id": i},
                        expires_at=now + dt.timedelta(hours=1), created_at=now - dt.timedelta(seconds=count - i),
                        **{**defaults, **fields})
        for i in range(count)])


def _cards(html: str) -> list[str]:
    return re.findall(r'<article class="card approval-card[^"]*" id="approval-([0-9a-f-]+)"', html)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Refunder")


def test_anonymous_visitors_are_sent_to_sign_in():
    response = Client().get("/approvals/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_waiting_requests_newest_first_and_the_others_only_counted(workspace, agent, owner, editor):
    older, newer = _requests(workspace, agent, 2)
    _requests(workspace, agent, 1, approver_roles=["owner-only-role"])
    html = signed_in(owner).get("/approvals/").content.decode()
    assert _cards(html) == [str(newer.pk), str(older.pk)]
    assert "1 more request waits for another approver" in html
    assert _cards(signed_in(editor).get("/approvals/").content.decode()) == []  # admins decide these


@pytest.mark.parametrize(("params", "expected"), [
    ({"tool": "refund"}, {"refund"}), ({"risk": "MONEY"}, {"refund"}), ({"tool": "write_back"}, {"write_back"}),
])
def test_filters_by_tool_and_risk(workspace, agent, owner, params, expected):
    _requests(workspace, agent, 1)
    _requests(workspace, agent, 1, tool_name="refund", risk_context="Moves money back to the customer.")
    html = signed_in(owner).get("/approvals/", params).content.decode()
    tools = set(re.findall(r"Approve <code>([a-z_]+)</code>\?", html))
    assert tools == expected


def test_filter_by_agent_and_by_decision(workspace, agent, owner):
    other = make_agent(workspace=workspace, owner=owner, name="Other")
    mine = _requests(workspace, agent, 1)[0]
    _requests(workspace, other, 1)
    approved = _requests(workspace, agent, 1, status=ApprovalRequest.Status.APPROVED, resolved_by=owner,
                         resolved_at=timezone.now(), resolution_comment="fine by me")[0]
    client = signed_in(owner)
    assert _cards(client.get("/approvals/", {"agent": str(agent.pk)}).content.decode()) == [str(mine.pk)]
    decided = client.get("/approvals/", {"status": "approved"}).content.decode()
    assert _cards(decided) == [] and f'id="approval-row-{approved.pk}"' in decided and "fine by me" in decided


@pytest.mark.parametrize("params", [{"status": "pending-ish"}, {"agent": "nobody"}, {"tool": "not_a_tool_here"}])
def test_a_bad_filter_is_a_400_naming_the_field(workspace, agent, owner, params):
    _requests(workspace, agent, 1)
    response = signed_in(owner).get("/approvals/", params)
    html = response.content.decode()
    field = next(iter(params))
    assert response.status_code == 400 and f'id="id_{field}-error"' in html and _cards(html) == []


def test_another_workspaces_requests_never_show(workspace, agent, other_workspace, outsider, owner):
    foreign_agent = make_agent(workspace=other_workspace, owner=outsider, name="Foreign")
    foreign = _requests(other_workspace, foreign_agent, 1)[0]
    mine = _requests(workspace, agent, 1)[0]
    assert _cards(signed_in(owner).get("/approvals/").content.decode()) == [str(mine.pk)]
    assert _cards(signed_in(outsider).get("/approvals/").content.decode()) == [str(foreign.pk)]


def test_the_list_part_is_the_list_alone(workspace, agent, owner):
    request = _requests(workspace, agent, 1)[0]
    html = signed_in(owner).get("/approvals/", {"part": "list"}).content.decode()
    assert "<html" not in html and 'data-part="list"' in html and _cards(html) == [str(request.pk)]


def test_a_page_of_cards_costs_the_same_queries_for_five_or_five_thousand_requests(workspace, agent, owner):
    client = signed_in(owner)
    _requests(workspace, agent, 5)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/approvals/").status_code == 200
    _requests(workspace, agent, 5000)
    with CaptureQueriesContext(connection) as many:
        html = client.get("/approvals/", {"page": 3}).content.decode()
    assert len(_cards(html)) == 20 and "Page 3 of" in html
    assert len(many) == len(few) <= 20
