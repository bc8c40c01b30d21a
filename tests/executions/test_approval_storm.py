"""200 paused runs, each approval raced by 8 concurrent HTTP requests that disagree:
every request gets 200 or 409, each approval gets exactly one decision, each decided
run is resumed once, and each approved write lands in the target table exactly once.

Real HTTP (pytest-django's live server: one thread per request, each with its own
PostgreSQL connection), real row locks, real runs paused at the gate by the engine,
and the real ``write_back`` into a SQLite data source.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from benchmarks import approval_storm as storm
from datasources.services import data_source_create, data_source_discover
from executions.models import Execution
from governance.models import ApprovalRequest, AuditLogEntry
from tenancy.models import Membership
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests.datasources.fixtures import *  # noqa: F403
from tests.factories import make_agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                       reason="row-lock concurrency needs PostgreSQL"),
]

APPROVALS = 200
RACERS = 8


def _rows(path, index: int) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT amount FROM charges WHERE status = ?", [storm.marker(index)]).fetchall()
    finally:
        conn.close()


def test_two_hundred_approvals_raced_by_eight_requests_each(live_server, workspace, owner, sqlite_file):
    source = data_source_create(workspace=workspace, name="Refunds", type="sqlite",
                                connection_config={"path": sqlite_file.name}, credentials={},
                                access_level="read_write")
    data_source_discover(data_source=source)
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], approver_roles=["admin", "editor"],
                       data_sources=[source])
    tokens = []
    for number in range(RACERS):
        # Approvers who did not start the runs (segregation of duties).
        approver = get_user_model().objects.create_user(username=f"approver{number}", password="x")
        Membership.objects.create(workspace=workspace, user=approver,
                                  role=Role.ADMIN if number % 2 else Role.EDITOR)
        tokens.append(token_issue(user=approver).plaintext)

    with storm.resumes_recorded() as queued:
        paused = storm.storm_prepare(agent=agent, starter=owner, data_source_id=source.pk, count=APPROVALS)
        assert len({p.approval_id for p in paused}) == APPROVALS
        queued.clear()  # the first segments' own tasks; only resumes from here on

        result = storm.storm_resolve(base_url=live_server.url, tokens=tokens, paused=paused,
                                     data_source_id=source.pk)

        # Every request: 200 or 409, never anything else; one 200 per approval.
        assert result.other == []
        assert result.requests == APPROVALS * RACERS
        assert set(result.codes) <= {200, 409}
        assert result.codes[200] == APPROVALS
        assert all(len(result.winners.get(p.approval_id, [])) == 1 for p in paused)

        # One decision, one audit entry, one resolution step and one resume per run.
        by_execution = {p.execution_id: p for p in paused}
        assert Counter(queued) == Counter(list(by_execution))
        for p in paused:
            approval = ApprovalRequest.objects.get(pk=p.approval_id)
            assert approval.status == result.winners[p.approval_id][0]["status"] != "pending"
            assert AuditLogEntry.objects.filter(approval_id=p.approval_id).exclude(
                event_type="approval_requested").count() == 1
        assert set(Execution.objects.filter(pk__in=by_execution).values_list("status", flat=True)) == {
            Execution.Status.QUEUED}

        resumed = storm.storm_resume(execution_ids=sorted(set(queued)))

    assert all(first == "success" and again is None for first, again in resumed.values())
    statuses = Counter()
    for p in paused:
        execution = Execution.objects.get(pk=p.execution_id)
        assert execution.status == Execution.Status.COMPLETED
        resolutions = execution.steps.filter(step_type="governance_check", output__has_key="resolution")
        assert resolutions.count() == 1
        decided = ApprovalRequest.objects.get(pk=p.approval_id).status
        statuses[decided] += 1
        rows = _rows(sqlite_file, p.index)
        if decided == ApprovalRequest.Status.REJECTED:
            assert rows == []
        elif decided == ApprovalRequest.Status.EDITED:
            assert rows == [(storm.EDITED_AMOUNT,)]
        else:
            assert rows == [(storm.PROPOSED_AMOUNT,)]
    # The racers disagreed, so every kind of decision won somewhere.
    assert set(statuses) == {ApprovalRequest.Status.APPROVED, ApprovalRequest.Status.REJECTED,
                             ApprovalRequest.Status.EDITED}
    print(f"\napproval storm: {result.requests} requests in {result.seconds:.1f} s "
          f"({result.per_second:.0f}/s), {dict(result.codes)}, decisions {dict(statuses)}")
