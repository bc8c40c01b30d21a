"""Issue 29 §1 end to end, on a PostgreSQL source and a SQLite source: a write_back
that pauses for approval carries its effect; the API shows it; an edited call is
previewed again; approval commits only if the effect is still the previewed one (a
stale preview writes nothing and the run keeps waiting with a fresh preview); the
approver's ceiling holds in the write's transaction; the write's audit entry names
the fingerprint and the rows it changed."""

from __future__ import annotations

import sqlite3
from unittest import mock

import pytest

from datasources.services import data_source_discover
from executions import services, tasks
from executions.models import Execution
from governance import tasks as governance_tasks
from governance.approvals import approvals_pending_count
from governance.models import ApprovalRequest, AuditLogEntry, Policy
from governance.previews import EffectApproval
from governance.resolution import approval_resolve
from rivercore.errors import Conflict
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect, pg_count, sqlite_count
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

CLOSE = {"table_name": "tickets", "operation": "update", "data": {"status": "closed"},
         "conditions": {"status": "open", "priority": "high"}}
CLOSED = "SELECT count(*) FROM tickets WHERE status = 'closed'"


@pytest.fixture(params=["postgresql", "sqlite"])
def source(request):
    if request.param == "postgresql":
        tables = request.getfixturevalue("pg_tables")
        data_source = request.getfixturevalue("pg_source")

        def change(sql):
            with pg_admin_connect(tables) as conn:
                conn.execute(sql)

        data_source.count = lambda sql: pg_count(tables, sql)
    else:
        path = request.getfixturevalue("sqlite_file")
        data_source = request.getfixturevalue("sqlite_source")

        def change(sql):
            conn = sqlite3.connect(path)
            conn.execute(sql)
            conn.commit()
            conn.close()

        data_source.count = lambda sql: sqlite_count(path, sql)
    data_source_discover(data_source=data_source)
    data_source.change = change
    return data_source


@pytest.fixture
def quiet():
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        yield


def paused(workspace, owner, source, args=None):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], approver_roles=["admin", "editor"],
                       data_sources=[source])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Close the open high tickets"))
    call = {"data_source_id": source.pk, **(args or CLOSE)}
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply("write_back", call)]))
    return execution, ApprovalRequest.objects.get(execution_id=execution.pk)


def resume(execution):
    return services.execution_run_segment(execution_id=execution.pk,
                                          llm=ScriptedLLM([text_reply("Done."), text_reply("Done.")]))


pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet")]


def test_the_paused_write_carries_its_effect_and_the_api_shows_it(workspace, owner, editor, source,
                                                                    api_client_for):
    execution, approval = paused(workspace, owner, source)

    body = api_client_for(editor).get(f"/api/v1/approvals/{approval.pk}/").json()
    preview = body["preview"]
    assert preview["rows_affected"] == 3
    assert preview["summary"] == "3 rows will change in tickets: status open → closed."
    assert preview["changes"][0] == {"key": {"id": 1}, "before": {"status": "open"}, "after": {"status": "closed"}}
    assert preview["truncated"] is False and len(preview["fingerprint"]) == 64
    assert "index" not in preview
    assert source.count(CLOSED) == 1  # the preview was rolled back


def test_a_matching_preview_is_written_and_audited(workspace, owner, editor, source):
    execution, approval = paused(workspace, owner, source)
    approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    assert resume(execution) == "success"

    assert source.count(CLOSED) == 4
    entry = AuditLogEntry.objects.get(approval_id=approval.pk, event_type="approved_write_applied")
    assert entry.details["preview_fingerprint"] == approval.preview["fingerprint"]
    assert entry.details["applied_fingerprint"] == approval.preview["fingerprint"]
    assert entry.details["rows_affected"] == 3
    assert entry.details["keys"] == [{"id": 1}, {"id": 2}, {"id": 3}]


def test_a_stale_preview_decides_nothing_and_the_run_waits_with_a_fresh_one(workspace, owner, editor, source,
                                                                             api_client_for):
    execution, approval = paused(workspace, owner, source)
    old = approval.preview["fingerprint"]
    # Another connection changes the rows between the pause and the approval.
    source.change("UPDATE tickets SET status = 'pending' WHERE id IN (1, 2, 3)")
    source.change("UPDATE tickets SET priority = 'high' WHERE id = 4")

    response = api_client_for(editor).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                           format="json")

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "preview_stale"
    assert "3 rows no longer match, 1 new row matches" in error["message"]
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
    assert approval.preview["fingerprint"] != old and approval.preview["rows_affected"] == 1
    assert approval.preview["stale"]["no_longer_match"] == 3 and approval.preview["stale"]["new_matches"] == 1
    assert source.count(CLOSED) == 1  # nothing written
    assert AuditLogEntry.objects.filter(approval_id=approval.pk, event_type="approval_preview_stale").count() == 1

    # Approving what is shown now goes through.
    fresh = approval.preview["fingerprint"]
    response = api_client_for(editor).post(f"/api/v1/approvals/{approval.pk}/resolve",
                                           {"status": "approved", "preview_fingerprint": fresh}, format="json")
    assert response.status_code == 200
    assert resume(execution) == "success"
    assert source.count(CLOSED) == 2


