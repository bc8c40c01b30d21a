"""A question read against a schema graph: what to measure, over which entity, grouped
by what, filtered on which values, in what order. Only the schema's own names and
sampled values are matched; the English the reader knows is generic (how many,
average, total, top N, by / per / each, which ... most)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from rivercore.planner import grammar
from rivercore.planner.grammar import Aggregate, Bucket, Period
from rivercore.planner.schema import Column, SchemaGraph, Table, name_words

__all__ = ["Aggregate", "Filter", "Intent", "Mention", "Metric", "entity_label", "intent_read"]

_QUOTED = re.compile(r"\"([^\"]{1,80})\"|'([^']{1,80})'|\u201c([^\u201d]{1,80})\u201d|\u2018([^\u2019]{1,80})\u2019")
_MEASURE_AGGREGATES: tuple[Aggregate, ...] = ("avg", "sum", "max", "min")
_FILTER_LEAD = {"from", "in", "on", "with", "named", "called", "at", "whose", "where"}
_GLUE = frozenset("""a an the is are was were be been being do does did have has had of in on at to for by per
    with from and or not no how many much what which who whom whose where when there their its it this that these
    those each every all any me my our show list give tell find get number count total sum average avg mean
    top most least fewest more less than highest lowest largest smallest biggest longest shortest greatest
    maximum minimum max min cheapest expensive please i we you database data table tables record records row rows
    overall across group grouped broken down value values amount altogether combined best worst bottom first
    entry entries kind kinds type types has having one ones as into them they he she his her so just only
    also sort sorted order ordered descending ascending rank ranked appear appears listed exist exists""".split())

class Mention(BaseModel):
    kind: Literal["table", "column", "value"]
    start: int
    end: int
    text: str
    candidates: list[tuple[str, str]] = Field(default_factory=list)  # (table, column) or (table, "")
    value: str = ""
    full: bool = True  # the whole name matched, not only its last word(s)


class Filter(BaseModel):
    table: str
    column: str
    value: str
    op: Literal["=", ">", ">=", "<", "<=", "year", "month"] = "="


class Metric(BaseModel):
    """One more aggregate in the answer ("total and average amount")."""

    aggregate: Aggregate
    measure: tuple[str, str] | None = None  # None: count the base's rows
    product: list[tuple[str, str]] = Field(default_factory=list)  # a derived measure: the product of these


class Intent(BaseModel):
    """What the question asks, in schema terms."""

    aggregate: Aggregate | None = None
    base: str | None = None  # the table whose rows are counted or measured
    measure: tuple[str, str] | None = None
    group: tuple[str, str] | None = None  # (table, column) or (table, "") for a whole entity
    filters: list[Filter] = Field(default_factory=list)
    order: Literal["asc", "desc"] | None = None
    limit: int | None = None
    listing: bool = False
    distinct: tuple[str, str] | None = None  # "how many distinct countries": COUNT(DISTINCT column)
    product: list[tuple[str, str]] = Field(default_factory=list)  # the measure is the product of these columns
    measure_name: str = ""  # what the question calls a derived measure ("revenue")
    metrics: list[Metric] = Field(default_factory=list)  # further aggregates, in the question's order
    bucket: Bucket | None = None  # group by the day / month / quarter / year of time_column
    periods: list[Period] = Field(default_factory=list)  # compare the measure over these periods of time_column
    time_column: tuple[str, str] | None = None
    ignored: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    understood: list[str] = Field(default_factory=list)


def _word_pattern(word: str) -> str:
    if word.isdigit():
        return word
    if word.endswith("y") and len(word) > 2:
        return re.escape(word[:-1]) + "(?:y|ies)"
    return re.escape(word) + "(?:s|es)?"


def _phrase_pattern(words: list[str]) -> re.Pattern[str]:
    return re.compile(r"(?<![\w])" + r"[\s_-]*".join(_word_pattern(w) for w in words) + r"(?:'s)?(?![\w])")


def _schema_mentions(text: str, graph: SchemaGraph) -> list[Mention]:
    found: list[Mention] = []
    for table in graph.tables:
        words = table.words
        if words:
            for m in _phrase_pattern(words).finditer(text):
                found.append(Mention(kind="table", start=m.start(), end=m.end(), text=m.group(0),
                                     candidates=[(table.name, "")]))
        for column in table.columns:
            if column.looks_like_key:
                continue
            cwords = column.words
            if words and cwords[:len(words)] != words:
                # "supplier country", "invoice total": a column named with its table.
                for m in _phrase_pattern(words + cwords).finditer(text):
                    found.append(Mention(kind="column", start=m.start(), end=m.end(), text=m.group(0),
                                         candidates=[(table.name, column.name)]))
            for size in range(len(cwords), 0, -1):
                tail = cwords[-size:]
                if size < len(cwords) and tail in ([w] for w in ("name", "id", "code", "date")):
                    continue
                for m in _phrase_pattern(tail).finditer(text):
                    found.append(Mention(kind="column", start=m.start(), end=m.end(), text=m.group(0),
                                         candidates=[(table.name, column.name)], full=size == len(cwords)))
    return found


def _value_mentions(text: str, original: str, graph: SchemaGraph) -> list[Mention]:
    found: list[Mention] = []
    for table in graph.tables:
        for column in table.columns:
            for value in column.sample_values:
                folded = value.lower().strip()
                if not folded or folded in _GLUE or len(folded) < 2:
                    continue
                pattern = re.compile(r"(?<![\w])" + re.escape(folded) + r"(?![\w])")
                for m in pattern.finditer(text):
                    if len(folded) <= 3 and not original[m.start():m.end()][:1].isupper():
                        continue  # "us", "in", "it": ordinary words, not values
                    found.append(Mention(kind="value", start=m.start(), end=m.end(), text=original[m.start():m.end()],
                                         candidates=[(table.name, column.name)], value=value))
    for m in _QUOTED.finditer(original):
        inner = next(g for g in m.groups() if g is not None)
        found.append(Mention(kind="value", start=m.start(), end=m.end(), text=m.group(0), value=inner,
                             candidates=[]))
    return found


def _merge(mentions: list[Mention], original: str) -> list[Mention]:
    """Keep the longest non-overlapping mentions; one span may name several columns."""

    def rank(m: Mention) -> tuple[Any, ...]:
        capitalised = original[m.start:m.start + 1].isupper() and m.start > 0
        quoted = m.kind == "value" and not m.candidates
        kind_order = {"value": 0 if (quoted or capitalised) else 2, "table": 1, "column": 1}[m.kind]
        return (-(m.end - m.start), kind_order, 0 if m.kind == "table" else 1, not m.full)

    ordered = sorted(mentions, key=lambda m: (rank(m), m.start))
    chosen: list[Mention] = []
    for mention in ordered:
        same = next((c for c in chosen if (c.start, c.end, c.kind) == (mention.start, mention.end, mention.kind)
                     and c.full == mention.full), None)
        if same is not None:
            for cand in mention.candidates:
                if cand not in same.candidates:
                    same.candidates.append(cand)
            continue
        if any(mention.start < c.end and c.start < mention.end for c in chosen):
            continue
        chosen.append(mention.model_copy(deep=True))
    return sorted(chosen, key=lambda m: m.start)


def _distance(graph: SchemaGraph, start: str | None, goal: str) -> int:
    if start is None:
        return 0
    route = graph.path(start, goal)
    return 99 if route is None else len(route)


@dataclass
class _Measure:
    """A numeric column the question names, or a product of several ("price × quantity")."""

    mention: Mention
    factors: list[Mention] = field(default_factory=list)
    name: str = ""

    @property
    def start(self) -> int:
        return self.mention.start

    @property
    def end(self) -> int:
        return self.factors[-1].end if self.factors else self.mention.end


@dataclass
class _Question:
    """A question being read: its text, the schema names it mentions and what has been
    decided so far. Each step of :func:`intent_read` reads or sets a few fields."""

    graph: SchemaGraph
    original: str
    text: str
    mentions: list[Mention]
    intent: Intent = field(default_factory=Intent)
    covered: list[tuple[int, int]] = field(default_factory=list)  # understood spans besides the mentions
    comparison: grammar.PeriodComparison | None = None
    bucket: grammar.BucketPhrase | None = None
    group: Mention | None = None
    which: bool = False
    measures: list[_Measure] = field(default_factory=list)
    chain: list[tuple[Aggregate, _Measure | None]] = field(default_factory=list)
    entity: Mention | None = None
    count_at: re.Match[str] | None = None

    @property
    def tables_named(self) -> list[str]:
        return [m.candidates[0][0] for m in self.mentions if m.kind == "table"]

    def before(self, m: Mention) -> str:
        return self.text[:m.start]

    def numeric(self, m: Mention) -> bool:
        return m.kind == "column" and any(_column(self.graph, c).is_numeric for c in m.candidates)

    def in_comparison(self, at: int) -> bool:
        return self.comparison is not None and self.comparison.start <= at < self.comparison.end


def intent_read(*, question: str, graph: SchemaGraph) -> Intent:
    """What ``question`` asks of ``graph``, read in steps: the time shape, the dimension,
    the measures and aggregates, ranking, the entity, filters, and what was not understood."""
    original = " ".join(question.split())
    text = original.lower()
    q = _Question(graph=graph, original=original, text=text,
                  mentions=_merge(_schema_mentions(text, graph) + _value_mentions(text, original, graph), original))
    q.count_at = grammar.aggregate_pattern("count").search(text)
    _time_shape_read(q)
    _dimension_read(q)
    _measures_read(q)
    _aggregates_read(q)
    _ranking_read(q)
    _entity_read(q)
    _measure_and_base(q)
    _group_set(q)
    _value_filters(q)
    _number_filters(q)
    _year_filters(q)
    _time_column_set(q)
    _warnings(q)
    _unknown_words(q)
    _completed(q)
    return q.intent


def _time_shape_read(q: _Question) -> None:
    """A comparison of two periods, and a time bucket unless a column has the bucket's name."""
    q.comparison = grammar.comparison_read(q.text)
    if q.comparison is not None:
        q.covered.append((q.comparison.start, q.comparison.end))
    bucket = grammar.bucket_read(q.text)
    if bucket is not None and not any(m.kind != "value" and m.start < bucket.end and bucket.start < m.end
                                      for m in q.mentions):
        q.bucket = bucket
        q.covered.append((bucket.start, bucket.end))


