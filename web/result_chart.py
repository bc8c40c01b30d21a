"""The chart beside a query result (docs/ui.md, "Query results"): which chart, if any,
and its geometry, drawn by ``templates/results/_chart.html`` as inline SVG.

A chart is drawn when ``recommend_visualization`` asked for one (bar, line or pie, naming
two of the result's columns) or, without its advice, when the data has the shape of one:
one label column and one or two numeric columns (a bar per row, at most ``BAR_ROWS``
rows) or a date/time column and one or two numeric columns (a line). A pie is drawn as
bars: their lengths compare better than angles, and the numbers stay readable. Advice of
``table`` means no chart.

Everything here is geometry and text; the template escapes every label, the colours come
from classes in ``static/results.css`` (theme tokens), so the SVG carries no style
attribute under the Content-Security-Policy. Cells that are not finite numbers (null,
NaN, text, numbers too large for a float) are gaps, never zeros.
"""

from __future__ import annotations

import datetime as dt
import math
import re

BAR_ROWS = 50
LINE_ROWS = 1000
CHART_KINDS = {"bar": "bar", "pie": "bar", "line": "line"}
LABEL_CHARS = 24
LONG_LABEL_CHARS = 40
BAR_SPAN = 74  # percent of the width for bars; the rest for their values
WIDTH = 640
_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MOMENT = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?")


def number(value) -> float | None:
    """The cell as a finite float, or None (bools, text, NaN, infinities, overflow)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        if len(value) > 64 or not _NUMBER.fullmatch(value.strip()):
            return None
        value = value.strip()
    if not isinstance(value, int | float | str):
        return None
    try:
        result = float(value)
    except (OverflowError, ValueError):
        return None
    return result if math.isfinite(result) else None


def moment(value) -> float | None:
    """An ISO date or date-time cell as a POSIX timestamp (naive ones read as UTC), or None."""
    if not isinstance(value, str) or not _MOMENT.fullmatch(value.strip()):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def numeric_cell(value) -> float | None:
    """Like ``number``, but any int or float counts, as a gap when it has no finite
    value (NaN, infinity, an integer too large for a float)."""
    found = number(value)
    if found is None and isinstance(value, int | float) and not isinstance(value, bool):
        return 0.0
    return found


def _all(rows: list[list], index: int, read) -> bool:
    present = [row[index] for row in rows if row[index] is not None]
    return bool(present) and all(read(value) is not None for value in present)


def chart_choose(columns: list[str], rows: list[list], advice: dict | None) -> dict | None:
    """``{"kind", "x", "ys", "title", "advised"}`` (column indexes) or None for no chart."""
    if len(rows) < 2:
        return None
    if advice is not None and str(advice.get("recommended_type") or "") in {*CHART_KINDS, "table"}:
        return _advised(columns, rows, advice)
    numeric = [i for i in range(len(columns)) if _all(rows, i, numeric_cell)]
    others = [i for i in range(len(columns)) if i not in numeric]
    if len(others) != 1 or not 1 <= len(numeric) <= 2:
        return None
    x = others[0]
    if _all(rows, x, moment):
        return _fits({"kind": "line", "x": x, "ys": numeric, "title": "", "advised": False}, rows)
    return _fits({"kind": "bar", "x": x, "ys": numeric, "title": "", "advised": False}, rows)


def _advised(columns: list[str], rows: list[list], advice: dict) -> dict | None:
    kind = CHART_KINDS.get(str(advice.get("recommended_type")))
    x_name, y_name = advice.get("x_axis"), advice.get("y_axis")
    if kind is None or x_name not in columns or y_name not in columns or x_name == y_name:
        return None
    x, y = columns.index(x_name), columns.index(y_name)
    if not _all(rows, y, numeric_cell):
        return None
    if kind == "line" and not _all(rows, x, moment):
        kind = "bar"  # a line over labels that are not times would invent an order
    title = str(advice.get("title") or "")[:200]
    return _fits({"kind": kind, "x": x, "ys": [y], "title": title, "advised": True}, rows)


def _fits(choice: dict, rows: list[list]) -> dict | None:
    limit = BAR_ROWS if choice["kind"] == "bar" else LINE_ROWS
    return choice if len(rows) <= limit else None


def number_text(value: float) -> str:
    """A number as a person reads it: 1,234,567 · 2,328.6 · 0.0042 · 1.2e+21."""
    size = abs(value)
    if size >= 1e15 or (0 < size < 1e-3):
        return f"{value:.3g}"
    if value == int(value):
        return f"{int(value):,}"
    if size >= 1:
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def label_text(value) -> str:
    return "(empty)" if value is None else str(value)


def chart_geometry(chart: dict, columns: list[str], rows: list[list]) -> dict:
    """What the template draws: bars or polylines, positions in the SVG's own units."""
    series = [{"name": columns[y], "index": n} for n, y in enumerate(chart["ys"])]
    drawn = _bars(chart, rows) if chart["kind"] == "bar" else _lines(chart, rows)
    y_names = " and ".join(columns[y] for y in chart["ys"])
    return {**drawn, "kind": chart["kind"], "series": series, "width": WIDTH,
            "title": chart["title"] or f"{y_names} by {columns[chart['x']]}", "advised_title": chart["title"],
            "x_name": columns[chart["x"]], "y_names": y_names}


