"""Who may call /mcp/ and /a2a/, what they reach, and how often (interop.callers,
interop.runs), on the database without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from executions.models import Execution
from governance.models import AuditLogEntry
from interop.callers import caller_authenticate, caller_throttle
from interop.runs import agent_get_runnable, agent_tool_names, agents_runnable, run_get, run_start, tool_name_for
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from tenancy.models import Membership, Workspace
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.factories import make_agent
from triggers.apikeys import NotAuthenticated, RateLimited, api_key_issue, api_key_revoke

NOON = datetime(2026, 11, 27, 12, 0, 5, tzinfo=UTC)


@pytest.fixture
def second_workspace(org):
    return Workspace.objects.create(organization=org, name="Billing", slug="billing")


def test_a_token_acts_as_its_user_in_all_their_workspaces(db, owner, workspace, second_workspace):
    Membership.objects.create(workspace=second_workspace, user=owner, role=Role.ADMIN)
    here = make_agent(workspace=workspace, owner=owner, name="Support Analyst")
    there = make_agent(workspace=second_workspace, owner=owner, name="Billing Clerk")
    caller = caller_authenticate(authorization=f"Bearer {token_issue(user=owner).plaintext}")
    assert caller.user == owner and caller.credential == "token"
    assert {a.pk for a in agents_runnable(caller=caller)} == {here.pk, there.pk}


def test_a_workspace_key_reaches_its_workspace_only(db, owner, workspace, second_workspace):
    Membership.objects.create(workspace=second_workspace, user=owner, role=Role.ADMIN)
    here = make_agent(workspace=workspace, owner=owner, name="Support Analyst")
    there = make_agent(workspace=second_workspace, owner=owner, name="Billing Clerk")
    key = api_key_issue(created_by=owner, name="k", workspace=workspace).plaintext
    for caller in (caller_authenticate(api_key=key), caller_authenticate(authorization=f"Bearer {key}")):
        assert caller.credential == "key" and caller.user == owner
        assert [a.pk for a in agents_runnable(caller=caller)] == [here.pk]
        with pytest.raises(NotFound):
            agent_get_runnable(caller=caller, agent_id=there.pk)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "Bearer ",
        "Basic abc",
        "Bearer rvr_nope_nope",
        "Bearer rtk_nope_nope",
        "Bearer " + "x" * 500,
        "Bearer rvr_a\x00b",
    ],
)
def test_a_missing_unknown_or_malformed_credential_is_not_authenticated(db, header):
    with pytest.raises(NotAuthenticated):
        caller_authenticate(authorization=header)


def test_a_revoked_key_or_an_owner_who_left_is_not_authenticated(db, owner, member, workspace):
    issued = api_key_issue(created_by=owner, name="k", workspace=workspace)
    api_key_revoke(key=issued.key)
    with pytest.raises(NotAuthenticated):
        caller_authenticate(api_key=issued.plaintext)
    kept = api_key_issue(created_by=member, name="k2", workspace=workspace).plaintext
    Membership.objects.filter(user=member).delete()
    with pytest.raises(NotAuthenticated):
        caller_authenticate(api_key=kept)


def test_the_budget_is_per_credential_and_minute(db, owner, workspace):
    key = api_key_issue(created_by=owner, name="k", workspace=workspace, rate_limit_per_minute=2).plaintext
    caller = caller_authenticate(api_key=key)
    caller_throttle(caller=caller, now=NOON)
    caller_throttle(caller=caller, now=NOON)
    with pytest.raises(RateLimited) as refused:
        caller_throttle(caller=caller, now=NOON)
    assert refused.value.retry_after == 55
    other = caller_authenticate(
        api_key=api_key_issue(created_by=owner, name="k2", workspace=workspace, rate_limit_per_minute=2).plaintext
    )
    caller_throttle(caller=other, now=NOON)  # another key's budget is its own
    caller_throttle(caller=caller, now=NOON.replace(minute=1))  # the next minute's window


def test_an_outsider_and_a_viewer_reach_nothing_here(db, owner, outsider, workspace):
    agent = make_agent(workspace=workspace, owner=owner)
    stranger = caller_authenticate(authorization=f"Bearer {token_issue(user=outsider).plaintext}")
    assert agents_runnable(caller=stranger) == []
    with pytest.raises(NotFound):
        agent_get_runnable(caller=stranger, agent_id=agent.pk)
    viewer = Membership.objects.create(
        workspace=workspace, role=Role.VIEWER, user=type(owner).objects.create_user("viewer")
    ).user
    looker = caller_authenticate(authorization=f"Bearer {token_issue(user=viewer).plaintext}")
    assert agents_runnable(caller=looker) == []
    with pytest.raises(PermissionDenied):
        agent_get_runnable(caller=looker, agent_id=agent.pk)


def test_a_run_started_as_the_caller_is_theirs_audited_and_hidden_from_others(
    db, owner, outsider, workspace, django_capture_on_commit_callbacks
):
    agent = make_agent(workspace=workspace, owner=owner)
    token = token_issue(user=owner)
    caller = caller_authenticate(authorization=f"Bearer {token.plaintext}")
    execution = run_start(caller=caller, agent=agent, prompt="How many tickets?", channel="mcp")
    assert execution.requested_by_id == owner.pk and execution.requester_id == owner.pk
    assert execution.trigger_source == "mcp" and execution.status == Execution.Status.QUEUED
    entry = AuditLogEntry.objects.get(event_type="mcp_run_started", execution_id=execution.pk)
    assert entry.details == {"credential": f"token {token.token.prefix}", "channel": "mcp"}
    assert run_get(caller=caller, execution_id=str(execution.pk)) == execution
    stranger = caller_authenticate(authorization=f"Bearer {token_issue(user=outsider).plaintext}")
    for probe in (execution.pk, str(execution.pk), "abc", 2**70, True, None, [1]):
        with pytest.raises(NotFound, match="^Run not found.$"):
            run_get(caller=stranger, execution_id=probe)


@pytest.mark.parametrize("prompt", ["", "   ", "a\x00b", "x" * 200_000, 12, None, ["q"]])
def test_a_bad_prompt_starts_nothing(db, owner, workspace, prompt):
    agent = make_agent(workspace=workspace, owner=owner)
    caller = caller_authenticate(authorization=f"Bearer {token_issue(user=owner).plaintext}")
    with pytest.raises(InvalidInput) as refused:
        run_start(caller=caller, agent=agent, prompt=prompt, channel="mcp")
    assert "prompt" in refused.value.details
    assert not Execution.objects.exists() and not AuditLogEntry.objects.filter(event_type="mcp_run_started").exists()


def test_tool_names_are_ascii_and_two_agents_never_share_one(db, owner, workspace, second_workspace):
    assert tool_name_for(make_agent(workspace=workspace, owner=owner, name="Équipe <b>Support</b>!")) == (
        "ask_equipe_b_support_b"
    )
    one = make_agent(workspace=workspace, owner=owner, name="Support Analyst")
    two = make_agent(workspace=second_workspace, owner=owner, name="support analyst")
    named = agent_tool_names([one, two])
    assert set(named) == {f"ask_support_analyst_{one.pk.hex[:8]}", f"ask_support_analyst_{two.pk.hex[:8]}"}
    assert all(
        len(name) <= 64 for name in agent_tool_names([make_agent(workspace=workspace, owner=owner, name="x" * 200)])
    )
