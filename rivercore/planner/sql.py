"""SQL from an intent: joins along the schema graph's keys, one aggregate, an optional
dimension, filters on sampled values, order and limit. Identifiers are always quoted
and values are literals with quotes doubled; the result is one read-only SELECT that
River's SQL guard still checks before it runs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rivercore.planner.question import Intent
from rivercore.planner.schema import Edge, SchemaGraph


class SqlPlan(BaseModel):
    query: str = ""
    explanation: str = ""
    operations: list[dict[str, Any]] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    return "'" + value.replace("\x00", "").replace("'", "''") + "'"


def sql_build(*, intent: Intent, graph: SchemaGraph, row_limit: int) -> SqlPlan:
    plan = SqlPlan(problems=list(intent.problems))
    base = graph.table(intent.base) if intent.base else None
    if base is None or plan.problems:
        return plan
    aliases = {base.name: "t0"}
    joins: list[str] = []
    said_joins: list[str] = []
    fans_out = False
    needed = [f.table for f in intent.filters] + ([intent.group[0]] if intent.group else []) + (
        [intent.distinct[0]] if intent.distinct else [])
    for target in needed:
        if target in aliases:
            continue
        route = graph.path(base.name, target)
        if route is None:
            plan.problems.append(f"no chain of keys joins {base.name} to {target}")
            return plan
        here = base.name
        for edge in route:
            there = edge.ref_table if edge.table == here else edge.table
            if there not in aliases:
                aliases[there] = f"t{len(aliases)}"
                joins.append(f"JOIN {quote_ident(there)} {aliases[there]} ON {_on(edge, aliases)}")
                said_joins.append(f"{edge.table}.{edge.column} = {edge.ref_table}.{edge.ref_column}"
                                  + (" (inferred from the names)" if edge.inferred else ""))
                # Walking from the referenced side to the referencing side repeats rows.
                fans_out = fans_out or edge.ref_table == here
            here = there

    def col(table: str, column: str) -> str:
        return f"{aliases[table]}.{quote_ident(column)}"

    agg = intent.aggregate
    key = base.key
    if agg == "count" and intent.distinct is not None:
        value_sql = f"COUNT(DISTINCT {col(*intent.distinct)})"
        alias, said = "count", f"counts the distinct values of {intent.distinct[0]}.{intent.distinct[1]}"
    elif agg == "count":
        if joins and key is not None:
            value_sql = f"COUNT(DISTINCT {col(base.name, key.name)})"
        elif joins:
            plan.problems.append(f"{base.name} has no key, so I cannot count its rows across a join")
            return plan
        else:
            value_sql = "COUNT(*)"
        alias, said = "count", f"counts {base.name} rows"
    elif agg in {"sum", "avg", "min", "max"} and intent.measure is not None:
        if fans_out and agg in {"sum", "avg"}:
            plan.problems.append(f"joining {base.name} to {', '.join(needed)} repeats its rows, so "
                                 f"{'a sum' if agg == 'sum' else 'an average'} of "
                                 f"{intent.measure[1]} would be wrong")
            return plan
        func = {"sum": "SUM", "avg": "AVG", "min": "MIN", "max": "MAX"}[agg]
        value_sql = f"{func}({col(*intent.measure)})"
        alias = f"{agg}_{intent.measure[1]}".lower()
        said = {"sum": "adds up", "avg": "averages", "min": "takes the minimum of", "max": "takes the maximum of"}[
            agg] + f" {intent.measure[0]}.{intent.measure[1]}"
    elif intent.listing:
        value_sql, alias, said = "", "", f"lists {base.name} rows"
    else:
        plan.problems.append("I could not tell what to compute")
        return plan

    where, said_filters = [], []
    for f in intent.filters:
        target = col(f.table, f.column)
        table = graph.table(f.table)
        column = table.column(f.column) if table else None
        if f.op == "year":
            year = int(f.value)
            where.append(f"strftime('%Y', {target}) = '{year}'" if graph.dialect == "sqlite"
                         else f"EXTRACT(YEAR FROM {target}) = {year}")
            said_filters.append(f"{f.table}.{f.column} is in {year}")
            continue
        if f.op != "=":
            where.append(f"{target} {f.op} {float(f.value)!r}")
            said_filters.append(f"{f.table}.{f.column} {f.op} {f.value}")
            continue
        if column is not None and f.value in column.sample_values:
            where.append(f"{target} = {literal(f.value)}")
        else:
            where.append(f"LOWER({target}) = {literal(f.value.lower())}")
        said_filters.append(f"{f.table}.{f.column} is '{f.value}'")

    select: list[str] = []
    group_by: list[str] = []
    order: list[str] = []
    limit = row_limit
    said_group = ""
    if intent.group is not None:
        gtable = graph.table(intent.group[0])
        gcolumn = intent.group[1] or (gtable.label.name if gtable and gtable.label else "")
        if gtable is None or not gcolumn:
            plan.problems.append(f"{intent.group[0]} has no column that names its rows to group by")
            return plan
        label = col(gtable.name, gcolumn)
        select.append(f"{label} AS {quote_ident(gcolumn)}")
        group_by.append(label)
        if not intent.group[1] and gtable.key is not None:
            group_by.append(col(gtable.name, gtable.key.name))
        said_group = f" for each {gtable.name}.{gcolumn}" if intent.group[1] else f" for each {gtable.name} " \
                                                                                    f"(named by {gcolumn})"
        select.append(f"{value_sql} AS {quote_ident(alias)}")
        direction = "ASC" if intent.order == "asc" else "DESC"
        order = [f"{quote_ident(alias)} {direction}", f"{label} ASC"]
        if intent.limit:
            limit = min(intent.limit, row_limit)
    elif intent.listing:
        shown = [base.label.name] if base.label is not None else []
        if intent.measure is not None:
            shown.append(intent.measure[1])
        select = [col(base.name, c) for c in dict.fromkeys(shown)] or [f"{aliases[base.name]}.*"]
        if intent.measure is not None and intent.order:
            order = [f"{col(*intent.measure)} {'ASC' if intent.order == 'asc' else 'DESC'}"]
        if intent.limit:
            limit = min(intent.limit, row_limit)
    else:
        select.append(f"{value_sql} AS {quote_ident(alias)}")
        limit = 0

    query = f"SELECT {', '.join(select)} FROM {quote_ident(base.name)} t0"
    if joins:
        query += " " + " ".join(joins)
    if where:
        query += " WHERE " + " AND ".join(where)
    if group_by:
        query += " GROUP BY " + ", ".join(group_by)
    if order:
        query += " ORDER BY " + ", ".join(order)
    if limit:
        query += f" LIMIT {int(limit)}"
    plan.query = query
    parts = [f"This query {said}{said_group}"]
    if said_joins:
        parts.append(f"joining on {'; '.join(said_joins)}")
    if said_filters:
        parts.append(f"where {' and '.join(said_filters)}")
    if order and intent.limit:
        parts.append(f"keeping the {'lowest' if intent.order == 'asc' else 'highest'} {intent.limit}")
    plan.explanation = ", ".join(parts) + "."
    plan.operations = [{"type": "select", "table": base.name},
                       *({"type": "join", "on": j} for j in said_joins),
                       *({"type": "filter", "condition": c} for c in said_filters)]
    if agg:
        plan.operations.append({"type": "aggregate", "function": agg})
    return plan


def _on(edge: Edge, aliases: dict[str, str]) -> str:
    return (f"{aliases[edge.table]}.{quote_ident(edge.column)} = "
            f"{aliases[edge.ref_table]}.{quote_ident(edge.ref_column)}")
