"""The overview in a real browser: the charts draw the seeded numbers, the frame's menus
work from the keyboard, the page fits a phone, and another organization sees nothing."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from executions.models import Execution
from tenancy.models import Membership, Organization, Workspace
from tenancy.permissions import Role
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}


# The outcome each seeded run ends with, as the engine would record it for these runs.
_OUTCOME_OF = {Execution.Status.COMPLETED: "answered", Execution.Status.FAILED: "failed",
               Execution.Status.CANCELLED: "cancelled"}


def _seed_runs(agent, *, days_ago: int, status: str, count: int, cost: str) -> None:
    when = timezone.now() - dt.timedelta(days=days_ago)
    Execution.objects.bulk_create([
        Execution(workspace=agent.workspace, agent=agent, agent_version=agent.current_version, status=status,
                  outcome=_OUTCOME_OF.get(status), queued_at=when, cost_usd=Decimal(cost),
                  tokens_input=1200, tokens_output=300)
        for _ in range(count)
    ])


def _stat(page, label: str):
    """The figure whose label is exactly ``label`` (a note may repeat a label's words:
    "finished runs this week" under Average run time)."""
    return page.locator(".stat").filter(has=page.locator(".label", has_text=re.compile(rf"^{re.escape(label)}$")))


def _chart(page, canvas_id: str):
    return page.evaluate(
        """id => { const chart = Chart.getChart(document.getElementById(id));
                   return chart && {labels: chart.data.labels.length,
                                    datasets: chart.data.datasets.map(d => ({label: d.label, data: d.data})),
                                    drawn: chart.width > 0 && chart.height > 0}; }""",
        canvas_id,
    )


def test_charts_draw_the_seeded_runs_and_the_page_works_on_a_phone(signed_in, demo):
    specialist = demo["agents"]["L1 Support Specialist"]
    analyst = demo["agents"]["Support Analyst"]
    _seed_runs(specialist, days_ago=0, status=Execution.Status.COMPLETED, count=4, cost="0.30")
    _seed_runs(analyst, days_ago=0, status=Execution.Status.FAILED, count=1, cost="0.10")
    _seed_runs(analyst, days_ago=2, status=Execution.Status.COMPLETED, count=6, cost="0.25")
    _seed_runs(specialist, days_ago=5, status=Execution.Status.CANCELLED, count=2, cost="0")
    page = signed_in(demo["admin"])
    # Charts drawn at once (overview.js honours reduced motion), so the screenshot shows them whole.
    page.emulate_media(reduced_motion="reduce")

    page.goto("/")
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    expect(_stat(page, "Runs today").locator(".value")).to_have_text("5")
    expect(_stat(page, "Runs this week").locator(".value")).to_have_text("13")
    # Answered over finished: 10 of 11 (the 2 cancelled runs are not counted).
    expect(_stat(page, "Success rate").locator(".value")).to_have_text("91%")
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('cost-chart'))")

    runs = _chart(page, "runs-chart")
    assert runs["drawn"] and runs["labels"] == 14
    series = {d["label"]: d["data"] for d in runs["datasets"]}
    assert set(series) == {"Completed", "Failed", "Cancelled"}
    assert series["Completed"][-1] == 4 and series["Completed"][-3] == 6
    assert series["Failed"][-1] == 1 and series["Cancelled"][-6] == 2
    assert sum(sum(values) for values in series.values()) == 13
    cost = _chart(page, "cost-chart")
    assert cost["datasets"][0]["data"][-1] == 1.3 and cost["datasets"][0]["data"][-3] == 1.5

    screenshot(page, "overview")
    # The text alternative holds the same numbers.
    page.get_by_text("Show as a table").first.click()
    expect(page.locator("table").first.locator("tbody tr").last).to_contain_text("4")
    assert axe_violations(page) == []

    # A figure leads to the list behind it.
    href = _stat(page, "Failed this week").get_attribute("href")
    assert re.fullmatch(r"/runs/\?status=failed&since=\d{4}-\d{2}-\d{2}", href)

    page.set_viewport_size(PHONE)
    page.reload()
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('runs-chart'))")
    # Nothing wider than the phone but the navigation, which scrolls sideways itself.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("(() => { const n = document.querySelector('.mainnav'); "
                         "return n.scrollWidth > n.clientWidth && getComputedStyle(n).overflowX === 'auto'; })()")
    assert axe_violations(page) == []
    screenshot(page, "overview-phone")


def test_menus_open_close_and_keep_focus_from_the_keyboard(signed_in, demo):
    admin = demo["admin"]
    finance = Workspace.objects.create(organization=demo["workspace"].organization, name="Finance", slug="finance")
    Membership.objects.create(workspace=finance, user=admin, role=Role.ADMIN)
    page = signed_in(admin)
    page.goto("/notifications/")

    switcher = page.get_by_role("button", name=re.compile("^Workspace:"))
    expect(switcher).to_have_attribute("aria-expanded", "false")
    switcher.focus()
    page.keyboard.press("Enter")
    expect(switcher).to_have_attribute("aria-expanded", "true")
    menu = page.locator("#ws-menu")
    expect(menu).to_be_visible()
    expect(menu.locator("[aria-current='true']")).to_be_focused()
    assert axe_violations(page) == []
    page.keyboard.press("Escape")
    expect(menu).to_be_hidden()
    expect(switcher).to_be_focused()

    bell = page.get_by_role("button", name=re.compile("^Notifications"))
    bell.click()
    expect(page.locator("#bell-panel")).to_contain_text("You're all caught up")
    expect(switcher).to_have_attribute("aria-expanded", "false")
    page.locator("main").click()
    expect(page.locator("#bell-panel")).to_be_hidden()
    expect(bell).to_have_attribute("aria-expanded", "false")

    # Switching keeps the section and shows the other workspace.
    switcher.click()
    menu.get_by_role("button", name=re.compile("^Finance")).click()
    expect(page).to_have_url(re.compile(r"/notifications/$"))
    expect(page.get_by_role("status").first).to_contain_text("Now showing Finance")
    page.goto("/")
    expect(page.locator(".head-note")).to_contain_text("Finance")
    expect(page.get_by_text("No agents in this workspace yet")).to_be_visible()


def test_another_organizations_user_sees_nothing_of_the_first(signed_in, demo):
    _seed_runs(demo["agents"]["Support Analyst"], days_ago=0, status=Execution.Status.COMPLETED, count=3, cost="9.99")
    other = Organization.objects.create(name="Globex", slug="globex")
    elsewhere = Workspace.objects.create(organization=other, name="Elsewhere", slug="elsewhere")
    stranger = get_user_model().objects.create_user(username="stranger", password="a-long-password-1")
    Membership.objects.create(workspace=elsewhere, user=stranger, role=Role.ADMIN)
    page = signed_in(stranger)

    page.goto("/")
    expect(page.locator(".head-note")).to_contain_text("Elsewhere · Globex")
    expect(_stat(page, "Runs today").locator(".value")).to_have_text("0")
    content = page.content()
    for leak in ("Demo Org", "Support Analyst", "L1 Support", "$9.99"):
        assert leak not in content
    assert page.locator("#ws-menu").count() == 0  # one workspace: nothing to switch to
    assert axe_violations(page) == []


def test_the_frame_on_a_phone_keeps_the_menus_on_screen(signed_in, demo):
    admin = demo["admin"]
    finance = Workspace.objects.create(organization=demo["workspace"].organization, name="Finance", slug="finance")
    Membership.objects.create(workspace=finance, user=admin, role=Role.ADMIN)
    page = signed_in(admin)
    page.set_viewport_size(PHONE)
    page.goto("/approvals/")
    # The current section is scrolled into view in the sideways-scrolling navigation.
    current = page.get_by_role("navigation", name="Main").get_by_role("link", name=re.compile("^Approvals"))
    expect(current).to_be_in_viewport()
    for opener, panel in (("^Workspace:", "#ws-menu"), ("^Notifications", "#bell-panel")):
        page.get_by_role("button", name=re.compile(opener)).click()
        expect(page.locator(panel)).to_be_visible()
        box = page.locator(panel).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (panel, box)
        assert axe_violations(page) == []
        screenshot(page, f"frame-phone-{panel.strip('#')}")
        page.keyboard.press("Escape")
        expect(page.locator(panel)).to_be_hidden()
