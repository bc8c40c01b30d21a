"""The policy backtest against a hand-built history: exact counts, examples and the
approver-time estimate; who may start and read one; hostile input; the claim."""

from __future__ import annotations

import pytest

from executions.backtest import backtest_run
from executions.tasks import policy_backtest
from governance.backtest_models import PolicyBacktest
from governance.models import AuditLogEntry, Policy
from tests.executions.backtest_history import decided_approval, recorded_run
from tests.factories import make_agent

pytestmark = pytest.mark.django_db(transaction=False)

INVOICES = {"table_name": "invoices", "data": {"amount": 10}}
CUSTOMERS = {"table_name": "customers", "data": {"name": "x"}}
QUERY = {"sql": "select 1"}


@pytest.fixture
def history(workspace, other_workspace, owner, outsider):
    """Four runs in the last 14 days, one older, one in another workspace.

    The active policy asks approval for writes to customers. Recorded calls:
      run a (1 day ago):  execute_query, write_back invoices
      run b (2 days ago): write_back invoices, write_back customers
      run c (3 days ago): write_back customers
      run d (5 days ago): execute_query
      old  (20 days ago): write_back invoices             (outside the window)
      other workspace:    write_back invoices             (never seen)
    Decided approvals in the window wait 4, 10 and 30 minutes: the median is 10.
    """
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back", "execute_query"])
    Policy.objects.create(organization=workspace.organization, workspace=workspace, scope="workspace",
                          name="Approve customers", policy_type="content",
                          conditions={"expression": "args.table_name == 'customers'"},
                          enforcement="require_approval")
    runs = {
        "a": recorded_run(agent=agent, days_ago=1, calls=[("execute_query", QUERY), ("write_back", INVOICES)]),
        "b": recorded_run(agent=agent, days_ago=2, calls=[("write_back", INVOICES), ("write_back", CUSTOMERS)]),
        "c": recorded_run(agent=agent, days_ago=3, calls=[("write_back", CUSTOMERS)]),
        "d": recorded_run(agent=agent, days_ago=5, calls=[("execute_query", QUERY)]),
        "old": recorded_run(agent=agent, days_ago=20, calls=[("write_back", INVOICES)]),
    }
    elsewhere = make_agent(workspace=other_workspace, owner=outsider, tools=["write_back"])
    recorded_run(agent=elsewhere, days_ago=1, calls=[("write_back", INVOICES)])
    for wait in (4, 10, 30):
        decided_approval(agent=agent, run=runs["b"], tool="write_back", arguments=CUSTOMERS, status="approved",
                         wait_minutes=wait, by=owner)
    return agent, runs


def _start(client, body):
    response = client.post("/api/v1/policies/backtest", body, format="json")
    return response


def _finished(client, response):
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    backtest_id = response.json()["id"]
    assert policy_backtest.run(backtest_id) == "policy"
    result = client.get(f"/api/v1/policies/backtest/{backtest_id}")
    assert result.status_code == 200
    return result.json()


def test_a_new_blocking_policy_counts_the_calls_and_runs_it_would_have_blocked(history, workspace, owner,
                                                                               api_client_for):
    _, runs = history
    client = api_client_for(owner)
    body = {"policy": {"name": "No invoices", "scope": "workspace", "workspace_id": workspace.pk,
                       "conditions": {"expression": "args.table_name == 'invoices'"}, "enforcement": "block"}}
    data = _finished(client, _start(client, body))
    assert data["status"] == "done" and data["progress"] == 100
    assert data["runs_considered"] == 4
    assert data["calls_considered"] == 6
    assert data["calls_matched"] == 2
    assert data["calls_changed"] == 2
    assert data["runs_affected"] == 2
    assert data["runs_blocked"] == 2
    assert data["would_block"] == 2
    assert data["would_need_approval"] == 0
    assert data["approvals_added"] == 0
    assert data["approver_minutes_estimate"] == 0
    assert data["examples"] == [
        {"execution_id": runs["b"].pk, "step": 1, "tool": "write_back", "verdict_before": "PROCEED",
         "verdict_after": "BLOCKED", "policy": "No invoices"},
        {"execution_id": runs["a"].pk, "step": 2, "tool": "write_back", "verdict_before": "PROCEED",
         "verdict_after": "BLOCKED", "policy": "No invoices"},
    ]


