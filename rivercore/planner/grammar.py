"""The English the schema-graph planner knows, written down as tables.

Every phrase the planner reacts to is in one of the tables below, each with the small
function that applies it to a (lower-case) question. ``question.intent_read`` only
combines their answers with the schema's own names and sampled values. A new phrasing
is a new row here, with its test in ``tests/rivercore/test_planner_grammar.py``.

* ``AGGREGATE_WORDS``: which aggregate a word asks for, in the order of precedence;
* ``ORDER_WORDS``, ``TOP_N`` and the group leads: ranking, "top N", "by / per / each";
* ``NUMBER_COMPARISONS``: "more than 30", "at most 5";
* ``TIME_BUCKETS``: "per month", "by year", "monthly", "which month";
* ``PERIODS`` and ``PERIOD_COMPARISONS``: "2025 compared to 2024", "this month vs last month";
* ``PRODUCT_WORDS``: a derived measure, "price × quantity", "price times quantity".
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

Aggregate = Literal["count", "sum", "avg", "min", "max"]
Bucket = Literal["day", "month", "quarter", "year"]


def _words(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(rf"\b{a}\b" for a in alternatives))


# --- aggregates ---------------------------------------------------------------------------------

# Precedence matters when several appear: "average number of ..." is an average.
AGGREGATE_WORDS: tuple[tuple[Aggregate, re.Pattern[str]], ...] = (
    ("avg", _words("average", "avg", "mean")),
    ("count", _words("how many", "number of", r"count(?:s|ed)?", "fewest", "how often")),
    ("sum", _words("total", "sum", "altogether", "combined")),
    ("max", _words(r"max(?:imum)?", "highest", "largest", "biggest", "longest", "most expensive", "greatest")),
    ("min", _words(r"min(?:imum)?", "lowest", "smallest", "shortest", "cheapest", "least expensive")),
)
_AGGREGATE = dict(AGGREGATE_WORDS)
RANKING_AGGREGATES = frozenset({"max", "min"})  # with a dimension these words rank, they do not aggregate

AGGREGATE_VERBS: dict[Aggregate, str] = {"sum": "add up", "avg": "average", "min": "take the minimum of",
                                         "max": "take the maximum of", "count": "count"}


def aggregate_pattern(aggregate: Aggregate) -> re.Pattern[str]:
    return _AGGREGATE[aggregate]


def aggregate_first(text: str, *, grouped: bool) -> Aggregate | None:
    """The aggregate ``text`` asks for, by precedence; with a dimension, "highest" and
    "lowest" rank the groups rather than aggregate."""
    for aggregate, pattern in AGGREGATE_WORDS:
        if grouped and aggregate in RANKING_AGGREGATES:
            continue
        if pattern.search(text):
            return aggregate
    return None


def aggregate_of_word(word: str) -> Aggregate | None:
    """"total" in "invoice total", "max" in "max_speed": the aggregate a column's own word names."""
    for aggregate in ("avg", "sum", "max", "min"):
        if _AGGREGATE[aggregate].search(word):
            return aggregate
    return None


class AggregateWord(BaseModel):
    aggregate: Aggregate
    start: int
    end: int


# The gap between two aggregate words of a list: perhaps what the first one counts
# ("number of orders and"), then "and" / "," / "plus" / "as well as", perhaps an article.
_LIST_JOIN = re.compile(r"^(?:[a-z][\w' ]{0,30} )?(?:, and|,|and|&|plus|as well as)(?: the| their| its)?$")


def aggregate_list(text: str) -> list[AggregateWord]:
    """Two or more aggregates joined by "and" / "," ("total and average amount", "the
    number of orders and their total amount"); an empty list when there is one or none.
    ``text`` has the measure names blanked out, so the gap between two aggregate words
    holds only spaces where a measure stood."""
    found: list[AggregateWord] = []
    for aggregate, pattern in AGGREGATE_WORDS:
        for m in pattern.finditer(text):
            if not any(m.start() < w.end and w.start < m.end() for w in found):
                found.append(AggregateWord(aggregate=aggregate, start=m.start(), end=m.end()))
    found.sort(key=lambda w: w.start)
    chain: list[AggregateWord] = []
    for word in found:
        if chain and _joined(text[chain[-1].end:word.start]) and word.aggregate not in {w.aggregate for w in chain}:
            chain.append(word)
        elif len(chain) < 2:
            chain = [word]
    return chain if len(chain) >= 2 else []