def _domain(values: list[float], *, from_zero: bool) -> tuple[float, float]:
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if from_zero:
        low, high = min(low, 0.0), max(high, 0.0)
    if high - low <= abs(high) * 1e-12 or high == low:
        low, high = low - 1.0, high + 1.0
    return low, high


def _bars(chart: dict, rows: list[list]) -> dict:
    """Horizontal bars, one group per row in the table's order: the label on a line of its
    own, then a bar per series. Across, everything is a percentage of the SVG's width (bars
    in the first ``BAR_SPAN`` percent, the values right-aligned after them), so the chart
    fills a phone or a wide page with its text at its natural size; down, pixels."""
    band, label_height = 16, 18
    group = label_height + band * len(chart["ys"]) + 10
    values = [number(row[y]) for row in rows for y in chart["ys"]]
    low, high = _domain([v for v in values if v is not None], from_zero=True)

    def place(value: float) -> float:
        return round((value - low) / (high - low) * BAR_SPAN, 3)

    zero = place(0.0)
    top = 26 if len(chart["ys"]) > 1 else 4
    groups = []
    for r, row in enumerate(rows):
        y0 = top + r * group
        bars = []
        for n, column in enumerate(chart["ys"]):
            value = number(row[column])
            end = zero if value is None else place(value)
            y = y0 + label_height + n * band
            bars.append({"series": n, "x": min(zero, end), "y": y, "width": round(abs(end - zero), 3),
                         "height": band - 3, "text": "no value" if value is None else number_text(value),
                         "text_y": y + 11})
        label = label_text(row[chart["x"]])
        groups.append({"label": label, "short": short(label, LONG_LABEL_CHARS), "label_y": y0 + 13, "bars": bars})
    height = top + len(rows) * group
    return {"groups": groups, "height": height, "zero": zero, "plot_top": top + label_height - 2,
            "plot_bottom": height - 8}


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= high + step * 1e-9]


def _lines(chart: dict, rows: list[list]) -> dict:
    """One polyline per series over time, broken where a value is missing."""
    left, right, top, bottom, height = 86, WIDTH - 16, 16, 252, 300
    points = sorted(((moment(row[chart["x"]]), row) for row in rows), key=lambda p: p[0] or 0.0)
    points = [(t, row) for t, row in points if t is not None]
    values = [number(row[y]) for _, row in points for y in chart["ys"]]
    low, high = _domain([v for v in values if v is not None], from_zero=False)
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0

    def place_x(t: float) -> float:
        return round(left + (t - t0) / span * (right - left) if t1 > t0 else (left + right) / 2, 2)

    def place_y(v: float) -> float:
        return round(bottom - (v - low) / (high - low) * (bottom - top), 2)

    lines = []
    for n, column in enumerate(chart["ys"]):
        runs: list[list[str]] = [[]]
        dots = []
        for t, row in points:
            value = number(row[column])
            if value is None:
                runs.append([])
                continue
            x, y = place_x(t), place_y(value)
            runs[-1].append(f"{x},{y}")
            dots.append({"x": x, "y": y, "text": f"{label_text(row[chart['x']])}: {number_text(value)}"})
        lines.append({"series": n, "paths": [" ".join(run) for run in runs if run],
                      "dots": dots if len(points) <= 60 else []})
    y_ticks = [{"y": place_y(v), "text": number_text(v)} for v in _ticks(low, high) if low <= v <= high]
    picks = sorted({0, len(points) // 2, len(points) - 1})
    x_ticks = [{"x": place_x(points[i][0]), "text": short(label_text(points[i][1][chart["x"]]), 19),
                "anchor": "start" if i == 0 and len(picks) > 1 else "end" if i == picks[-1] and i else "middle"}
               for i in picks]
    return {"lines": lines, "height": height, "left": left, "right": right, "top": top, "bottom": bottom,
            "y_ticks": y_ticks, "x_ticks": x_ticks}