def _dimension_read(q: _Question) -> None:
    """The dimension: a table or column right after "by / per / each / top N", or after
    "which" when the question ranks."""
    names = [m for m in q.mentions if m.kind in {"table", "column"}
             and not (q.numeric(m) and grammar.product_follows(q.text[m.end:]))]
    q.group = next((m for m in names if grammar.grouping_lead(q.before(m))), None)
    if q.group is None and grammar.order_read(q.text) is not None:
        q.group = next((m for m in names if grammar.WHICH_LEAD.search(q.before(m))), None)
        q.which = q.group is not None


def _measures_read(q: _Question) -> None:
    """The numeric columns named, products joined into one derived measure, without the
    columns a number is compared with and the ones whose name is only an aggregate word."""
    numeric = [m for m in q.mentions if m is not q.group and q.numeric(m)]
    measures: list[_Measure] = []
    for m in numeric:
        last = measures[-1] if measures else None
        if last is not None and grammar.product_gap(q.text[last.end:m.start]):
            last.factors.append(m)
            continue
        measures.append(_Measure(mention=m))
    reserved = _GLUE | {w for t in q.graph.tables for c in t.columns for w in c.words}
    for index, measure in enumerate(measures):
        named_by = measures[index - 1] if index else None
        if measure.factors and named_by is not None and not named_by.factors \
                and grammar.NAMING_GAP.match(q.text[named_by.end:measure.start]):
            # "cost as unit cost × qty": a column's word used as the product's name.
            measure.name = "_".join(re.findall(r"[a-z0-9]+", named_by.mention.text))
            q.covered.append((named_by.start, named_by.end))
            q.mentions.remove(named_by.mention)
            continue
        if measure.factors:
            named = grammar.product_name(q.text, measure.start, measure.end, reserved=reserved)
            if named is not None:
                measure.name = named[0]
                q.covered.append((named[1], named[2]))
            q.covered.append((measure.start, measure.end))
    measures = [m for m in measures if m.mention in q.mentions]
    worded = [m for m in measures if not m.factors and any(
        grammar.aggregate_pattern(a).fullmatch(m.mention.text) for a in _MEASURE_AGGREGATES)]
    if worded and len(measures) > len(worded):
        # "total quantity": "total" names a column here, but the question means a sum.
        measures = [m for m in measures if m not in worded]
    comparisons = [c.start for c in grammar.number_comparisons(q.text) if not q.in_comparison(c.start)]
    compared = [m for m in measures if any(0 <= at - m.end <= 12 for at in comparisons)]
    q.measures = [m for m in measures if m not in compared] or measures


