"""Catalog search: rank cached tables and columns by how well they match a question.

Method: Okapi BM25 over small documents built from the cached schemas (one per
table, one per column), with business-aware tokenization:

- identifiers are split on ``_``, punctuation, digits and camelCase
  (``createdAt`` -> ``created at``), lower-cased, stop words dropped;
- a light suffix stemmer folds plurals and verb endings (``tickets`` -> ``ticket``,
  ``created``/``creating`` -> ``creat``);
- a synonym map folds business vocabulary onto one term (customer / client /
  account, ticket / issue / case, charge / payment / invoice, ...), so "clients"
  finds ``customers``;
- table documents weight the table name above its columns; column documents weight
  the column name above the table it belongs to, and include the column type so
  "when" / "date" questions reach timestamp columns.

Scores are BM25 divided by the best score the query could reach on that corpus, so
they fall in [0, 1] and are comparable between tables and columns. Everything is
deterministic and offline: no model, no network, no vector store, same input same
order (ties break by data source, table and column name).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, Field

from datasources.models import DataSource
from rivercore.types.datasources import TableInfo

K1 = 1.2
B = 0.75
TABLE_NAME_WEIGHT = 3
COLUMN_NAME_WEIGHT = 2

STOP_WORDS = frozenset(
    """a an and are as at be by did do does for from has have how i in is it its last me my
    of on or per show the their them there these this those to was we were what when where
    which who whose why will with all any each list give find get many much number count
    please tell about into than then over under since during id""".split()
)

# Stemmed word -> canonical term. Groups of words a business user treats as the same thing.
_SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {
    "customer": ("customer", "client", "account", "buyer", "subscriber", "patron", "consumer"),
    "ticket": ("ticket", "issue", "case", "incident", "complaint", "inquiry", "enquiry"),
    "charge": ("charge", "payment", "invoice", "billing", "bill", "transaction", "fee", "paid", "pay"),
    "refund": ("refund", "chargeback", "reimbursement"),
    "order": ("order", "purchase", "sale"),
    "product": ("product", "item", "sku", "article"),
    "employee": ("employee", "staff", "agent", "rep", "representative", "worker", "assignee"),
    "company": ("company", "organization", "organisation", "org", "business", "firm"),
    "amount": ("amount", "total", "price", "cost", "sum", "revenue", "value"),
    "priority": ("priority", "severity", "urgency", "urgent"),
    "status": ("status", "state"),
    "email": ("email", "mail", "e-mail"),
    "phone": ("phone", "telephone", "mobile", "cell"),
    "create": ("create", "submit", "raise"),
    "date": ("date", "time", "timestamp", "timestamptz", "datetime", "day", "hour", "week", "month", "year"),
    "message": ("message", "comment", "reply", "note", "response"),
    "shipment": ("shipment", "delivery", "shipping", "ship"),
    "address": ("address", "street", "location"),
    "product_review": ("review", "rating", "feedback"),
}


def stem(word: str) -> str:
    """A deliberately small suffix stripper: folds plurals, -ed/-ing and a final -e,
    so create / created / creating / creates all become ``creat``."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, replacement, min_len in (
        ("ies", "y", 5),
        ("sses", "ss", 5),
        ("ing", "", 6),
        ("ed", "", 5),
        ("es", "", 5),
        ("s", "", 4),
    ):
        if not (word.endswith(suffix) and len(word) >= min_len):
            continue
        if suffix == "s" and word.endswith(("ss", "us", "is")):
            break
        if suffix == "es" and not word.endswith(("ches", "shes", "xes", "sses", "zes")):
            continue
        word = word[: len(word) - len(suffix)] + replacement
        break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def _build_synonyms() -> dict[str, str]:
    mapping: dict[str, str] = {}
    for canonical, words in _SYNONYM_GROUPS.items():
        for word in words:
            mapping[stem(word)] = canonical
            mapping[word] = canonical
    return mapping


SYNONYMS = _build_synonyms()
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")


