"""Query results as tables and charts (web/results.py, web/result_chart.py): 25 rows a
page, sorting by any column both ways, bad paging or sorting parameters reading as the
first page, the CSV download with formula cells escaped, the same component under a
conversation's answer, another workspace's run a 404, the chart chosen for the shapes of
data that suit one, and hostile values escaped and drawn."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.template.loader import render_to_string
from django.test import Client

from executions.models import Execution, ExecutionStep, SessionMessage
from executions.services import sessions
from tests.factories import make_agent
from web.result_chart import BAR_SPAN, chart_choose, number, number_text
from web.results import ROWS_PER_PAGE, result_view

pytestmark = pytest.mark.django_db

COLUMNS = ["city", "amount", "note"]
# 60 rows: amounts 0..59 shuffled by a fixed step, every third note empty.
ROWS = [[f"City {i:02d}", (i * 37) % 60, None if i % 3 == 0 else f"n{59 - i:02d}"] for i in range(60)]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _run(workspace, owner, *, columns=COLUMNS, rows=ROWS, query="SELECT city, amount, note FROM sales",
         total=None, advice=None) -> Execution:
    agent = make_agent(workspace=workspace, owner=owner, name="Analyst")
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.versions.get(),
                                   status=Execution.Status.COMPLETED, result={"summary": "Here it is."})
    ExecutionStep.objects.create(execution=run, step_number=3, step_type="observation", tool_name="execute_query",
                                 input={"query": query, "data_source_id": 1},
                                 output={"result": {"columns": columns, "rows": rows,
                                                    "total_rows": len(rows) if total is None else total}})
    if advice is not None:
        ExecutionStep.objects.create(execution=run, step_number=4, step_type="observation",
                                     tool_name="recommend_visualization", output={"result": advice})
    return run


def _cells(html: str, column: int) -> list[str]:
    body = re.search(r"<tbody>(.*?)</tbody>", html, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[column] for row in rows]


def _svg(html: str) -> str:
    return re.search(r'<svg class="result-chart-svg.*?</svg>', html, re.S).group(0)


def _part(client, run, **params):
    return client.get(f"/runs/{run.pk}/results/3/", params, HTTP_HX_REQUEST="true")


@pytest.fixture
def run(workspace, owner):
    return _run(workspace, owner)


# --- paging -------------------------------------------------------------------------


def test_the_run_page_shows_the_first_25_rows_with_paging(run, owner):
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert _cells(html, 0) == [f"City {i:02d}" for i in range(ROWS_PER_PAGE)]
    assert "Rows 1–25 of 60" in html and "Page 1 of 3" in html
    assert f'href="/runs/{run.pk}/results/3/?page=2"' in html and 'rel="prev"' not in html


@pytest.mark.parametrize(("page", "first", "count"), [("1", 0, 25), ("2", 25, 25), ("3", 50, 10), ("999", 50, 10)])
def test_each_page_has_its_rows_and_a_page_past_the_end_is_the_last(run, owner, page, first, count):
    response = _part(signed_in(owner), run, page=page)
    assert response.status_code == 200
    assert _cells(response.content.decode(), 0) == [f"City {i:02d}" for i in range(first, first + count)]


@pytest.mark.parametrize("page", ["0", "-1", "abc", "", "2.5", "page"])
def test_a_bad_page_number_is_the_first_page(run, owner, page):
    response = _part(signed_in(owner), run, page=page)
    assert response.status_code == 200
    assert _cells(response.content.decode(), 0)[:2] == ["City 00", "City 01"]


def test_without_htmx_the_component_is_a_page_of_its_own(run, owner):
    response = signed_in(owner).get(f"/runs/{run.pk}/results/3/", {"page": "2"})
    html = response.content.decode()
    assert response.status_code == 200 and "<h1>" in html and f'href="/runs/{run.pk}/"' in html
    assert _cells(html, 0)[0] == "City 25"


# --- sorting ------------------------------------------------------------------------


def _sorted_values(client, run, column: int, direction: str) -> list[str]:
    values = []
    for page in ("1", "2", "3"):
        html = _part(client, run, sort=str(column), dir=direction, page=page).content.decode()
        values += _cells(html, column)
    return values


def test_every_column_sorts_both_ways_with_empty_cells_last(run, owner):
    client = signed_in(owner)
    cities = sorted(row[0] for row in ROWS)
    assert _sorted_values(client, run, 0, "asc") == cities
    assert _sorted_values(client, run, 0, "desc") == cities[::-1]
    assert _sorted_values(client, run, 1, "asc") == [str(n) for n in range(60)]
    assert _sorted_values(client, run, 1, "desc") == [str(n) for n in range(59, -1, -1)]
    notes = sorted(row[2] for row in ROWS if row[2] is not None)
    empty = '<span aria-hidden="true">—</span><span class="visually-hidden">empty</span>'
    assert _sorted_values(client, run, 2, "asc") == notes + [empty] * 20
    assert _sorted_values(client, run, 2, "desc") == notes[::-1] + [empty] * 20


def test_the_sorted_header_says_so_and_links_the_other_way(run, owner):
    html = _part(signed_in(owner), run, sort="1", dir="asc").content.decode()
    header = re.search(r'<th scope="col" class="num" aria-sort="ascending"><a class="sort-link" href="([^"]+)"', html)
    assert header and header.group(1) == f"/runs/{run.pk}/results/3/?page=1&amp;sort=1&amp;dir=desc"
    assert html.count("aria-sort=") == 1
    # Paging keeps the order.
    assert f'href="/runs/{run.pk}/results/3/?page=2&amp;sort=1&amp;dir=asc"' in html


@pytest.mark.parametrize("params", [{"sort": "3"}, {"sort": "-1"}, {"sort": "amount"}, {"sort": "1", "dir": "up"},
                                    {"sort": "99999999999999999999"}, {"sort": "1e3"}, {"dir": "desc"}])
def test_a_bad_sort_is_the_stored_order(run, owner, params):
    response = _part(signed_in(owner), run, **params)
    assert response.status_code == 200
    html = response.content.decode()
    order = _cells(html, 0)
    if params.get("sort") == "1":  # a bad direction only: ascending by that column
        assert _cells(html, 1)[:3] == ["0", "1", "2"]
    else:
        assert order[:3] == ["City 00", "City 01", "City 02"] and "aria-sort=" not in html


# --- CSV ------------------------------------------------------------------------------


def test_the_csv_has_every_kept_row_with_formula_cells_escaped(workspace, owner):
    rows = [["=HYPERLINK(\"http://evil\")", 1], ["+1+1", -5], ["-2+3", 2.5], ["@SUM(A1)", None],
            ["\tTab", 0], ["\rReturn", 10**30], ["Zürich, \"quoted\"", True], ["plain", 3]]
    run = _run(workspace, owner, columns=["=label", "value"], rows=rows)
    response = signed_in(owner).get(f"/runs/{run.pk}/results/3/csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.pk}-query-3.csv"'
    text = response.content.decode("utf-8")
    assert text.startswith("\ufeff")
    parsed = list(csv.reader(io.StringIO(text[1:])))
    assert parsed == [
        ["'=label", "value"],
        ["'=HYPERLINK(\"http://evil\")", "1"], ["'+1+1", "-5"], ["'-2+3", "2.5"], ["'@SUM(A1)", ""],
        ["'\tTab", "0"], ["'\rReturn", str(10**30)], ["Zürich, \"quoted\"", "true"], ["plain", "3"],
    ]


def test_the_download_link_is_on_the_component(run, owner):
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/results/3/csv"' in html and "Download CSV" in html


# --- the SQL, the conversation --------------------------------------------------------


def test_the_sql_is_behind_a_show_query_toggle(run, owner):
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r'<details class="result-sql"><summary>Show query</summary><pre><code>'
                     r"SELECT city, amount, note FROM sales</code></pre></details>", html)


def test_a_conversation_answer_shows_its_result(workspace, owner, monkeypatch):
    from executions import tasks

    monkeypatch.setattr(tasks.run_segment, "delay", lambda *args: None)
    agent = make_agent(workspace=workspace, owner=owner, name="Support Analyst")
    session = sessions.session_create(workspace=workspace, agent=agent, user=owner, title="Sales")
    run = _run(workspace, owner)
    SessionMessage.objects.create(session=session, sequence=1, role="agent", state="answered", content="Here.",
                                  agent=agent, execution=run)
    html = signed_in(owner).get(f"/sessions/{session.pk}/").content.decode()
    assert f'id="result-{run.pk}-3"' in html and "Rows 1–25 of 60" in html and "Show query" in html
    assert '<h3 class="result-title"' in html
    part = signed_in(owner).get(f"/sessions/{session.pk}/conversation").content.decode()
    assert f'id="result-{run.pk}-3"' in part


def test_the_run_kept_fewer_rows_than_the_query_found(workspace, owner):
    run = _run(workspace, owner, rows=ROWS[:5], total=12_000)
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "Rows 1–5 of 5; the query found 12,000, the run kept these" in html
    assert "Page 1 of" not in html


# --- who may see it -------------------------------------------------------------------


def test_an_outsider_gets_404_for_the_table_and_the_csv(run, outsider):
    client = signed_in(outsider)
    assert client.get(f"/runs/{run.pk}/results/3/").status_code == 404
    assert client.get(f"/runs/{run.pk}/results/3/csv").status_code == 404


def test_a_step_that_is_not_a_query_result_is_a_404(run, owner):
    client = signed_in(owner)
    ExecutionStep.objects.create(execution=run, step_number=5, step_type="observation", tool_name="search_catalog",
                                 output={"result": {"columns": ["x"], "rows": [[1]]}})
    for step in (5, 4, 999):
        assert client.get(f"/runs/{run.pk}/results/{step}/").status_code == 404
        assert client.get(f"/runs/{run.pk}/results/{step}/csv").status_code == 404
    assert client.get(f"/runs/{run.pk + 1000}/results/3/csv").status_code == 404


def test_a_failed_query_step_is_not_shown(workspace, owner):
    run = _run(workspace, owner)
    ExecutionStep.objects.filter(execution=run).update(status="failed")
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "result-table" not in html
    assert signed_in(owner).get(f"/runs/{run.pk}/results/3/").status_code == 404


# --- which chart ---------------------------------------------------------------------


LABELLED = [["North", 120], ["South", 80], ["East", 45]]


@pytest.mark.parametrize(("columns", "rows", "advice", "expected"), [
    (["region", "amount"], LABELLED, None, ("bar", 0, [1])),
    (["region", "amount", "cost"], [r + [r[1] / 2] for r in LABELLED], None, ("bar", 0, [1, 2])),
    (["amount", "region"], [[r[1], r[0]] for r in LABELLED], None, ("bar", 1, [0])),
    (["region", "amount"], [["North", "120.5"], ["South", "80"]], None, ("bar", 0, [1])),  # numeric text
    (["day", "amount"], [["2026-01-02", 3], ["2026-01-01", 5], ["2026-01-03", None]], None, ("line", 0, [1])),
    (["at", "amount"], [["2026-01-01T10:00:00Z", 1], ["2026-01-01 11:30", 2]], None, ("line", 0, [1])),
    (["region", "amount"], [[f"R{i}", i] for i in range(50)], None, ("bar", 0, [1])),
    (["region", "amount"], [[f"R{i}", i] for i in range(51)], None, None),  # too many bars
    (["region", "amount"], [["North", 1]], None, None),  # one row: a number, not a chart
    (["region", "a", "b", "c"], [["N", 1, 2, 3], ["S", 4, 5, 6]], None, None),  # three numeric columns
    (["region", "city", "amount"], [["N", "x", 1], ["S", "y", 2]], None, None),  # two label columns
    (["a", "b"], [[1, 2], [3, 4]], None, None),  # no label column
    (["region", "amount"], [["N", "many"], ["S", 2]], None, None),  # a text cell: not numeric
    (["region", "amount"], [["N", None], ["S", None]], None, None),  # nothing to draw
    (["region", "amount"], LABELLED, {"recommended_type": "table"}, None),
    (["region", "amount"], LABELLED, {"recommended_type": "bar", "x_axis": "region", "y_axis": "amount",
                                      "title": "By region"}, ("bar", 0, [1])),
    (["region", "amount"], LABELLED, {"recommended_type": "pie", "x_axis": "region", "y_axis": "amount"},
     ("bar", 0, [1])),
    (["region", "amount"], LABELLED, {"recommended_type": "line", "x_axis": "region", "y_axis": "amount"},
     ("bar", 0, [1])),  # a line over labels is drawn as bars
    (["region", "amount"], LABELLED, {"recommended_type": "bar", "x_axis": "nope", "y_axis": "amount"}, None),
    (["region", "amount"], LABELLED, {"recommended_type": "bar", "x_axis": "amount", "y_axis": "region"}, None),
    (["region", "amount"], LABELLED, {"recommended_type": "scatter", "x_axis": "region", "y_axis": "amount"},
     ("bar", 0, [1])),  # unknown advice: the data decides
])
def test_the_chart_fits_the_data(columns, rows, advice, expected):
    choice = chart_choose(columns, rows, advice)
    assert (None if choice is None else (choice["kind"], choice["x"], choice["ys"])) == expected


def test_the_advised_chart_is_drawn_with_its_title_and_a_description(workspace, owner):
    run = _run(workspace, owner, columns=["region", "amount"], rows=LABELLED,
               advice={"recommended_type": "bar", "x_axis": "region", "y_axis": "amount", "title": "By region"})
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    svg = _svg(html)
    labelled = f'aria-labelledby="result-{run.pk}-3-chart-title result-{run.pk}-3-chart-desc"'
    assert 'role="img"' in svg and labelled in svg
    assert ">By region</title>" in svg and "Bar chart of amount by region, 3 bars per series" in svg
    assert svg.count('<rect class="result-series-0"') == 3 and "style=" not in svg


def test_a_time_series_is_a_line_in_time_order(workspace, owner):
    rows = [["2026-01-03", 30], ["2026-01-01", 10], ["2026-01-02", None], ["2026-01-04", 40]]
    run = _run(workspace, owner, columns=["day", "orders"], rows=rows)
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()
    svg = _svg(html)
    assert "result-chart-line" in svg
    # The missing day breaks the line in two: 01 alone, then 03 to 04.
    lines = re.findall(r'<polyline points="([^"]+)"/>', svg)
    assert [len(points.split()) for points in lines] == [1, 2]
    xs = [float(p.split(",")[0]) for p in " ".join(lines).split()]
    assert xs == sorted(xs)
    assert re.findall(r"<title>(2026-01-0\d: \d+)</title>", svg) == ["2026-01-01: 10", "2026-01-03: 30",
                                                                      "2026-01-04: 40"]


def test_no_chart_when_the_data_does_not_suit_one(run, owner):
    html = signed_in(owner).get(f"/runs/{run.pk}/").content.decode()  # two label columns
    assert "<svg class=\"result-chart-svg" not in html


# --- hostile values ------------------------------------------------------------------


HOSTILE = "<script>alert(1)</script>"


def test_hostile_values_are_escaped_and_drawn(workspace, owner):
    long_label = "Ü" + "x" * 5000
    rows = [[HOSTILE, 10**30], ["Zürich 🚀 مرحبا", -7.5], [long_label, 1e308], [None, 3], ['"><img src=x>', None],
            ["big", 10**400]]
    run = _run(workspace, owner, columns=[f"label {HOSTILE}", "value"], rows=rows, query=f"SELECT '{HOSTILE}'")
    response = signed_in(owner).get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert HOSTILE not in html and "<img src=x>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Zürich 🚀 مرحبا" in html and long_label in html and str(10**30) in html
    svg = _svg(html)
    assert "1e+30" in svg and "-7.5" in svg and "1e+308" in svg and "no value" in svg
    assert "(empty)" in svg  # the null label
    assert "Ü" + "x" * 38 + "…<" in svg  # the long label cut, its full text in a <title>
    # Across, bars are percentages of the width, all within the bars' span.
    found = re.findall(r'<rect class="result-series-0" x="([^"]+)%" y="[^"]+" width="([^"]+)%"', svg)
    assert len(found) == 6 and all(0 <= float(x) and float(x) + float(w) <= BAR_SPAN + 1e-6 for x, w in found)


def test_nan_infinities_and_odd_cells_render_in_the_component():
    found = {"step_number": 1, "query": "", "advice": None,
             "result": {"columns": ["label", "value", "extra"],
                        "rows": [["a", float("nan"), {"k": HOSTILE}], ["b", float("inf"), [1, 2]],
                                 ["c", -1e-9, True], ["d"], {"label": "e", "value": 2}, "not a row"]}}
    view = result_view(execution_id=1, found=found)
    html = render_to_string("results/_result.html", {"result": view})
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert _cells(html, 0) == ["a", "b", "c", "d", "e"]
    assert view["chart"] is None  # two columns that are not numbers: no chart
    escaped = "{&quot;k&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;}"
    assert _cells(html, 2)[:3] == [escaped, "[1, 2]", "true"]
    sorted_view = result_view(execution_id=1, found=found, query={"sort": "1", "dir": "desc"})
    # NaN sorts as text: after the numbers ascending, so first descending.
    assert [row[0]["text"] for row in sorted_view["rows"]] == ["a", "b", "e", "c", "d"]
    found["result"]["columns"] = ["label", "value"]
    chart = result_view(execution_id=1, found=found)["chart"]
    assert chart is not None and chart["kind"] == "bar"
    assert [bar["text"] for group in chart["groups"] for bar in group["bars"]] == [
        "no value", "no value", "-1e-09", "no value", "2"]


@pytest.mark.parametrize(("value", "expected"), [(True, None), ("12", 12.0), ("1e400", None), (float("nan"), None),
                                                 (10**400, None), ("NaN", None), (" -3.5 ", -3.5), ([1], None)])
def test_what_counts_as_a_number(value, expected):
    assert number(value) == expected


@pytest.mark.parametrize(("value", "text"), [(1234567, "1,234,567"), (2328.6000000000004, "2,328.6"),
                                             (0.0042, "0.0042"), (1.2e21, "1.2e+21"), (-0.5, "-0.5"), (0, "0")])
def test_numbers_read_as_people_write_them(value, text):
    assert number_text(value) == text
