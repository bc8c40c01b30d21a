"""A question read against a schema graph: what to measure, over which entity, grouped
by what, filtered on which values, in what order. Only the schema's own names and
sampled values are matched; the English the reader knows is generic (how many,
average, total, top N, by / per / each, which ... most)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from rivercore.planner.schema import Column, SchemaGraph, Table, name_words

Aggregate = Literal["count", "sum", "avg", "min", "max"]

_COUNT = re.compile(r"\bhow many\b|\bnumber of\b|\bcount(?:s|ed)?\b|\bfewest\b|\bhow often\b")
_AVG = re.compile(r"\baverage\b|\bavg\b|\bmean\b")
_SUM = re.compile(r"\btotal\b|\bsum\b|\baltogether\b|\bcombined\b")
_MAX = re.compile(r"\bmax(?:imum)?\b|\bhighest\b|\blargest\b|\bbiggest\b|\blongest\b|\bmost expensive\b|\bgreatest\b")
_MIN = re.compile(r"\bmin(?:imum)?\b|\blowest\b|\bsmallest\b|\bshortest\b|\bcheapest\b|\bleast expensive\b")
_DESC = re.compile(r"\bmost\b|\bhighest\b|\blargest\b|\bbiggest\b|\bgreatest\b|\blongest\b|\bbest\b|\btop\b|\bmore\b")
_ASC = re.compile(r"\bfewest\b|\bleast\b|\blowest\b|\bsmallest\b|\bshortest\b|\bbottom\b|\bworst\b")
_TOP_N = re.compile(r"\b(?:top|first|bottom|best|worst)\s+(\d{1,4})\b|\b(\d{1,4})\s+(?:most|least|highest|lowest|"
                    r"biggest|largest|smallest|top|best)\b")
_GROUP_LEAD = re.compile(r"\b(?:by|per|for each|each|for every|every|in each|across|grouped by|broken down by)\s+"
                         r"(?:the\s+|their\s+|its\s+)?$")
_TOP_LEAD = re.compile(r"\b(?:top|bottom|first|best|worst)\s+\d{1,4}\s+$")
# "spent by customers", "written by Queen": "by" names who did it, not a dimension.
_AGENT_BY = re.compile(r"\b(?:\w+ed|\w+en|spent|made|sold|bought|paid|sent|held|won|built|bought)\s+by\s+"
                       r"(?:the\s+)?$")
_WHICH_N = re.compile(r"\b(?:which|what)\s+(?:are\s+the\s+|were\s+the\s+)?(\d{1,4})\b")
_WHICH_LEAD = re.compile(r"\b(?:which|what)\s+(?:\w+\s+)?$")
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|'([^']{1,80})'|\u201c([^\u201d]{1,80})\u201d|\u2018([^\u2019]{1,80})\u2019")
_LIST = re.compile(r"^\s*(?:please\s+)?(?:list|show|name|display|give me|what are|which are|which|who)\b")
_NEGATION = re.compile(r"\b(?:not|no|never|without|none|neither|nor|except|excluding)\b|n't\b")
_SUPERLATIVE = re.compile(r"\b(?:most|fewest|least|top|bottom|best|worst|popular)\b")
_YEAR = re.compile(r"\b(?:in|during|for|of)\s+(?:the\s+year\s+)?((?:19|20)\d\d)\b")
_COMPARE = re.compile(r"\b(?:(more|greater|higher|longer|larger|bigger|over|above|at least)|"
                      r"(less|fewer|lower|shorter|smaller|cheaper|under|below|at most))\s+(?:than\s+)?"
                      r"\$?(-?\d+(?:\.\d+)?)\b")
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
    op: Literal["=", ">", ">=", "<", "<=", "year"] = "="


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


def intent_read(*, question: str, graph: SchemaGraph) -> Intent:
    original = " ".join(question.split())
    text = original.lower()
    mentions = _merge(_schema_mentions(text, graph) + _value_mentions(text, original, graph), original)
    intent = Intent()
    tables_named = [m.candidates[0][0] for m in mentions if m.kind == "table"]

    def before(m: Mention) -> str:
        return text[:m.start]

    # The dimension: a table or column right after "by / per / each", or after "which".
    group_mention = next((m for m in mentions if m.kind in {"table", "column"} and not _AGENT_BY.search(before(m))
                          and (_GROUP_LEAD.search(before(m)) or _TOP_LEAD.search(before(m)))), None)
    which = False
    if group_mention is None:
        group_mention = next((m for m in mentions if m.kind in {"table", "column"}
                              and _WHICH_LEAD.search(before(m)) and (_DESC.search(text) or _ASC.search(text))), None)
        which = group_mention is not None

    # The aggregate.
    measure_mentions = [m for m in mentions if m.kind == "column" and m is not group_mention
                        and any(_column(graph, c).is_numeric for c in m.candidates)]
    compared_at = [c.start() for c in _COMPARE.finditer(text)]
    worded = [m for m in measure_mentions if _AVG.fullmatch(m.text) or _SUM.fullmatch(m.text)
              or _MAX.fullmatch(m.text) or _MIN.fullmatch(m.text)]
    if worded and len(measure_mentions) > len(worded):
        # "total quantity": "total" names a column here, but the question means a sum.
        measure_mentions = [m for m in measure_mentions if m not in worded]
    compared = [m for m in measure_mentions if any(0 <= at - m.end <= 12 for at in compared_at)]
    measure_mentions = [m for m in measure_mentions if m not in compared] or measure_mentions
    consumed = text
    for m in measure_mentions:
        consumed = consumed[:m.start] + " " * (m.end - m.start) + consumed[m.end:]
    if _AVG.search(consumed):
        intent.aggregate = "avg"
    elif _COUNT.search(consumed):
        intent.aggregate = "count"
    elif _SUM.search(consumed):
        intent.aggregate = "sum"
    elif group_mention is None and _MAX.search(consumed):
        intent.aggregate = "max"
    elif group_mention is None and _MIN.search(consumed):
        intent.aggregate = "min"
    elif measure_mentions and not _LIST.search(text):
        word = measure_mentions[0].text
        intent.aggregate = ("avg" if _AVG.search(word) else "sum" if _SUM.search(word) else "max"
                            if _MAX.search(word) else "min" if _MIN.search(word) else None)

    top = _TOP_N.search(text) or _WHICH_N.search(text)
    if top:
        intent.limit = int(next(g for g in top.groups() if g))
    if group_mention is not None:
        if _ASC.search(text) and not _DESC.search(text.replace("most expensive", "")):
            intent.order = "asc"
        elif _DESC.search(text) or intent.limit:
            intent.order = "desc"
        if which and intent.limit is None:
            intent.limit = 1

    # The entity counted: the table named right after the count words, else any other.
    count_at = _COUNT.search(text)
    entity = None
    others = [m for m in mentions if m.kind == "table" and m is not group_mention]
    if count_at:
        entity = next((m for m in others if m.start >= count_at.end()), None)
    if entity is None and group_mention is not None:
        entity = next((m for m in others if m.start > group_mention.end), None)
    if entity is None:
        entity = next(iter(others), None)

    context = [t for t in tables_named]
    # "how many distinct countries": the column right after the count words.
    if count_at:
        first = next((m for m in mentions if m.start >= count_at.end()), None)
        if first is not None and first.kind == "column" and first is not group_mention and not any(
                _column(graph, c).is_numeric for c in first.candidates):
            intent.distinct = _pick(graph, first.candidates, context, entity.candidates[0][0] if entity else None)
            if entity is None or entity.start > first.start:
                entity = None
    measure: tuple[str, str] | None = None
    if measure_mentions:
        m = measure_mentions[0]
        measure = _pick(graph, m.candidates, context, entity.candidates[0][0] if entity else None)
    base = measure[0] if measure else (entity.candidates[0][0] if entity else None)
    if base is None and intent.distinct is not None:
        base = intent.distinct[0]
    if intent.aggregate in {"sum", "avg", "min", "max"} and measure is None:
        pool = [graph.table(base)] if base else [graph.table(n) for n in tables_named]
        options = [(t.name, c.name) for t in pool if t is not None for c in t.measures]
        if len(options) == 1:
            measure = options[0]
            base = measure[0]
        else:
            intent.problems.append(
                "I could not tell which numeric column to " + {"sum": "add up", "avg": "average", "min": "take the "
                "minimum of", "max": "take the maximum of"}[intent.aggregate]
                + (f" (candidates: {', '.join(f'{t}.{c}' for t, c in options[:6])})" if options else
                   " (none of the tables I matched has one)"))
    if measure is not None and intent.aggregate is None:
        intent.aggregate = "sum" if group_mention is not None else None
        if group_mention is None:
            intent.listing = True
    if base is None and group_mention is not None and group_mention.kind == "column":
        base = group_mention.candidates[0][0]
    intent.base = base
    intent.measure = measure

    if group_mention is not None:
        if group_mention.kind == "table":
            intent.group = (group_mention.candidates[0][0], "")
        else:
            intent.group = _pick(graph, group_mention.candidates, context, base)
        if intent.aggregate is None:
            intent.aggregate = "count"
        if intent.group[0] == base and intent.group[1] == "" and entity is None:
            intent.problems.append("I could not tell what to count for each " + intent.group[0])

    # Filters: every value mention, attached to the column that holds it.
    for m in mentions:
        if m.kind != "value":
            continue
        if m.candidates:
            near = [t.candidates[0][0] for t in sorted(
                (t for t in mentions if t.kind == "table"), key=lambda t: abs(m.start - t.end))]
            table, column = _pick(graph, m.candidates, near[:1] or context, base)
        else:
            table, column = _quoted_column(graph, m, mentions, base)
            if not column:
                intent.problems.append(f"I could not tell which column holds {m.text}")
                continue
        intent.filters.append(Filter(table=table, column=column, value=m.value))

    # Comparisons with a number: on the numeric column named just before them.
    for found in _COMPARE.finditer(text):
        op = (">=" if "least" in found.group(0) else ">") if found.group(1) else (
            "<=" if "most" in found.group(0) else "<")
        numeric = [m for m in mentions if m.kind == "column" and any(_column(graph, c).is_numeric
                                                                   for c in m.candidates)]
        following = [m for m in numeric if 0 <= m.start - found.end() <= 2]  # "over 300000 milliseconds"
        near_numbers = following or [m for m in numeric if m.end <= found.start()]
        if near_numbers:
            table, column = _pick(graph, near_numbers[-1].candidates, context, base)
            intent.filters.append(Filter(table=table, column=column, value=found.group(3), op=op))
        else:
            intent.problems.append(f"I could not tell which number '{found.group(0)}' compares")

    # A year: on the one date column of the base table (or the date column the question names).
    for found in _YEAR.finditer(text):
        named = [m for m in mentions if m.kind == "column" and any(_column(graph, c).is_temporal
                                                                   for c in m.candidates)]
        base_table = graph.table(base) if base else None
        dates = [(base_table.name, c.name) for c in base_table.columns if c.is_temporal] if base_table else []
        target = _pick(graph, named[0].candidates, context, base) if named else (dates[0] if len(dates) == 1
                                                                                   else None)
        if target is None:
            intent.problems.append(f"I could not tell which date '{found.group(1)}' is about"
                                   + (f" (candidates: {', '.join(f'{t}.{c}' for t, c in dates)})" if dates else ""))
        else:
            intent.filters.append(Filter(table=target[0], column=target[1], value=found.group(1), op="year"))
    if _NEGATION.search(text):
        intent.problems.append("I do not handle negation (not / no / without): I would count the opposite")
    if (group_mention is None and intent.aggregate in {"count", None} and not intent.listing
            and _SUPERLATIVE.search(text) and not _LIST.search(text)):
        intent.problems.append("the question asks for a most / least but names nothing to rank by (use 'by' "
                               "or 'which ... has the most ...')")

    # Words that look like a filter value but match nothing in the data.
    covered = [(m.start, m.end) for m in mentions]
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

    if intent.base is None and intent.group is not None:
        intent.problems.append(f"I could not tell what to count or measure for each {intent.group[0]}")
    elif intent.base is None:
        intent.problems.append("the question names no table I can see" + (
            f" (I looked for: {', '.join(t.name for t in graph.tables[:12])})" if graph.tables else ""))
    if intent.aggregate is None and not intent.listing and intent.base is not None:
        listing = _LIST.search(text) and not count_at
        intent.aggregate = None if listing else "count"
        if intent.aggregate is None:
            intent.listing = True
    intent.understood = [f"{m.kind} {m.text!r} -> {', '.join(f'{t}.{c}' if c else t for t, c in m.candidates)}"
                         for m in mentions]
    return intent


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
