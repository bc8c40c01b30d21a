"""SQL from an intent: joins along the schema graph's keys, one or more aggregates
(of a column or of a product of columns), an optional dimension and time bucket, a
comparison of two periods, filters on sampled values, order and limit. Identifiers are
always quoted and values are literals with quotes doubled; the result is one read-only
SELECT that River's SQL guard still checks before it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from rivercore.planner import grammar
from rivercore.planner.grammar import Aggregate
from rivercore.planner.question import Filter, Intent
from rivercore.planner.schema import Edge, SchemaGraph, Table

_FUNCTIONS = {"sum": "SUM", "avg": "AVG", "min": "MIN", "max": "MAX"}
_SAID = {"sum": "adds up", "avg": "averages", "min": "takes the minimum of", "max": "takes the maximum of"}


class SqlPlan(BaseModel):
    query: str = ""
    explanation: str = ""
    operations: list[dict[str, Any]] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    return "'" + value.replace("\x00", "").replace("'", "''") + "'"


class _Refused(Exception):
    """A part of the query cannot be written; the message says why."""


@dataclass
class _Query:
    """The query being written: the base table, the joined tables' aliases, and the
    pieces each step adds."""

    intent: Intent
    graph: SchemaGraph
    base: Table
    aliases: dict[str, str]
    joins: list[str] = field(default_factory=list)
    said_joins: list[str] = field(default_factory=list)
    fans_out: bool = False
    select: list[str] = field(default_factory=list)
    group_by: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    said_filters: list[str] = field(default_factory=list)
    said_group: str = ""
    limit: int = 0

    def col(self, table: str, column: str) -> str:
        return f"{self.aliases[table]}.{quote_ident(column)}"

    @property
    def dialect(self) -> str:
        return "sqlite" if self.graph.dialect == "sqlite" else "postgresql"


def sql_build(*, intent: Intent, graph: SchemaGraph, row_limit: int) -> SqlPlan:
    plan = SqlPlan(problems=list(intent.problems))
    base = graph.table(intent.base) if intent.base else None
    if base is None or plan.problems:
        return plan
    q = _Query(intent=intent, graph=graph, base=base, aliases={base.name: "t0"})
    try:
        _joins_add(q)
        values = _values(q)
        _filters_add(q)
        _shape(q, values, row_limit)
    except _Refused as refused:
        plan.problems.append(str(refused))
        return plan
    plan.query = _text(q)
    plan.explanation = _explanation(q, values)
    plan.operations = [{"type": "select", "table": base.name},
                       *({"type": "join", "on": j} for j in q.said_joins),
                       *({"type": "filter", "condition": c} for c in q.said_filters)]
    for aggregate in [intent.aggregate, *(m.aggregate for m in intent.metrics)]:
        if aggregate:
            plan.operations.append({"type": "aggregate", "function": aggregate})
    return plan


def _needed(intent: Intent) -> list[str]:
    """Every table the query reads besides the base, in a stable order."""
    tables = [f.table for f in intent.filters]
    tables += [intent.group[0]] if intent.group else []
    tables += [intent.distinct[0]] if intent.distinct else []
    tables += [intent.time_column[0]] if intent.time_column else []
    tables += [t for t, _ in intent.product]
    for metric in intent.metrics:
        tables += [metric.measure[0]] if metric.measure else []
        tables += [t for t, _ in metric.product]
    return list(dict.fromkeys(tables))


def _joins_add(q: _Query) -> None:
    for target in _needed(q.intent):
        if target in q.aliases:
            continue
        route = q.graph.path(q.base.name, target)
        if route is None:
            raise _Refused(f"no chain of keys joins {q.base.name} to {target}")
        here = q.base.name
        for edge in route:
            there = edge.ref_table if edge.table == here else edge.table
            if there not in q.aliases:
                q.aliases[there] = f"t{len(q.aliases)}"
                q.joins.append(f"JOIN {quote_ident(there)} {q.aliases[there]} ON {_on(edge, q.aliases)}")
                q.said_joins.append(f"{edge.table}.{edge.column} = {edge.ref_table}.{edge.ref_column}"
                                    + (" (inferred from the names)" if edge.inferred else ""))
                # Walking from the referenced side to the referencing side repeats rows.
                q.fans_out = q.fans_out or edge.ref_table == here
            here = there


@dataclass
class _Value:
    """One aggregate of the answer: the expression to aggregate and how it is named."""

    aggregate: Aggregate
    argument: str  # "" for COUNT(*); a column or a product of columns
    alias: str
    said: str
    distinct: bool = False


def _values(q: _Query) -> list[_Value]:
    intent = q.intent
    if intent.listing:
        return []
    if intent.aggregate is None:
        raise _Refused("I could not tell what to compute")
    values = [_value(q, intent.aggregate, intent.measure, intent.product, name=intent.measure_name)]
    for metric in intent.metrics:
        values.append(_value(q, metric.aggregate, metric.measure, metric.product,
                             name=intent.measure_name if metric.product == intent.product else ""))
    seen: set[str] = set()
    for value in values:
        while value.alias in seen:
            value.alias += "_2"
        seen.add(value.alias)
    return values


def _value(q: _Query, aggregate: Aggregate, measure: tuple[str, str] | None, product: list[tuple[str, str]],
           *, name: str) -> _Value:
    intent, base = q.intent, q.base
    if aggregate == "count" and intent.distinct is not None:
        return _Value(aggregate="count", argument=q.col(*intent.distinct), alias="count", distinct=True,
                      said=f"counts the distinct values of {intent.distinct[0]}.{intent.distinct[1]}")
    if aggregate == "count":
        if q.joins and base.key is None:
            raise _Refused(f"{base.name} has no key, so I cannot count its rows across a join")
        key = q.col(base.name, base.key.name) if q.joins and base.key is not None else ""
        return _Value(aggregate="count", argument=key, alias="count", distinct=bool(key),
                      said=f"counts {base.name} rows")
    if measure is None:
        raise _Refused(f"I could not tell which numeric column to {grammar.AGGREGATE_VERBS[aggregate]}")
    factors = product or [measure]
    described = " × ".join(f"{t}.{c}" for t, c in factors)
    if q.fans_out and aggregate in {"sum", "avg"}:
        raise _Refused(f"joining {base.name} to {', '.join(_needed(intent))} repeats its rows, so "
                       f"{'a sum' if aggregate == 'sum' else 'an average'} of {described} would be wrong")
    label = name or "_x_".join(c for _, c in factors)
    return _Value(aggregate=aggregate, argument=" * ".join(q.col(t, c) for t, c in factors),
                  alias=f"{aggregate}_{label}".lower(), said=f"{_SAID[aggregate]} {described}")


def _aggregate_sql(value: _Value, condition: str = "") -> str:
    """``SUM(x)``, ``COUNT(DISTINCT k)``, or the same over the rows where ``condition`` holds."""
    if value.aggregate == "count":
        argument = value.argument or "1"
        if condition:
            argument = f"CASE WHEN {condition} THEN {argument} END"
        elif not value.argument:
            return "COUNT(*)"
        return f"COUNT({'DISTINCT ' if value.distinct else ''}{argument})"
    argument = f"CASE WHEN {condition} THEN {value.argument} END" if condition else value.argument
    return f"{_FUNCTIONS[value.aggregate]}({argument})"


def _filters_add(q: _Query) -> None:
    for f in q.intent.filters:
        condition, said = _filter_sql(q, f)
        q.where.append(condition)
        q.said_filters.append(said)


def _filter_sql(q: _Query, f: Filter) -> tuple[str, str]:
    target = q.col(f.table, f.column)
    if f.op == "year":
        year = int(f.value)
        condition = (f"strftime('%Y', {target}) = '{year}'" if q.dialect == "sqlite"
                     else f"EXTRACT(YEAR FROM {target}) = {year}")
        return condition, f"{f.table}.{f.column} is in {year}"
    if f.op != "=":
        return f"{target} {f.op} {float(f.value)!r}", f"{f.table}.{f.column} {f.op} {f.value}"
    table = q.graph.table(f.table)
    column = table.column(f.column) if table else None
    if column is not None and f.value in column.sample_values:
        condition = f"{target} = {literal(f.value)}"
    else:
        condition = f"LOWER({target}) = {literal(f.value.lower())}"
    return condition, f"{f.table}.{f.column} is '{f.value}'"


def _shape(q: _Query, values: list[_Value], row_limit: int) -> None:
    """SELECT, GROUP BY, ORDER BY and LIMIT: grouped, listed, or one row of aggregates."""
    intent = q.intent
    if intent.bucket is not None:
        _bucket_add(q)
    if intent.group is not None:
        _group_add(q)
    if intent.listing and not q.group_by:
        _listing(q, row_limit)
        return
    _aggregates_add(q, values)
    if q.group_by:
        _group_order(q, values, row_limit)


def _bucket_add(q: _Query) -> None:
    intent = q.intent
    assert intent.bucket is not None and intent.time_column is not None
    label = grammar.bucket_sql(intent.bucket, q.col(*intent.time_column), q.dialect)
    q.select.append(f"{label} AS {quote_ident(intent.bucket)}")
    q.group_by.append(label)
    q.where.append(f"{q.col(*intent.time_column)} IS NOT NULL")
    q.said_group = f" for each {intent.bucket} of {intent.time_column[0]}.{intent.time_column[1]}"


def _group_add(q: _Query) -> None:
    intent = q.intent
    assert intent.group is not None
    gtable = q.graph.table(intent.group[0])
    gcolumn = intent.group[1] or (gtable.label.name if gtable and gtable.label else "")
    if gtable is None or not gcolumn:
        raise _Refused(f"{intent.group[0]} has no column that names its rows to group by")
    label = q.col(gtable.name, gcolumn)
    q.select.append(f"{label} AS {quote_ident(gcolumn)}")
    q.group_by.append(label)
    if not intent.group[1] and gtable.key is not None:
        q.group_by.append(q.col(gtable.name, gtable.key.name))
    said = f"{gtable.name}.{gcolumn}" if intent.group[1] else f"{gtable.name} (named by {gcolumn})"
    q.said_group += f" for each {said}" if not q.said_group else f" and {said}"


def _aggregates_add(q: _Query, values: list[_Value]) -> None:
    """One column per aggregate; with two periods, one per period and their difference."""
    intent = q.intent
    if not intent.periods:
        q.select += [f"{_aggregate_sql(v)} AS {quote_ident(v.alias)}" for v in values]
        return
    assert intent.time_column is not None
    date = q.col(*intent.time_column)
    conditions = [grammar.period_condition(p, date, q.dialect) for p in intent.periods]
    value = values[0]
    per_period = [_aggregate_sql(value, c) for c in conditions]
    q.select += [f"{sql} AS {quote_ident(p.label)}" for sql, p in zip(per_period, intent.periods, strict=True)]
    q.select.append(f"{per_period[0]} - {per_period[1]} AS {quote_ident('difference')}")
    q.where.append("(" + " OR ".join(conditions) + ")")
    first, second = intent.periods
    q.said_filters.append(f"{intent.time_column[0]}.{intent.time_column[1]} is in {first.label} or {second.label}")


def _group_order(q: _Query, values: list[_Value], row_limit: int) -> None:
    intent = q.intent
    first_value = quote_ident(intent.periods[0].label) if intent.periods else quote_ident(values[0].alias)
    labels = [q.group_by[0]] if intent.group is None else [q.group_by[0]]
    if intent.bucket is not None and intent.order is None:
        q.order = [f"{q.group_by[0]} ASC", *(f"{g} ASC" for g in q.group_by[1:2] if intent.group is not None)]
    else:
        direction = "ASC" if intent.order == "asc" else "DESC"
        q.order = [f"{first_value} {direction}", *(f"{label} ASC" for label in labels)]
    q.limit = min(intent.limit, row_limit) if intent.limit else row_limit


def _listing(q: _Query, row_limit: int) -> None:
    intent, base = q.intent, q.base
    ranked = intent.measure is not None and intent.order is not None
    shown = [base.key.name] if ranked and base.key is not None and intent.limit else []
    shown += [base.label.name] if base.label is not None else []
    if intent.measure is not None and not intent.product:
        shown.append(intent.measure[1])
    q.select = [q.col(base.name, c) for c in dict.fromkeys(shown)] or [f"{q.aliases[base.name]}.*"]
    if intent.product:
        q.select.append(f"{' * '.join(q.col(t, c) for t, c in intent.product)} AS "
                        f"{quote_ident(intent.measure_name or '_x_'.join(c for _, c in intent.product))}")
    if intent.measure is not None and intent.order:
        measure = " * ".join(q.col(t, c) for t, c in intent.product) if intent.product else q.col(*intent.measure)
        q.order = [f"{measure} {'ASC' if intent.order == 'asc' else 'DESC'}"]
    q.limit = min(intent.limit, row_limit) if intent.limit else row_limit


def _text(q: _Query) -> str:
    query = f"SELECT {', '.join(q.select)} FROM {quote_ident(q.base.name)} t0"
    if q.joins:
        query += " " + " ".join(q.joins)
    if q.where:
        query += " WHERE " + " AND ".join(q.where)
    if q.group_by:
        query += " GROUP BY " + ", ".join(q.group_by)
    if q.order:
        query += " ORDER BY " + ", ".join(q.order)
    if q.limit:
        query += f" LIMIT {int(q.limit)}"
    return query


def _explanation(q: _Query, values: list[_Value]) -> str:
    intent = q.intent
    said = " and ".join(v.said for v in values) if values else f"lists {q.base.name} rows"
    parts = [f"This query {said}{q.said_group}"]
    if intent.periods:
        parts.append(f"comparing {intent.periods[0].label} with {intent.periods[1].label}")
    if q.said_joins:
        parts.append(f"joining on {'; '.join(q.said_joins)}")
    if q.said_filters:
        parts.append(f"where {' and '.join(q.said_filters)}")
    if q.order and intent.limit:
        parts.append(f"keeping the {'lowest' if intent.order == 'asc' else 'highest'} {intent.limit}")
    return ", ".join(parts) + "."


def _on(edge: Edge, aliases: dict[str, str]) -> str:
    return (f"{aliases[edge.table]}.{quote_ident(edge.column)} = "
            f"{aliases[edge.ref_table]}.{quote_ident(edge.ref_column)}")
