"""Which arm a new run takes while a canary runs: decided once at creation by a hash of
the canary's seed and the run's id, so the split honours the canary's share and each
run's arm can be recomputed afterwards."""

from __future__ import annotations

import math
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.canary import agent_canary_start, canary_arm_draw
from agents.models import AgentVersion
from executions.services import execution_start, person_run_request
from tests.factories import make_agent

SEED = 20261127


def _bounds(n: int, percent: int, sigmas: float = 5.0) -> tuple[float, float]:
    """The binomial count's mean ± ``sigmas`` standard deviations (5: outside once in
    about 3.5 million)."""
    p = percent / 100
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return mean - sigmas * sd, mean + sigmas * sd


@pytest.mark.parametrize("percent", [1, 10, 25, 50])
def test_the_draw_honours_the_share_on_fixed_keys(percent):
    picked = sum(canary_arm_draw(seed=SEED, key=key, percent=percent) for key in range(1, 10_001))
    low, high = _bounds(10_000, percent)
    assert low <= picked <= high, (percent, picked)


def test_a_run_in_the_canary_stays_in_it_at_a_larger_share():
    """The draw is a threshold on one number per run: raising the share only adds runs."""
    for key in range(1, 2001):
        if canary_arm_draw(seed=SEED, key=key, percent=10):
            assert canary_arm_draw(seed=SEED, key=key, percent=30)


def test_another_seed_draws_other_runs():
    first = {key for key in range(1, 1001) if canary_arm_draw(seed=SEED, key=key, percent=10)}
    second = {key for key in range(1, 1001) if canary_arm_draw(seed=SEED + 1, key=key, percent=10)}
    assert first != second and len(first & second) < len(first) / 2


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


def test_a_thousand_runs_split_as_the_canary_says(agent, owner):
    canary = agent_canary_start(agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10, seed=SEED)
    agent.refresh_from_db()
    with mock.patch("executions.tasks.run_segment.delay"):
        started = [
            execution_start(agent=agent, request=person_run_request(agent=agent, user=owner)) for _ in range(1000)
        ]
    in_canary = [run for run in started if run.canary_arm]
    low, high = _bounds(1000, 10)
    assert low <= len(in_canary) <= high, len(in_canary)
    for run in started:
        # Each run's arm is the draw of its own id, and its version the arm's.
        assert run.canary_id == canary.pk
        assert run.canary_arm == canary_arm_draw(seed=SEED, key=run.pk, percent=10)
        assert run.agent_version_id == (canary.version_id if run.canary_arm else canary.base_version_id)


def test_without_a_canary_a_start_costs_no_more(agent, owner):
    """No canary: the run's INSERT and nothing else (the agent is already loaded). With
    one: the canary's row and the id taken from the sequence first."""
    agent.refresh_from_db()
    with mock.patch("executions.tasks.run_segment.delay"), CaptureQueriesContext(connection) as plain:
        execution_start(agent=agent, request=person_run_request(agent=agent, user=None))
    agent_canary_start(agent=agent, version=agent.versions.get(version=2), actor=owner, percent=10)
    agent.refresh_from_db()
    with mock.patch("executions.tasks.run_segment.delay"), CaptureQueriesContext(connection) as with_canary:
        run = execution_start(agent=agent, request=person_run_request(agent=agent, user=None))
    assert [q["sql"].split()[0] for q in plain.captured_queries] == ["INSERT"]
    assert [q["sql"].split()[0] for q in with_canary.captured_queries] == ["SELECT", "SELECT", "INSERT"]
    assert run.canary_id is not None