def test_a_change_after_the_approval_re_pauses_the_run_with_a_fresh_preview(workspace, owner, editor, outsider,
                                                                            source, api_client_for):
    execution, approval = paused(workspace, owner, source)
    approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    # Another connection moves the rows after the approval, before the resume writes.
    source.change("UPDATE tickets SET status = 'pending' WHERE id = 2")
    source.change("UPDATE tickets SET priority = 'high' WHERE id = 4")

    assert resume(execution) == "awaiting_approval"

    assert source.count("SELECT count(*) FROM tickets WHERE status = 'open'") == 3  # nothing written
    assert Execution.objects.get(pk=execution.pk).status == Execution.Status.AWAITING_APPROVAL
    first, again = ApprovalRequest.objects.filter(execution_id=execution.pk).order_by("created_at")
    assert first.pk == approval.pk and first.status == ApprovalRequest.Status.APPROVED  # the decision stands
    assert again.status == ApprovalRequest.Status.PENDING and again.tool_call_id == first.tool_call_id
    stale = again.preview["stale"]
    assert stale["at_write"] is True and stale["no_longer_match"] == 1 and stale["new_matches"] == 1
    assert stale["message"].startswith("Nothing was written: the data changed since the preview: "
                                       "1 row no longer matches, 1 new row matches")
    assert stale["previous_fingerprint"] == approval.preview["fingerprint"]
    assert again.preview["rows_affected"] == 3 and again.preview["fingerprint"] != approval.preview["fingerprint"]
    audit = AuditLogEntry.objects.get(approval_id=again.pk, event_type="approval_preview_stale")
    assert audit.details["at_write"] is True and audit.details["follows_approval_id"] == str(approval.pk)
    assert not AuditLogEntry.objects.filter(event_type="approved_write_applied").exists()
    shown = api_client_for(editor).get(f"/api/v1/approvals/{again.pk}/").json()
    assert shown["status"] == "pending" and shown["preview"]["stale"]["message"] == stale["message"]
    # The new request is guarded like any: another workspace 404, the requester 403.
    assert api_client_for(outsider).get(f"/api/v1/approvals/{again.pk}/").status_code == 404
    assert api_client_for(owner).post(f"/api/v1/approvals/{again.pk}/resolve", {"status": "approved"},
                                      format="json").status_code == 403
    run_page = _page_html(editor, f"/runs/{execution.pk}/")
    assert run_page.count(stale["message"]) == 1 and f'id="approval-{again.pk}"' in run_page

    # Approving the fresh preview writes it, once; the run carries on.
    approval_resolve(user=editor, approval_id=again.pk, status="approved")
    assert resume(execution) == "success"
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'closed' AND id IN (1, 3, 4)") == 3
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'pending' AND id = 2") == 1
    applied = AuditLogEntry.objects.get(event_type="approved_write_applied")
    assert applied.approval_id == again.pk and applied.details["preview_fingerprint"] == again.preview["fingerprint"]
    observed = [s for s in Execution.objects.get(pk=execution.pk).steps.all()
                if s.step_type == "observation" and s.tool_name == "write_back"]
    assert [s.status for s in observed] == ["completed"]


