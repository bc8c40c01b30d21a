"""Two checks of the same worse canary at once (two beat ticks, a retried task): both
find it worse, exactly one rolls it back, and there is one audit entry and one
notification per admin."""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from django.db import connection

from agents.canary import agent_canary_start
from agents.models import AgentCanary, AgentVersion
from executions import canary as canary_module
from governance.models import AuditLogEntry, Notification
from tests.executions.test_canary_rollback import runs
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_checks_at_once_roll_back_once(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["get_workspace_info"])
    AgentVersion.objects.create(agent=agent, version=2, goal="g", instructions="i", action_level="automated")
    canary = agent_canary_start(agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10, min_runs=2)
    runs(canary, arm=True, outcomes={"failed": 2})
    runs(canary, arm=False, outcomes={"answered": 2})
    both_compared = threading.Barrier(2, timeout=30)
    real = canary_module.canary_compare
    results: list[str] = []

    def compare_then_wait(*, canary):
        comparison = real(canary=canary)
        both_compared.wait()  # each has seen the canary running and worse before either ends it
        return comparison

    def check():
        try:
            results.append(canary_module.canary_check(canary_id=canary.pk))
        finally:
            connection.close()

    with mock.patch.object(canary_module, "canary_compare", side_effect=compare_then_wait):
        threads = [threading.Thread(target=check) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert sorted(results) == ["not_running", "rolled_back"]
    assert AgentCanary.objects.get(pk=canary.pk).status == AgentCanary.Status.ROLLED_BACK
    assert AuditLogEntry.objects.filter(event_type="canary_rolled_back").count() == 1
    assert Notification.objects.filter(kind="canary_rolled_back").count() == 1