def _consumed(q: _Question) -> str:
    """The text with the measures' names blanked, so "invoice total" is not a sum."""
    consumed = q.text
    for m in q.measures:
        consumed = consumed[:m.start] + " " * (m.end - m.start) + consumed[m.end:]
    return consumed


def _aggregates_read(q: _Question) -> None:
    consumed = _consumed(q)
    chain = grammar.aggregate_list(consumed)
    if chain:
        # "the number of orders and their total amount": each aggregate takes the measure
        # after it, or the one after the whole list ("total and average amount").
        tail = next((m for m in q.measures if m.start >= chain[-1].end), None)
        for index, word in enumerate(chain):
            stop = chain[index + 1].start if index + 1 < len(chain) else len(q.text)
            own = next((m for m in q.measures if word.end <= m.start < stop), None)
            q.chain.append((word.aggregate, None if word.aggregate == "count" and own is None else own or tail))
        q.intent.aggregate = chain[0].aggregate
        return
    grouped = q.group is not None or (q.bucket is not None and q.bucket.ranked)
    q.intent.aggregate = grammar.aggregate_first(consumed, grouped=grouped)
    if q.intent.aggregate is None and q.measures and not grammar.LIST_LEAD.search(q.text):
        q.intent.aggregate = grammar.aggregate_of_word(q.measures[0].mention.text)