def test_an_edited_call_is_previewed_before_it_is_approved(workspace, owner, editor, source, api_client_for):
    execution, approval = paused(workspace, owner, source)
    client = api_client_for(editor)
    edited = {"data_source_id": source.pk, **CLOSE, "conditions": {"id": [1, 2]}}

    # Approving unpreviewed edits is refused, and the preview is computed for the card.
    refused = client.post(f"/api/v1/approvals/{approval.pk}/resolve",
                          {"status": "edited_approved", "modified_args": {**edited, "conditions": {"id": [5]}}},
                          format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "preview_required"

    shown = client.post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": edited}, format="json")
    assert shown.status_code == 200
    assert shown.json()["preview_edit"]["rows_affected"] == 2
    assert shown.json()["preview"]["rows_affected"] == 3  # the proposed call's preview is kept
    assert source.count(CLOSED) == 1

    done = client.post(f"/api/v1/approvals/{approval.pk}/resolve",
                       {"status": "edited_approved", "modified_args": edited,
                        "preview_fingerprint": shown.json()["preview_edit"]["fingerprint"]}, format="json")
    assert done.status_code == 200
    assert resume(execution) == "success"
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'closed' AND id IN (1, 2)") == 2
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'open' AND id = 3") == 1


def test_the_ceiling_refuses_a_larger_effect(workspace, owner, editor, source, api_client_for):
    execution, approval = paused(workspace, owner, source)
    client = api_client_for(editor)

    refused = client.post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved", "max_rows": 2},
                          format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "row_ceiling_exceeded"

    # Within the ceiling at approval, over it by the time the write runs: nothing written.
    assert client.post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved", "max_rows": 3},
                       format="json").status_code == 200
    approval.refresh_from_db()
    assert approval.resolution["effect_terms"] == {"fingerprint": approval.preview["fingerprint"], "max_rows": 3}
    with mock.patch("datasources.effects._check", lambda effect, terms: _ceiling_only(effect, terms, 2)):
        assert resume(execution) == "awaiting_approval"  # never a silent fail: it asks again
    assert source.count(CLOSED) == 1
    again = ApprovalRequest.objects.filter(execution_id=execution.pk, status="pending").get()
    assert again.preview["stale"]["max_rows"] == 2
    assert again.preview["stale"]["message"] == ("The write would now change 3 rows, more than the ceiling of 2; "
                                                 "nothing was written. Review the new preview.")


def _ceiling_only(effect, terms, max_rows):
    from datasources.effects import CeilingExceeded

    if effect.rows_affected > max_rows:
        raise CeilingExceeded(effect, max_rows=max_rows)


def test_bad_ceilings_and_fingerprints_are_400s(workspace, owner, editor, source, api_client_for):
    _, approval = paused(workspace, owner, source)
    client = api_client_for(editor)
    for body in ({"status": "approved", "max_rows": -1}, {"status": "approved", "max_rows": "x"},
                 {"status": "approved", "preview_fingerprint": "'; DROP TABLE tickets; --"}):
        response = client.post(f"/api/v1/approvals/{approval.pk}/resolve", body, format="json")
        assert response.status_code == 400, body
    assert client.post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": [1]},
                       format="json").status_code == 400
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING


def test_hostile_edits_are_never_run_by_the_preview(workspace, owner, editor, source, api_client_for):
    _, approval = paused(workspace, owner, source)
    client = api_client_for(editor)
    for hostile in ({"table_name": "tickets; DROP TABLE customers"},
                    {"table_name": "tickets", "conditions": {"1=1; DROP TABLE customers; --": 1}},
                    {"data": {"status": "x', priority = 'y"}, "conditions": {"id": "1 OR 1=1"}}):
        edited = {"data_source_id": source.pk, **CLOSE, **hostile}
        response = client.post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": edited}, format="json")
        assert response.status_code == 200
        preview = response.json()["preview_edit"]
        assert preview["available"] is False or preview["rows_affected"] == 0
    assert source.count("SELECT count(*) FROM customers") == 3
    assert source.count("SELECT count(*) FROM tickets WHERE status = 'open'") == 4


def test_only_approvers_may_preview_and_outsiders_get_404(workspace, owner, member, outsider, source,
                                                          api_client_for):
    _, approval = paused(workspace, owner, source)
    edited = {"data_source_id": source.pk, **CLOSE}
    assert api_client_for(member).post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": edited},
                                       format="json").status_code == 403
    assert api_client_for(outsider).post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": edited},
                                         format="json").status_code == 404
    assert api_client_for(owner).post(f"/api/v1/approvals/{approval.pk}/preview", {"modified_args": edited},
                                      format="json").status_code == 403  # the requester


