"""A query's result as the pages show it (docs/ui.md, "Query results"): a table of at most
``ROWS_PER_PAGE`` rows with paging and sorting, a CSV download, the SQL behind a "Show
query" toggle, and a chart when the data or ``recommend_visualization`` calls for one.

The same component (``templates/results/_result.html``) sits in the run page's outcome
and under each answer of a conversation. It reads the stored observation of an
``execute_query`` call (``execution_query_results``): the rows the run kept, already
capped by the observation byte limit, so sorting and paging happen here over that list.

Paging and sorting links are plain GETs of ``result_part`` (htmx swaps the component in
place; without JavaScript it is a page of its own). Both views look the run up with
``execution_get_for_user``: another workspace's run is a 404, like its run page. Bad
``page``/``sort``/``dir`` values fall back to the first page in stored order.
"""

from __future__ import annotations

import csv
import io
import json
import math

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from common.spreadsheet import csv_cell
from executions.selectors import execution_get_for_user, execution_query_results
from rivercore.errors import NotFound
from web.page_tools import page_login_required
from web.result_chart import chart_choose, chart_geometry

ROWS_PER_PAGE = 25
SORT_DIRECTIONS = ("asc", "desc")
# A spreadsheet reads a cell starting with one of these as a formula (CSV injection).


def result_rows(result: dict) -> tuple[list[str], list[list]]:
    """The stored result's column names and rows, each row exactly as wide as the columns
    (dict rows read by name, missing cells None)."""
    columns = [str(c) for c in result.get("columns") or []] if isinstance(result.get("columns"), list) else []
    rows = []
    for row in result.get("rows") if isinstance(result.get("rows"), list) else []:
        if isinstance(row, dict):
            row = [row.get(name) for name in columns]
        if isinstance(row, list):
            rows.append((row + [None] * len(columns))[:len(columns)])
    return columns, rows


def _sort_key(value) -> tuple:
    if isinstance(value, int | float) and not isinstance(value, bool) and not (
            isinstance(value, float) and math.isnan(value)):
        return (0, value, "")
    if isinstance(value, str):
        return (1, 0, value.casefold())
    return (2, 0, json.dumps(value, sort_keys=True, default=str))


def rows_sorted(rows: list[list], column: int | None, direction: str) -> list[list]:
    """Rows ordered by one column (numbers by value, then text, then anything else);
    empty cells stay last whichever the direction. Ties keep the stored order."""
    if column is None:
        return rows
    filled = [row for row in rows if row[column] is not None]
    empty = [row for row in rows if row[column] is None]
    return sorted(filled, key=lambda row: _sort_key(row[column]), reverse=direction == "desc") + empty


def cell(value) -> dict:
    """A cell for the template: its text (the template escapes it), numeric or empty."""
    if value is None:
        return {"text": "", "empty": True, "num": False}
    if isinstance(value, bool):
        return {"text": "true" if value else "false", "empty": False, "num": False}
    if isinstance(value, int | float):
        return {"text": str(value), "empty": False, "num": True}
    if isinstance(value, str):
        return {"text": value, "empty": False, "num": False}
    return {"text": json.dumps(value, ensure_ascii=False, default=str), "empty": False, "num": False}


def _params(query, width: int) -> tuple[str, int | None, str]:
    sort, direction = query.get("sort", ""), query.get("dir", "asc")
    column = int(sort) if sort.isdigit() and int(sort) < width else None
    if direction not in SORT_DIRECTIONS:
        direction = "asc"
    page = query.get("page", "1")
    # Past the end is the last page (Paginator.get_page); anything not a page number is the first.
    return (page if page.isdigit() and int(page) >= 1 else "1"), column, direction


