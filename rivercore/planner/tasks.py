"""Answers to the model-backed tools' sub-requests (``RIVER-TOOL-TASK <task>``):
classify_intent, generate_query, recommend_visualization, explain_results and
generate_agent, each a JSON object built from the structured payload."""

from __future__ import annotations

import re
from typing import Any

from rivercore.planner import grammar, question_plan
from rivercore.planner.rules import (
    DEFAULT_ROW_LIMIT,
    PRIORITY_COLUMNS,
    STATUS_COLUMNS,
    Reading,
    Table,
    build_query,
    classify,
    dialect_for,
    read_prompt,
    tables_from_sources,
)

# --- tool sub-requests -----------------------------------------------------------------------


def task_classify_intent(payload: dict[str, Any]) -> dict[str, Any]:
    tables = tables_from_sources(payload.get("data_sources") or [])
    return classify(str(payload.get("user_prompt", "")), tables, payload.get("available_intents"))


def task_generate_query(payload: dict[str, Any]) -> dict[str, Any]:
    """A query for the question: record changes, time windows and the enum-like values
    of column descriptions go to the single-table rules; everything else is planned from
    the schema graph (joins, dimensions, sampled values) by the planner package."""
    sources = [s for s in payload.get("data_sources") or [] if isinstance(s, dict)]
    tables = tables_from_sources(sources)
    prompt = str(payload.get("user_prompt", ""))
    row_limit = int(payload.get("row_limit") or DEFAULT_ROW_LIMIT)
    reading = read_prompt(prompt, tables, want_change=payload.get("intent_type") == "ACTION_EXECUTION")
    table = reading.table
    lowered = prompt.lower()
    # Periods set against each other and time buckets are the schema planner's: the
    # single-table rules would read "last month" as a window and drop the comparison.
    time_shaped = grammar.comparison_read(lowered) is not None or grammar.bucket_read(lowered) is not None
    if table is not None and reading.actionable and not (time_shaped and reading.change is None) and (
            reading.change or reading.time or reading.numeric_filters
            or any(_is_enum_like(table, name) for name in reading.filters)):
        return _single_table_query(reading, table, sources, row_limit)
    planned = question_plan(question=prompt, sources=sources, row_limit=row_limit)
    if planned.answered:
        return {"query": planned.query, "dialect": planned.dialect, "explanation": planned.explanation,
                "operations": planned.operations, "plan_type": "query",
                "data_source_ids": [planned.data_source_id] if planned.data_source_id is not None else []}
    # An honest failure: the tool reports it and the agent explains what was tried.
    return {"error": "The offline planner could not match this question to the data. " + " ".join(planned.tried)}


def _is_enum_like(table: Table, name: str) -> bool:
    column = table.column(name)
    return column is not None and (bool(column.values) or name in STATUS_COLUMNS | PRIORITY_COLUMNS)


def _single_table_query(reading: Reading, table: Table, sources: list[dict[str, Any]],
                        row_limit: int) -> dict[str, Any]:
    source_type = next((str(s.get("type") or "") for s in sources
                        if s.get("data_source_id") == table.source_id), "")
    dialect = next((str(s.get("dialect")) for s in sources
                    if s.get("data_source_id") == table.source_id and s.get("dialect")), None)
    return build_query(reading, dialect=dialect or dialect_for(source_type), row_limit=row_limit)


