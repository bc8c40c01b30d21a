"""Query results in Chromium (web/results.py): a conversation's answer from a query shows
its table, its chart and its SQL behind "Show query", with a CSV download; a run page's
result shows 25 rows a page, pages and sorts in place. Both pass axe in the light and
the dark theme at 1280 and 390 pixels, with screenshots of each."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from demo.seed import SUPPORT_ANALYST
from executions.models import Execution, ExecutionStep
from tests.browser.conftest import WAIT_MS, axe_violations, screenshot

PHONE = {"width": 390, "height": 844}
WIDE = {"width": 1280, "height": 900}
QUESTION = "How many tickets are there per priority?"


def _in_both_themes(page, name: str, visible) -> None:
    """axe (serious, critical) and a screenshot in light and dark, wide and on a phone."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
        for width, viewport in (("1280", WIDE), ("390", PHONE)):
            page.set_viewport_size(viewport)
            expect(visible).to_be_visible()
            assert axe_violations(page) == [], (name, scheme, width)
            if viewport is PHONE:
                assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1, (name, scheme)
            screenshot(page, f"results-{name}-{scheme}-{width}")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(WIDE)


def test_a_query_answer_shows_a_table_and_a_chart_in_a_conversation(demo, signed_in, page):
    signed_in(demo["admin"])
    page.goto("/sessions/")
    page.get_by_label("Talk to").select_option(label=SUPPORT_ANALYST)
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/sessions/\d+/$"))
    expect(page.locator("#convo-connection")).to_have_text("Live", timeout=WAIT_MS)
    page.get_by_label("Your message").fill(QUESTION)
    page.get_by_role("button", name="Send").click()

    result = page.locator(".convo-agent [data-result]").first
    expect(result.locator("table tbody tr")).to_have_count(4, timeout=WAIT_MS)
    expect(result.locator("thead th")).to_have_count(2)  # the priority and its count
    chart = result.get_by_role("img")
    expect(chart).to_be_visible()
    assert chart.evaluate("svg => svg.tagName.toLowerCase()") == "svg"
    assert result.locator("svg rect.result-series-0").count() == 4
    # The bars take the theme's accent colour from results.css (no inline style under the CSP).
    assert chart.evaluate("svg => getComputedStyle(svg.querySelector('rect.result-series-0')).fill") \
        == "rgb(11, 92, 173)"

    sql = result.locator("details.result-sql")
    expect(sql.locator("code")).to_be_hidden()
    sql.get_by_text("Show query").click()
    expect(sql.locator("code")).to_contain_text("SELECT")

    with page.expect_download() as download:
        result.get_by_role("link", name=re.compile("Download CSV")).click()
    assert re.fullmatch(r"run-\d+-query-\d+\.csv", download.value.suggested_filename)
    lines = open(download.value.path(), encoding="utf-8-sig").read().splitlines()
    assert len(lines) == 5 and "," in lines[0]

    _in_both_themes(page, "conversation", result.get_by_role("img"))
    page.emulate_media(color_scheme="dark")
    assert chart.evaluate("svg => getComputedStyle(svg.querySelector('rect.result-series-0')).fill") \
        == "rgb(124, 185, 255)"


@pytest.fixture
def daily_run(demo):
    """A finished run whose query returned 60 days of orders and refunds (two gaps)."""
    agent = demo["agents"][SUPPORT_ANALYST]
    start = dt.date(2026, 1, 1)
    rows = [[(start + dt.timedelta(days=i)).isoformat(), (i * 37) % 60 + 100, None if i in (10, 40) else i % 7]
            for i in range(60)]
    run = Execution.objects.create(workspace=demo["workspace"], agent=agent, agent_version=agent.current_version,
                                   status=Execution.Status.COMPLETED, outcome="answered",
                                   input_prompt="Orders and refunds per day", result={"summary": "Orders per day."})
    ExecutionStep.objects.create(execution=run, step_number=1, step_type="observation", tool_name="execute_query",
                                 input={"query": "SELECT day, orders, refunds FROM daily ORDER BY day"},
                                 output={"result": {"columns": ["day", "orders", "refunds"], "rows": rows,
                                                    "total_rows": 60}})
    return run


def test_the_run_page_shows_25_rows_with_paging_and_sorting(demo, signed_in, page, daily_run):
    signed_in(demo["admin"])
    page.goto(f"/runs/{daily_run.pk}/")
    page.evaluate("window.riverMarker = 'same page'")
    result = page.locator("#run-part-outcome [data-result]")
    rows = result.locator("tbody tr")
    expect(rows).to_have_count(25)
    expect(rows.first.locator("td").first).to_have_text("2026-01-01")
    expect(result.locator(".result-count")).to_have_text("Rows 1–25 of 60")
    expect(result.get_by_role("img")).to_be_visible()  # a line: a date column and two numbers
    assert result.locator("svg polyline").count() == 4  # two series, each broken once by a gap

    result.get_by_role("link", name="Next").click()
    expect(page.locator("#run-part-outcome .result-count")).to_have_text("Rows 26–50 of 60")
    expect(page.locator("#run-part-outcome tbody tr").first.locator("td").first).to_have_text("2026-01-26")
    expect(page.locator("#run-part-outcome [data-result]")).to_be_focused()
    page.locator("#run-part-outcome").get_by_role("link", name="Next").click()
    expect(page.locator("#run-part-outcome tbody tr")).to_have_count(10)
    expect(page.locator("#run-part-outcome .result-pages")).to_contain_text("Page 3 of 3")

    orders = page.locator("#run-part-outcome thead th").nth(1)
    orders.get_by_role("link").click()
    expect(orders).to_have_attribute("aria-sort", "ascending")
    first_cells = page.locator("#run-part-outcome tbody tr td:nth-child(2)")
    expect(first_cells.first).to_have_text("100")
    page.locator("#run-part-outcome thead th").nth(1).get_by_role("link").click()
    expect(page.locator("#run-part-outcome thead th").nth(1)).to_have_attribute("aria-sort", "descending")
    expect(first_cells.first).to_have_text("159")
    assert page.evaluate("window.riverMarker") == "same page", "paging reloaded the page"

    _in_both_themes(page, "run-page", page.locator("#run-part-outcome table"))
