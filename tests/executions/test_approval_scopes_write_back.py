"""Scopes and grants over a real write_back, on a PostgreSQL source and a SQLite source
(issue 29 §2, §3; docs/approvals.md "Scopes and standing grants"): every call a run
scope, a session scope or a grant lets through gets a fresh preview, and its write is
bound to it (committed only if its effect is still that one); a grant covers an update
or a delete when that preview's row count is within its ceiling, and says on the card
why it did not apply otherwise; the write's audit entry names what allowed it."""

# ruff: noqa: F811 (the fixtures are imported from test_approval_preview)
from __future__ import annotations

from unittest import mock

import pytest

from datasources import effects
from executions import services
from executions.models import Execution
from executions.services import sessions
from governance.grants import ApprovalScope, GrantTerms, ScopeChoice
from governance.models import ApprovalGrant, ApprovalRequest, AuditLogEntry
from governance.resolution import approval_resolve
from tests.datasources.fixtures import *  # noqa: F403
from tests.executions.test_approval_preview import quiet, source  # noqa: F401
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet")]

LOW = {"table_name": "tickets", "operation": "update", "data": {"priority": "low"}}


def call(source, **conditions):
    return {"data_source_id": source.pk, **LOW, "conditions": conditions}


@pytest.fixture
def agent(workspace, owner, source):
    return make_agent(
        workspace=workspace,
        owner=owner,
        tools=["write_back"],
        action_level="act_with_approval",
        require_approval_for=["write_back"],
        approver_roles=["admin", "editor"],
        data_sources=[source],
    )


def run(agent, owner, replies, *, session=None) -> Execution:
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt="Lower the priority")
    )
    if session is not None:
        Execution.objects.filter(pk=execution.pk).update(session=session)
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(replies))
    execution.refresh_from_db()
    return execution


def resume(execution, replies) -> Execution:
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(replies))
    execution.refresh_from_db()
    return execution


def pending(execution) -> ApprovalRequest:
    return ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)


def applied(execution, call_id) -> AuditLogEntry:
    return AuditLogEntry.objects.get(
        execution_id=execution.pk, event_type="approved_write_applied", details__call_id=call_id
    )


def low(source) -> set[int]:
    ids = [i for i in range(1, 7) if source.count(f"SELECT count(*) FROM tickets WHERE id = {i} AND priority = 'low'")]
    return set(ids)


def test_run_scope_lets_the_identical_call_through_bound_to_a_fresh_preview(agent, owner, editor, source):
    args = call(source, id=[1, 2])
    execution = run(agent, owner, [tool_reply("write_back", args, call_id="c1")])
    approval_resolve(
        user=editor, approval_id=pending(execution).pk, status="approved", scope=ScopeChoice(scope=ApprovalScope.RUN)
    )
    execution = resume(execution, [tool_reply("write_back", args, call_id="c2"), text_reply("Done.")])

    assert execution.status == Execution.Status.COMPLETED
    assert low(source) == {1, 2, 4}
    check = execution.steps.get(step_type="governance_check", call_id="c2")
    fresh = check.output["approval_request"]["preview"]
    # Its own preview, of the rows as c1 left them (not c1's preview).
    assert fresh["rows_affected"] == 2 and fresh["changes"][0]["before"] == {"priority": "low"}
    terms = check.output["resolution"]["effect_terms"]
    assert terms["fingerprint"] == fresh["fingerprint"] and terms["scope"] == "run"
    entry = applied(execution, "c2")
    assert entry.details["preview_fingerprint"] == fresh["fingerprint"] == entry.details["applied_fingerprint"]
    assert entry.details["allowed_by"] == "allowed by editor's approval for the rest of this run"
    assert entry.details["scope"] == "run" and entry.details["keys"] == [{"id": 1}, {"id": 2}]
    used = AuditLogEntry.objects.get(execution_id=execution.pk, event_type="approval_scope_used")
    assert used.details["preview_fingerprint"] == fresh["fingerprint"] and used.details["rows_affected"] == 2


def test_a_change_between_the_let_through_and_the_write_re_pauses(agent, owner, editor, source):
    args = call(source, id=[1, 2])
    execution = run(agent, owner, [tool_reply("write_back", args, call_id="c1")])
    approval_resolve(
        user=editor, approval_id=pending(execution).pk, status="approved", scope=ScopeChoice(scope=ApprovalScope.RUN)
    )
    original = effects.write_back_preview
    previews = []

    def preview_then_someone_writes(**kwargs):
        shown = original(**kwargs)
        previews.append(shown)
        if len(previews) == 1:  # c2's preview: another connection moves a row before c2 writes
            source.change("UPDATE tickets SET priority = 'medium' WHERE id = 2")
        return shown

    with mock.patch.object(effects, "write_back_preview", preview_then_someone_writes):
        execution = resume(execution, [tool_reply("write_back", args, call_id="c2"), text_reply("Done.")])

    assert execution.status == Execution.Status.AWAITING_APPROVAL, execution.error
    assert low(source) == {1, 4}  # c1 was written; c2 found the change and wrote nothing
    again = pending(execution)
    assert again.tool_call_id == "c2"
    assert again.preview["stale"]["at_write"] is True
    assert "1 row has different values now" in again.preview["stale"]["message"]
    stale = AuditLogEntry.objects.get(approval_id=again.pk, event_type="approval_preview_stale")
    assert stale.details["allowed_by"].startswith("allowed by editor's approval for the rest of this run")
    assert not AuditLogEntry.objects.filter(event_type="approved_write_applied", details__call_id="c2").exists()