def _joined(gap: str) -> bool:
    return bool(_LIST_JOIN.match(" ".join(gap.replace(",", " , ").split()).replace(" ,", ",")))


# --- ranking, top N, dimensions -----------------------------------------------------------------

ORDER_WORDS: dict[Literal["asc", "desc"], re.Pattern[str]] = {
    "desc": _words("most", "highest", "largest", "biggest", "greatest", "longest", "best", "top", "more"),
    "asc": _words("fewest", "least", "lowest", "smallest", "shortest", "bottom", "worst"),
}
TOP_N = re.compile(r"\b(?:top|first|bottom|best|worst)\s+(\d{1,4})\b|\b(\d{1,4})\s+(?:most|least|highest|lowest|"
                   r"biggest|largest|smallest|top|best)\b")
WHICH_N = re.compile(r"\b(?:which|what)\s+(?:are\s+the\s+|were\s+the\s+)?(\d{1,4})\b")
GROUP_LEAD = re.compile(r"\b(?:by|per|for each|each|for every|every|in each|across|grouped by|broken down by)\s+"
                        r"(?:the\s+|their\s+|its\s+)?$")
TOP_LEAD = re.compile(r"\b(?:top|bottom|first|best|worst)\s+\d{1,4}\s+$")
# "spent by customers", "written by Queen": "by" names who did it, not a dimension.
AGENT_BY = re.compile(r"\b(?!(?:grouped|sorted|ordered|ranked|broken)\b)"
                      r"(?:\w+ed|\w+en|spent|made|sold|bought|paid|sent|held|won|built)\s+by\s+(?:the\s+)?$")
WHICH_LEAD = re.compile(r"\b(?:which|what)\s+(?:\w+\s+)?$")
LIST_LEAD = re.compile(r"^\s*(?:please\s+)?(?:list|show|name|display|give me|what are|which are|which|who)\b")
NEGATION = re.compile(r"\b(?:not|no|never|without|none|neither|nor|except|excluding)\b|n't\b")
SUPERLATIVE = _words("most", "fewest", "least", "top", "bottom", "best", "worst", "popular")


def order_read(text: str) -> Literal["asc", "desc"] | None:
    """The ranking direction; "most expensive" is a price, not a ranking of counts."""
    if ORDER_WORDS["asc"].search(text) and not ORDER_WORDS["desc"].search(text.replace("most expensive", "")):
        return "asc"
    if ORDER_WORDS["desc"].search(text):
        return "desc"
    return None


def top_n_read(text: str) -> int | None:
    """"top 5", "the 3 biggest", "which 10": how many rows to keep."""
    found = TOP_N.search(text) or WHICH_N.search(text)
    return int(next(g for g in found.groups() if g)) if found else None


def grouping_lead(before: str) -> bool:
    """Whether the words before a name make it the dimension ("by", "per", "top 5")."""
    return not AGENT_BY.search(before) and bool(GROUP_LEAD.search(before) or TOP_LEAD.search(before))


# --- comparisons with a number ------------------------------------------------------------------

NUMBER_COMPARISONS: tuple[tuple[str, str], ...] = (
    # (words, operator), longest first within each direction
    ("at least", ">="), ("more", ">"), ("greater", ">"), ("higher", ">"), ("longer", ">"), ("larger", ">"),
    ("bigger", ">"), ("over", ">"), ("above", ">"),
    ("at most", "<="), ("less", "<"), ("fewer", "<"), ("lower", "<"), ("shorter", "<"), ("smaller", "<"),
    ("cheaper", "<"), ("under", "<"), ("below", "<"),
)
_OPERATOR = dict(NUMBER_COMPARISONS)
NUMBER_COMPARISON = re.compile(r"\b(" + "|".join(w for w, _ in NUMBER_COMPARISONS) + r")\s+(?:than\s+)?"
                               r"\$?(-?\d+(?:\.\d+)?)\b")


class NumberComparison(BaseModel):
    op: str
    number: str
    start: int
    end: int
    text: str


def number_comparisons(text: str) -> list[NumberComparison]:
    return [NumberComparison(op=_OPERATOR[m.group(1)], number=m.group(2), start=m.start(), end=m.end(),
                             text=m.group(0)) for m in NUMBER_COMPARISON.finditer(text)]


YEAR_FILTER = re.compile(r"\b(?:in|during|for|of)\s+(?:the\s+year\s+)?((?:19|20)\d\d)\b")


# --- time buckets -------------------------------------------------------------------------------

