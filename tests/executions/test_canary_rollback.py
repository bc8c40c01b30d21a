"""A canary that does worse is rolled back by the beat task, with the figures that
condemned it; one that does as well, or has too few runs behind it, keeps running. The
runs are hand-built with their outcomes (and approvals), so every figure is checked
against a history whose counts are known."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.utils import timezone

from agents.canary import agent_canary_start, agent_canary_stop
from agents.models import AgentCanary, AgentVersion
from executions import tasks
from executions.canary import canary_arm_run_ids, canary_check, canary_compare
from executions.models import Execution
from executions.services import execution_start, person_run_request
from governance.models import ApprovalRequest, AuditLogEntry, Notification
from tests.factories import make_agent


@pytest.fixture
def agent(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["get_workspace_info"])
    AgentVersion.objects.create(
        agent=agent,
        version=2,
        goal="Help faster.",
        instructions="Be quick.",
        action_level="automated",
        tools=["get_workspace_info"],
    )
    return agent


@pytest.fixture
def canary(agent, owner):
    return agent_canary_start(
        agent=agent, version=agent.versions.get(version=2), actor=owner, percent=20, margin=0.1, min_runs=10, seed=7
    )


def runs(canary, *, arm: bool, outcomes: dict[str, int], cost: str = "0.01", turns: int = 2) -> list[int]:
    """Finished runs of one arm with these outcomes (built by hand: the outcome is what
    is under test here, not how a run reaches it)."""
    version = canary.version if arm else canary.base_version
    now = timezone.now()
    ids = []
    for outcome, count in outcomes.items():
        status = Execution.Status.FAILED if outcome == "failed" else Execution.Status.COMPLETED
        for _ in range(count):
            ids.append(
                Execution.objects.create(
                    workspace_id=canary.agent.workspace_id,
                    agent=canary.agent,
                    agent_version=version,
                    canary=canary,
                    canary_arm=arm,
                    status=status,
                    outcome=outcome,
                    cost_usd=Decimal(cost),
                    turn_count=turns,
                    finished_at=now,
                ).pk
            )
    return ids


def approvals(canary, run_ids: list[int], statuses: dict[str, int]) -> None:
    rows = iter(run_ids)
    for status, count in statuses.items():
        for _ in range(count):
            ApprovalRequest.objects.create(
                workspace_id=canary.agent.workspace_id,
                execution_id=next(rows),
                agent_id=canary.agent_id,
                tool_name="write_back",
                status=status,
                expires_at=timezone.now() + timedelta(hours=1),
            )


def test_a_canary_that_fails_more_is_rolled_back(canary, agent, owner, member):
    current_ids = runs(canary, arm=False, outcomes={"answered": 36, "failed": 4})
    canary_ids = runs(canary, arm=True, outcomes={"answered": 6, "failed": 6})

    assert tasks.canaries_check() == {"rolled_back": 1}

    canary.refresh_from_db()
    agent.refresh_from_db()
    assert canary.status == AgentCanary.Status.ROLLED_BACK and canary.ended_at is not None
    assert agent.canary_id is None and agent.current_version.version == 1
    entry = AuditLogEntry.objects.get(event_type="canary_rolled_back")
    figures = entry.details["figures"]
    assert figures["canary"]["failed"] == {"count": 6, "of": 12, "rate": 0.5}
    assert figures["current"]["failed"] == {"count": 4, "of": 40, "rate": 0.1}
    assert figures["canary"]["answered"] == {"count": 6, "of": 12, "rate": 0.5}
    assert figures["canary"]["runs"] == 12 and figures["current"]["runs"] == 40
    assert {c["metric"] for c in figures["checks"] if c["worse"]} == {"answered_rate", "failed_rate"}
    assert "failed 50.0% (6 of 12) against 10.0% (4 of 40)" in entry.details["reason"]
    assert canary.end_reason == entry.details["reason"] and canary.figures["verdict"] == "worse"
    # The runs the figures come from, named.
    named = canary_arm_run_ids(canary=canary)
    assert sorted(named["canary"]) == sorted(canary_ids) and len(named["current"]) == 40
    assert set(named["current"]) <= set(current_ids)

    told = Notification.objects.filter(kind="canary_rolled_back")
    assert [n.user_id for n in told] == [owner.pk]  # the workspace's admin, not the analyst
    assert "v2 rolled back" in told[0].title and "failed 50.0%" in told[0].body
    assert told[0].url == f"/agents/{agent.pk}/?canary={canary.pk}#canary"  # the agent's page, its panel

    # Safe to run again: nothing more happens, nothing more is recorded.
    assert tasks.canaries_check() == {}
    assert canary_check(canary_id=canary.pk) == "not_running"
    assert AuditLogEntry.objects.filter(event_type="canary_rolled_back").count() == 1
    assert told.count() == 1

    # New runs all take the deployed version again.
    with mock.patch("executions.tasks.run_segment.delay"):
        later = [execution_start(agent=agent, request=person_run_request(agent=agent, user=owner)) for _ in range(20)]
    assert {run.agent_version_id for run in later} == {agent.current_version_id}
    assert not any(run.canary_id for run in later)


def test_a_canary_that_does_as_well_keeps_running(canary):
    runs(canary, arm=False, outcomes={"answered": 36, "failed": 4})
    runs(canary, arm=True, outcomes={"answered": 11, "failed": 1})
    assert tasks.canaries_check() == {"kept": 1}
    canary.refresh_from_db()
    assert canary.status == AgentCanary.Status.RUNNING
    comparison = canary_compare(canary=canary)
    assert comparison.verdict == "not_worse" and comparison.reason == ""
    assert not AuditLogEntry.objects.filter(event_type="canary_rolled_back").exists()


def test_too_few_runs_decide_nothing(canary):
    runs(canary, arm=False, outcomes={"answered": 40})
    runs(canary, arm=True, outcomes={"failed": 9})  # all failed, but one short of min_runs
    assert canary_compare(canary=canary).verdict == "too_few_runs"
    assert canary_check(canary_id=canary.pk) == "kept"
    # An unfinished run counts as a run, never as a finished one.
    Execution.objects.create(
        workspace_id=canary.agent.workspace_id,
        agent=canary.agent,
        agent_version=canary.version,
        canary=canary,
        canary_arm=True,
    )
    comparison = canary_compare(canary=canary)
    assert (comparison.canary.runs, comparison.canary.finished) == (10, 9)
    assert canary_check(canary_id=canary.pk) == "kept"
    runs(canary, arm=True, outcomes={"failed": 1})
    assert canary_check(canary_id=canary.pk) == "rolled_back"


def test_more_rejections_roll_it_back(canary):
    current_ids = runs(canary, arm=False, outcomes={"answered": 20})
    canary_ids = runs(canary, arm=True, outcomes={"answered": 12})
    approvals(canary, current_ids, {"approved": 18, "rejected": 2})
    approvals(canary, canary_ids, {"approved": 5, "rejected": 5, "edited": 2})
    comparison = canary_compare(canary=canary)
    assert comparison.canary.rejected.model_dump() == {"count": 5, "of": 12, "rate": 0.4167}
    assert comparison.canary.edited.model_dump() == {"count": 2, "of": 12, "rate": 0.1667}
    assert comparison.current.rejected.model_dump() == {"count": 2, "of": 20, "rate": 0.1}
    assert [c.metric for c in comparison.checks if c.worse] == ["rejected_rate", "edited_rate"]
    assert canary_check(canary_id=canary.pk) == "rolled_back"


def test_cost_and_turns_are_compared_as_means(canary):
    runs(canary, arm=False, outcomes={"answered": 10}, cost="0.010", turns=2)
    runs(canary, arm=True, outcomes={"answered": 10}, cost="0.011", turns=4)
    comparison = canary_compare(canary=canary)
    assert comparison.canary.cost_usd.model_dump() == {"total": 0.11, "of": 10, "mean": 0.011}
    assert [c.metric for c in comparison.checks if c.worse] == ["mean_turns"]  # cost is 10% up: within


def test_a_stop_and_a_rollback_end_it_once(canary, owner):
    runs(canary, arm=False, outcomes={"answered": 10})
    runs(canary, arm=True, outcomes={"failed": 10})
    agent_canary_stop(canary=canary, actor=owner)
    assert canary_check(canary_id=canary.pk) == "not_running"
    canary.refresh_from_db()
    assert canary.status == AgentCanary.Status.STOPPED
    assert not AuditLogEntry.objects.filter(event_type="canary_rolled_back").exists()


def test_another_workspaces_runs_never_count(canary, other_workspace, outsider):
    runs(canary, arm=False, outcomes={"answered": 10})
    runs(canary, arm=True, outcomes={"answered": 10})
    theirs = make_agent(workspace=other_workspace, owner=outsider)
    Execution.objects.create(
        workspace=other_workspace,
        agent=theirs,
        agent_version=theirs.current_version,
        status=Execution.Status.FAILED,
        outcome="failed",
    )
    comparison = canary_compare(canary=canary)
    assert comparison.canary.finished == 10 and comparison.current.finished == 10
    assert comparison.verdict == "not_worse"


def test_the_check_is_a_beat_task_by_name(settings):
    from riverapp.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["executions-canaries-check"]
    assert entry["task"] == "executions.canaries_check" and entry["task"] in app.tasks
    assert entry["schedule"].total_seconds() == settings.RIVER_CANARY_CHECK_SECONDS


def test_one_canary_that_cannot_be_compared_does_not_stop_the_others(canary, agent, owner, workspace):
    other = make_agent(workspace=workspace, owner=owner, name="Second")
    AgentVersion.objects.create(agent=other, version=2, goal="g", instructions="i", action_level="automated")
    second = agent_canary_start(agent=other, version=other.versions.get(version=2), actor=owner, percent=10, min_runs=1)
    runs(second, arm=True, outcomes={"failed": 1})
    runs(second, arm=False, outcomes={"answered": 1})
    real = canary_compare

    def flaky(*, canary):
        if canary.pk == second.pk:
            return real(canary=canary)
        raise RuntimeError("database hiccup")

    with mock.patch("executions.canary.canary_compare", side_effect=flaky):
        assert tasks.canaries_check() == {"error": 1, "rolled_back": 1}
    assert AgentCanary.objects.get(pk=second.pk).status == AgentCanary.Status.ROLLED_BACK
    assert AgentCanary.objects.get(pk=canary.pk).status == AgentCanary.Status.RUNNING
