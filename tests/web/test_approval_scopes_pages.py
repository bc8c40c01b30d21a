"""The scope choice on the approval card, the grants page (/approvals/grants/) and the
run page's list of calls let through without asking (web/approval_scopes.py)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client

from executions import services, tasks
from governance.models import ApprovalGrant, ApprovalRequest, AuditLogEntry
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _clean_calls():
    approval_tools.reset()
    yield
    approval_tools.reset()


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL],
                      action_level="act_with_approval", approver_roles=["admin"])


def run(agent, workspace, replies):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund"))
    with mock.patch.object(tasks.run_segment, "delay"):
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(replies))
    execution.refresh_from_db()
    return execution


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_card(user, approval, data):
    with mock.patch.object(tasks.run_segment, "delay"):
        return browser(user).post(f"/approvals/{approval.pk}/resolve", data, **HTMX)


def test_the_card_offers_the_scopes_beside_approve(agent, workspace, owner):
    execution = run(agent, workspace, [tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")])
    html = browser(owner).get(f"/runs/{execution.pk}/").content.decode()
    for value in ("once", "run", "session", "grant"):
        assert f'name="scope" value="{value}"' in html
    assert 'name="grant_expires_in_days"' in html and 'max="30"' in html


def test_approving_for_the_run_on_the_card_records_the_scope(agent, workspace, owner):
    execution = run(agent, workspace, [tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")])
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    response = post_card(owner, approval, {"decision": "approved", "scope": "run"})

    assert response.status_code == 200
    assert "Scope: Identical calls for the rest of this run" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.scope == "run"


def test_a_bad_grant_on_the_card_is_a_400_inside_the_card_naming_the_field(agent, workspace, owner):
    execution = run(agent, workspace, [tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")])
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)

    response = post_card(owner, approval, {"decision": "approved", "scope": "grant", "grant_expires_in_days": "90",
                                           "grant_max_rows": "5"})

    assert response.status_code == 400
    html = response.content.decode()
    assert "grant.expires_in_days" in html
    assert 'value="90"' in html  # what was typed is kept
    approval.refresh_from_db()
    assert approval.status == "pending" and ApprovalGrant.objects.count() == 0


def granted(agent, workspace, owner) -> ApprovalGrant:
    execution = run(agent, workspace, [tool_reply(WRITE_TOOL, PROPOSED, call_id="c1")])
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    response = post_card(owner, approval, {"decision": "approved", "scope": "grant", "grant_expires_in_days": "7",
                                           "grant_max_rows": "1", "grant_condition": "args.amount <= 50"})
    assert response.status_code == 200, response.content.decode()
    return ApprovalGrant.objects.get()


def test_the_grants_page_lists_and_revokes(agent, workspace, owner, member, outsider):
    grant = granted(agent, workspace, owner)
    html = browser(member).get("/approvals/grants/").content.decode()
    assert f'id="grant-{grant.pk}"' in html and "args.amount &lt;= 50" in html
    assert "Revoke grant" not in html  # an analyst may not revoke
    assert f'id="grant-{grant.pk}"' not in browser(outsider).get("/approvals/grants/").content.decode()
    assert browser(outsider).post(f"/approvals/grants/{grant.pk}/revoke").status_code == 404
    assert browser(member).post(f"/approvals/grants/{grant.pk}/revoke").status_code == 403
    assert browser(owner).get("/approvals/grants/?state=nonsense").status_code == 400

    response = browser(owner).post(f"/approvals/grants/{grant.pk}/revoke", follow=True)

    assert response.status_code == 200
    assert f"Grant #{grant.pk} is revoked" in response.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_by == owner
    assert AuditLogEntry.objects.filter(event_type="approval_grant_revoked", actor=owner).count() == 1
    revoked = browser(owner).get("/approvals/grants/?state=revoked").content.decode()
    assert f'id="grant-{grant.pk}" data-state="revoked"' in revoked


def test_the_run_page_shows_the_call_a_grant_let_through(agent, workspace, owner):
    grant = granted(agent, workspace, owner)
    later = run(agent, workspace, [tool_reply(WRITE_TOOL, {"ticket_id": 9, "amount": 20.0}, call_id="g1"),
                                   text_reply("done")])
    assert later.status == "completed"

    html = browser(owner).get(f"/runs/{later.pk}/").content.decode()

    assert "Let through without asking" in html
    assert f"allowed by grant #{grant.pk} from owner, expires " in html