def test_a_policy_can_require_a_preview(workspace, owner, editor, source, api_client_for):
    execution, approval = paused(workspace, owner, source)
    created = api_client_for(owner).post("/api/v1/policies/", {
        "name": "Writes need a preview", "scope": "workspace", "workspace_id": workspace.pk,
        "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "require_approval",
        "require_preview": True}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["require_preview"] is True
    policy = Policy.objects.get(pk=created.json()["id"])
    approval.preview = {"available": False, "kind": "none", "reason": "no preview: the effect is unknown",
                        "policy_id": str(policy.pk)}
    approval.save(update_fields=["preview"])
    with pytest.raises(Conflict) as raised:
        approval_resolve(user=editor, approval_id=approval.pk, status="approved")
    assert raised.value.code == "preview_required"
    approval_resolve(user=editor, approval_id=approval.pk, status="rejected", comment="no preview")
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.REJECTED


def test_under_a_two_person_rule_the_deciding_approval_holds_the_write_to_the_preview(
        workspace, owner, editor, source, api_client_for):
    from django.contrib.auth import get_user_model

    from agents.models import AgentVersion
    from tenancy.models import Membership
    from tenancy.permissions import Role

    second = get_user_model().objects.create_user(username="dana", password="x")
    Membership.objects.create(workspace=workspace, user=second, role=Role.ADMIN)
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], approver_roles=["admin", "editor"],
                       data_sources=[source])
    version = agent.current_version
    AgentVersion.objects.filter(pk=version.pk).update(
        approval_rules={**version.approval_rules, "quorum": [{"approvals": 2}]})
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Close them"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply(
        "write_back", {"data_source_id": source.pk, **CLOSE})]))
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    assert approval.preview["rows_affected"] == 3

    first = api_client_for(editor).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                        format="json")
    assert first.status_code == 200 and first.json()["status"] == "pending"  # one vote of two
    assert approvals_pending_count(user=editor, workspace=workspace) == 0  # it waits on someone else
    assert "effect_terms" not in (ApprovalRequest.objects.get(pk=approval.pk).resolution or {})
    # The data moves between the two votes: the second is refused and nothing is decided.
    source.change("UPDATE tickets SET status = 'pending' WHERE id = 1")
    stale = api_client_for(second).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                        format="json")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "preview_stale"
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING and approval.preview["rows_affected"] == 2

    # The first vote approved the older preview: it no longer counts.
    second_vote = api_client_for(second).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                              format="json")
    assert second_vote.status_code == 200 and second_vote.json()["status"] == "pending"
    quorum = second_vote.json()["quorum"]
    assert quorum["given"] == 1 and [v["user"]["username"] for v in quorum["approvals"]] == ["dana"]
    assert [v["user"]["username"] for v in quorum["older_preview"]] == ["editor"]
    assert approvals_pending_count(user=editor, workspace=workspace) == 1  # it waits on editor again
    card = _card_html(editor, approval)
    assert "1 of 2 approvals</strong><span class=\"approval-quorum-older\">; editor's approval was of an older " \
        "preview</span>" in card.replace("&#x27;", "'")
    assert source.count(CLOSED) == 1  # nothing decided, nothing written

    # The first approver approves the fresh preview: that completes the quorum.
    decided = api_client_for(editor).post(f"/api/v1/approvals/{approval.pk}/resolve", {"status": "approved"},
                                          format="json")
    assert decided.status_code == 200 and decided.json()["status"] == "approved"
    approval.refresh_from_db()
    assert approval.resolution["effect_terms"]["fingerprint"] == approval.preview["fingerprint"]
    assert resume(execution) == "success"
    assert source.count(CLOSED) == 3


def _card_html(user, approval) -> str:
    return _page_html(user, f"/approvals/{approval.pk}/")


def _page_html(user, path) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def test_a_ceiling_over_an_unknown_effect_is_held_in_the_write_and_asks_again(workspace, owner, editor, source):
    """The preview failed when the run paused (the effect was unknown), so the approver
    set a ceiling instead; the write finds 3 rows, over it: nothing written, the call
    asks again with the real preview and the count against the ceiling."""
    from datasources import effects

    with mock.patch.object(effects, "write_back_preview", side_effect=RuntimeError("source down")):
        execution, approval = paused(workspace, owner, source)
    assert approval.preview["available"] is False
    approval_resolve(user=editor, approval_id=approval.pk, status="approved",
                     effect=EffectApproval(max_rows=2))

    assert resume(execution) == "awaiting_approval"

    assert source.count(CLOSED) == 1  # nothing written
    again = ApprovalRequest.objects.get(execution_id=execution.pk, status="pending")
    assert again.preview["rows_affected"] == 3 and again.preview["available"] is True
    assert again.preview["stale"]["max_rows"] == 2 and again.preview["stale"]["at_write"] is True
    assert again.preview["stale"]["message"].startswith("The write would now change 3 rows, more than the ceiling of 2")
    audit = AuditLogEntry.objects.get(approval_id=again.pk, event_type="approval_preview_stale")
    assert audit.details["code"] == "row_ceiling_exceeded" and audit.details["max_rows"] == 2
