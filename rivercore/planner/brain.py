"""The offline planner as the agent's brain: it reads the run's structured view (the
prompt, the agent's goal, the data sources, the calls made and their observations;
``rivercore.view``) and the tools on offer, and chooses the next call or writes the
final answer from what the observations said."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rivercore.attachments import attachment_notes_removed
from rivercore.context import GENERIC_PROMPT
from rivercore.outcome import NO_ANSWER_NOTE, NO_MATCH_NOTE
from rivercore.planner.followup import followup_resolve
from rivercore.planner.rules import (
    DATA_INTENTS,
    SAMPLE_ROWS,
    SIGNATURE,
    Change,
    Reading,
    Table,
    classify,
    read_prompt,
    tables_from_sources,
)
from rivercore.planner.tasks import as_rows, readable, task_explain_results

# --- the agent's brain ---------------------------------------------------------------------------


@dataclass
class Observation:
    name: str
    ok: bool
    body: object
    arguments: dict[str, Any]

    @property
    def problem(self) -> str | None:
        """Why the call did not do what was asked, or None."""
        body = self.body if isinstance(self.body, dict) else {}
        if body.get("rejected"):
            return f"the approver rejected it ({body.get('comment') or 'no comment'})"
        if body.get("blocked"):
            return f"governance blocked it ({body.get('reason') or 'no reason given'})"
        if body.get("withheld"):
            return f"governance withheld the result ({body.get('reason') or 'no reason given'})"
        if not self.ok:
            error = body.get("error")
            return str((error.get("message") if isinstance(error, dict) else None) or "it failed")
        if body.get("success") is False:
            return str(body.get("message") or "it reported no success")
        return None


@dataclass
class Conversation:
    prompt: str
    goal: str = ""
    instructions: str = ""
    trigger: str = ""
    manual: bool = True
    sources: list[dict[str, Any]] = field(default_factory=list)
    observations: dict[str, Observation] = field(default_factory=dict)  # tool name -> latest observation
    called: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    notice: str | None = None
    previous_question: str = ""  # in a session: what the previous turn's query was planned from


def read_view(view: dict[str, Any]) -> Conversation:
    """The conversation from the run's structured view (``rivercore.view.RunView``):
    the prompt, the agent's goal and instructions, the trigger, the data sources, the
    calls made and what each observation said, as values; no text is parsed back."""
    convo = Conversation(
        prompt=str(view.get("prompt") or ""), goal=str(view.get("goal") or ""),
        instructions=str(view.get("instructions") or ""), trigger=str(view.get("trigger") or ""),
        manual=view.get("trigger_type", "manual") == "manual",
        sources=[s for s in view.get("data_sources") or [] if isinstance(s, dict)],
        called=[str(name) for name in view.get("called") or []],
        notice=view.get("notice") if isinstance(view.get("notice"), str) else None,
        previous_question=str(view.get("previous_question") or ""),
    )
    for item in view.get("observations") or []:
        if not isinstance(item, dict) or not item.get("name"):
            continue
        name = str(item["name"])
        body = item.get("body")
        convo.observations[name] = Observation(name=name, ok=bool(item.get("ok")), body=body,
                                               arguments=dict(item.get("arguments") or {}))
        if name == "ask_user" and isinstance(body, dict) and "user_response" in body:
            convo.answers.append(_answer_text(body["user_response"]))
    return convo


def _answer_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(_answer_text(v) for v in value)
    if isinstance(value, dict):
        return " ".join(_answer_text(v) for v in value.values())
    return str(value)


class Plan:
    """One decision: a tool call or a final answer."""

    def __init__(self, *, tool: str | None = None, arguments: dict[str, Any] | None = None, answer: str | None = None,
                 thought: str | None = None):
        self.tool, self.arguments, self.answer, self.thought = tool, arguments or {}, answer, thought


def plan_next(view: dict[str, Any], offered: list[str]) -> Plan:
    convo = read_view(view)
    tables = tables_from_sources(convo.sources)
    generic = convo.prompt.strip() == GENERIC_PROMPT
    # Attachment notes name files, not what the question is about.
    working = attachment_notes_removed(convo.prompt) or convo.prompt
    if generic:
        working = " ".join([convo.goal, convo.instructions, convo.trigger])
    elif convo.previous_question:
        working = followup_resolve(working, attachment_notes_removed(convo.previous_question)) or working
    working = " ".join([working, *convo.answers]).strip()
    lowered = working.lower()
    can = set(offered)

    def fresh(name: str) -> bool:
        return name in can and name not in convo.called

    if convo.notice is not None or not offered:
        return Plan(answer=_final(convo, tables, note=_notice_note(convo.notice)))

    intent_obs = convo.observations.get("classify_intent")
    if fresh("classify_intent"):
        return Plan(tool="classify_intent", arguments={"user_prompt": working},
                    thought="First I classify what the request asks for.")
    # An answer to ask_user changes the request: it is classified once more, so the run's
    # intent (and the turns the engine allows for it) follows what the user asked for.
    if "classify_intent" in can and 0 < convo.called.count("classify_intent") <= len(convo.answers):
        return Plan(tool="classify_intent", arguments={"user_prompt": working},
                    thought="Your answer tells me what to do; I classify the request again with it.")
    classified = classify(working, tables)
    if intent_obs is not None and intent_obs.ok and isinstance(intent_obs.body, dict):
        intent = str(intent_obs.body.get("intent_type") or classified["intent_type"])
    else:
        intent = classified["intent_type"]
    reading = read_prompt(lowered, tables, want_change=True)
    if intent not in DATA_INTENTS and reading.actionable and classified["intent_type"] in DATA_INTENTS:
        intent = classified["intent_type"]

    manual = convo.manual
    unclear = not reading.actionable and classified["confidence"] < 0.5
    if unclear:
        if fresh("ask_user") and manual and not convo.answers:
            names = sorted({t.name for t in tables})[:8]
            message = ("I could not tell what to act on. Which data and question do you mean? "
                       + (f"I can see these tables: {', '.join(names)}." if names else
                          "No data source with a cached schema is connected to this agent."))
            arguments = {"interaction_type": "clarification_request", "message": message, "required": True}
            if names:
                arguments["options"] = [f"Count the rows of {name}" for name in names[:4]]
            return Plan(tool="ask_user", arguments=arguments,
                        thought="The request names no table, column or value I know, so I ask.")
        return Plan(answer=_final(convo, tables, note=NO_MATCH_NOTE))

    if intent in DATA_INTENTS and tables:
        return _data_plan(convo, reading, intent, working, fresh, tables)
    if intent == "WORKSPACE_ADMIN" and fresh("get_workspace_info"):
        return Plan(tool="get_workspace_info", arguments={}, thought="Reading the workspace's details.")
    if intent == "STORAGE_MANAGEMENT" and fresh("get_storage_info"):
        return Plan(tool="get_storage_info", arguments={}, thought="Reading the workspace's storage usage.")
    if intent == "DATA_SOURCE_MANAGEMENT":
        source = _named_source(lowered, tables)
        if source is not None and re.search(r"\btest\b|\bcheck\b|\bping\b", lowered) and fresh("test_connection"):
            return Plan(tool="test_connection", arguments={"data_source_id": source[0]},
                        thought=f"Testing the connection to {source[1]}.")
        if source is not None and re.search(r"\bdiscover|\brefresh|\bre-?sync|\bscan", lowered) \
                and fresh("discover_schema"):
            return Plan(tool="discover_schema", arguments={"data_source_id": source[0]},
                        thought=f"Discovering the schema of {source[1]}.")
    return Plan(answer=_final(convo, tables))


def _named_source(text: str, tables: list[Table]) -> tuple[int, str] | None:
    """The data source the text names, or the only one connected."""
    sources = {t.source_id: t.source_name for t in tables if t.source_id is not None}
    named = [(i, n) for i, n in sources.items() if n and n.lower() in text]
    if named:
        return named[0]
    return next(iter(sources.items())) if len(sources) == 1 else None


def _data_plan(convo: Conversation, reading: Reading, intent: str, working: str, fresh: Callable[[str], bool],
               tables: list[Table]) -> Plan:
    table = reading.table  # None: no single table stands out; the schema planner looks at them all
    scope = [table] if table is not None else tables
    scoped_ids = sorted({t.source_id for t in scope if t.source_id is not None})
    obs = convo.observations
    if fresh("search_catalog") and "generate_query" not in convo.called:
        arguments: dict[str, Any] = {"query": working, "top_k": 5}
        if scoped_ids:
            arguments["data_source_ids"] = scoped_ids
        where = table.source_name if table is not None else "the connected data sources"
        return Plan(tool="search_catalog", arguments=arguments,
                    thought=f"Looking up the tables and columns that match the request in {where}.")
    if intent == "DATA_DISCOVERY" and reading.change is None and not (reading.count or reading.filters):
        return Plan(answer=_final(convo, scope, change=reading.change))
    if fresh("generate_query"):
        over = table.name if table is not None else "the connected tables"
        return Plan(tool="generate_query", thought=f"Writing a query over {over}.", arguments={
            "user_prompt": working, "intent_type": "ACTION_EXECUTION" if reading.change else intent,
            "data_sources": scoped_ids,
        })
    generated = obs.get("generate_query")
    if generated is None or generated.problem or not isinstance(generated.body, dict):
        return Plan(answer=_final(convo, scope, change=reading.change))
    if fresh("execute_query"):
        source_ids = generated.body.get("data_source_ids") or scoped_ids or [None]
        return Plan(tool="execute_query", thought="Running the generated query (read-only).",
                    arguments={"data_source_id": source_ids[0],
                                                     "query": generated.body.get("query", "")})
    executed = obs.get("execute_query")
    if executed is None or executed.problem or not isinstance(executed.body, dict):
        return Plan(answer=_final(convo, scope, change=reading.change))
    columns = [str(c) for c in executed.body.get("columns") or []]
    rows = as_rows(columns, executed.body.get("rows") or [])
    if reading.change is not None and table is not None and fresh("write_back") and rows:
        key = table.key.name if table.key else (columns[0] if columns else "id")
        ids = [r.get(key) for r in rows if r.get(key) is not None]
        if ids:
            change = ", ".join(f"{k} = '{v}'" for k, v in reading.change.data.items())
            how = str(generated.body.get("explanation") or "").split(" Proposed change:")[0]
            thought = (f"Proposing to set {change} on {len(ids)} {table.name} row(s) ({key} "
                       f"{', '.join(map(str, ids[:20]))}{' ...' if len(ids) > 20 else ''}). {how}")
            return Plan(tool="write_back", thought=thought, arguments={
                "data_source_id": table.source_id, "table_name": table.name, "operation": "update",
                "data": dict(reading.change.data), "conditions": {key: ids[0] if len(ids) == 1 else ids},
            })
    if fresh("recommend_visualization") and len(rows) >= 2 and reading.change is None:
        return Plan(tool="recommend_visualization", thought="Choosing a chart for the result.", arguments={
            "columns": columns, "column_types": [_type_of(rows, c) for c in columns],
            "row_count": int(executed.body.get("total_rows") or len(rows)), "user_prompt": working,
        })
    if fresh("explain_results"):
        return Plan(tool="explain_results", thought="Explaining what the result says.", arguments={
            "user_prompt": working, "query_result_columns": columns,
            "query_result_sample": [[r.get(c) for c in columns] for r in rows[:SAMPLE_ROWS]],
            "generated_query": generated.body.get("query", ""),
            "total_rows": int(executed.body.get("total_rows") or len(rows)),
        })
    return Plan(answer=_final(convo, scope, change=reading.change))


def _type_of(rows: list[dict[str, Any]], column: str) -> str:
    value = next((r.get(column) for r in rows if r.get(column) is not None), None)
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "numeric"
    if isinstance(value, str) and re.match(r"\d{4}-\d{2}-\d{2}", value):
        return "timestamp"
    return "text"


def _notice_note(notice: str | None) -> str | None:
    if notice is None:
        return None
    if "turn limit" in notice.lower():
        return "The turn limit was reached; this is my progress report."
    if "budget" in notice.lower():
        return "My token budget is nearly spent, so I am concluding now."
    return None


def _final(convo: Conversation, tables: list[Table], note: str | None = None,
           change: Change | None = None) -> str:
    """The final answer, built from what the observations actually said."""
    obs = convo.observations
    lines: list[str] = []
    if note:
        lines.append(note)
    generated, executed, written = obs.get("generate_query"), obs.get("execute_query"), obs.get("write_back")
    explained = obs.get("explain_results")
    for name, observation in obs.items():
        if observation.problem and name not in {"classify_intent", "search_catalog"}:
            lines.append(f"{name} did not succeed: {observation.problem.rstrip('.')}. I did not retry it.")
    if executed is not None and not executed.problem and isinstance(executed.body, dict):
        columns = [str(c) for c in executed.body.get("columns") or []]
        rows = as_rows(columns, executed.body.get("rows") or [])
        total = executed.body.get("total_rows", len(rows))
        source = next((t.source_name for t in tables if t.source_name), "")
        if change is not None or written is not None:
            lines.insert(0, f"Found {total} matching row(s).")
        elif len(rows) == 1 and len(columns) == 1:
            lines.insert(0, f"Answer: {readable(rows[0][columns[0]])}.")
        elif explained is not None and not explained.problem and isinstance(explained.body, dict):
            lines.insert(0, str(explained.body.get("explanation") or ""))
        else:
            lines.insert(0, task_explain_results({"query_result_columns": columns, "query_result_sample":
                                                  rows[:SAMPLE_ROWS], "total_rows": total})["explanation"])
        if generated is not None and isinstance(generated.body, dict):
            # The SQL itself stays in the run's steps (the pages show it behind "Show query").
            lines.append(f"How: {generated.body.get('explanation', '')}"
                         + (f" (data source {source})." if source else ""))
        if written is not None and not written.problem and isinstance(written.body, dict):
            body = written.body
            if body.get("suggestion_recorded"):
                lines.append("The change was recorded as a recommendation, not executed: "
                             + str(body.get("message") or ""))
            else:
                applied = ", ".join(f"{k} = '{v}'" for k, v in (written.arguments.get("data") or {}).items())
                lines.insert(0, f"Updated {body.get('rows_affected', 0)} row(s) in "
                                f"{written.arguments.get('table_name')}: set {applied}.")
        elif written is None and change is not None:
            wanted = ", ".join(f"{k} = '{v}'" for k, v in change.data.items())
            if not rows:
                lines.append("No rows matched, so there was nothing to change.")
            elif "write_back" not in convo.called:
                lines.append(f"I did not change anything: write_back is not available to this agent. The change "
                             f"would set {wanted} on the {total} row(s) above.")
    elif any(not o.problem for n, o in obs.items() if n not in _CHAIN):
        for name, observation in obs.items():
            if name not in _CHAIN and not observation.problem:
                lines.append(f"{name}: {_brief(observation.body)}")
    elif not lines:
        lines.append(_capabilities(tables))
    elif generated is not None and generated.problem:
        lines.insert(0, NO_ANSWER_NOTE)
        lines.append("I answer counts, sums, averages, minimums and maximums over the connected tables, grouped "
                     "by a column or a related table, top-N lists, joins along their keys and filters on values "
                     "that occur in the data; rephrase the question with the tables and columns it is about.")
    answer = " ".join(line for line in lines if line).strip()
    return f"{answer}\n\n{SIGNATURE}"


_CHAIN = {"classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results",
          "recommend_visualization", "write_back", "ask_user"}


def _brief(body: object) -> str:
    if isinstance(body, dict):
        if body.get("message"):
            return str(body["message"])
        return ", ".join(f"{k}={v}" for k, v in list(body.items())[:8] if not isinstance(v, dict | list))
    return str(body)[:300]


def _capabilities(tables: list[Table]) -> str:
    names = ", ".join(sorted({t.name for t in tables})[:8])
    text = ("I am River's offline planner. I can answer questions over the connected data sources: counts, "
            "sums, averages, minimums and maximums, grouped by a column or a related table, top-N lists, joins "
            "along their keys, filters on values that occur in the data and time windows such as the last 24 "
            "hours; I explain the result and propose record updates for approval.")
    return text + (f" Tables I can see: {names}." if names else " No data source is connected to this agent yet.")