def test_a_new_approval_policy_estimates_approver_time_from_the_median_decision(history, workspace, owner,
                                                                               api_client_for):
    client = api_client_for(owner)
    body = {"days": 14, "policy": {"name": "Approve writes", "scope": "workspace", "workspace_id": workspace.pk,
                                   "conditions": {"expression": "tool.name == 'write_back'"},
                                   "enforcement": "require_approval"}}
    data = _finished(client, _start(client, body))
    assert data["calls_matched"] == 4  # every write_back in the window
    assert data["would_need_approval"] == 2  # the invoices writes; customers already needed one
    assert data["would_block"] == 0
    assert data["runs_affected"] == 2
    assert data["approvals_added"] == 2
    assert data["decision_minutes"] == {"minutes": 10.0, "source": "measured", "decisions": 3}
    assert data["approver_minutes_estimate"] == 20.0
    assert data["approvals_added_per_day"] == round(2 / 14, 1)
    assert data["approver_minutes_per_day"] == round(2 / 14 * 10, 1)


def test_changing_an_existing_policy_replaces_it_in_the_set(history, owner, api_client_for):
    client = api_client_for(owner)
    policy = Policy.objects.get(name="Approve customers")
    data = _finished(client, _start(client, {"policy_id": str(policy.pk), "enforcement": "block"}))
    assert data["would_block"] == 2
    assert data["runs_affected"] == 2
    assert data["approvals_added"] == -2  # two approvals fewer: those calls are now refused
    assert data["approver_minutes_estimate"] == -20.0
    assert {e["verdict_before"] for e in data["examples"]} == {"APPROVAL_REQUIRED"}
    assert data["policy_id"] == str(policy.pk)
    policy.refresh_from_db()
    assert policy.enforcement == "require_approval"  # a backtest changes nothing


def test_disabling_a_policy_shows_the_approvals_it_would_save(history, owner, api_client_for):
    client = api_client_for(owner)
    policy = Policy.objects.get(name="Approve customers")
    data = _finished(client, _start(client, {"policy_id": str(policy.pk), "enabled": False}))
    assert data["approvals_added"] == -2
    assert data["calls_matched"] == 0
    assert {(e["verdict_before"], e["verdict_after"]) for e in data["examples"]} == {("APPROVAL_REQUIRED",
                                                                                       "PROCEED")}


def test_the_fallback_decision_time_is_used_without_decided_approvals(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"])
    recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)])
    client = api_client_for(owner)
    body = {"policy": {"name": "Approve", "workspace_id": workspace.pk,
                       "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "require_approval"}}
    data = _finished(client, _start(client, body))
    assert data["decision_minutes"] == {"minutes": 5.0, "source": "fallback", "decisions": 0}
    assert data["approver_minutes_estimate"] == 5.0


def test_time_windows_use_the_time_each_call_was_made(workspace, owner, api_client_for):
    """A write made at 03:00 UTC is inside a night-time window; the backtest runs now."""
    import datetime as dt

    from executions.models import ExecutionStep

    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"])
    run = recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)])
    night = run.queued_at.replace(hour=3, minute=0, second=0, microsecond=0)
    ExecutionStep.objects.filter(execution=run).update(created_at=night)
    day = recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)])
    ExecutionStep.objects.filter(execution=day).update(created_at=night + dt.timedelta(hours=9))
    client = api_client_for(owner)
    body = {"policy": {"name": "Nights", "workspace_id": workspace.pk,
                       "conditions": {"expression": "time.hour < 6"}, "enforcement": "block"}}
    data = _finished(client, _start(client, body))
    assert data["would_block"] == 1
    assert [e["execution_id"] for e in data["examples"]] == [run.pk]


def test_max_runs_bounds_the_window_to_the_newest(history, workspace, owner, api_client_for, settings):
    settings.RIVER_BACKTEST_MAX_RUNS = 2
    client = api_client_for(owner)
    body = {"policy": {"name": "No invoices", "workspace_id": workspace.pk,
                       "conditions": {"expression": "args.table_name == 'invoices'"}, "enforcement": "block"}}
    data = _finished(client, _start(client, body))
    assert data["runs_considered"] == 2  # runs a and b
    assert data["would_block"] == 2


