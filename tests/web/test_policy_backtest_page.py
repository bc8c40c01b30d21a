"""The policy form's Backtest panel: the drafted form tried over recorded runs (nothing
saved), progress polled, then the result in words with the changed calls linked to
their runs; who may; the form's errors in the panel."""

from __future__ import annotations

import pytest
from django.test import Client

from executions.tasks import policy_backtest
from governance.backtest_models import PolicyBacktest
from governance.models import Policy
from tests.executions.backtest_history import decided_approval, recorded_run
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

INVOICES = {"table_name": "invoices", "data": {"amount": 10}}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(**overrides) -> dict:
    data = {"name": "No invoice writes", "description": "", "expression": "args.table_name == 'invoices'",
            "policy_type": "", "enforcement": "block", "enabled": "on", "backtest_days": "14"}
    data.update(overrides)
    return data


@pytest.fixture
def runs(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"])
    made = [recorded_run(agent=agent, days_ago=day, calls=[("write_back", INVOICES)] * 2) for day in (1, 1.5, 3)]
    decided_approval(agent=agent, run=made[0], tool="write_back", arguments=INVOICES, status="approved",
                     wait_minutes=12, by=owner)
    return made


def test_the_form_offers_a_backtest(owner):
    body = _client(owner).get("/policies/new/").content.decode()
    assert 'hx-post="/policy-backtests/"' in body and "Backtest before you save" in body


def test_backtest_a_draft_then_read_the_result(owner, runs):
    client = _client(owner)
    response = client.post("/policy-backtests/", _form())
    assert response.status_code == 200
    body = response.content.decode()
    backtest = PolicyBacktest.objects.get()
    assert f'hx-get="/policy-backtests/{backtest.pk}"' in body and 'hx-trigger="every 1s"' in body
    assert not Policy.objects.exists()  # nothing saved
    policy_backtest.run(backtest.pk)
    body = client.get(f"/policy-backtests/{backtest.pk}").content.decode()
    assert "hx-trigger" not in body  # finished: no more polling
    assert "Would have blocked 6 calls in 3 runs." in body
    assert f'href="/runs/{runs[2].pk}/"' in body
    assert "Confirm and save" in body


def test_an_approval_draft_reads_as_approvals_and_minutes_a_day(owner, runs):
    client = _client(owner)
    client.post("/policy-backtests/", _form(enforcement="require_approval", backtest_days="2"))
    backtest = PolicyBacktest.objects.get()
    policy_backtest.run(backtest.pk)
    body = client.get(f"/policy-backtests/{backtest.pk}").content.decode()
    # Runs 1 and 1.5 days ago are in a two-day window: 4 approvals, 2 a day, 12 minutes each.
    assert "2 more approvals a day (4 over the window), about 24 approver-minutes a day." in body
    assert "median time to a decision, 12.0 minutes over 1 decision" in body


def test_editing_a_policy_backtests_the_change(owner, runs, workspace):
    client = _client(owner)
    policy = Policy.objects.create(organization=workspace.organization, workspace=workspace, scope="workspace",
                                   name="Invoices", policy_type="content", enforcement="block",
                                   conditions={"expression": "args.table_name == 'invoices'"})
    client.post("/policy-backtests/", _form(name="Invoices", enforcement="warn", policy=str(policy.pk)))
    backtest = PolicyBacktest.objects.get()
    assert backtest.policy_id == policy.pk
    policy_backtest.run(backtest.pk)
    body = client.get(f"/policy-backtests/{backtest.pk}").content.decode()
    assert "Would have let through 6 calls blocked now." in body


def test_form_errors_show_in_the_panel(owner):
    response = _client(owner).post("/policy-backtests/", _form(expression="args.table_name =="))
    body = response.content.decode()
    assert response.status_code == 200 and "conditions" in body and 'role="alert"' in body
    response = _client(owner).post("/policy-backtests/", _form(name="<script>x</script>", backtest_days="999"))
    assert "Days must be a whole number" in response.content.decode()
    assert not PolicyBacktest.objects.exists()


def test_member_gets_403_and_outsider_404(owner, member, editor, outsider, runs):
    for user in (member, editor):
        assert _client(user).post("/policy-backtests/", _form()).status_code == 403
    _client(owner).post("/policy-backtests/", _form())
    backtest = PolicyBacktest.objects.get()
    assert _client(member).get(f"/policy-backtests/{backtest.pk}").status_code == 403
    assert _client(outsider).get(f"/policy-backtests/{backtest.pk}").status_code == 404
