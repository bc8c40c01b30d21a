"""River's offline planner: a deterministic stand-in for a language model.

The code lives in ``rivercore.planner`` (rules, tasks, brain, provider and
the schema-graph planner); this module keeps the names the engine imports.

It is a litellm custom provider (``river-offline/planner``), so the router calls
it with ``litellm.completion`` exactly as it calls a real model, and every run
records it as the model used. It plays two roles:

* the agent's brain in the reasoning loop: it reads the run's structured view
  (``rivercore.view``: the prompt, the agent's goal, the data sources, the tool calls
  made so far and their observations, as values, never parsed out of chat text)
  and the tools on offer, and answers with the next tool call or a
  final answer: classify_intent -> search_catalog -> generate_query ->
  execute_query -> (write_back when the prompt asks to change records) ->
  explain_results -> answer. It asks the user when the prompt names nothing it
  can act on, never repeats a call, and explains failures instead of retrying;
* the answerer of the model-backed tools' sub-requests (the task's name and its
  payload, passed as values next to the instructions a real model reads), replying
  with the JSON object the tool asked for.

Queries come from two places. Record changes, time windows and the enum-like
values listed in column descriptions use the single-table rules below; every other
question is planned by ``rivercore.planner`` (plain Python) from the
discovered schema: keys declared or inferred from names for joins, sampled values
for filters, a dimension, an aggregate, top-N. When neither can answer, the tool
fails with what was tried and the final answer says so.
"""

from __future__ import annotations

from rivercore.planner.brain import plan_next, read_view
from rivercore.planner.provider import OfflinePlanner, ensure_registered, respond
from rivercore.planner.rules import (
    DEFAULT_ROW_LIMIT,
    MODEL,
    PROVIDER,
    SIGNATURE,
    TASK_MARKER,
    build_query,
    classify,
    dialect_for,
    read_prompt,
    tables_from_sources,
)
from rivercore.planner.tasks import TASKS

__all__ = [
    "DEFAULT_ROW_LIMIT", "MODEL", "PROVIDER", "SIGNATURE", "TASKS", "TASK_MARKER", "OfflinePlanner", "build_query",
    "classify", "dialect_for", "ensure_registered", "plan_next", "read_prompt", "read_view", "respond",
    "tables_from_sources",
]
