"""The policy form's Backtest panel in Chromium against the real stack: an admin drafts
a policy, backtests it (the worker process runs the backtest, the panel polls it), reads
what it would have blocked, follows nothing saved, then confirms and saves."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from governance.backtest_models import PolicyBacktest
from governance.models import Policy
from tests.browser.conftest import WAIT_MS, axe_violations, screenshot
from tests.executions.backtest_history import decided_approval, recorded_run
from tests.factories import make_agent

PHONE = {"width": 390, "height": 844}
INVOICES = {"table_name": "invoices", "data": {"amount": 10}}
CUSTOMERS = {"table_name": "customers", "data": {"name": "x"}}


def test_backtest_a_draft_policy_then_confirm(signed_in, demo, page_errors):
    admin = demo["admin"]
    agent = make_agent(workspace=demo["workspace"], owner=admin, tools=["write_back"], name="Ledger clerk")
    runs = [recorded_run(agent=agent, days_ago=day / 2, calls=[("write_back", INVOICES), ("write_back", CUSTOMERS)])
            for day in range(1, 10)]
    decided_approval(agent=agent, run=runs[0], tool="write_back", arguments=CUSTOMERS, status="approved",
                     wait_minutes=7, by=admin)

    page = signed_in(admin)
    page.goto("/policies/new/")
    page.get_by_label("Name").fill("No invoice writes")
    page.get_by_label("Condition").fill("args.table_name == 'invoices'")
    page.get_by_label("Enforcement").select_option("block")
    panel = page.locator("#policy-backtest")
    panel.get_by_role("button", name="Backtest").click()
    summary = panel.locator(".backtest-summary")
    expect(summary).to_have_text("Would have blocked 9 calls in 9 runs.", timeout=WAIT_MS)
    assert PolicyBacktest.objects.get().status == "done"
    assert not Policy.objects.filter(name="No invoice writes").exists()
    rows = panel.locator(".backtest-examples tbody tr")
    expect(rows).to_have_count(9)
    expect(rows.first.get_by_role("link")).to_have_attribute("href", re.compile(r"^/runs/\d+/$"))
    expect(rows.first).to_contain_text("Blocked")
    screenshot(page, "policy-backtest")
    assert axe_violations(page) == []
    page.emulate_media(color_scheme="dark")
    screenshot(page, "policy-backtest-dark")
    page.set_viewport_size(PHONE)
    screenshot(page, "policy-backtest-phone")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.emulate_media(color_scheme="light")
    screenshot(page, "policy-backtest-phone-light")
    page.set_viewport_size({"width": 1280, "height": 800})

    # An approval draft: the approvers' load, from the measured decision time.
    page.get_by_label("Enforcement").select_option("require_approval")
    panel.get_by_role("button", name="Backtest").click()
    expect(summary).to_have_text(re.compile(r"^0\.6 more approvals a day \(9 over the window\), about 4\.5 "
                                            r"approver-minutes a day\.$"), timeout=WAIT_MS)

    panel.get_by_role("button", name="Confirm and save").click()
    page.wait_for_url(re.compile(r"/policies/[0-9a-f-]+/$"))
    assert Policy.objects.get(name="No invoice writes").enforcement == "require_approval"


def test_backtest_auto_approve_conditions_on_the_new_version_page(signed_in, demo, page_errors):
    admin = demo["admin"]
    agent = make_agent(workspace=demo["workspace"], owner=admin, tools=["write_back"], name="Refund clerk",
                       action_level="act_with_approval")
    run = recorded_run(agent=agent, days_ago=1, calls=[])
    for status, amount in [("approved", 5), ("approved", 40), ("approved", 700), ("edited", 30), ("rejected", 900)]:
        decided_approval(agent=agent, run=run, tool="write_back", status=status, wait_minutes=4, by=admin,
                         arguments={"table_name": "refunds", "data": {"amount": amount}})
    page = signed_in(admin)
    page.goto(f"/agents/{agent.pk}/versions/new/")
    row = page.locator("[data-auto-approve-row]").first
    row.locator("select[name=auto-0-tool]").select_option("write_back")
    row.locator("textarea[name=auto-0-condition]").fill("args.data.amount < 100")
    panel = page.locator("#auto-approve-backtest")
    panel.get_by_role("button", name="Backtest").click()
    expect(panel.locator(".backtest-summary")).to_have_text(
        "Would have auto-approved 2 of the 3 calls people approved; 1 of the 1 they edited; 0 of the 1 they "
        "rejected.", timeout=WAIT_MS)
    panel.scroll_into_view_if_needed()
    screenshot(page, "version-backtest")
    assert axe_violations(page) == []
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