def tokenize(text: str) -> list[str]:
    words = _SPLIT.split(_CAMEL.sub(" ", text or ""))
    tokens = []
    for raw in words:
        word = raw.lower()
        if not word or word in STOP_WORDS:
            continue
        stemmed = stem(word)
        tokens.append(SYNONYMS.get(word) or SYNONYMS.get(stemmed) or stemmed)
    return tokens


class CatalogMatch(BaseModel):
    kind: str  # "table" or "column"
    data_source_id: int
    data_source_name: str
    table_name: str
    column_name: str | None = None
    data_type: str | None = None
    description: str = ""
    score: float = Field(ge=0.0, le=1.0)


class CatalogSearchResult(BaseModel):
    matches: list[CatalogMatch]
    total_results: int


class _Doc:
    __slots__ = ("match", "tf", "length")

    def __init__(self, match: CatalogMatch, tokens: list[str]):
        self.match = match
        self.tf = Counter(tokens)
        self.length = len(tokens)


def _table_doc(source: DataSource, table: TableInfo) -> _Doc:
    tokens = tokenize(table.table_name) * TABLE_NAME_WEIGHT + tokenize(table.description)
    for column in table.columns:
        tokens += tokenize(column.column_name) + tokenize(column.description)
    match = CatalogMatch(
        kind="table",
        data_source_id=source.pk,
        data_source_name=source.name,
        table_name=table.table_name,
        description=table.description,
        score=0.0,
    )
    return _Doc(match, tokens)


def _column_doc(source: DataSource, table: TableInfo, column) -> _Doc:
    tokens = (
        tokenize(column.column_name) * COLUMN_NAME_WEIGHT
        + tokenize(column.description)
        + tokenize(table.table_name)
        + tokenize(column.data_type.split("(")[0])
        # The sampled values, so "customers from Brazil" finds the column that holds Brazil.
        + tokenize(" ".join(column.sample_values))
    )
    match = CatalogMatch(
        kind="column",
        data_source_id=source.pk,
        data_source_name=source.name,
        table_name=table.table_name,
        column_name=column.column_name,
        data_type=column.data_type,
        description=column.description,
        score=0.0,
    )
    return _Doc(match, tokens)


def _bm25(docs: list[_Doc], query_terms: list[str]) -> list[tuple[float, _Doc]]:
    if not docs:
        return []
    n = len(docs)
    avg_len = sum(d.length for d in docs) / n or 1.0
    df = Counter(term for d in docs for term in set(d.tf))
    terms = Counter(query_terms)
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms if df[t]}
    # The most a document could score: every query term present with tf -> infinity.
    ceiling = sum(idf[t] * (K1 + 1) * count for t, count in terms.items() if t in idf)
    if ceiling <= 0:
        return []
    scored = []
    for doc in docs:
        raw = 0.0
        for term, count in terms.items():
            tf = doc.tf.get(term, 0)
            if not tf or term not in idf:
                continue
            norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * doc.length / avg_len))
            raw += idf[term] * norm * count
        if raw > 0:
            scored.append((min(1.0, raw / ceiling), doc))
    return scored


def catalog_search(*, data_sources: Iterable[DataSource], query: str, top_k: int = 10) -> CatalogSearchResult:
    """Rank the cached tables and columns of ``data_sources`` against ``query``.

    The caller decides which sources are visible; this function never widens that set
    and never contacts a database (only ``schema_cache`` is read)."""
    query_terms = tokenize(query)
    table_docs: list[_Doc] = []
    column_docs: list[_Doc] = []
    for source in data_sources:
        for raw_table in source.schema_cache or []:
            table = TableInfo.model_validate(raw_table)
            table_docs.append(_table_doc(source, table))
            column_docs.extend(_column_doc(source, table, column) for column in table.columns)
    scored = _bm25(table_docs, query_terms) + _bm25(column_docs, query_terms)
    scored.sort(
        key=lambda item: (
            -round(item[0], 9),
            item[1].match.kind != "table",
            item[1].match.data_source_id,
            item[1].match.table_name,
            item[1].match.column_name or "",
        )
    )
    matches = [doc.match.model_copy(update={"score": round(score, 4)}) for score, doc in scored[: max(top_k, 0)]]
    return CatalogSearchResult(matches=matches, total_results=len(scored))
