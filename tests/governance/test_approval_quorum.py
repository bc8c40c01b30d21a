"""Quorum (issue 29 §3): a call that needs N distinct approvers resumes once, when the
N-th distinct approval lands; the requester never counts, a second approval of the
same person is refused, one rejection ends it, an edit starts a new round."""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from agents.models import AgentVersion
from executions import services, tasks
from executions.models import Execution
from governance import services as governance_services
from governance.models import ApprovalRequest, ApprovalVote, AuditLogEntry, Notification
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

PROPOSED = {"ticket_id": 7, "amount": 40.0}


def quorum_agent(workspace, owner, *, quorum=None, escalation=None, timeout=1440, approver_roles=("admin", "editor")):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=list(approver_roles),
                       escalation_timeout_minutes=timeout)
    version = agent.current_version
    version.approval_rules = {**version.approval_rules, "quorum": quorum or [], "escalation": escalation or []}
    AgentVersion.objects.filter(pk=version.pk).update(approval_rules=version.approval_rules)
    return agent


def pause(agent, *, args=None, llm=None):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(agent.workspace), prompt="Refund ticket 7"))
    services.execution_run_segment(execution_id=execution.pk, llm=llm or ScriptedLLM(
        [tool_reply(WRITE_TOOL, args or PROPOSED, call_id="call_refund")]))
    return execution, ApprovalRequest.objects.get(execution_id=execution.pk)


def resolve(client, approval, body):
    return client.post(f"/api/v1/approvals/{approval.pk}/resolve", body, format="json")


@pytest.fixture
def capture(django_capture_on_commit_callbacks):
    """The resume is queued on commit: run the commit callbacks of the block."""
    return django_capture_on_commit_callbacks


@pytest.fixture
def second_admin(workspace):
    user = get_user_model().objects.create_user(username="dana", password="x", first_name="Dana")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.mark.django_db
