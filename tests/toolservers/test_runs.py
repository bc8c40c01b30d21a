"""MCP tools in real runs: the gate at the agent's level, policies naming the tool and
its arguments, arguments checked against the tool's input schema, approvals, results
journaled and audited, and a server that is down."""

from __future__ import annotations

import pytest
from django.test import Client

from executions import services
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from governance.services import policy_create
from rivercore.contracts import StepType
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from toolservers import services as toolservers
from toolservers.models import McpTool

from .conftest import GIT_COMMAND, TIME_COMMAND, git_log

pytestmark = pytest.mark.django_db(transaction=True)  # the tool thread reads the committed tool rows


def reviewed_server(workspace, owner, *, name, command, args, classes: dict[str, str]):
    server = toolservers.tool_server_register(
        workspace=workspace, actor=owner, name=name, transport="stdio", command=command, args=args
    )
    toolservers.tool_server_discover(server=server, actor=owner)
    for tool, action_class in classes.items():
        toolservers.mcp_tool_review(
            tool=McpTool.objects.get(server=server, name=tool), actor=owner, action_class=action_class, enabled=True
        )
    return server


def run(agent, owner, llm, prompt="go") -> tuple[Execution, str]:
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt=prompt)
    )
    status = services.execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution, status


def observation(execution, tool_name):
    return execution.steps.filter(step_type=StepType.OBSERVATION, tool_name=tool_name).order_by("step_number").last()


@pytest.fixture
def approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def time_tools(workspace, owner):
    return reviewed_server(
        workspace,
        owner,
        name="time",
        command=TIME_COMMAND,
        args=["--local-timezone", "UTC"],
        classes={"get_current_time": "read"},
    )


@pytest.fixture
def git_tools(workspace, owner, git_repo):
    return reviewed_server(
        workspace,
        owner,
        name="git",
        command=GIT_COMMAND,
        args=["--repository", str(git_repo)],
        classes={"git_add": "write", "git_commit": "write", "git_status": "read"},
    )


def test_a_read_tool_runs_and_the_model_sees_a_sanitized_name(workspace, owner, time_tools):
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:time/get_current_time"], action_level="read_only")
    llm = ScriptedLLM(
        [
            tool_reply("mcp__time__get_current_time", {"timezone": "Europe/Paris"}, call_id="t1"),
            text_reply("It is evening in Paris."),
        ]
    )
    execution, status = run(agent, owner, llm)
    assert status == "success", execution.steps.values_list("step_type", "error")
    offered = [tool["function"] for tool in llm.requests[0]["tools"]]
    time_tool = next(t for t in offered if t["name"] == "mcp__time__get_current_time")
    assert time_tool["parameters"]["required"] == ["timezone"]
    seen = observation(execution, "mcp:time/get_current_time")
    assert seen.status == "completed", seen.output
    assert seen.output["result"]["structured"]["timezone"] == "Europe/Paris"
    assert AuditLogEntry.objects.filter(event_type="mcp_tool.called", execution_id=execution.pk).count() == 1
    page = Client()
    page.force_login(owner)
    shown = page.get(f"/runs/{execution.pk}/")
    assert shown.status_code == 200 and "mcp:time/get_current_time" in shown.content.decode()  # on the run page


def test_arguments_against_the_input_schema_are_refused_before_the_call(workspace, owner, time_tools):
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:time/get_current_time"])
    llm = ScriptedLLM(
        [tool_reply("mcp__time__get_current_time", {"timezone": 5}, call_id="t1"), text_reply("Could not ask.")]
    )
    execution, status = run(agent, owner, llm)
    assert status == "success"
    seen = observation(execution, "mcp:time/get_current_time")
    assert seen.status == "failed" and seen.output["error"]["code"] == "VALIDATION_ERROR", seen.output
    assert not AuditLogEntry.objects.filter(event_type="mcp_tool.called").exists()  # never sent