def _ranking_read(q: _Question) -> None:
    intent = q.intent
    intent.limit = grammar.top_n_read(q.text)
    ranked_buckets = q.bucket is not None and q.bucket.ranked
    if q.group is not None or ranked_buckets:
        intent.order = grammar.order_read(q.text) or ("desc" if intent.limit or ranked_buckets else None)
        if (q.which or (ranked_buckets and q.group is None)) and intent.limit is None:
            intent.limit = 1


def _entity_read(q: _Question) -> None:
    """The entity counted: the table named right after the count words, else any other."""
    others = [m for m in q.mentions if m.kind == "table" and m is not q.group]
    entity = None
    if q.count_at:
        entity = next((m for m in others if m.start >= q.count_at.end()), None)
    if entity is None and q.group is not None:
        entity = next((m for m in others if m.start > q.group.end), None)
    q.entity = entity or next(iter(others), None)
    # "how many distinct countries": the column right after the count words.
    if q.count_at:
        first = next((m for m in q.mentions if m.start >= q.count_at.end()), None)
        if first is not None and first.kind == "column" and first is not q.group and not q.numeric(first):
            entity_table = q.entity.candidates[0][0] if q.entity else None
            q.intent.distinct = _pick(q.graph, first.candidates, q.tables_named, entity_table)
            if q.entity is None or q.entity.start > first.start:
                q.entity = None


def _resolve(q: _Question, measure: _Measure, base: str | None) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    """A measure's column and, for a derived one, all its factors' columns."""
    column = _pick(q.graph, measure.mention.candidates, q.tables_named, base)
    factors = [column] + [_pick(q.graph, f.candidates, q.tables_named, base) for f in measure.factors]
    return column, factors if measure.factors else []


def _many_side(graph: SchemaGraph, tables: list[str]) -> str | None:
    """The table from which every other one is reached along references only (each of its
    rows meets one row of the others), so a product of their columns is per row of it."""
    for start in dict.fromkeys(tables):
        routes = [graph.path(start, other) for other in tables]
        if all(route is not None and _follows_references(start, route) for route in routes):
            return start
    return None