def task_recommend_visualization(payload: dict[str, Any]) -> dict[str, Any]:
    columns = [str(c) for c in payload.get("columns") or []]
    types = [str(t).lower() for t in payload.get("column_types") or []]
    rows = int(payload.get("row_count") or 0)
    prompt = str(payload.get("user_prompt") or "").lower()
    types += [""] * (len(columns) - len(types))
    numeric = [c for c, t in zip(columns, types, strict=False)
               if any(k in t for k in ("int", "num", "float", "real", "double", "decimal"))]
    temporal = [c for c, t in zip(columns, types, strict=False) if "time" in t or "date" in t]
    categorical = [c for c in columns if c not in numeric and c not in temporal]
    title = (payload.get("user_prompt") or "Query result").strip().rstrip("?")[:80]
    if rows <= 1 and len(columns) <= 2:
        return {"recommended_type": "table", "x_axis": None, "y_axis": numeric[0] if numeric else None,
                "title": title, "config": {"display": "single_value"}}
    if temporal and numeric:
        return {"recommended_type": "line", "x_axis": temporal[0], "y_axis": numeric[0], "title": title,
                "config": {"sort": "x_ascending"}}
    if categorical and numeric:
        share = re.search(r"\bshare\b|\bproportion\b|\bdistribution\b|\bbreakdown\b|\bsplit\b", prompt)
        kind = "pie" if share and rows <= 8 else "bar"
        return {"recommended_type": kind, "x_axis": categorical[0], "y_axis": numeric[0], "title": title,
                "config": {"sort": "y_descending"}}
    return {"recommended_type": "table", "x_axis": None, "y_axis": None, "title": title,
            "config": {"columns": columns}}


def readable(value: object) -> object:
    """A float as a person reads it (2328.6, not 2328.6000000000004); anything else as is."""
    return round(value, 4) if isinstance(value, float) else value


def as_rows(columns: list[str], sample: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for row in sample or []:
        if isinstance(row, dict):
            rows.append(row)
        elif isinstance(row, list | tuple):
            rows.append(dict(zip(columns, row, strict=False)))
    return rows


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def task_explain_results(payload: dict[str, Any]) -> dict[str, Any]:
    columns = [str(c) for c in payload.get("query_result_columns") or []]
    rows = as_rows(columns, payload.get("query_result_sample") or [])
    total = payload.get("total_rows")
    total = int(total) if isinstance(total, int) else len(rows)
    notes, suggestions = [], []
    if not rows:
        return {"explanation": "The query returned no rows: nothing matches the question's conditions.",
                "confidence": 0.7, "suggestions": ["Widen the time window or remove a filter."],
                "data_quality_notes": []}
    if len(rows) == 1 and len(columns) == 1 and _is_number(rows[0].get(columns[0])):
        value = rows[0][columns[0]]
        explanation = f"The answer is {readable(value)} ({columns[0]})."
        confidence = 0.9
        suggestions.append("Break the number down by another column, for example by status or priority.")
    elif len(rows) == 1 and len(columns) == 2 and _is_number(rows[0].get(columns[1])):
        explanation = f"{rows[0].get(columns[0])} ({columns[1]} {rows[0].get(columns[1])})."
        confidence = 0.85
    elif len(columns) == 2 and all(_is_number(r.get(columns[1])) for r in rows):
        parts = ", ".join(f"{r.get(columns[0])}: {r.get(columns[1])}" for r in rows[:10])
        overall = sum(r[columns[1]] for r in rows)
        additive = not columns[1].lower().startswith(("avg", "min", "max"))  # a total of averages means nothing
        explanation = (f"{columns[1]} per {columns[0]}: {parts}"
                       + (f" (and {total - 10} more groups)" if total > 10 else "") + "."
                       + (f" Total: {overall}." if additive else ""))
        confidence = 0.85
        suggestions.append(f"Chart {columns[1]} by {columns[0]} as a bar chart.")
    else:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in list(r.items())[:4]) for r in rows[:5])
        explanation = f"The query returned {total} row{'s' if total != 1 else ''}. First rows: {shown}."
        confidence = 0.8
        if total > len(rows):
            notes.append(f"Only {len(rows)} of {total} rows were included in this explanation.")
    nulls = sorted({k for r in rows for k, v in r.items() if v is None})
    if nulls:
        notes.append("Empty values in: " + ", ".join(nulls) + ".")
    return {"explanation": explanation, "confidence": confidence, "suggestions": suggestions,
            "data_quality_notes": notes}


def task_generate_agent(payload: dict[str, Any]) -> dict[str, Any]:
    from rivercore.generate import offline_configuration

    return offline_configuration(payload)


TASKS = {
    "classify_intent": task_classify_intent,
    "generate_query": task_generate_query,
    "recommend_visualization": task_recommend_visualization,
    "explain_results": task_explain_results,
    "generate_agent": task_generate_agent,
}

