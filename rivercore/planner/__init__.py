"""River's offline planner package: plain Python (no Django), fed the discovered schema
as plain values.

* ``schema``: the schema graph, with foreign keys declared or inferred from names;
* ``question``: a question read into an :class:`Intent` (aggregate, entity, dimension,
  filters on sampled values, order, limit);
* ``sql``: the intent as one SELECT in the source's dialect;
* :func:`question_plan`: all three over the data sources a tool passes, returning
  either a query or an honest account of what was tried and why it failed;
* ``rules``: the single-table rules (record changes, time windows, enum-like values)
  and intent classification;
* ``tasks``: the answers to the model-backed tools' sub-requests;
* ``brain``: the next tool call or the final answer, from the conversation;
* ``provider``: the litellm custom provider the router registers.

Importing this package loads none of ``rules``/``tasks``/``brain``/``provider``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rivercore.attachments import attachment_notes_removed
from rivercore.planner.question import Intent, intent_read
from rivercore.planner.schema import SchemaGraph, graph_build, graph_from_source
from rivercore.planner.sql import SqlPlan, sql_build

__all__ = ["Intent", "PlannedQuery", "SchemaGraph", "graph_build", "graph_from_source", "intent_read",
           "question_plan", "sql_build"]


QUESTION_MAX_CHARS = 2000


class PlannedQuery(BaseModel):
    answered: bool
    query: str = ""
    dialect: str = ""
    explanation: str = ""
    operations: list[dict[str, Any]] = Field(default_factory=list)
    data_source_id: int | None = None
    intent: Intent | None = None
    tried: list[str] = Field(default_factory=list)


def _dialect(source: dict[str, Any]) -> str:
    dialect = str(source.get("dialect") or "").lower()
    if dialect:
        return dialect
    return "sqlite" if str(source.get("type") or "").lower() in {"sqlite", "sqlite3"} else "postgresql"


def question_plan(*, question: str, sources: list[dict[str, Any]], row_limit: int) -> PlannedQuery:
    """The best query over any one of ``sources`` for ``question``, or why none. The
    question is read without its attachment notes (the files are among ``sources``)."""
    question = attachment_notes_removed(question) or question
    if len(question) > QUESTION_MAX_CHARS:
        return PlannedQuery(answered=False, tried=[
            f"The question is longer than {QUESTION_MAX_CHARS} characters; ask one short question at a time."])
    tried: list[str] = []
    best: tuple[tuple[Any, ...], PlannedQuery] | None = None
    for source in sources:
        if not isinstance(source, dict):
            continue
        graph = graph_from_source(source, dialect=_dialect(source))
        if not graph.tables:
            continue
        intent = intent_read(question=question, graph=graph)
        built: SqlPlan = sql_build(intent=intent, graph=graph, row_limit=row_limit)
        name = str(source.get("name") or source.get("data_source_id"))
        if built.query and not built.problems:
            planned = PlannedQuery(answered=True, query=built.query, dialect=graph.dialect,
                                   explanation=built.explanation, operations=built.operations,
                                   data_source_id=graph.source_id, intent=intent)
            score = (len(intent.understood), -len(intent.ignored))
            if best is None or score > best[0]:
                best = (score, planned)
        else:
            seen = "; ".join(intent.understood) or "nothing I recognised"
            tried.append(f"In {name} I matched {seen}, but {'; '.join(built.problems)}.")
    if best is not None:
        return best[1]
    if not tried:
        tried.append("No connected data source has a discovered schema to plan from.")
    return PlannedQuery(answered=False, tried=tried)