TIME_BUCKETS: tuple[tuple[Bucket, str, str], ...] = (
    # (bucket, its unit word, its adjectives)
    ("day", "day", r"daily|day by day"),
    ("month", "month", r"monthly|month by month|month over month|month on month"),
    ("quarter", "quarter", r"quarterly|quarter by quarter|quarter over quarter"),
    ("year", "year", r"yearly|annual|annually|year by year|year over year|year on year"),
)
_BUCKET_LEAD = (r"(?:by|per|each|every|for each|for every|in each|grouped by|broken down by|which|what|"
                r"top\s+\d{1,4}|bottom\s+\d{1,4})\s+(?:the\s+)?(?:calendar\s+)?")
_BUCKET_PATTERNS: tuple[tuple[Bucket, re.Pattern[str]], ...] = tuple(
    (bucket, re.compile(rf"\b{_BUCKET_LEAD}{unit}s?\b|\b(?:{adjectives})\b"))
    for bucket, unit, adjectives in TIME_BUCKETS
)
# The label each bucket gets: text that sorts in time order and reads the same on both dialects.
BUCKET_SQL: dict[str, dict[Bucket, str]] = {
    "sqlite": {"day": "strftime('%Y-%m-%d', {col})", "month": "strftime('%Y-%m', {col})",
               "quarter": "strftime('%Y', {col}) || '-Q' || ((CAST(strftime('%m', {col}) AS INTEGER) + 2) / 3)",
               "year": "strftime('%Y', {col})"},
    "postgresql": {"day": "to_char({col}, 'YYYY-MM-DD')", "month": "to_char({col}, 'YYYY-MM')",
                   "quarter": "to_char({col}, 'YYYY') || '-Q' || to_char({col}, 'Q')",
                   "year": "to_char({col}, 'YYYY')"},
}


class BucketPhrase(BaseModel):
    bucket: Bucket
    start: int
    end: int
    ranked: bool = False  # "which month", "top 3 months": the buckets are ranked, not listed in time order


def bucket_read(text: str) -> BucketPhrase | None:
    """The time bucket a question groups by, the earliest one named."""
    found: list[BucketPhrase] = []
    for bucket, pattern in _BUCKET_PATTERNS:
        for m in pattern.finditer(text):
            ranked = bool(re.match(r"(?:which|what|top|bottom)\b", m.group(0)))
            found.append(BucketPhrase(bucket=bucket, start=m.start(), end=m.end(), ranked=ranked))
    return min(found, key=lambda b: b.start) if found else None


def bucket_sql(bucket: Bucket, column_sql: str, dialect: str) -> str:
    return BUCKET_SQL["sqlite" if dialect == "sqlite" else "postgresql"][bucket].format(col=column_sql)


# --- periods and their comparison ---------------------------------------------------------------

MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
               "november", "december")
_MONTH_ABBREVIATIONS = {name[:3]: i + 1 for i, name in enumerate(MONTH_NAMES)} | {"sept": 9}
_MONTH_NUMBER = {name: i + 1 for i, name in enumerate(MONTH_NAMES)} | _MONTH_ABBREVIATIONS
_MONTH_WORD = "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True))

PERIODS: tuple[tuple[str, str], ...] = (
    # (kind, pattern): the period's text, most specific first
    ("month_of_year", rf"(?:{_MONTH_WORD})\.?\s+(?:of\s+)?(?:19|20)\d\d"),
    ("relative", r"(?:this|current|last|previous|prior)\s+(?:month|quarter|year)"),
    ("year", r"(?:19|20)\d\d"),
)
_PERIOD = "|".join(f"(?:{pattern})" for _, pattern in PERIODS)
PERIOD_COMPARISONS = ("vs", "vs.", "versus", "compared to", "compared with", "against", "relative to")
_COMPARISON = re.compile(
    rf"(?<![\w])(?:in\s+|for\s+|during\s+)?(?:the\s+)?(?P<a>{_PERIOD})\b\s*,?\s*"
    rf"(?:{'|'.join(re.escape(p) for p in PERIOD_COMPARISONS)})\s+(?:in\s+|for\s+|during\s+|with\s+)?(?:the\s+)?"
    rf"(?P<b>{_PERIOD})\b")
_RELATIVE_UNIT = {"month": "month", "quarter": "quarter", "year": "year"}


class Period(BaseModel):
    """One calendar period: a year, a month of a year, or this / last month, quarter or year."""

    label: str  # the result column's name: "2025", "2025-03", "this month"
    unit: Literal["month", "quarter", "year"]
    value: str = ""  # "2025" / "2025-03" for a fixed period; "" for a relative one
    back: int = 0  # relative: 0 = this, 1 = the previous one