def _follows_references(start: str, route: list[Any]) -> bool:
    here = start
    for edge in route:
        if edge.table != here:
            return False
        here = edge.ref_table
    return True


def _measure_and_base(q: _Question) -> None:
    intent, graph = q.intent, q.graph
    entity_table = q.entity.candidates[0][0] if q.entity else None
    first = next((m for _, m in q.chain if m is not None), None) if q.chain else (
        q.measures[0] if q.measures else None)
    measure: tuple[str, str] | None = None
    if first is not None:
        measure, product = _resolve(q, first, entity_table)
        if product:
            intent.product, intent.measure_name = product, first.name
            many = _many_side(graph, [t for t, _ in product])
            if many is None:
                intent.problems.append("I cannot multiply " + " by ".join(f"{t}.{c}" for t, c in product)
                                       + ": no one row of a table meets one value of each")
            else:
                measure = next(f for f in product if f[0] == many)
    counted_first = bool(q.chain) and q.chain[0][1] is None
    base = (entity_table or (measure[0] if measure else None)) if counted_first else (
        measure[0] if measure else entity_table)
    if base is None and intent.distinct is not None:
        base = intent.distinct[0]
    if intent.aggregate in {"sum", "avg", "min", "max"} and measure is None:
        measure, base = _only_measure(q, base)
    if measure is not None and intent.aggregate is None:
        grouped = q.group is not None or q.bucket is not None or bool(intent.product)
        intent.aggregate = "sum" if grouped or q.comparison is not None else None
        if not grouped and q.comparison is None:
            intent.listing = True
    if base is None and q.group is not None and q.group.kind == "column":
        base = q.group.candidates[0][0]
    intent.base = base
    intent.measure = None if counted_first else measure
    if q.chain:
        _metrics_set(q, base)


def _only_measure(q: _Question, base: str | None) -> tuple[tuple[str, str] | None, str | None]:
    """"the average of orders": the one numeric column there is, else why not."""
    intent, graph = q.intent, q.graph
    pool = [graph.table(base)] if base else [graph.table(n) for n in q.tables_named]
    options = [(t.name, c.name) for t in pool if t is not None for c in t.measures]
    if len(options) == 1:
        return options[0], options[0][0]
    assert intent.aggregate is not None
    intent.problems.append(
        f"I could not tell which numeric column to {grammar.AGGREGATE_VERBS[intent.aggregate]}"
        + (f" (candidates: {', '.join(f'{t}.{c}' for t, c in options[:6])})" if options else
           " (none of the tables I matched has one)"))
    return None, base


def _metrics_set(q: _Question, base: str | None) -> None:
    """The aggregates after the first of a list, each with its own measure."""
    intent = q.intent
    for aggregate, measure in q.chain[1:]:
        if measure is None and aggregate != "count":
            measure_column, product = intent.measure, intent.product
        elif measure is None:
            measure_column, product = None, []
        else:
            measure_column, product = _resolve(q, measure, base)
            if product:
                many = _many_side(q.graph, [t for t, _ in product])
                measure_column = next((f for f in product if f[0] == many), measure_column)
        if measure_column is None and aggregate != "count":
            intent.problems.append(f"I could not tell which numeric column to {grammar.AGGREGATE_VERBS[aggregate]}")
            continue
        intent.metrics.append(Metric(aggregate=aggregate, measure=measure_column, product=product))


def _group_set(q: _Question) -> None:
    intent, group = q.intent, q.group
    if group is None:
        if q.bucket is not None and intent.aggregate is None:
            intent.aggregate = "count"
        return
    if group.kind == "table":
        intent.group = (group.candidates[0][0], "")
    else:
        intent.group = _pick(q.graph, group.candidates, q.tables_named, intent.base)
    if intent.aggregate is None:
        intent.aggregate = "count"
    whole_base = intent.group[0] == intent.base and intent.group[1] == ""
    if whole_base and intent.measure is not None and q.bucket is None and not intent.metrics:
        # "the top 5 orders by amount": each order is one row, so rank the rows themselves.
        intent.group, intent.listing, intent.aggregate = None, True, None
        intent.order = intent.order or "desc"
    elif whole_base and q.entity is None:
        intent.problems.append("I could not tell what to count for each " + intent.group[0])