def test_a_second_delivery_does_nothing(history, workspace, owner, api_client_for):
    client = api_client_for(owner)
    body = {"policy": {"name": "No invoices", "workspace_id": workspace.pk,
                       "conditions": {"expression": "args.table_name == 'invoices'"}, "enforcement": "block"}}
    response = _start(client, body)
    backtest_id = response.json()["id"]
    assert backtest_run(backtest_id=backtest_id) == "policy"
    first = PolicyBacktest.objects.get(pk=backtest_id)
    assert backtest_run(backtest_id=backtest_id) is None
    again = PolicyBacktest.objects.get(pk=backtest_id)
    assert (again.status, again.result, again.finished_at) == ("done", first.result, first.finished_at)
    assert backtest_run(backtest_id=10**9) is None


def test_starting_one_is_audited(history, workspace, owner, api_client_for):
    client = api_client_for(owner)
    body = {"policy": {"name": "No invoices", "workspace_id": workspace.pk,
                       "conditions": {"expression": "args.table_name == 'invoices'"}, "enforcement": "block"}}
    backtest_id = _start(client, body).json()["id"]
    entry = AuditLogEntry.objects.get(event_type="policy_backtest_requested")
    assert entry.details["backtest_id"] == backtest_id and entry.actor_id == owner.pk


# --- who may ------------------------------------------------------------------------------


def test_outsider_gets_404(history, workspace, owner, outsider, api_client_for):
    body = {"policy": {"name": "x", "workspace_id": workspace.pk,
                       "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "block"}}
    assert _start(api_client_for(outsider), body).status_code == 404
    policy = Policy.objects.get(name="Approve customers")
    assert _start(api_client_for(outsider), {"policy_id": str(policy.pk), "enforcement": "block"}).status_code == 404
    backtest_id = _start(api_client_for(owner), body).json()["id"]
    assert api_client_for(outsider).get(f"/api/v1/policies/backtest/{backtest_id}").status_code == 404
    assert PolicyBacktest.objects.count() == 1


def test_member_without_policy_rights_gets_403(history, workspace, owner, member, editor, api_client_for):
    body = {"policy": {"name": "x", "workspace_id": workspace.pk,
                       "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "block"}}
    for user in (member, editor):
        assert _start(api_client_for(user), body).status_code == 403
    backtest_id = _start(api_client_for(owner), body).json()["id"]
    assert api_client_for(member).get(f"/api/v1/policies/backtest/{backtest_id}").status_code == 403
    assert PolicyBacktest.objects.count() == 1


# --- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize("body, field", [
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == "}, "enforcement": "block"}},
     "policy.conditions"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "explode"}},
     "policy"),
    ({"policy": {"name": "x" * 5000, "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"}},
     "policy"),
    ({"policy": {"name": "a\x00b", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"}},
     "policy"),
    ({"policy": {"name": "x", "conditions": {"expression": "rows > 5"}, "enforcement": "block",
                 "policy_type": "content"}}, "policy.conditions"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "warn",
                 "required_approvals": 3}}, "policy.required_approvals"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"},
      "days": 1000}, "days"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"},
      "days": "many"}, "days"),
    ({"policy": "<script>alert(1)</script>"}, "policy"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"},
      "enforcement": "warn"}, "enforcement"),
    ({"policy_id": "not-a-uuid"}, "policy_id"),
    ({}, "policy"),
    ({"policy": {"name": "x", "conditions": {"expression": "tool.name == 'a'"}, "enforcement": "block"},
      "surprise": 1}, "surprise"),
])
def test_invalid_input_is_400_naming_the_field(history, workspace, owner, api_client_for, body, field):
    if isinstance(body.get("policy"), dict):
        body["policy"]["workspace_id"] = workspace.pk
    response = _start(api_client_for(owner), body)
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert any(key == field or key.startswith(field) for key in details), details
    assert PolicyBacktest.objects.count() == 0


def test_changed_fields_are_validated_like_a_patch(history, owner, api_client_for):
    policy = Policy.objects.get(name="Approve customers")
    response = _start(api_client_for(owner), {"policy_id": str(policy.pk),
                                              "conditions": {"expression": "args.table_name =="}})
    assert response.status_code == 400
    assert "conditions" in response.json()["error"]["details"]
    assert PolicyBacktest.objects.count() == 0


def test_an_unknown_backtest_is_404(owner, api_client_for):
    client = api_client_for(owner)
    assert client.get("/api/v1/policies/backtest/99999").status_code == 404
    assert client.get("/api/v1/policies/backtest/abc").status_code == 404