class PeriodComparison(BaseModel):
    first: Period
    second: Period
    start: int
    end: int


def period_read(phrase: str) -> Period | None:
    words = phrase.lower().replace(".", " ").split()
    if not words:
        return None
    if words[0] in _MONTH_NUMBER:
        year = words[-1]
        return Period(label=f"{year}-{_MONTH_NUMBER[words[0]]:02d}", unit="month",
                      value=f"{year}-{_MONTH_NUMBER[words[0]]:02d}")
    if len(words) == 2 and words[1] in _RELATIVE_UNIT:
        back = 0 if words[0] in {"this", "current"} else 1
        unit = _RELATIVE_UNIT[words[1]]
        return Period(label=f"{'this' if back == 0 else 'last'} {unit}", unit=unit, back=back)
    if re.fullmatch(r"(?:19|20)\d\d", words[0]):
        return Period(label=words[0], unit="year", value=words[0])
    return None


def comparison_read(text: str) -> PeriodComparison | None:
    """Two periods set against each other: "this month vs last month", "2025 compared to 2024"."""
    found = _COMPARISON.search(text)
    if found is None:
        return None
    first, second = period_read(found.group("a")), period_read(found.group("b"))
    if first is None or second is None or first.label == second.label:
        return None
    return PeriodComparison(first=first, second=second, start=found.start(), end=found.end())


def _relative_sqlite(period: Period) -> str:
    start = {"month": "'start of month'", "year": "'start of year'", "quarter": "'start of month'"}[period.unit]
    shift = {"month": f"'-{period.back} month'", "year": f"'-{period.back} year'",
             "quarter": f"'-{3 * period.back} month'"}[period.unit]
    return f"'now', {start}, {shift}" if period.back else f"'now', {start}"


def period_condition(period: Period, column_sql: str, dialect: str) -> str:
    """A condition true for the rows whose date falls in ``period``, in the dialect."""
    label = bucket_sql(period.unit, column_sql, dialect)
    if period.value:
        return f"{label} = '{period.value}'"
    if dialect == "sqlite":
        return f"{label} = {bucket_sql(period.unit, _relative_sqlite(period), dialect)}"
    months = {"month": 1, "quarter": 3, "year": 12}[period.unit] * period.back
    moment = f"date_trunc('{period.unit}', now()) - interval '{months} month'" if months else "now()"
    return f"{label} = {bucket_sql(period.unit, moment, dialect)}"


# --- derived measures ---------------------------------------------------------------------------

PRODUCT_WORDS = ("×", "*", "x", "times", "multiplied by")
PRODUCT_GAP = re.compile(r"^\s*(?:" + "|".join(re.escape(w) for w in PRODUCT_WORDS) + r")\s*$")
_NAME_BEFORE = re.compile(r"\b([a-z][a-z0-9_]{1,40})\s*(?:\(|:|=|\bas\b|\bdefined as\b|\bmeaning\b)\s*(?:the\s+)?$")
NAMING_GAP = re.compile(r"^\s*(?:\(|:|=|\bas\b|\bdefined as\b|\bmeaning\b)\s*(?:the\s+)?$")
_NAME_AFTER = re.compile(r"^\s*\)?\s*(?:as|called|named)\s+([a-z][a-z0-9_]{1,40})\b")


_PRODUCT_NEXT = re.compile(r"^\s*(?:" + "|".join(re.escape(w) for w in PRODUCT_WORDS) + r")\s")


def product_follows(after: str) -> bool:
    """Whether a name is the first factor of a product ("by price × quantity"), so not a dimension."""
    return bool(_PRODUCT_NEXT.match(after))


def product_gap(gap: str) -> bool:
    """Whether the text between two numeric columns multiplies them ("price × quantity")."""
    return bool(PRODUCT_GAP.match(gap))


def product_name(text: str, start: int, end: int, *, reserved: frozenset[str]) -> tuple[str, int, int] | None:
    """The name a question gives the derived measure at ``text[start:end]``: "revenue as
    price × quantity", "revenue (price * quantity)" or "price × quantity as revenue", as
    (name, start, end); None when it names none."""
    found = _NAME_BEFORE.search(text[:start])
    if found and found.group(1) not in reserved:
        return found.group(1), found.start(1), found.end(1)
    after = _NAME_AFTER.match(text[end:])
    if after and after.group(1) not in reserved:
        return after.group(1), end + after.start(1), end + after.end(1)
    return None