def test_a_tool_the_agent_does_not_list_is_not_available(workspace, owner, time_tools):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    llm = ScriptedLLM(
        [tool_reply("mcp:time/get_current_time", {"timezone": "UTC"}, call_id="t1"), text_reply("No tool.")]
    )
    execution, _ = run(agent, owner, llm)
    assert observation(execution, "mcp:time/get_current_time").output["error"]["code"] == "INVALID_TOOL"
    assert not AuditLogEntry.objects.filter(event_type="mcp_tool.called").exists()


def test_a_git_commit_pauses_for_approval_and_after_it_exists_exactly_once(
    workspace, owner, approver, git_tools, git_repo
):
    (git_repo / "notes.txt").write_text("from the agent\n")
    agent = make_agent(
        workspace=workspace,
        owner=owner,
        tools=["mcp:git/git_add", "mcp:git/git_commit"],
        action_level="act_with_approval",
    )
    llm = ScriptedLLM(
        [
            tool_reply("mcp__git__git_add", {"repo_path": str(git_repo), "files": ["notes.txt"]}, call_id="a1"),
            tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": "Add notes"}, call_id="c1"),
            text_reply("Committed."),
        ]
    )
    execution, status = run(agent, owner, llm)
    assert status == "awaiting_approval"
    first = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert first.tool_name == "mcp:git/git_add"
    assert git_log(git_repo) == ["first"]
    approval_resolve(user=approver, approval_id=first.pk, status="approved", comment="ok")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    second = ApprovalRequest.objects.filter(execution_id=execution.pk).exclude(pk=first.pk).get()
    assert second.tool_name == "mcp:git/git_commit" and second.proposed_payload["message"] == "Add notes"
    assert git_log(git_repo) == ["first"]  # nothing committed before the approval
    approval_resolve(user=approver, approval_id=second.pk, status="approved", comment="ok")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    assert git_log(git_repo) == ["Add notes", "first"]  # exactly once
    calls = AuditLogEntry.objects.filter(event_type="mcp_tool.called", execution_id=execution.pk)
    assert sorted(c.details["tool"] for c in calls) == ["mcp:git/git_add", "mcp:git/git_commit"]


@pytest.mark.parametrize("level", ["read_only", "recommend"])
def test_a_write_tool_is_not_run_at_read_only_or_recommend(workspace, owner, git_tools, git_repo, level):
    (git_repo / "notes.txt").write_text("x\n")
    subprocess_add(git_repo)
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:git/git_commit"], action_level=level)
    llm = ScriptedLLM(
        [
            tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": "sneaky"}, call_id="c1"),
            text_reply("Done."),
        ]
    )
    execution, status = run(agent, owner, llm)
    assert status == "success"
    assert observation(execution, "mcp:git/git_commit").status == "blocked"
    assert git_log(git_repo) == ["first"]
    assert not AuditLogEntry.objects.filter(event_type="mcp_tool.called").exists()


def subprocess_add(repo):
    import subprocess

    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)


def test_a_policy_names_the_tool_and_its_arguments(workspace, owner, git_tools, git_repo):
    (git_repo / "notes.txt").write_text("x\n")
    subprocess_add(git_repo)
    policy_create(
        actor=owner,
        scope="workspace",
        workspace_id=workspace.pk,
        name="No WIP commits",
        conditions="tool.name == 'mcp:git/git_commit' AND args.message == 'wip'",
        enforcement="block",
    )
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:git/git_commit"], action_level="automated")
    llm = ScriptedLLM(
        [
            tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": "wip"}, call_id="c1"),
            tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": "Real work"}, call_id="c2"),
            text_reply("Done."),
        ]
    )
    execution, status = run(agent, owner, llm)
    assert status == "success"
    steps = execution.steps.filter(step_type=StepType.OBSERVATION).order_by("step_number")
    assert [s.status for s in steps] == ["blocked", "completed"]
    assert git_log(git_repo) == ["Real work", "first"]


def test_a_tool_changed_since_the_run_loaded_is_refused_at_call_time(workspace, owner, time_tools):
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:time/get_current_time"])

    class Disabling(ScriptedLLM):
        def complete(self, **kwargs):
            if not self.requests:  # between the load and the call, an admin disables the tool
                McpTool.objects.filter(name="get_current_time").update(enabled=False)
            return super().complete(**kwargs)

    llm = Disabling(
        [tool_reply("mcp__time__get_current_time", {"timezone": "UTC"}, call_id="t1"), text_reply("Refused.")]
    )
    execution, _ = run(agent, owner, llm)
    seen = observation(execution, "mcp:time/get_current_time")
    assert seen.status == "failed" and "since this run started" in seen.error, seen.output
    assert not AuditLogEntry.objects.filter(event_type="mcp_tool.called").exists()