class TestTwoPersonRule:
    def test_one_of_two_waits_then_two_of_two_resumes_once(self, workspace, owner, editor, api_client_for, capture):
        approval_tools.reset()
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Refunded.")])
        execution, approval = pause(agent, llm=llm)
        assert approval.required_approvals == 2

        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            first = resolve(api_client_for(editor), approval, {"status": "approved", "resolution_comment": "ok"})
            assert first.status_code == 200, first.content
            body = first.json()
            assert body["status"] == "pending"
            assert body["quorum"]["given"] == 1 and body["quorum"]["required"] == 2
            assert [v["user"]["username"] for v in body["quorum"]["approvals"]] == ["editor"]
        assert queued.call_count == 0
        assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
        assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_vote_recorded").count() == 1

        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            second = resolve(api_client_for(owner), approval, {"status": "approved"})
        assert second.status_code == 200, second.content
        assert second.json()["status"] == "approved"
        assert second.json()["quorum"]["given"] == 2
        assert [c.args for c in queued.call_args_list] == [(execution.pk,)]  # one resume

        decided = AuditLogEntry.objects.get(approval_id=approval.pk, event_type="approval_approved")
        assert decided.details["required_approvals"] == 2
        assert sorted(decided.details["approved_by"]) == sorted([owner.pk, editor.pk])
        services.execution_run_segment(execution_id=execution.pk, llm=llm)
        assert approval_tools.calls_of(WRITE_TOOL) == [{**PROPOSED, "note": ""}]
        assert Execution.objects.get(pk=execution.pk).status == Execution.Status.COMPLETED

    def test_the_requester_never_counts(self, workspace, owner, api_client_for):
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}], approver_roles=("admin", "editor",
                                                                                          "analyst"))
        _, approval = pause(agent)
        requester = approval_tools.requester_in(workspace)
        Membership.objects.filter(workspace=workspace, user=requester).update(role=Role.EDITOR)

        response = resolve(api_client_for(requester), approval, {"status": "approved"})

        assert response.status_code == 403
        assert response.json()["error"]["code"] == "self_approval_forbidden"
        assert not ApprovalVote.objects.filter(approval=approval).exists()

    def test_the_same_person_twice_gets_409_and_counts_once(self, workspace, owner, editor, api_client_for, capture):
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        execution, approval = pause(agent)
        client = api_client_for(editor)

        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            assert resolve(client, approval, {"status": "approved"}).status_code == 200
            again = resolve(client, approval, {"status": "approved"})

        assert again.status_code == 409
        assert again.json()["error"]["code"] == "already_approved"
        approval.refresh_from_db()
        assert approval.status == ApprovalRequest.Status.PENDING
        assert ApprovalVote.objects.filter(approval=approval).count() == 1
        assert queued.call_count == 0
        assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL

    def test_one_reject_ends_it(self, workspace, owner, editor, api_client_for, capture):
        approval_tools.reset()
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 3}])
        execution, approval = pause(agent)

        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            assert resolve(api_client_for(editor), approval, {"status": "approved"}).status_code == 200
            rejected = resolve(api_client_for(owner), approval, {"status": "rejected", "resolution_comment": "no"})

        assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
        assert [c.args for c in queued.call_args_list] == [(execution.pk,)]
        assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_rejected").count() == 1
        assert approval_tools.calls_of(WRITE_TOOL) == []

    def test_who_approved_can_still_reject(self, workspace, owner, editor, api_client_for):
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        _, approval = pause(agent)
        client = api_client_for(editor)

        with mock.patch.object(tasks.run_segment, "delay"):
            assert resolve(client, approval, {"status": "approved"}).status_code == 200
            response = resolve(client, approval, {"status": "rejected"})

        assert response.status_code == 200 and response.json()["status"] == "rejected"
        assert list(ApprovalVote.objects.filter(approval=approval).values_list("decision", flat=True)) == ["rejected"]

    def test_an_edit_starts_a_new_round_and_the_quorum_approves_the_edit(
        self, workspace, owner, editor, second_admin, api_client_for, capture
    ):
        approval_tools.reset()
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Done.")])
        execution, approval = pause(agent, llm=llm)
        edited = {"ticket_id": 7, "amount": 25.0}

        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            assert resolve(api_client_for(editor), approval, {"status": "approved"}).status_code == 200
            edit = resolve(api_client_for(owner), approval, {"status": "edited_approved", "modified_args": edited})
            assert edit.status_code == 200
            body = edit.json()
            # The editor's approval was of other arguments: only the edit counts now.
            assert body["status"] == "pending" and body["quorum"]["given"] == 1 and body["quorum"]["round"] == 1
            assert [v["user"]["username"] for v in body["quorum"]["superseded"]] == ["editor"]
            assert body["quorum"]["edited_args"] == {**edited, "note": ""}
            # Someone who reviewed round 0 is told the arguments changed.
            stale = resolve(api_client_for(second_admin), approval, {"status": "approved", "arguments_round": 0})
            assert stale.status_code == 409 and stale.json()["error"]["code"] == "arguments_changed"
            final = resolve(api_client_for(editor), approval, {"status": "approved", "arguments_round": 1})
            assert final.status_code == 200, final.content
        assert queued.call_count == 1

        assert final.json()["status"] == "edited"
        assert final.json()["resolution"]["modified_args"] == {**edited, "note": ""}
        audit = AuditLogEntry.objects.get(approval_id=approval.pk, event_type="approval_edited")
        assert audit.details["diff"]["amount"] == {"from": 40.0, "to": 25.0}
        services.execution_run_segment(execution_id=execution.pk, llm=llm)
        assert approval_tools.calls_of(WRITE_TOOL) == [{**edited, "note": ""}]

    def test_a_partial_vote_marks_only_the_voters_notification_read(self, workspace, owner, editor, api_client_for):
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        _, approval = pause(agent)
        for user in (owner, editor):
            Notification.objects.create(user=user, workspace=workspace, kind="approval_requested", title="Approve?",
                                        approval_id=approval.pk, url=f"/approvals/{approval.pk}/")

        resolve(api_client_for(editor), approval, {"status": "approved"})

        assert Notification.objects.get(user=editor, approval_id=approval.pk).read_at is not None
        mine = Notification.objects.get(user=owner, approval_id=approval.pk)
        assert mine.read_at is None and mine.resolved_at is None

    def test_the_badge_leaves_out_what_you_already_approved(self, workspace, owner, editor, api_client_for):
        from governance.approvals import approvals_pending_count

        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        _, approval = pause(agent)
        assert approvals_pending_count(user=editor, workspace=workspace) == 1

        resolve(api_client_for(editor), approval, {"status": "approved"})

        assert approvals_pending_count(user=editor, workspace=workspace) == 0
        assert approvals_pending_count(user=owner, workspace=workspace) == 1

    def test_a_request_with_one_approver_records_no_votes(self, workspace, owner, editor, api_client_for):
        agent = quorum_agent(workspace, owner)
        _, approval = pause(agent)
        with mock.patch.object(tasks.run_segment, "delay"):
            response = resolve(api_client_for(editor), approval, {"status": "approved"})
        assert response.json()["status"] == "approved" and response.json()["quorum"] is None
        assert not ApprovalVote.objects.exists()


