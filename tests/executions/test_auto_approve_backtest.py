"""The auto-approve backtest: proposed conditions against the decisions people made on
an agent's requests in the window (hand-built), exact counts; who may; hostile input."""

from __future__ import annotations

import pytest

from executions.tasks import policy_backtest
from governance.backtest_models import PolicyBacktest
from tests.executions.backtest_history import decided_approval, recorded_run
from tests.factories import make_agent

CONDITIONS = [{"tool": "write_back", "condition": "args.data.amount < 100"}]


def _write(amount):
    return {"table_name": "invoices", "data": {"amount": amount}}


@pytest.fixture
def agent(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back", "execute_query"],
                       action_level="act_with_approval")
    run = recorded_run(agent=agent, days_ago=1, calls=[])
    decided = [("approved", 10), ("approved", 20), ("approved", 30), ("approved", 99), ("approved", 500),
               ("edited", 50), ("rejected", 20), ("rejected", 900)]
    for status, amount in decided:
        decided_approval(agent=agent, run=run, tool="write_back", arguments=_write(amount), status=status,
                         wait_minutes=10, by=owner)
    decided_approval(agent=agent, run=run, tool="execute_query", arguments={"sql": "select 1"}, status="approved",
                     wait_minutes=10, by=owner)
    decided_approval(agent=agent, run=run, tool="write_back", arguments=_write(5), status="approved",
                     wait_minutes=10, by=owner, days_ago=20)  # outside the window
    return agent


def _start(client, agent, body):
    return client.post(f"/api/v1/agents/{agent.pk}/versions/backtest", body, format="json")


def test_counts_what_the_conditions_would_have_approved_unseen(agent, owner, editor, api_client_for):
    for user in (owner, editor):  # whoever may write a version may try its conditions
        client = api_client_for(user)
        response = _start(client, agent, {"auto_approve_conditions": CONDITIONS, "days": 14, "agent_version": 1})
        assert response.status_code == 202, response.content
        backtest_id = response.json()["id"]
        assert policy_backtest.run(backtest_id) == "auto_approve"
        data = client.get(f"/api/v1/policies/backtest/{backtest_id}").json()
        assert data["status"] == "done" and data["kind"] == "auto_approve"
        assert data["decisions_considered"] == 9
        assert (data["approved"], data["approved_auto"]) == (6, 4)
        assert (data["edited"], data["edited_auto"]) == (1, 1)
        assert (data["rejected"], data["rejected_auto"]) == (2, 1)
        assert data["approvals_saved"] == 6
        assert data["approver_minutes_saved"] == 60.0
        assert sorted(e["decision"] for e in data["examples"]) == ["edited", "rejected"]


def test_outsider_gets_404_and_member_403(agent, outsider, member, owner, api_client_for):
    body = {"auto_approve_conditions": CONDITIONS}
    assert _start(api_client_for(outsider), agent, body).status_code == 404
    assert _start(api_client_for(member), agent, body).status_code == 403
    backtest_id = _start(api_client_for(owner), agent, body).json()["id"]
    assert api_client_for(outsider).get(f"/api/v1/policies/backtest/{backtest_id}").status_code == 404
    assert api_client_for(member).get(f"/api/v1/policies/backtest/{backtest_id}").status_code == 403
    assert PolicyBacktest.objects.count() == 1


@pytest.mark.parametrize("body, field", [
    ({"auto_approve_conditions": [{"tool": "write_back", "condition": "true"}]},
     "auto_approve_conditions.0.condition"),
    ({"auto_approve_conditions": [{"tool": "write_back", "condition": "args.x =="}]},
     "auto_approve_conditions.0.condition"),
    ({"auto_approve_conditions": [{"tool": "write_back", "condition": "x" * 100000}]}, "auto_approve_conditions"),
    ({"auto_approve_conditions": [{"tool": "<b>x</b>", "condition": "args.a == 1"}]},
     "auto_approve_conditions.0.tool"),
    ({"auto_approve_conditions": [{"tool": "save_artifact", "condition": "args.a == 1"}]},
     "auto_approve_conditions.0.tool"),
    ({"auto_approve_conditions": [{"tool": "write_back", "condition": "args.a == 1", "x": 1}]},
     "auto_approve_conditions"),
    ({"auto_approve_conditions": []}, "auto_approve_conditions"),
    ({"auto_approve_conditions": "args.a == 1"}, "auto_approve_conditions"),
    ({"auto_approve_conditions": CONDITIONS, "days": 0}, "days"),
])
def test_invalid_input_is_400_naming_the_field(agent, owner, api_client_for, body, field):
    response = _start(api_client_for(owner), agent, body)
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert any(key.startswith(field) for key in details), details
    assert PolicyBacktest.objects.count() == 0


def test_an_unknown_version_is_404(agent, owner, api_client_for):
    response = _start(api_client_for(owner), agent, {"auto_approve_conditions": CONDITIONS, "agent_version": 7})
    assert response.status_code == 404
    assert PolicyBacktest.objects.count() == 0