def _value_filters(q: _Question) -> None:
    """Every value mention, attached to the column that holds it."""
    intent = q.intent
    for m in q.mentions:
        if m.kind != "value":
            continue
        if m.candidates:
            near = [t.candidates[0][0] for t in sorted(
                (t for t in q.mentions if t.kind == "table"), key=lambda t: abs(m.start - t.end))]
            table, column = _pick(q.graph, m.candidates, near[:1] or q.tables_named, intent.base)
        else:
            table, column = _quoted_column(q.graph, m, q.mentions, intent.base)
            if not column:
                intent.problems.append(f"I could not tell which column holds {m.text}")
                continue
        intent.filters.append(Filter(table=table, column=column, value=m.value))


def _number_filters(q: _Question) -> None:
    """Comparisons with a number: on the numeric column named just before them."""
    intent = q.intent
    numeric = [m for m in q.mentions if q.numeric(m)]
    for found in grammar.number_comparisons(q.text):
        if q.in_comparison(found.start):
            continue
        following = [m for m in numeric if 0 <= m.start - found.end <= 2]  # "over 300000 milliseconds"
        near_numbers = following or [m for m in numeric if m.end <= found.start]
        if near_numbers:
            table, column = _pick(q.graph, near_numbers[-1].candidates, q.tables_named, intent.base)
            intent.filters.append(Filter(table=table, column=column, value=found.number, op=found.op))
        else:
            intent.problems.append(f"I could not tell which number '{found.text}' compares")


def _date_candidates(q: _Question) -> tuple[tuple[str, str] | None, list[tuple[str, str]]]:
    """The date column a question is about: the one it names, else the only one of the
    base table, else the only one of the tables the base refers to (each base row meets
    one row there, so the date is the row's date). Returns (choice, candidates)."""
    intent, graph = q.intent, q.graph
    named = [m for m in q.mentions if m.kind == "column" and any(_column(graph, c).is_temporal
                                                                 for c in m.candidates)]
    if named:
        return _pick(graph, named[0].candidates, q.tables_named, intent.base), []
    base_table = graph.table(intent.base) if intent.base else None
    if base_table is None:
        return None, []
    dates = [(base_table.name, c.name) for c in base_table.columns if c.is_temporal]
    if not dates:
        referred = [t for t in graph.tables if t.name != base_table.name
                    and (route := graph.path(base_table.name, t.name)) and _follows_references(base_table.name, route)]
        dates = [(t.name, c.name) for t in referred for c in t.columns if c.is_temporal]
    return (dates[0] if len(dates) == 1 else None), dates


def _year_filters(q: _Question) -> None:
    """"in 2024": a year on the date column the question is about."""
    for found in grammar.YEAR_FILTER.finditer(q.text):
        if q.in_comparison(found.start(1)):
            continue
        target, dates = _date_candidates(q)
        if target is None:
            q.intent.problems.append(f"I could not tell which date '{found.group(1)}' is about"
                                     + (f" (candidates: {', '.join(f'{t}.{c}' for t, c in dates)})" if dates else ""))
        else:
            q.intent.filters.append(Filter(table=target[0], column=target[1], value=found.group(1), op="year"))


def _time_column_set(q: _Question) -> None:
    """The date a bucket or a comparison of periods reads."""
    intent = q.intent
    if q.bucket is not None:
        intent.bucket = q.bucket.bucket
    if q.comparison is not None:
        if intent.aggregate is None:
            intent.aggregate = "count"
        intent.periods = [q.comparison.first, q.comparison.second]
        intent.listing = False
        if intent.metrics:
            intent.problems.append("I compare one aggregate between two periods at a time")
    if intent.bucket is None and not intent.periods:
        return
    target, dates = _date_candidates(q)
    if target is None:
        what = "group by " + (intent.bucket or "") if intent.bucket else "compare periods on"
        intent.problems.append(f"I could not tell which date to {what}"
                               + (f" (candidates: {', '.join(f'{t}.{c}' for t, c in dates)})" if dates
                                  else " (the tables I matched have no date column)"))
        return
    intent.time_column = target