@pytest.mark.django_db
class TestWhenTheQuorumApplies:
    def test_a_rule_with_a_condition_asks_two_only_when_it_holds(self, workspace, owner):
        agent = quorum_agent(workspace, owner, quorum=[{"when": "args.amount > 100", "approvals": 2}])
        _, small = pause(agent, args={"ticket_id": 7, "amount": 40.0})
        _, large = pause(agent, args={"ticket_id": 8, "amount": 400.0})
        assert (small.required_approvals, large.required_approvals) == (1, 2)

    def test_a_policy_asks_for_two_approvers(self, workspace, owner, editor, api_client_for, capture):
        policy = governance_services.policy_create(
            actor=owner, scope="workspace", workspace_id=workspace.pk, name="Big refunds need two",
            conditions={"expression": "args.amount > 100"}, enforcement="require_approval", required_approvals=2)
        agent = quorum_agent(workspace, owner)
        agent.current_version.__class__.objects.filter(pk=agent.current_version_id).update(action_level="automated")

        _, approval = pause(agent, args={"ticket_id": 8, "amount": 400.0})

        assert approval.required_approvals == 2
        assert api_client_for(owner).get(f"/api/v1/policies/{policy.pk}/").json()["required_approvals"] == 2
        with mock.patch.object(tasks.run_segment, "delay") as queued, capture(execute=True):
            assert resolve(api_client_for(editor), approval, {"status": "approved"}).json()["status"] == "pending"
            assert resolve(api_client_for(owner), approval, {"status": "approved"}).json()["status"] == "approved"
        assert queued.call_count == 1

    def test_policy_quorum_is_validated(self, workspace, owner, api_client_for):
        client = api_client_for(owner)
        base = {"name": "p", "scope": "workspace", "workspace_id": workspace.pk,
                "conditions": {"expression": "args.amount > 100"}}
        warn = client.post("/api/v1/policies/", {**base, "enforcement": "warn", "required_approvals": 2},
                           format="json")
        assert warn.status_code == 400 and "required_approvals" in warn.json()["error"]["details"]
        for bad in (0, 11, "two", True):
            response = client.post("/api/v1/policies/", {**base, "enforcement": "require_approval",
                                                         "required_approvals": bad}, format="json")
            assert response.status_code == 400, bad
            assert "required_approvals" in response.json()["error"]["details"]
        made = client.post("/api/v1/policies/", {**base, "enforcement": "require_approval", "required_approvals": 3},
                           format="json")
        assert made.status_code == 201 and made.json()["required_approvals"] == 3
        # Turning it into a warning drops the quorum: nobody is asked.
        patched = client.patch(f"/api/v1/policies/{made.json()['id']}/", {"enforcement": "warn"}, format="json")
        assert patched.status_code == 200 and patched.json()["required_approvals"] == 1


