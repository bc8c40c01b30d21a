"""Resolving and cancelling the same paused run at the same moment: both lock the run
first and its approval request second, so they queue up instead of deadlocking.

The interleaving is forced, not hoped for: the resolution stops right after its
decision (holding its locks), the cancel starts, and the resolution only goes on
once PostgreSQL shows the cancel waiting for a lock. Had the resolution locked the
request before the run, the cancel would hold the run and wait for the request
while the resolution waits for the run: a deadlock, reported as a database error.
"""

from __future__ import annotations

import threading
import time
from unittest import mock

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from executions import services, tasks
from executions.models import Execution
from governance import resolution as governance_resolution
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve, approvals_expire_due
from rivercore.errors import Conflict
from tests.governance.test_approvals_api import paused_run

WAIT_SECONDS = 15


def _lock_waiters(db: dict) -> int:
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
              "dbname": db["NAME"], "autocommit": True}
    with psycopg.connect(**params) as probe:
        return probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="row-lock ordering needs PostgreSQL")
def test_cancel_arriving_while_a_resolution_holds_its_locks_waits_and_never_deadlocks(workspace, owner, editor):
    db = connection.settings_dict
    decided = threading.Event()
    real_decide = governance_resolution.approval_decide

    def decide_then_hold(**kwargs):
        approval = real_decide(**kwargs)
        decided.set()
        deadline = time.monotonic() + WAIT_SECONDS
        while _lock_waiters(db) == 0:
            assert time.monotonic() < deadline, "the cancel never waited for a lock"
            time.sleep(0.02)
        return approval

    outcomes: dict[str, object] = {}

    def run(name, action) -> None:
        try:
            outcomes[name] = action()
        except Conflict as exc:
            outcomes[name] = exc
        except BaseException as exc:  # reported by the assertions
            outcomes[name] = exc
        finally:
            connection.close()

    with mock.patch.object(tasks.run_segment, "delay") as resume, mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution, approval = paused_run(workspace, owner)
        resume.reset_mock()  # the start's own segment task
        with mock.patch.object(governance_resolution, "approval_decide", decide_then_hold):
            resolver = threading.Thread(target=run, args=("resolve", lambda: approval_resolve(
                user=editor, approval_id=approval.pk, status="approved")))
            resolver.start()
            assert decided.wait(timeout=WAIT_SECONDS)
            canceller = threading.Thread(target=run, args=("cancel", lambda: services.execution_cancel(
                execution=execution, user=owner)))
            canceller.start()
            resolver.join(timeout=WAIT_SECONDS * 2)
            canceller.join(timeout=WAIT_SECONDS * 2)

    # The resolution won and queued its resume; the cancel waited, then cancelled the
    # queued run. Neither saw a database error.
    assert isinstance(outcomes["resolve"], ApprovalRequest), outcomes["resolve"]
    assert isinstance(outcomes["cancel"], Execution), outcomes["cancel"]
    assert [c.args for c in resume.call_args_list] == [(execution.pk,)]
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.APPROVED
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="row-lock ordering needs PostgreSQL")
def test_expiry_sweep_skips_a_run_someone_holds_and_expires_it_next_time(workspace, owner):
    """The sweep takes the run's lock first too, without waiting: a run being
    resolved or cancelled right now is left for the next sweep."""
    from django.utils import timezone

    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution, approval = paused_run(workspace, owner)
        ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
        db = connection.settings_dict
        params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
                  "dbname": db["NAME"]}
        with psycopg.connect(**params) as holder:
            holder.execute("SELECT id FROM executions_execution WHERE id = %s FOR UPDATE", [execution.pk])
            assert approvals_expire_due() == 0
            assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.PENDING
            holder.rollback()
        assert approvals_expire_due() == 1

    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalRequest.Status.EXPIRED
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.APPROVAL_EXPIRED