def test_session_scope_binds_the_later_runs_write_to_its_own_preview(agent, owner, editor, workspace, source):
    session = sessions.session_create(workspace=workspace, agent=agent, user=owner)
    args = call(source, id=[3])
    first = run(agent, owner, [tool_reply("write_back", args, call_id="s1")], session=session)
    approval_resolve(
        user=editor, approval_id=pending(first).pk, status="approved", scope=ScopeChoice(scope=ApprovalScope.SESSION)
    )
    assert resume(first, [text_reply("Done.")]).status == Execution.Status.COMPLETED
    source.change("UPDATE tickets SET priority = 'high' WHERE id = 3")

    later = run(agent, owner, [tool_reply("write_back", args, call_id="s2"), text_reply("Done.")], session=session)

    assert later.status == Execution.Status.COMPLETED
    entry = applied(later, "s2")
    assert entry.details["allowed_by"] == "allowed by editor's approval for the rest of this conversation"
    assert entry.details["keys"] == [{"id": 3}] and entry.details["rows_affected"] == 1
    assert low(source) == {3, 4}


def test_a_grant_covers_updates_and_deletes_within_its_row_ceiling(agent, owner, editor, source):
    first = run(agent, owner, [tool_reply("write_back", call(source, id=[1]), call_id="g1")])
    approval_resolve(
        user=editor,
        approval_id=pending(first).pk,
        status="approved",
        scope=ScopeChoice(scope=ApprovalScope.GRANT, grant=GrantTerms(expires_in_days=7, max_rows=2)),
    )
    resume(first, [text_reply("Done.")])
    grant = ApprovalGrant.objects.get()

    # Two rows: within the ceiling, let through and written, bound to its preview.
    within = run(agent, owner, [tool_reply("write_back", call(source, id=[2, 3]), call_id="w1"), text_reply("Done.")])
    assert within.status == Execution.Status.COMPLETED
    assert low(source) == {1, 2, 3, 4}
    entry = applied(within, "w1")
    assert entry.details["allowed_by"].startswith(f"allowed by grant #{grant.pk} from editor, expires ")
    assert entry.details["grant_id"] == grant.pk and entry.details["max_rows"] == 2
    assert entry.details["rows_affected"] == 2 and entry.details["preview_fingerprint"]

    # A delete of one row is covered too.
    gone = run(
        agent,
        owner,
        [
            tool_reply(
                "write_back",
                {
                    "data_source_id": source.pk,
                    "table_name": "tickets",
                    "operation": "delete",
                    "data": {},
                    "conditions": {"id": 6},
                },
                call_id="d1",
            ),
            text_reply("Done."),
        ],
    )
    assert gone.status == Execution.Status.COMPLETED
    assert source.count("SELECT count(*) FROM tickets WHERE id = 6") == 0
    assert applied(gone, "d1").details["operation"] == "delete"

    # Three rows: over the ceiling, it asks, and the card says why the grant did not apply.
    over = run(
        agent,
        owner,
        [tool_reply("write_back", {**call(source, priority="low"), "data": {"priority": "high"}}, call_id="o1")],
    )
    assert over.status == Execution.Status.AWAITING_APPROVAL
    asked = pending(over)
    assert (
        f"Grant #{grant.pk} did not apply: the preview shows 4 rows, more than its ceiling of 2." in asked.risk_context
    )
    assert asked.preview["rows_affected"] == 4
    assert source.count("SELECT count(*) FROM tickets WHERE priority = 'high'") == 1  # nothing written
    grant.refresh_from_db()
    assert grant.uses == 2


def test_a_grant_never_covers_an_update_without_a_preview(agent, owner, editor, source):
    first = run(agent, owner, [tool_reply("write_back", call(source, id=[1]), call_id="g1")])
    approval_resolve(
        user=editor,
        approval_id=pending(first).pk,
        status="approved",
        scope=ScopeChoice(scope=ApprovalScope.GRANT, grant=GrantTerms(expires_in_days=7, max_rows=5)),
    )
    resume(first, [text_reply("Done.")])

    with mock.patch.object(effects, "write_back_preview", side_effect=RuntimeError("source down")):
        later = run(agent, owner, [tool_reply("write_back", call(source, id=[2]), call_id="n1")])

    assert later.status == Execution.Status.AWAITING_APPROVAL
    assert "did not apply: the rows this call would change are unknown (no preview)" in pending(later).risk_context
    assert low(source) == {1, 4}
