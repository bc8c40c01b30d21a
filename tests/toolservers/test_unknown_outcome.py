"""An MCP write sent and never journaled (issue 31 §1, docs/mcp.md "Durability"): the run
pauses on an "unknown outcome" request; a person says done (nothing is sent again) or
not done (sent again exactly once, through the gate), with the approval rules and an
audit entry; nobody answering ends the run failed, never answered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve, approvals_expire_due
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from toolservers import mcp_client

from .conftest import git_log
from .test_runs import observation, reviewed_server, subprocess_add

pytestmark = pytest.mark.django_db(transaction=True)  # the tool thread reads the committed tool rows

GIT_ARGS = {"git_add": "write", "git_commit": "write"}


class WorkerDied(BaseException):
    pass


@pytest.fixture
def approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def git_server(workspace, owner, git_repo):
    from .conftest import GIT_COMMAND

    return reviewed_server(
        workspace, owner, name="git", command=GIT_COMMAND, args=["--repository", str(git_repo)], classes=GIT_ARGS
    )


@pytest.fixture
def no_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _commit_call(git_repo, message="Once"):
    return tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": message}, call_id="c1")


def _interrupted(execution, git_repo, monkeypatch, *, server_committed: bool, llm=None):
    """Run a segment whose worker dies after sending the commit (the server made it or
    not), then let its lease lapse and resume: the run must pause on the question."""
    real_call = mcp_client.tool_call

    def sent_then_died(**kwargs):
        if server_committed:
            real_call(**kwargs)
        raise WorkerDied

    monkeypatch.setattr(mcp_client, "tool_call", sent_then_died)
    with pytest.raises(WorkerDied):
        services.execution_run_segment(execution_id=execution.pk, llm=llm or ScriptedLLM([_commit_call(git_repo)]))
    monkeypatch.setattr(mcp_client, "tool_call", real_call)
    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([])) == "awaiting_approval"
    return (
        ApprovalRequest.objects.filter(execution_id=execution.pk, kind="unknown_outcome")
        .order_by("-created_at")
        .first()
    )


def _staged_run(workspace, owner, git_repo, *, level="automated"):
    (git_repo / "notes.txt").write_text("x\n")
    subprocess_add(git_repo)
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:git/git_commit"], action_level=level)
    return services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt="commit")
    )


def _confirm(client, asked, outcome, **extra):
    return client.post(f"/api/v1/approvals/{asked.pk}/confirm-outcome", {"outcome": outcome, **extra}, format="json")


def test_done_records_the_confirmation_and_never_sends_again(
    workspace, owner, approver, git_server, git_repo, monkeypatch, no_queue, api_client_for
):
    execution = _staged_run(workspace, owner, git_repo)
    asked = _interrupted(execution, git_repo, monkeypatch, server_committed=True)
    assert asked.status == "pending" and asked.tool_name == "mcp:git/git_commit"
    assert "does not know whether it happened" in asked.risk_context
    assert git_log(git_repo) == ["Once", "first"]

    answered = _confirm(api_client_for(approver), asked, "done", resolution_comment="I see it in the log")
    assert answered.status_code == 200, answered.json()
    assert answered.json()["kind"] == "unknown_outcome" and answered.json()["resolution"]["outcome"] == "done"
    entry = AuditLogEntry.objects.get(event_type="unknown_outcome_confirmed", approval_id=asked.pk)
    assert entry.actor_id == approver.pk and entry.details["outcome"] == "done"

    finish = ScriptedLLM([text_reply("The commit was made once.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=finish) == "success"
    assert git_log(git_repo) == ["Once", "first"]  # no second commit
    seen = observation(Execution.objects.get(pk=execution.pk), "mcp:git/git_commit")
    assert seen.status == "completed" and seen.output["result"]["confirmed_by_person"] is True
    assert seen.output["confirmed_by"] == str(approver.pk)
    told = finish.requests[0]["messages"][-1]
    assert "A person confirmed" in str(told["content"])  # the model is told what the person said
    # Answered once: a second answer is a conflict, nothing is resumed twice.
    assert _confirm(api_client_for(approver), asked, "not_done").status_code == 409


def test_not_done_sends_the_call_again_exactly_once_without_a_second_approval(
    workspace, owner, approver, git_server, git_repo, monkeypatch, no_queue, api_client_for
):
    execution = _staged_run(workspace, owner, git_repo, level="act_with_approval")
    llm = ScriptedLLM([_commit_call(git_repo)])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk, kind="approval")
    approval_resolve(user=approver, approval_id=approval.pk, status="approved", comment="ok")
    asked = _interrupted(execution, git_repo, monkeypatch, server_committed=False, llm=ScriptedLLM([]))
    assert git_log(git_repo) == ["first"]  # the send was lost

    assert _confirm(api_client_for(approver), asked, "not_done").status_code == 200
    finish = ScriptedLLM([text_reply("Committed.")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=finish) == "success"
    assert git_log(git_repo) == ["Once", "first"]  # exactly one more commit
    assert ApprovalRequest.objects.filter(execution_id=execution.pk, kind="approval").count() == 1  # no second
    seen = observation(Execution.objects.get(pk=execution.pk), "mcp:git/git_commit")
    assert seen.status == "completed" and seen.output.get("_dispatched") is True
    assert AuditLogEntry.objects.get(event_type="unknown_outcome_confirmed").details["outcome"] == "not_done"


def test_a_retry_interrupted_again_asks_again_and_sends_nothing_on_its_own(
    workspace, owner, approver, git_server, git_repo, monkeypatch, no_queue
):
    from governance.unknown_outcome import unknown_outcome_confirm

    execution = _staged_run(workspace, owner, git_repo)
    first = _interrupted(execution, git_repo, monkeypatch, server_committed=False)
    unknown_outcome_confirm(user=approver, approval_id=first.pk, outcome="not_done")
    second = _interrupted(execution, git_repo, monkeypatch, server_committed=False, llm=ScriptedLLM([]))
    assert second.pk != first.pk and second.tool_call_id == first.tool_call_id == "c1"  # a new question, same call
    assert git_log(git_repo) == ["first"]
    unknown_outcome_confirm(user=approver, approval_id=second.pk, outcome="not_done")
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("ok")])) == "success"
    assert git_log(git_repo) == ["Once", "first"]


def test_outsider_gets_404_requester_and_non_approver_get_403_and_resolve_refuses_the_kind(
    workspace, owner, member, outsider, approver, git_server, git_repo, monkeypatch, no_queue, api_client_for
):
    execution = _staged_run(workspace, owner, git_repo)
    asked = _interrupted(execution, git_repo, monkeypatch, server_committed=True)
    assert _confirm(api_client_for(outsider), asked, "done").status_code == 404
    assert _confirm(api_client_for(member), asked, "done").status_code == 403  # an analyst may not resolve
    requester = _confirm(api_client_for(owner), asked, "done")  # owner started the run
    assert requester.status_code == 403 and requester.json()["error"]["code"] == "self_approval_forbidden"
    refused = api_client_for(approver).post(
        f"/api/v1/approvals/{asked.pk}/resolve", {"status": "approved"}, format="json"
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "unknown_outcome"
    asked.refresh_from_db()
    assert asked.status == "pending"
    assert not AuditLogEntry.objects.filter(event_type="unknown_outcome_confirmed").exists()
    assert Execution.objects.get(pk=execution.pk).status == "awaiting_approval"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "maybe"}, "outcome"),
        ({"outcome": ["done"]}, "outcome"),
        ({}, "outcome"),
        ({"outcome": "done", "resolution_comment": "x" * 4001}, "resolution_comment"),
        ({"outcome": "done", "resolution_comment": "a\x00b"}, "resolution_comment"),
        ({"outcome": "done", "status": "approved"}, "status"),
    ],
)
def test_hostile_input_is_a_400_naming_the_field(
    workspace, owner, approver, git_server, git_repo, monkeypatch, no_queue, api_client_for, body, field
):
    execution = _staged_run(workspace, owner, git_repo)
    asked = _interrupted(execution, git_repo, monkeypatch, server_committed=True)
    answer = api_client_for(approver).post(f"/api/v1/approvals/{asked.pk}/confirm-outcome", body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["details"]
    asked.refresh_from_db()
    assert asked.status == "pending"


def test_nobody_answering_ends_the_run_failed_never_answered(
    workspace, owner, git_server, git_repo, monkeypatch, no_queue
):
    execution = _staged_run(workspace, owner, git_repo)
    asked = _interrupted(execution, git_repo, monkeypatch, server_committed=True)
    ApprovalRequest.objects.filter(pk=asked.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_due() == 1
    ended = Execution.objects.get(pk=execution.pk)
    assert ended.status == "approval_expired"
    assert ended.error["code"] == "OUTCOME_UNKNOWN" and "nobody confirmed" in ended.error["message"]
    assert git_log(git_repo) == ["Once", "first"]