def test_a_server_that_dies_is_an_error_observation_and_its_health_shows_it(workspace, owner, time_tools, settings):
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:time/get_current_time"])
    settings.RIVER_MCP_STDIO_COMMANDS = []  # the operator withdrew the command: nothing is started
    llm = ScriptedLLM(
        [tool_reply("mcp__time__get_current_time", {"timezone": "UTC"}, call_id="t1"), text_reply("The clock is down.")]
    )
    execution, status = run(agent, owner, llm)
    assert status == "success"
    seen = observation(execution, "mcp:time/get_current_time")
    assert seen.status == "failed" and "no longer allowed" in seen.error
    time_tools.refresh_from_db()
    assert time_tools.health == "error"


def test_agent_versions_accept_only_reviewed_enabled_tools_of_their_workspace(
    api_client_for, owner, workspace, other_workspace, time_tools
):
    from agents.services import agent_version_spec
    from rivercore.errors import InvalidInput

    agent = make_agent(workspace=workspace, owner=owner)
    ok = agent_version_spec(
        agent=agent, goal="g", instructions="i", action_level="read_only", tools=["mcp:time/get_current_time"]
    )
    assert ok.tools == ["mcp:time/get_current_time"]
    for name in ("mcp:time/convert_time", "mcp:time/nope", "mcp:other/get_current_time", "mcp:bad"):
        with pytest.raises(InvalidInput) as refused:
            agent_version_spec(agent=agent, goal="g", instructions="i", action_level="read_only", tools=[name])
        assert "tools" in refused.value.details
    foreign = make_agent(workspace=other_workspace, owner=owner, name="Elsewhere")
    with pytest.raises(InvalidInput):
        agent_version_spec(
            agent=foreign, goal="g", instructions="i", action_level="read_only", tools=["mcp:time/get_current_time"]
        )


def test_a_worker_that_dies_after_sending_a_write_never_sends_it_again(
    workspace, owner, git_tools, git_repo, monkeypatch
):
    from datetime import timedelta

    from django.utils import timezone

    from executions import tasks
    from toolservers import mcp_client

    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)
    (git_repo / "notes.txt").write_text("x\n")
    subprocess_add(git_repo)
    agent = make_agent(workspace=workspace, owner=owner, tools=["mcp:git/git_commit"], action_level="automated")
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt="commit")
    )

    class WorkerDied(BaseException):
        pass

    real_call = mcp_client.tool_call

    def sent_then_died(**kwargs):
        real_call(**kwargs)  # the server committed
        raise WorkerDied  # and the worker died before the result was journaled

    monkeypatch.setattr(mcp_client, "tool_call", sent_then_died)
    first = ScriptedLLM(
        [tool_reply("mcp__git__git_commit", {"repo_path": str(git_repo), "message": "Once"}, call_id="c1")]
    )
    with pytest.raises(WorkerDied):
        services.execution_run_segment(execution_id=execution.pk, llm=first)
    assert git_log(git_repo) == ["Once", "first"]

    monkeypatch.setattr(mcp_client, "tool_call", real_call)
    Execution.objects.filter(pk=execution.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = ScriptedLLM([text_reply("Checked the log first.")])
    # The run pauses for a person to say whether it happened (tests/toolservers/test_unknown_outcome.py).
    assert services.execution_run_segment(execution_id=execution.pk, llm=second) == "awaiting_approval"
    assert second.requests == []  # the model is not asked either
    assert git_log(git_repo) == ["Once", "first"]  # never sent again
    asked = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert asked.kind == "unknown_outcome" and asked.tool_call_id == "c1" and asked.status == "pending"
    assert observation(Execution.objects.get(pk=execution.pk), "mcp:git/git_commit") is None
