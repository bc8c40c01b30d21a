"""Two approvers resolve the same request at the same moment with different scopes: one
decision wins with its own scope, the other gets 409 and leaves no trace (no grant, no
scope). The interleaving is forced: the first decision holds its locks until PostgreSQL
shows the second resolution waiting for one (as test_approval_lock_order does)."""

from __future__ import annotations

import threading
import time
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection

from executions import tasks
from governance import resolution as governance_resolution
from governance import tasks as governance_tasks
from governance.grants import approval_scope_parse
from governance.models import ApprovalGrant, ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from rivercore.errors import Conflict
from tests.governance.test_approval_lock_order import WAIT_SECONDS, _lock_waiters
from tests.governance.test_approvals_api import paused_run

GRANT = approval_scope_parse(scope="grant", grant={"expires_in_days": 3, "max_rows": 1})
RUN = approval_scope_parse(scope="run")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="row-lock ordering needs PostgreSQL")
@pytest.mark.parametrize("first_scope,second_scope", [(GRANT, RUN), (RUN, GRANT)], ids=["grant-first", "run-first"])
def test_two_resolves_racing_with_different_scopes_one_wins(workspace, owner, editor, first_scope, second_scope):
    db = connection.settings_dict
    decided = threading.Event()
    real_decide = governance_resolution.approval_decide
    held = []

    def decide_then_hold(**kwargs):
        approval = real_decide(**kwargs)
        if not held:  # only the first decision waits for its rival to queue behind it
            held.append(kwargs["user"])
            decided.set()
            deadline = time.monotonic() + WAIT_SECONDS
            while _lock_waiters(db) == 0:
                assert time.monotonic() < deadline, "the second resolution never waited for a lock"
                time.sleep(0.02)
        return approval

    outcomes: dict[str, object] = {}

    def resolve(name, user, scope) -> None:
        try:
            outcomes[name] = approval_resolve(user=user, approval_id=approval.pk, status="approved", scope=scope)
        except BaseException as exc:  # reported by the assertions
            outcomes[name] = exc
        finally:
            connection.close()

    with mock.patch.object(tasks.run_segment, "delay") as resume, mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution, approval = paused_run(workspace, owner)
        resume.reset_mock()
        with mock.patch.object(governance_resolution, "approval_decide", decide_then_hold):
            first = threading.Thread(target=resolve, args=("first", owner, first_scope))
            first.start()
            assert decided.wait(timeout=WAIT_SECONDS)
            second = threading.Thread(target=resolve, args=("second", editor, second_scope))
            second.start()
            first.join(timeout=WAIT_SECONDS * 2)
            second.join(timeout=WAIT_SECONDS * 2)

    assert isinstance(outcomes["first"], ApprovalRequest), outcomes["first"]
    assert isinstance(outcomes["second"], Conflict) and outcomes["second"].code == "already_resolved"
    stored = ApprovalRequest.objects.get(pk=approval.pk)
    assert stored.resolved_by == owner and stored.scope == first_scope.scope.value
    assert ApprovalGrant.objects.count() == (1 if first_scope is GRANT else 0)
    assert AuditLogEntry.objects.filter(event_type="approval_approved", approval_id=approval.pk).count() == 1
    assert [c.args for c in resume.call_args_list] == [(execution.pk,)]
