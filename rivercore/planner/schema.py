"""The discovered schema as a graph: tables, their columns, and the foreign keys that
join them, declared or inferred from naming (``customer_id`` / ``CustomerId`` pointing at
the table whose name is that word and whose key is that column or ``id``)."""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from pydantic import BaseModel, Field

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NUMERIC = ("int", "numeric", "decimal", "real", "float", "double", "money", "number")
_TEMPORAL = ("date", "time")


def name_words(name: str) -> list[str]:
    """``InvoiceLine`` / ``invoice_line`` / ``invoice-lines`` -> ["invoice", "line"] (singular)."""
    parts = re.split(r"[^A-Za-z0-9]+", _CAMEL.sub(" ", name or ""))
    return [singular(p.lower()) for p in parts if p]


def singular(word: str) -> str:
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


class Column(BaseModel):
    name: str
    data_type: str = ""
    primary_key: bool = False
    foreign_key: str | None = None  # "table.column" as discovered
    sample_values: list[str] = Field(default_factory=list)

    @property
    def words(self) -> list[str]:
        return name_words(self.name)

    @property
    def is_numeric(self) -> bool:
        return any(k in self.data_type.lower() for k in _NUMERIC)

    @property
    def is_temporal(self) -> bool:
        return any(k in self.data_type.lower() for k in _TEMPORAL)

    @property
    def is_text(self) -> bool:
        return not (self.is_numeric or self.is_temporal or "bool" in self.data_type.lower())

    @property
    def looks_like_key(self) -> bool:
        words = self.words
        return self.primary_key or self.foreign_key is not None or (bool(words) and words[-1] in {"id", "key"})


class Table(BaseModel):
    name: str
    columns: list[Column] = Field(default_factory=list)
    source_id: int | None = None

    @property
    def words(self) -> list[str]:
        return name_words(self.name)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def key(self) -> Column | None:
        declared = next((c for c in self.columns if c.primary_key), None)
        if declared is not None:
            return declared
        own = self.words + ["id"]
        return next((c for c in self.columns if c.words in (["id"], own)), None)

    @property
    def label(self) -> Column | None:
        """The column that names a row: the first text column that is not a key."""
        return next((c for c in self.columns if c.is_text and not c.looks_like_key), None)

    @property
    def measures(self) -> list[Column]:
        return [c for c in self.columns if c.is_numeric and not c.looks_like_key]


class Edge(BaseModel):
    """``table.column`` references ``ref_table.ref_column`` (many rows to one)."""

    table: str
    column: str
    ref_table: str
    ref_column: str
    inferred: bool = False


class SchemaGraph(BaseModel):
    tables: list[Table]
    edges: list[Edge] = Field(default_factory=list)
    dialect: str = "postgresql"
    source_id: int | None = None

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)

    def neighbours(self, name: str) -> list[tuple[str, Edge]]:
        found = []
        for edge in self.edges:
            if edge.table == name:
                found.append((edge.ref_table, edge))
            elif edge.ref_table == name:
                found.append((edge.table, edge))
        return found

    def path(self, start: str, goal: str) -> list[Edge] | None:
        """The shortest chain of joins from ``start`` to ``goal`` (ties: declared keys,
        then table names), or None when they are not connected."""
        if start == goal:
            return []
        seen = {start}
        queue: deque[tuple[str, list[Edge]]] = deque([(start, [])])
        while queue:
            here, route = queue.popleft()
            options = sorted(self.neighbours(here), key=lambda item: (item[1].inferred, item[0], item[1].column))
            for there, edge in options:
                if there in seen:
                    continue
                if there == goal:
                    return [*route, edge]
                seen.add(there)
                queue.append((there, [*route, edge]))
        return None


def _reference(table: Table, column: Column, by_words: dict[tuple[str, ...], Table]) -> tuple[Table, Column] | None:
    """The table ``column`` names by convention: ``<table>_id`` / ``<Table>Id``, or a
    longer name ending in one (``support_rep_id`` -> no table, ``billing_customer_id`` ->
    customer)."""
    words = column.words
    if len(words) < 2 or words[-1] != "id":
        return None
    stem = words[:-1]
    for start in range(len(stem)):
        target = by_words.get(tuple(stem[start:]))
        if target is None or target.name == table.name:
            continue
        key = target.key
        if key is not None:
            return target, key
    return None


def graph_build(*, tables: list[Table], dialect: str, source_id: int | None = None) -> SchemaGraph:
    by_name = {t.name.lower(): t for t in tables}
    by_words: dict[tuple[str, ...], Table] = {}
    for t in sorted(tables, key=lambda t: t.name):
        by_words.setdefault(tuple(t.words), t)
    edges: list[Edge] = []
    for table in tables:
        for column in table.columns:
            if column.foreign_key:
                ref_table, _, ref_column = column.foreign_key.partition(".")
                target = by_name.get(ref_table.lower())
                if target is not None:
                    ref = ref_column or (target.key.name if target.key else "")
                    if target.column(ref) is not None:
                        edges.append(Edge(table=table.name, column=column.name, ref_table=target.name,
                                          ref_column=ref))
                        continue
            found = _reference(table, column, by_words)
            if found is not None:
                edges.append(Edge(table=table.name, column=column.name, ref_table=found[0].name,
                                  ref_column=found[1].name, inferred=True))
    return SchemaGraph(tables=tables, edges=edges, dialect=dialect, source_id=source_id)


def graph_from_source(source: dict[str, Any], *, dialect: str) -> SchemaGraph:
    """A graph from one data source's metadata as the tools pass it (``schemas`` of
    ``table_name`` / ``columns`` with ``column_name``, ``data_type``, keys, samples)."""
    tables = []
    for raw in source.get("schemas") or source.get("tables") or []:
        if not isinstance(raw, dict):
            continue
        columns = []
        for col in raw.get("columns") or []:
            if not isinstance(col, dict):
                continue
            samples = col.get("sample_values") or []
            columns.append(Column(
                name=str(col.get("column_name") or col.get("name") or ""),
                data_type=str(col.get("data_type") or col.get("type") or ""),
                primary_key=bool(col.get("is_primary_key")),
                foreign_key=str(col["foreign_key"]) if col.get("foreign_key") else None,
                sample_values=[str(v) for v in samples if isinstance(v, str)] if isinstance(samples, list) else [],
            ))
        name = str(raw.get("table_name") or raw.get("name") or "")
        if name:
            tables.append(Table(name=name, columns=[c for c in columns if c.name],
                                source_id=source.get("data_source_id")))
    return graph_build(tables=tables, dialect=dialect, source_id=source.get("data_source_id"))
