"""The New version page's Backtest panel for auto-approve conditions: the typed rows
tried on the decisions people made on the agent's requests; who may; errors."""

from __future__ import annotations

import pytest
from django.test import Client

from executions.tasks import policy_backtest
from governance.backtest_models import PolicyBacktest
from tests.executions.backtest_history import decided_approval, recorded_run
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(*rules, tools=("write_back",)) -> dict:
    data = {"auto-TOTAL_FORMS": str(len(rules)), "auto-INITIAL_FORMS": "0", "auto-MIN_NUM_FORMS": "0",
            "auto-MAX_NUM_FORMS": "50", "backtest_days": "14", "tools": list(tools)}
    for index, (tool, condition) in enumerate(rules):
        data[f"auto-{index}-tool"] = tool
        data[f"auto-{index}-condition"] = condition
    return data


@pytest.fixture
def agent(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval")
    run = recorded_run(agent=agent, days_ago=1, calls=[])
    for status, amount in [("approved", 5), ("approved", 50), ("approved", 500), ("rejected", 1), ("rejected", 900)]:
        decided_approval(agent=agent, run=run, tool="write_back", status=status, wait_minutes=3, by=owner,
                         arguments={"table_name": "t", "data": {"amount": amount}})
    return agent


def test_the_page_offers_it_and_the_result_reads_as_a_sentence(agent, owner):
    client = _client(owner)
    page = client.get(f"/agents/{agent.pk}/versions/new/").content.decode()
    assert f'hx-post="/agents/{agent.pk}/versions/backtest"' in page
    response = client.post(f"/agents/{agent.pk}/versions/backtest", _rows(("write_back", "args.data.amount < 100")))
    assert 'hx-trigger="every 1s"' in response.content.decode()
    backtest = PolicyBacktest.objects.get()
    policy_backtest.run(backtest.pk)
    body = client.get(f"/agents/{agent.pk}/versions/backtest/{backtest.pk}").content.decode()
    assert "Would have auto-approved 2 of the 3 calls people approved; 1 of the 2 they rejected." in body
    assert "About 9.0 approver-minutes saved" in body


def test_errors_and_permissions(agent, owner, member, outsider):
    client = _client(owner)
    body = client.post(f"/agents/{agent.pk}/versions/backtest", _rows(("write_back", "true"))).content.decode()
    assert "auto_approve_conditions.0.condition" in body
    body = client.post(f"/agents/{agent.pk}/versions/backtest", _rows()).content.decode()
    assert "Add an auto-approve condition" in body
    body = client.post(f"/agents/{agent.pk}/versions/backtest", _rows(("write_back", "args.a == 1"), tools=())
                       ).content.decode()
    assert "auto_approve_conditions.0.tool" in body
    assert not PolicyBacktest.objects.exists()
    rows = _rows(("write_back", "args.a == 1"))
    assert _client(member).post(f"/agents/{agent.pk}/versions/backtest", rows).status_code == 403
    assert _client(outsider).post(f"/agents/{agent.pk}/versions/backtest", rows).status_code == 404