def test_the_admin_action_backtests_what_a_saved_policy_decides(history, owner):
    """Against the set without it: the policy asks for the two customers writes."""
    from django.test import Client

    owner.is_staff = owner.is_superuser = True
    owner.save(update_fields=["is_staff", "is_superuser"])
    client = Client()
    client.force_login(owner)
    policy = Policy.objects.get(name="Approve customers")
    response = client.post("/admin/governance/policy/", {"action": "backtest_policies",
                                                         "_selected_action": [str(policy.pk)]})
    assert response.status_code == 302
    backtest = PolicyBacktest.objects.get()
    assert backtest.policy_id == policy.pk and backtest.proposal["baseline_without"] is True
    backtest_run(backtest_id=backtest.pk)
    backtest.refresh_from_db()
    assert backtest.result["calls_matched"] == 2
    assert backtest.result["approvals_added"] == 2
    assert backtest.result["would_need_approval"] == 2
    assert client.get("/admin/governance/policybacktest/").status_code == 200


def _new_policy(client, workspace, expression, enforcement="block"):
    return _finished(client, _start(client, {"policy": {
        "name": "Proposed", "workspace_id": workspace.pk, "conditions": {"expression": expression},
        "enforcement": enforcement}}))


def test_rate_limits_count_the_agents_recorded_calls_in_that_hour(workspace, owner, api_client_for):
    """Three calls within a minute: with "more than 1 an hour" the 2nd and 3rd are blocked;
    the live counter is neither read nor written."""
    from governance.models import PolicyCounter

    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"])
    run = recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)] * 3)
    data = _new_policy(api_client_for(owner), workspace, "agent.tool_calls_this_hour > 1")
    assert data["would_block"] == 2
    assert [e["step"] for e in data["examples"]] == [2, 3] and data["examples"][0]["execution_id"] == run.pk
    assert not PolicyCounter.objects.exists()


def test_budget_policies_see_the_tokens_used_before_the_call(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"])
    thrifty = recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)], tokens=100)
    costly = recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES)], tokens=5000)
    data = _new_policy(api_client_for(owner), workspace, "cost.tokens > 1000")
    assert data["would_block"] == 1
    assert [e["execution_id"] for e in data["examples"]] == [costly.pk]
    assert thrifty.pk not in {e["execution_id"] for e in data["examples"]}


def test_the_versions_auto_approve_conditions_count_as_no_person_asked(workspace, owner, api_client_for):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"],
                       auto_approve_conditions=[{"tool": "write_back", "condition": "args.data.amount < 100"}])
    recorded_run(agent=agent, days_ago=1, calls=[("write_back", INVOICES),
                                                 ("write_back", {"table_name": "invoices", "data": {"amount": 900}})])
    data = _new_policy(api_client_for(owner), workspace, "tool.name == 'write_back'", "require_approval")
    assert data["approvals_added"] == 1  # the 10 is approved by the version's own condition
    assert sorted(e["verdict_after"] for e in data["examples"]) == ["APPROVAL_REQUIRED", "AUTO_APPROVED"]


def test_a_lapsed_claim_is_taken_over_and_a_live_one_is_not(history, workspace, owner, api_client_for):
    import datetime as dt

    from django.utils import timezone

    from governance.backtests import backtest_claim

    client = api_client_for(owner)
    body = {"policy": {"name": "x", "workspace_id": workspace.pk,
                       "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "block"}}
    backtest_id = _start(client, body).json()["id"]
    assert backtest_claim(backtest_id=backtest_id) is not None
    assert backtest_claim(backtest_id=backtest_id) is None  # running, lease alive
    PolicyBacktest.objects.filter(pk=backtest_id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert backtest_run(backtest_id=backtest_id) == "policy"
    assert PolicyBacktest.objects.get(pk=backtest_id).status == "done"


def test_an_error_ends_the_backtest_failed_with_its_reason(history, workspace, owner, api_client_for, monkeypatch):
    from executions import backtest as module

    def broken(**kwargs):
        raise RuntimeError("the steps could not be read")

    monkeypatch.setattr(module, "policy_backtest_compute", broken)
    client = api_client_for(owner)
    body = {"policy": {"name": "x", "workspace_id": workspace.pk,
                       "conditions": {"expression": "tool.name == 'write_back'"}, "enforcement": "block"}}
    backtest_id = _start(client, body).json()["id"]
    assert backtest_run(backtest_id=backtest_id) is None
    data = client.get(f"/api/v1/policies/backtest/{backtest_id}").json()
    assert data["status"] == "failed" and data["error"] == "RuntimeError: the steps could not be read"
    assert "would_block" not in data