def _warnings(q: _Question) -> None:
    intent = q.intent
    if grammar.NEGATION.search(q.text):
        intent.problems.append("I do not handle negation (not / no / without): I would count the opposite")
    ranked = q.group is not None or (q.bucket is not None and q.bucket.ranked)
    if (not ranked and intent.aggregate in {"count", None} and not intent.listing and not intent.periods
            and grammar.SUPERLATIVE.search(q.text) and not grammar.LIST_LEAD.search(q.text)):
        intent.problems.append("the question asks for a most / least but names nothing to rank by (use 'by' "
                               "or 'which ... has the most ...')")


def _unknown_words(q: _Question) -> None:
    """Words that look like a filter value but match nothing in the data."""
    intent, text, original = q.intent, q.text, q.original
    covered = [(m.start, m.end) for m in q.mentions] + q.covered
    words = [(w.group(0), w.start()) for w in re.finditer(r"[\w'&/.-]+", text)]
    for index, (word, start) in enumerate(words):
        if any(s <= start < e for s, e in covered) or word in _GLUE or re.fullmatch(r"[\d.$-]+", word):
            continue
        shown = original[start:start + len(word)]
        intent.ignored.append(shown)
        lead = [w for w, _ in words[max(0, index - 3):index] if w not in {"the", "a", "an"}]
        proper = index > 0 and shown[:1].isupper()
        if (lead and lead[-1] in _FILTER_LEAD) or proper:
            intent.problems.append(f"no table, column or sampled value matches '{shown}'")
        elif lead and lead[-1] in {"per", "by", "each", "every"}:
            intent.problems.append(f"I cannot group by '{shown}': no column of that name")


def _completed(q: _Question) -> None:
    intent = q.intent
    if intent.base is None and intent.group is not None:
        intent.problems.append(f"I could not tell what to count or measure for each {intent.group[0]}")
    elif intent.base is None:
        graph = q.graph
        intent.problems.append("the question names no table I can see" + (
            f" (I looked for: {', '.join(t.name for t in graph.tables[:12])})" if graph.tables else ""))
    if intent.aggregate is None and not intent.listing and intent.base is not None:
        listing = grammar.LIST_LEAD.search(q.text) and not q.count_at
        intent.aggregate = None if listing else "count"
        if intent.aggregate is None:
            intent.listing = True
    intent.understood = [f"{m.kind} {m.text!r} -> {', '.join(f'{t}.{c}' if c else t for t, c in m.candidates)}"
                         for m in q.mentions]


def _column(graph: SchemaGraph, candidate: tuple[str, str]) -> Column:
    table = graph.table(candidate[0])
    column = table.column(candidate[1]) if table else None
    return column or Column(name=candidate[1])


def _pick(graph: SchemaGraph, candidates: list[tuple[str, str]], named: list[str], base: str | None) -> tuple[str, str]:
    """Among columns with the same name, the one on a table the question names, else on
    the base table, else the nearest to it."""
    return min(candidates, key=lambda c: (c[0] not in named, c[0] != base, _distance(graph, base, c[0]), c))


def _quoted_column(graph: SchemaGraph, value: Mention, mentions: list[Mention], base: str | None) -> tuple[str, str]:
    """A quoted value with no sampled match: the label column of the table named right
    next to it, else of the base table."""
    near = sorted((m for m in mentions if m.kind in {"table", "column"}),
                  key=lambda m: min(abs(m.end - value.start), abs(value.end - m.start)))
    for m in near:
        table_name, column_name = m.candidates[0]
        table = graph.table(table_name)
        if table is None:
            continue
        if m.kind == "column" and _column(graph, m.candidates[0]).is_text:
            return table_name, column_name
        if m.kind == "table" and table.label is not None:
            return table_name, table.label.name
    table = graph.table(base) if base else None
    if table is not None and table.label is not None:
        return table.name, table.label.name
    return "", ""


def entity_label(table: Table) -> str:
    return " ".join(name_words(table.name))