def result_view(*, execution_id: int, found: dict, query=None) -> dict:
    """The component's context from one ``execution_query_results`` entry and the
    request's ``page``/``sort``/``dir`` (any of them bad: the default)."""
    result = found["result"]
    columns, rows = result_rows(result)
    page_number, column, direction = _params(query or {}, len(columns))
    page = Paginator(rows_sorted(rows, column, direction), ROWS_PER_PAGE).get_page(page_number)
    step = found["step_number"]
    base = reverse("result-part", args=[execution_id, step])
    chart = chart_choose(columns, rows, found.get("advice"))
    total = result.get("total_rows")
    numeric = [_numeric(rows, i) for i in range(len(columns))]
    return {
        "result_id": f"result-{execution_id}-{step}",
        "execution_id": execution_id,
        "sql": found.get("query") or "",
        "columns": [{**_header(base, name, i, column, direction), "num": numeric[i]}
                    for i, name in enumerate(columns)],
        "rows": [[{**cell(value), "num": numeric[i]} for i, value in enumerate(row)] for row in page.object_list],
        "page": page,
        "page_links": _page_links(base, page, column, direction),
        "kept": len(rows),
        "total": total if isinstance(total, int) and total >= len(rows) else len(rows),
        "note": str(result.get("note") or "")[:500],
        "csv_url": reverse("result-csv", args=[execution_id, step]),
        "chart": chart_geometry(chart, columns, rows) if chart else None,
    }


def _numeric(rows: list[list], index: int) -> bool:
    """A column of numbers only (empty cells aside): its header aligns with its cells."""
    present = [row[index] for row in rows if row[index] is not None]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)


def _link(base: str, *, page: int, column: int | None, direction: str) -> str:
    params = {"page": page}
    if column is not None:
        params.update({"sort": column, "dir": direction})
    return f"{base}?{urlencode(params)}"


def _header(base: str, name: str, index: int, column: int | None, direction: str) -> dict:
    """A column header: sorted ascending on the first click, the other way on the next."""
    current = index == column
    following = "desc" if current and direction == "asc" else "asc"
    return {"name": name, "url": _link(base, page=1, column=index, direction=following),
            "aria_sort": ("ascending" if direction == "asc" else "descending") if current else None,
            "next": "descending" if following == "desc" else "ascending"}


def _page_links(base: str, page, column: int | None, direction: str) -> dict:
    def to(number: int) -> str:
        return _link(base, page=number, column=column, direction=direction)

    return {"previous": to(page.previous_page_number()) if page.has_previous() else None,
            "next": to(page.next_page_number()) if page.has_next() else None,
            "first": to(1) if page.number > 2 else None,
            "last": to(page.paginator.num_pages) if page.number < page.paginator.num_pages - 1 else None}


def results_for_runs(*, execution_ids: list[int]) -> dict[int, dict]:
    """The latest query result of each run, as components (first page, stored order).
    The caller passes ids of runs the user may see."""
    found = execution_query_results(execution_ids=execution_ids)
    return {run_id: result_view(execution_id=run_id, found=entry) for run_id, entry in found.items()}


def _found_or_404(user, execution_id: int, step_number: int) -> dict:
    try:
        execution = execution_get_for_user(user=user, execution_id=execution_id)
    except NotFound as exc:
        raise Http404(exc.message) from None
    found = execution_query_results(execution_ids=[execution.pk], step_number=step_number).get(execution.pk)
    if found is None:
        raise Http404("This run has no query result at that step.")
    return found


@page_login_required
@require_GET
def result_part(request, execution_id: int, step_number: int):
    """The component on another page or order: the component alone for htmx, else a page."""
    found = _found_or_404(request.user, execution_id, step_number)
    context = {"result": result_view(execution_id=execution_id, found=found, query=request.GET)}
    if request.headers.get("HX-Request"):
        return render(request, "results/_result.html", context)
    return render(request, "results/page.html", context)


@page_login_required
@require_GET
def result_csv(request, execution_id: int, step_number: int):
    """Every row the run kept, in stored order, as a CSV file (UTF-8 with a BOM, so
    spreadsheets read accents right)."""
    found = _found_or_404(request.user, execution_id, step_number)
    columns, rows = result_rows(found["result"])
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([csv_cell(name) for name in columns])
    writer.writerows([csv_cell(value) for value in row] for row in rows)
    response = HttpResponse("\ufeff" + buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{execution_id}-query-{step_number}.csv"'
    return response


urlpatterns = [
    path("runs/<int:execution_id>/results/<int:step_number>/", result_part, name="result-part"),
    path("runs/<int:execution_id>/results/<int:step_number>/csv", result_csv, name="result-csv"),
]
