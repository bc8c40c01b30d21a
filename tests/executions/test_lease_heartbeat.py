"""Inline segments (run in their caller, not on a run host) share one heartbeat thread
per process, which renews all their leases with one statement a beat."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from executions import services
from executions.models import Execution
from executions.services.segment import _heartbeats
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=True)


def test_held_leases_share_one_thread_and_are_renewed_together(workspace, owner, settings):
    settings.RIVER_LEASE_SECONDS = 3  # a beat every second
    agent = make_agent(workspace=workspace, owner=owner)
    runs = [services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=f"run {i}")) for i in range(5)]
    tokens = {run.pk: services.execution_claim(execution_id=run.pk) for run in runs}
    first = dict(Execution.objects.filter(pk__in=tokens).values_list("pk", "lease_expires_at"))

    with contextlib.ExitStack() as stack:
        for pk, token in tokens.items():
            stack.enter_context(_heartbeats.held(pk, token))
        beating = [t for t in threading.enumerate() if t.name == "lease-heartbeat"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now = dict(Execution.objects.filter(pk__in=tokens).values_list("pk", "lease_expires_at"))
            if all(now[pk] > first[pk] for pk in tokens):
                break
            time.sleep(0.1)

    assert len(beating) == 1
    assert all(now[pk] > first[pk] for pk in tokens)
    assert _heartbeats._leases == {}  # each segment's lease is let go when it ends
