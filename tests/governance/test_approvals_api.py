"""The approvals API: who may see and resolve a request, and exactly-once resolution
under concurrency on PostgreSQL."""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

PROPOSED = {"ticket_id": 7, "amount": 40.0}


def paused_run(workspace, owner, *, approver_roles=("admin", "editor")):
    agent = make_agent(
        workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
        require_approval_for=[WRITE_TOOL], approver_roles=list(approver_roles),
    )
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    )
    return execution, ApprovalRequest.objects.get(execution_id=execution.pk)


@pytest.mark.django_db
class TestWhoMayResolve:
    def test_member_whose_role_is_not_an_approver_role_gets_403(self, workspace, owner, editor, api_client_for):
        execution, approval = paused_run(workspace, owner, approver_roles=["admin"])

        response = api_client_for(editor).post(
            f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"}, format="json"
        )

        assert response.status_code == 403
        assert response.json()["error"]["code"]
        approval.refresh_from_db()
        assert approval.status == ApprovalRequest.Status.PENDING
        assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL

    def test_analyst_without_the_resolve_permission_gets_403_even_if_listed(
        self, workspace, owner, member, api_client_for
    ):
        _, approval = paused_run(workspace, owner, approver_roles=["admin", "analyst"])

        response = api_client_for(member).post(
            f"/api/v1/approvals/{approval.pk}/resolve",
            {"status": "edited_approved", "modified_args": {"ticket_id": "x"}}, format="json",
        )

        assert response.status_code == 403  # refused before the arguments are looked at

    def test_user_of_another_workspace_gets_404(self, workspace, owner, outsider, api_client_for):
        _, approval = paused_run(workspace, owner)
        client = api_client_for(outsider)

        assert client.get(f"/api/v1/approvals/{approval.pk}/").status_code == 404
        response = client.post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"}, format="json")
        assert response.status_code == 404
        assert client.post("/api/v1/approvals/not-a-uuid/resolve", {"status": "approved"},
                           format="json").status_code == 404
        approval.refresh_from_db()
        assert approval.status == ApprovalRequest.Status.PENDING

    def test_org_admin_may_resolve_in_any_workspace_of_the_org(self, workspace, owner, org_admin, api_client_for):
        _, approval = paused_run(workspace, owner, approver_roles=["admin"])

        with mock.patch.object(tasks.run_segment, "delay"):
            response = api_client_for(org_admin).post(
                f"/api/v1/approvals/{approval.pk}/resolve", {"status": "rejected"}, format="json"
            )

        assert response.status_code == 200
        assert response.json()["resolved_by"] == org_admin.pk

    def test_pending_list_shows_only_what_the_caller_may_resolve(
        self, workspace, owner, editor, member, outsider, api_client_for
    ):
        _, admins_only = paused_run(workspace, owner, approver_roles=["admin"])
        _, editors_too = paused_run(workspace, owner, approver_roles=["admin", "editor"])

        def pending_ids(user):
            response = api_client_for(user).get("/api/v1/approvals/", {"status": "pending"})
            assert response.status_code == 200
            body = response.json()
            rows = body["results"] if isinstance(body, dict) else body
            return {row["id"] for row in rows}

        assert pending_ids(owner) == {str(admins_only.pk), str(editors_too.pk)}
        assert pending_ids(editor) == {str(editors_too.pk)}
        assert pending_ids(member) == set()
        assert pending_ids(outsider) == set()

    def test_unknown_status_filter_is_a_400_naming_the_field(self, owner, api_client_for):
        response = api_client_for(owner).get("/api/v1/approvals/", {"status": "maybe"})

        assert response.status_code == 400
        assert "status" in response.json()["error"]["details"]

    def test_second_resolution_gets_409(self, workspace, owner, editor, api_client_for):
        _, approval = paused_run(workspace, owner)

        with mock.patch.object(tasks.run_segment, "delay"):
            first = api_client_for(owner).post(
                f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"}, format="json"
            )
            second = api_client_for(editor).post(
                f"/api/v1/approvals/{approval.pk}/resolve", {"status": "rejected"}, format="json"
            )

        assert first.status_code == 200
        assert second.status_code == 409
        assert second.json()["error"]["code"] == "already_resolved"
        approval.refresh_from_db()
        assert approval.status == ApprovalRequest.Status.APPROVED and approval.resolved_by == owner

    def test_bad_status_is_a_400_naming_the_field(self, workspace, owner, api_client_for):
        _, approval = paused_run(workspace, owner)

        response = api_client_for(owner).post(
            f"/api/v1/approvals/{approval.pk}/resolve", {"status": "perhaps"}, format="json"
        )

        assert response.status_code == 400
        assert "status" in response.json()["error"]["details"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="row-lock concurrency test needs PostgreSQL (SQLite locks the whole database)")
def test_twenty_concurrent_resolutions_give_one_decision_and_one_resume(workspace, owner):
    """Committed data, real row locks: each thread has its own connection and user."""
    approval_tools.reset()
    with mock.patch.object(tasks.run_segment, "delay"), _notifications_off():
        execution, approval = paused_run(workspace, owner)

    users = []
    for i in range(20):
        user = get_user_model().objects.create_user(username=f"racer{i}", password="x")
        # 18 approvers (admins and editors) and 2 analysts, who may not resolve.
        role = Role.ANALYST if i % 7 == 6 else (Role.ADMIN if i % 2 else Role.EDITOR)
        Membership.objects.create(workspace=workspace, user=user, role=role)
        users.append((user, role))
    clients = []
    for user, _role in users:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(user=user).plaintext}")
        clients.append(client)

    barrier = threading.Barrier(len(clients))
    results: list[tuple[str, int]] = []
    lock = threading.Lock()

    def attempt(index: int, client: APIClient) -> None:
        body = [{"status": "approved"}, {"status": "rejected", "resolution_comment": "no"},
                {"status": "edited_approved", "modified_args": {"ticket_id": 7, "amount": 10.0}}][index % 3]
        try:
            barrier.wait(timeout=10)
            response = client.post(f"/api/v1/approvals/{approval.pk}/resolve", body, format="json")
            with lock:
                results.append((users[index][1], response.status_code))
        finally:
            connection.close()

    with mock.patch.object(tasks.run_segment, "delay") as delay:
        threads = [threading.Thread(target=attempt, args=(i, c)) for i, c in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert len(results) == 20
    codes = [code for _, code in results]
    assert codes.count(200) == 1
    assert sorted(code for role, code in results if role == Role.ANALYST) == [403, 403]
    assert codes.count(409) == 17
    assert [c.args for c in delay.call_args_list] == [(execution.pk,)]  # one resume queued

    approval.refresh_from_db()
    assert approval.status != ApprovalRequest.Status.PENDING
    resolutions = execution.steps.filter(step_type="governance_check", output__has_key="resolution")
    assert resolutions.count() == 1
    decided = AuditLogEntry.objects.filter(approval_id=approval.pk).exclude(event_type="approval_requested")
    assert decided.count() == 1
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.QUEUED


def _notifications_off():
    """Approval notifications are queued on commit; keep them off the broker here."""
    from governance import tasks as governance_tasks

    return mock.patch.object(governance_tasks.notify_approval, "delay")