@pytest.mark.django_db
class TestRulesAreValidated:
    def _create(self, client, agent, rules):
        return client.post(f"/api/v1/agents/{agent.pk}/versions/", {
            "goal": "Help.", "instructions": "Be careful.", "action_level": "act_with_approval",
            "tools": ["write_back"], "approval_rules": {"require_approval_for": ["write_back"], **rules},
        }, format="json")

    @pytest.mark.parametrize(("rules", "field"), [
        ({"quorum": [{"when": "args.amount >", "approvals": 2}]}, "quorum.0.when"),
        ({"quorum": [{"when": "agent.id == 'x'", "approvals": 2}]}, "quorum.0.when"),
        ({"escalation_timeout_minutes": 60, "escalation": [{"after_minutes": 90, "approver_roles": ["admin"]}]},
         "escalation.0.after_minutes"),
        ({"escalation": [{"after_minutes": 30, "approver_roles": ["admin"]},
                         {"after_minutes": 20, "approver_roles": ["admin"]}]}, "escalation.1.after_minutes"),
        ({"escalation": [{"after_minutes": 30, "approver_roles": ["boss"]}]}, "escalation.0.approver_roles"),
    ])
    def test_bad_rules_get_400_naming_the_field(self, workspace, owner, api_client_for, rules, field):
        agent = quorum_agent(workspace, owner)
        response = self._create(api_client_for(owner), agent, rules)
        assert response.status_code == 400, response.content
        assert list(response.json()["error"]["details"]) == ["approval_rules"]
        assert field in response.json()["error"]["details"]["approval_rules"]

    @pytest.mark.parametrize("rules", [
        {"quorum": [{"approvals": 11}]},
        {"quorum": [{"approvals": 2, "who": "x"}]},
        {"escalation": [{"after_minutes": 10, "approver_roles": []}]},
    ])
    def test_bad_shapes_get_400(self, workspace, owner, api_client_for, rules):
        agent = quorum_agent(workspace, owner)
        response = self._create(api_client_for(owner), agent, rules)
        assert response.status_code == 400, response.content
        assert "approval_rules" in response.json()["error"]["details"]

    def test_good_rules_are_stored(self, workspace, owner, api_client_for):
        agent = quorum_agent(workspace, owner)
        rules = {"quorum": [{"when": "args.amount > 100 OR rows > 100", "approvals": 2}],
                 "escalation": [{"after_minutes": 30, "approver_roles": ["admin"]}]}
        response = self._create(api_client_for(owner), agent, rules)
        assert response.status_code == 201, response.content
        stored = response.json()["approval_rules"]
        assert stored["quorum"][0]["approvals"] == 2 and stored["escalation"][0]["after_minutes"] == 30


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="row-lock concurrency test needs PostgreSQL (SQLite locks the whole database)")
def test_approvers_clicking_at_once_resume_the_run_exactly_once(workspace, owner):
    """Six approvers race on a two-person rule: two approvals count, the run resumes once."""
    from governance import tasks as governance_tasks

    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(governance_tasks.notify_approval, "delay"):
        agent = quorum_agent(workspace, owner, quorum=[{"approvals": 2}])
        execution, approval = pause(agent)
    clients = []
    for i in range(6):
        user = get_user_model().objects.create_user(username=f"quorum-racer{i}", password="x")
        Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN if i % 2 else Role.EDITOR)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(user=user).plaintext}")
        clients.append(client)
    barrier = threading.Barrier(len(clients))
    codes: list[int] = []
    lock = threading.Lock()

    def attempt(client: APIClient) -> None:
        try:
            barrier.wait(timeout=10)
            response = resolve(client, approval, {"status": "approved"})
            with lock:
                codes.append(response.status_code)
        finally:
            connection.close()

    with mock.patch.object(tasks.run_segment, "delay") as delay, \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        threads = [threading.Thread(target=attempt, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert sorted(codes) == [200, 200, 409, 409, 409, 409]
    assert [c.args for c in delay.call_args_list] == [(execution.pk,)]
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.APPROVED
    assert ApprovalVote.objects.filter(approval=approval).count() == 2
    assert execution.steps.filter(step_type="governance_check", output__has_key="resolution").count() == 1
    assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_approved").count() == 1
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.QUEUED
