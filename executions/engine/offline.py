"""River's offline planner: a deterministic stand-in for a language model.

It is a litellm custom provider (``river-offline/planner``), so the router calls
it with ``litellm.completion`` exactly as it calls a real model, and every run
records it as the model used. It plays two roles:

* the agent's brain in the reasoning loop: it reads the conversation (the system
  prompt's data sources, the user's prompt, the tool calls made so far and their
  observations) and the tools on offer, and answers with the next tool call or a
  final answer: classify_intent -> search_catalog -> generate_query ->
  execute_query -> (write_back when the prompt asks to change records) ->
  explain_results -> answer. It asks the user when the prompt names nothing it
  can act on, never repeats a call, and explains failures instead of retrying;
* the answerer of the model-backed tools' sub-requests (a system message
  starting with ``RIVER-TOOL-TASK <task>`` and a JSON payload), replying with the
  JSON object the tool asked for.

Queries come from two places. Record changes, time windows and the enum-like
values listed in column descriptions use the single-table rules below; every other
question is planned by ``executions.engine.planner`` (plain Python) from the
discovered schema: keys declared or inferred from names for joins, sampled values
for filters, a dimension, an aggregate, top-N. When neither can answer, the tool
fails with what was tried and the final answer says so.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field

import litellm
import sqlglot
from litellm import CustomLLM, ModelResponse

from executions.engine.planner import question_plan

PROVIDER = "river-offline"
MODEL = f"{PROVIDER}/planner"
TASK_MARKER = "RIVER-TOOL-TASK"
SIGNATURE = (
    "(River's offline planner answered: no language model is configured, so answers come from "
    "deterministic planning over the discovered schema, its keys and its sampled values.)"
)
DEFAULT_ROW_LIMIT = 1000
LIST_LIMIT = 100
SAMPLE_ROWS = 20

INTENTS = (
    "PLATFORM_EXPLANATION", "DATA_DISCOVERY", "DATA_QUERY", "DATA_SOURCE_MANAGEMENT", "ACTION_EXECUTION",
    "GOVERNANCE_MANAGEMENT", "WORKSPACE_ADMIN", "STORAGE_MANAGEMENT", "OBSERVABILITY",
)
DATA_INTENTS = {"DATA_QUERY", "DATA_DISCOVERY", "ACTION_EXECUTION"}

STATUS_WORDS = {
    "open", "opened", "closed", "pending", "solved", "resolved", "new", "active", "inactive", "cancelled",
    "canceled", "failed", "paid", "unpaid", "refunded", "disputed", "escalated", "overdue", "completed",
    "draft", "archived", "on_hold", "hold", "waiting", "succeeded", "approved", "rejected",
}
PRIORITY_WORDS = {"low", "normal", "medium", "high", "urgent", "critical"}
STATUS_COLUMNS = {"status", "state", "stage"}
PRIORITY_COLUMNS = {"priority", "severity", "urgency"}
ASSIGNEE_COLUMNS = ("assignee", "assigned_to", "owner", "agent", "assignee_name")
STOP = {
    "a", "an", "the", "by", "per", "of", "in", "on", "at", "to", "for", "and", "or", "with", "all", "any", "each",
    "every", "is", "are", "was", "were", "be", "how", "many", "much", "what", "which", "who", "top", "most",
    "least", "show", "list", "me", "my", "our", "that", "this", "these", "those", "from", "last", "past",
    "than", "more", "less", "not", "no", "as", "it", "its", "there", "do", "does", "did", "get", "give",
    "find", "count", "number", "total", "average", "created", "updated", "please", "new", "first", "then",
    "always", "before", "after", "only", "also", "should", "must", "level", "value", "values",
}
TIME_UNITS = {"minute": "minutes", "hour": "hours", "day": "days", "week": "days", "month": "months",
              "year": "years", "h": "hours", "d": "days"}

_VERBS = re.compile(
    r"\b(close|resolve|solve|reopen|escalate|mark|set|update|assign|reassign|change|move)\b", re.IGNORECASE
)


# --- schema model ---------------------------------------------------------------------------


@dataclass
class Column:
    name: str
    type: str = ""
    description: str = ""
    primary_key: bool = False
    values: list[str] = field(default_factory=list)  # enum-like values listed in the description

    @property
    def is_time(self) -> bool:
        t = self.type.lower()
        return "time" in t or "date" in t or self.name.endswith(("_at", "_on", "_date"))

    @property
    def is_numeric(self) -> bool:
        t = self.type.lower()
        return any(k in t for k in ("int", "numeric", "decimal", "real", "float", "double", "money", "number"))

    @property
    def is_text(self) -> bool:
        return not (self.is_time or self.is_numeric or "bool" in self.type.lower())


@dataclass
class Table:
    name: str
    columns: list[Column]
    source_id: int | None = None
    source_name: str = ""
    source_type: str = ""

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def key(self) -> Column | None:
        return next((c for c in self.columns if c.primary_key), None) or self.column("id")


def _enum_values(description: str) -> list[str]:
    text = description.split(":", 1)[1] if ":" in description else description
    parts = [p.strip().strip(".'\"") for p in re.split(r",|\bor\b|/|\|", text)]
    parts = [p for p in parts if p]
    if len(parts) >= 2 and all(re.fullmatch(r"[A-Za-z0-9_][\w -]{0,30}", p) for p in parts):
        return parts
    return []


def column_from(data: dict) -> Column:
    description = str(data.get("description") or "")
    column = Column(
        name=str(data.get("column_name") or data.get("name") or ""),
        type=str(data.get("data_type") or data.get("type") or ""),
        description=description,
        primary_key=bool(data.get("is_primary_key")),
    )
    if column.is_text:
        column.values = _enum_values(description)
    return column


def tables_from_sources(sources: list[dict]) -> list[Table]:
    """Tables from data source metadata (``data_source_id``, ``name``, ``type``, ``schemas``)."""
    tables = []
    for source in sources:
        for table in source.get("schemas") or source.get("tables") or []:
            tables.append(Table(
                name=str(table.get("table_name") or table.get("name")),
                columns=[column_from(c) for c in table.get("columns") or []],
                source_id=source.get("data_source_id"), source_name=str(source.get("name") or ""),
                source_type=str(source.get("type") or source.get("dialect") or ""),
            ))
    return tables


_SOURCE_LINE = re.compile(r"^### Data source (\d+): (.*) \(type ([^,]+), ([^,]+), ([^)]+)\)\s*$")
_TABLE_LINE = re.compile(r"^- ([^\s:\[(]+)(?: \[[^\]]*\])?(?: \(~\d+ rows\))?: ?(.*)$")
_COLUMN_SPLIT = re.compile(r", (?=[A-Za-z_]\w* [A-Za-z])")
_COLUMN = re.compile(r"^([A-Za-z_]\w*) (.+?)( not null)?(?: -- (.*))?$")


def tables_from_prompt(system_prompt: str) -> list[Table]:
    """Tables from the system prompt's "## Data sources" section."""
    section = system_prompt.split("## Data sources", 1)
    if len(section) < 2:
        return []
    body = section[1].split("\n## ", 1)[0]
    tables: list[Table] = []
    source: tuple[int, str, str] | None = None
    for line in body.splitlines():
        line = line.rstrip()
        match = _SOURCE_LINE.match(line)
        if match:
            source = (int(match.group(1)), match.group(2), match.group(3).strip())
            continue
        match = _TABLE_LINE.match(line)
        if match and source is not None:
            columns = []
            for piece in _COLUMN_SPLIT.split(match.group(2)) if match.group(2) else []:
                col = _COLUMN.match(piece.strip())
                if col:
                    columns.append(column_from({"column_name": col.group(1), "data_type": col.group(2),
                                                "description": col.group(4) or ""}))
            tables.append(Table(name=match.group(1), columns=columns, source_id=source[0],
                                source_name=source[1], source_type=source[2]))
    return tables


# --- reading a prompt -------------------------------------------------------------------------


def _forms(name: str) -> set[str]:
    name = name.lower()
    forms = {name, name + "s", name + "es", name.replace("_", " ")}
    if name.endswith("y"):
        forms.add(name[:-1] + "ies")
    if name.endswith("ies"):
        forms.add(name[:-3] + "y")
    if name.endswith("s"):
        forms.add(name[:-1])
    if name.endswith("es"):
        forms.add(name[:-2])
    return forms


def _mentions(text: str, name: str) -> bool:
    return any(re.search(rf"\b{re.escape(form)}\b", text) for form in _forms(name))


def _quote_ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class Change:
    verb: str
    data: dict[str, str]
    target_words: set[str]


@dataclass
class Reading:
    """What the planner understood of a prompt against one table."""

    table: Table | None = None
    score: int = 0
    filters: dict[str, list[str]] = field(default_factory=dict)
    exact: dict[str, bool] = field(default_factory=dict)
    numeric_filters: list[tuple[str, str, str]] = field(default_factory=list)
    time: tuple[str, str, int, str] | None = None  # column, op (">=" / "<" / "today" / "month"), amount, unit
    time_phrase: str = ""
    count: bool = False
    group_by: str | None = None
    aggregate: tuple[str, str] | None = None  # (func, column)
    order: tuple[str, str] | None = None
    limit: int | None = None
    mentioned: list[str] = field(default_factory=list)
    change: Change | None = None

    @property
    def actionable(self) -> bool:
        return self.table is not None and self.score > 0


def _time_window(text: str) -> tuple[str, int, str, str] | None:
    patterns = [
        (r"\b(?:last|past|previous)\s+(\d+)\s*(minute|hour|day|week|month|year|h|d)s?\b", ">="),
        (r"\b(?:older than|more than|over)\s+(\d+)\s*(minute|hour|day|week|month|year)s?(?:\s+(?:ago|old))?", "<"),
    ]
    for pattern, op in patterns:
        match = re.search(pattern, text)
        if match:
            amount, unit = int(match.group(1)), match.group(2)
            if op == "<" and not re.search(r"older than|ago|old\b", match.group(0)):
                continue
            if unit == "week":
                amount *= 7
            return op, amount, TIME_UNITS[unit], match.group(0)
    match = re.search(r"\b(?:in the |within the |over the )?(?:last|past) (minute|hour|day|week|month|year)\b", text)
    if match:
        unit = match.group(1)
        return ">=", 7 if unit == "week" else 1, TIME_UNITS[unit], match.group(0)
    if re.search(r"\btoday\b", text):
        return "today", 0, "", "today"
    if re.search(r"\bthis month\b", text):
        return "month", 0, "", "this month"
    return None


def parse_change(text: str, table: Table) -> Change | None:
    """The update a prompt asks for ("close", "mark ... as solved", "set priority to urgent")."""
    match = _VERBS.search(text)
    if not match:
        return None
    verb = match.group(1).lower()
    status = next((c for c in table.columns if c.name in STATUS_COLUMNS), None)
    priority = next((c for c in table.columns if c.name in PRIORITY_COLUMNS), None)

    def pick(column: Column | None, preferred: list[str], default: str) -> str:
        known = {v.lower(): v for v in (column.values if column else [])}
        return next((known[p] for p in preferred if p in known), default)

    def column_for_value(value: str) -> Column | None:
        for column in table.columns:
            if value in {v.lower() for v in column.values}:
                return column
        if value in PRIORITY_WORDS and priority:
            return priority
        return status

    data: dict[str, str] = {}
    targets: set[str] = set()
    if verb == "mark":
        found = re.search(r"\bmark(?:ed)?\b.*?\bas\s+([a-z0-9_-]+)", text)
        if found:
            value = found.group(1)
            column = column_for_value(value)
            if column:
                data[column.name] = value
                targets.add(value)
    elif verb in {"set", "change", "update"}:
        found = re.search(r"\b(?:set|change|update)\s+(?:the\s+)?([a-z_ ]+?)\s+to\s+([a-z0-9_-]+)", text)
        if found:
            column = next((c for c in table.columns if _mentions(found.group(1), c.name)), None)
            if column:
                data[column.name] = found.group(2)
                targets.add(found.group(2))
    elif verb in {"assign", "reassign"}:
        found = re.search(r"\bto\s+([a-z0-9_.@-]+)", text)
        column = next((table.column(n) for n in ASSIGNEE_COLUMNS if table.column(n)), None)
        if found and column:
            data[column.name] = found.group(1)
            targets.add(found.group(1))
    elif verb == "move":
        found = re.search(r"\bto\s+([a-z0-9_-]+)", text)
        if found and status:
            data[status.name] = found.group(1)
            targets.add(found.group(1))
    elif verb == "close" and status:
        data[status.name] = pick(status, ["closed"], "closed")
    elif verb in {"resolve", "solve"} and status:
        data[status.name] = pick(status, ["solved", "resolved", "closed"], "resolved")
    elif verb == "reopen" and status:
        data[status.name] = pick(status, ["open", "opened"], "open")
    elif verb == "escalate":
        if status and "escalated" in {v.lower() for v in status.values}:
            data[status.name] = pick(status, ["escalated"], "escalated")
        elif priority:
            data[priority.name] = pick(priority, ["urgent", "critical", "high"], "urgent")
    if not data:
        return None
    return Change(verb=verb, data=data, target_words=targets)


def read_prompt(text: str, tables: list[Table], *, want_change: bool = False) -> Reading:
    """Match a prompt against each table and keep the best reading."""
    text = text.lower()
    best = Reading()
    for table in tables:
        reading = _read_table(text, table, want_change=want_change)
        if reading.score > best.score:
            best = reading
    return best


def _read_table(text: str, table: Table, *, want_change: bool) -> Reading:
    reading = Reading(table=table)
    change = parse_change(text, table) if want_change else None
    reading.change = change
    excluded = set(change.target_words) if change else set()
    if change:
        # "mark ... as solved": the target value is not a filter.
        excluded |= {v.lower() for v in change.data.values()}
    score = 3 if _mentions(text, table.name) else 0
    tokens = set(re.findall(r"[a-z0-9_]+", text))

    for column in table.columns:
        if _mentions(text, column.name) and column.name != "id":
            reading.mentioned.append(column.name)
            score += 1

    def add_filter(column: Column, value: str, exact: bool) -> None:
        values = reading.filters.setdefault(column.name, [])
        if value not in values:
            values.append(value)
        reading.exact[column.name] = reading.exact.get(column.name, True) and exact

    for column in table.columns:
        if not column.is_text:
            continue
        for value in column.values:  # values the schema documents
            if value.lower() not in excluded and re.search(rf"\b{re.escape(value.lower())}\b", text):
                add_filter(column, value, exact=True)
        for form in _forms(column.name):  # "high-priority", "priority high", "status is open"
            for found in re.finditer(rf"\b([a-z0-9_]+)[- ]{re.escape(form)}\b", text):
                word = found.group(1)
                if word not in STOP and word not in excluded and not _is_schema_word(word, table) \
                        and not word.isdigit() and column.name not in reading.filters:
                    add_filter(column, word, exact=False)
            for found in re.finditer(rf"\b{re.escape(form)}\b\s*(is\s+|=\s*|:\s*|equals\s+)?([a-z0-9_]+)\b", text):
                word = found.group(2)
                known = word in STATUS_WORDS | PRIORITY_WORDS
                if (found.group(1) or known) and word not in STOP and word not in excluded \
                        and not _is_schema_word(word, table) and not word.isdigit() \
                        and column.name not in reading.filters:
                    add_filter(column, word, exact=False)
        vocabulary = STATUS_WORDS if column.name in STATUS_COLUMNS else \
            PRIORITY_WORDS if column.name in PRIORITY_COLUMNS else set()
        if column.name not in reading.filters:
            for word in sorted(vocabulary & tokens - excluded):
                if word == "new" and not re.search(r"\bnew\s+(?:status|state)\b|\bstatus\s+new\b", text):
                    continue  # "new" is too common to be a status by itself
                add_filter(column, word, exact=False)
    score += 2 * len(reading.filters)

    measures = [c for c in table.columns if c.is_numeric and not c.primary_key and c.name != "id"
                and not c.name.endswith("_id")]
    for column in table.columns:
        if not column.is_numeric:
            continue
        forms = _forms(column.name) | (_forms(table.name) if measures == [column] else set())
        for form in forms:
            found = re.search(rf"\b{re.escape(form)}\s+(over|above|greater than|more than|under|below|less than|"
                              rf"at least|at most)\s+\$?(\d+(?:\.\d+)?)", text)
            if found:
                op = {"over": ">", "above": ">", "greater than": ">", "more than": ">", "under": "<",
                      "below": "<", "less than": "<", "at least": ">=", "at most": "<="}[found.group(1)]
                reading.numeric_filters.append((column.name, op, found.group(2)))
                score += 2
                break

    window = _time_window(text)
    time_columns = [c for c in table.columns if c.is_time]
    if window and time_columns:
        preferred = next((c for c in time_columns if c.name.split("_")[0] in tokens), None)
        preferred = preferred or next((c for c in time_columns if "created" in c.name), time_columns[0])
        reading.time = (preferred.name, window[0], window[1], window[2])
        reading.time_phrase = window[3]
        score += 1

    reading.count = bool(re.search(r"\bhow many\b|\bcount\b|\bnumber of\b", text))
    found = re.search(r"\b(?:by|per|for each|each|grouped by|broken down by|breakdown by)\s+([a-z_]+(?: [a-z_]+)?)",
                      text)
    if found:
        phrase = found.group(1)
        column = next((c for c in table.columns if _mentions(phrase, c.name)), None)
        if column is not None:
            reading.group_by = column.name
            reading.filters.pop(column.name, None)
    for pattern, func in ((r"\b(?:sum of|total)\s+(?:the\s+)?([a-z_]+)", "SUM"),
                          (r"\b(?:average|avg|mean)\s+(?:of\s+)?(?:the\s+)?([a-z_]+)", "AVG"),
                          (r"\b(?:highest|maximum|max|largest)\s+([a-z_]+)", "MAX"),
                          (r"\b(?:lowest|minimum|min|smallest)\s+([a-z_]+)", "MIN")):
        found = re.search(pattern, text)
        if found:
            column = next((c for c in table.columns if c.is_numeric and _mentions(found.group(1), c.name)), None)
            if column is not None:
                reading.aggregate = (func, column.name)
                break
    found = re.search(r"\btop\s+(\d+)\b", text)
    if found:
        reading.limit = int(found.group(1))
        numeric = next((c for c in table.columns if c.is_numeric and c.name in reading.mentioned), None)
        if numeric is not None:
            reading.order = (numeric.name, "DESC")
    found = re.search(r"\b(latest|newest|most recent|last|oldest|first)\s+(\d+)\b(?!\s*(?:minute|hour|day|week|"
                      r"month|year|h\b|d\b))", text)
    found = found or re.search(r"\b()(\d+)\s+(latest|newest|most recent|oldest)\b", text)
    if found and time_columns:
        reading.limit = int(found.group(2))
        word = found.group(1) or found.group(3)
        direction = "ASC" if word in {"oldest", "first"} else "DESC"
        created = next((c for c in time_columns if "created" in c.name), time_columns[0])
        reading.order = (created.name, direction)
    elif time_columns and re.search(r"\b(latest|newest|most recent)\b", text):
        created = next((c for c in time_columns if "created" in c.name), time_columns[0])
        reading.order = (created.name, "DESC")
    if change and (reading.filters or reading.time or reading.numeric_filters):
        score += 1
    elif change:
        reading.change = None  # no conditions: never propose a change to every row of a table
    reading.score = score
    return reading


def _is_schema_word(word: str, table: Table) -> bool:
    return word in _forms(table.name) or any(word in _forms(c.name) for c in table.columns)


# --- SQL -------------------------------------------------------------------------------------


def dialect_for(source_type: str) -> str:
    kind = (source_type or "").lower()
    if kind in {"sqlite", "sqlite3"}:
        return "sqlite"
    if kind in {"mysql", "mariadb", "duckdb", "snowflake", "bigquery", "redshift", "tsql", "oracle"}:
        return kind
    return "postgresql"


def _time_condition(column: str, op: str, amount: int, unit: str, dialect: str) -> str:
    col = _quote_ident(column)
    if dialect == "sqlite":
        target = f"datetime({col})"
        if op == "today":
            return f"{target} >= datetime('now', 'start of day')"
        if op == "month":
            return f"{target} >= datetime('now', 'start of month')"
        return f"{target} {op} datetime('now', '-{amount} {unit}')"
    if op == "today":
        return f"{col} >= date_trunc('day', now())"
    if op == "month":
        return f"{col} >= date_trunc('month', now())"
    return f"{col} {op} now() - interval '{amount} {unit}'"


def _describe_time(reading: Reading) -> str:
    column, op, amount, unit = reading.time
    if op == "today":
        return f"{column} is today"
    if op == "month":
        return f"{column} is in this month"
    span = f"{amount} {unit[:-1] if amount == 1 else unit}"
    return f"{column} is within the last {span}" if op == ">=" else f"{column} is older than {span}"


def build_query(reading: Reading, *, dialect: str, row_limit: int) -> dict:
    """SQL for one table from a reading, in the source's dialect, with its explanation."""
    table = reading.table
    assert table is not None
    write_dialect = "postgresql" if dialect not in {"sqlite", "postgresql"} else dialect
    conditions, said = [], []
    for name, values in reading.filters.items():
        column = table.column(name)
        exact = reading.exact.get(name, False) or (column is not None and "user-defined" in column.type.lower())
        target = _quote_ident(name) if exact else f"LOWER({_quote_ident(name)})"
        values = values if exact else [v.lower() for v in values]
        if len(values) == 1:
            conditions.append(f"{target} = {_literal(values[0])}")
            said.append(f"{name} is '{values[0]}'")
        else:
            conditions.append(f"{target} IN ({', '.join(_literal(v) for v in values)})")
            said.append(f"{name} is one of {', '.join(repr(v) for v in values)}")
    for name, op, number in reading.numeric_filters:
        conditions.append(f"{_quote_ident(name)} {op} {number}")
        said.append(f"{name} {op} {number}")
    if reading.time:
        column, op, amount, unit = reading.time
        conditions.append(_time_condition(column, op, amount, unit, write_dialect))
        said.append(_describe_time(reading))

    key = table.key
    operations = []
    if reading.change is not None:
        shown = [key.name] if key else []
        for name in [*reading.filters, *reading.change.data]:
            if name not in shown and table.column(name):
                shown.append(name)
        select = ", ".join(_quote_ident(n) for n in shown) or "*"
        order, limit = "", min(reading.limit or row_limit, row_limit)
        what = f"Finds the {table.name} rows to change"
        operations.append({"operation": "select_targets", "table": table.name, "change": reading.change.data})
    elif reading.group_by:
        group = _quote_ident(reading.group_by)
        if reading.aggregate:
            func, column = reading.aggregate
            measure = f"{func}({_quote_ident(column)}) AS {func.lower()}_{column}"
            order_by = f"{func.lower()}_{column}"
        else:
            measure, order_by = "COUNT(*) AS count", "count"
        select = f"{group}, {measure}"
        order = f" GROUP BY {group} ORDER BY {order_by} DESC"
        limit = min(reading.limit or row_limit, row_limit)
        what = f"{'Aggregates' if reading.aggregate else 'Counts'} {table.name} rows per {reading.group_by}"
        operations.append({"operation": "group_by", "column": reading.group_by})
    elif reading.aggregate:
        func, column = reading.aggregate
        select, order, limit = f"{func}({_quote_ident(column)}) AS {func.lower()}_{column}", "", None
        what = f"Computes {func} of {column} over {table.name}"
        operations.append({"operation": "aggregate", "function": func, "column": column})
    elif reading.count:
        select, order, limit = "COUNT(*) AS count", "", None
        what = f"Counts {table.name} rows"
        operations.append({"operation": "count"})
    else:
        shown = [key.name] if key else []
        for name in [*reading.mentioned, *reading.filters, *(c.name for c in table.columns)]:
            if name not in shown and len(shown) < 8:
                shown.append(name)
        select = ", ".join(_quote_ident(n) for n in shown)
        limit = min(reading.limit or LIST_LIMIT, row_limit)
        order = f" ORDER BY {_quote_ident(reading.order[0])} {reading.order[1]}" if reading.order else ""
        what = f"Lists {table.name} rows"
        operations.append({"operation": "list", "limit": limit})

    sql = f"SELECT {select} FROM {_quote_ident(table.name)}"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
        operations.insert(0, {"operation": "filter", "conditions": said})
    sql += order
    if limit is not None:
        sql += f" LIMIT {limit}"
    if write_dialect != dialect:
        sql = sqlglot.transpile(sql, read="postgres", write=dialect)[0]
    explanation = what + (" where " + ", ".join(said) if said else "") + "."
    if reading.change is not None:
        explanation += " Proposed change: " + ", ".join(f"{k} = '{v}'" for k, v in reading.change.data.items()) + "."
    return {
        "query": sql,
        "dialect": dialect,
        "explanation": explanation,
        "operations": operations,
        "plan_type": "query",
        "data_source_ids": [table.source_id] if table.source_id is not None else [],
    }


# --- classification ---------------------------------------------------------------------------


_INTENT_KEYWORDS = [
    ("DATA_SOURCE_MANAGEMENT", r"\bdata ?sources?\b|\bconnection\b|\bconnect\b|\bdiscover\b|\bre-?sync\b|"
                               r"\bcredentials?\b"),
    ("GOVERNANCE_MANAGEMENT", r"\bpolic(y|ies)\b|\bgovernance\b|\bapproval rules?\b|\bcompliance rules?\b|"
                              r"\bpermissions?\b"),
    ("STORAGE_MANAGEMENT", r"\bstorage\b|\bquota\b|\bdisk\b|\bstored files\b"),
    ("WORKSPACE_ADMIN", r"\bworkspace\b|\bmembers?\b|\binvite\b|\bteam settings\b"),
    ("OBSERVABILITY", r"\blogs?\b|\bexecutions?\b|\bruns?\b(?! a)|\blatency\b|\bmetrics\b|\bmonitoring\b|\baudit\b"),
    ("DATA_DISCOVERY", r"\bwhat tables\b|\bwhich tables\b|\bwhat data\b|\bschemas?\b|\bcolumns?\b|\bcatalog\b|"
                       r"\bwhere can i find\b"),
    ("PLATFORM_EXPLANATION", r"\bwhat is river\b|\bhow does\b|\bwhat can you do\b|\bhelp\b|\bexplain (river|how)\b"),
]


def classify(text: str, tables: list[Table], available: list[str] | None = None) -> dict:
    lowered = text.lower()
    reading = read_prompt(lowered, tables, want_change=True)
    candidates = [i for i in (available or INTENTS) if i in INTENTS] or list(INTENTS)
    hits = [intent for intent, pattern in _INTENT_KEYWORDS if re.search(pattern, lowered)]
    wants_change = reading.change is not None and reading.actionable
    if wants_change:
        intent, confidence = "ACTION_EXECUTION", 0.85
    elif reading.actionable and reading.score >= 3:
        intent, confidence = "DATA_QUERY", min(0.95, 0.6 + 0.05 * reading.score)
    elif hits:
        intent, confidence = hits[0], 0.75
    elif reading.actionable:
        intent, confidence = "DATA_QUERY", 0.6
    else:
        intent, confidence = "PLATFORM_EXPLANATION", 0.3
    if intent not in candidates:
        intent, confidence = candidates[0], 0.2
    sub_intents = [i for i in dict.fromkeys(
        [intent] + (["DATA_QUERY"] if wants_change else []) + hits) if i != intent and i in candidates]
    entities: dict = {}
    if reading.table is not None and reading.actionable:
        entities["data_source_id"] = reading.table.source_id
        entities["tables"] = [reading.table.name]
        entities["columns"] = sorted(set(reading.mentioned) | set(reading.filters))
        if reading.filters:
            entities["values"] = reading.filters
        if reading.time:
            entities["time_window"] = reading.time_phrase
        if reading.group_by:
            entities["group_by"] = reading.group_by
        if reading.change:
            entities["change"] = reading.change.data
    numbers = re.findall(r"\b\d+\b", lowered)
    if numbers:
        entities["numbers"] = [int(n) for n in numbers]
    return {"intent_type": intent, "confidence": round(confidence, 2), "sub_intents": sub_intents,
            "entities": entities}


# --- tool sub-requests -----------------------------------------------------------------------


def task_classify_intent(payload: dict) -> dict:
    tables = tables_from_sources(payload.get("data_sources") or [])
    return classify(str(payload.get("user_prompt", "")), tables, payload.get("available_intents"))


def task_generate_query(payload: dict) -> dict:
    """A query for the question: record changes, time windows and the enum-like values
    of column descriptions go to the single-table rules; everything else is planned from
    the schema graph (joins, dimensions, sampled values) by the planner package."""
    sources = [s for s in payload.get("data_sources") or [] if isinstance(s, dict)]
    tables = tables_from_sources(sources)
    prompt = str(payload.get("user_prompt", ""))
    row_limit = int(payload.get("row_limit") or DEFAULT_ROW_LIMIT)
    reading = read_prompt(prompt, tables, want_change=payload.get("intent_type") == "ACTION_EXECUTION")
    if reading.actionable and (reading.change or reading.time or reading.numeric_filters
                               or any(_is_enum_like(reading.table, name) for name in reading.filters)):
        return _single_table_query(reading, sources, row_limit)
    planned = question_plan(question=prompt, sources=sources, row_limit=row_limit)
    if planned.answered:
        return {"query": planned.query, "dialect": planned.dialect, "explanation": planned.explanation,
                "operations": planned.operations, "plan_type": "query",
                "data_source_ids": [planned.data_source_id] if planned.data_source_id is not None else []}
    # An honest failure: the tool reports it and the agent explains what was tried.
    return {"error": "The offline planner could not match this question to the data. " + " ".join(planned.tried)}


def _is_enum_like(table: Table, name: str) -> bool:
    column = table.column(name)
    return column is not None and (bool(column.values) or name in STATUS_COLUMNS | PRIORITY_COLUMNS)


def _single_table_query(reading: Reading, sources: list[dict], row_limit: int) -> dict:
    source_type = next((str(s.get("type") or "") for s in sources
                        if s.get("data_source_id") == reading.table.source_id), "")
    dialect = next((str(s.get("dialect")) for s in sources
                    if s.get("data_source_id") == reading.table.source_id and s.get("dialect")), None)
    return build_query(reading, dialect=dialect or dialect_for(source_type), row_limit=row_limit)


def task_recommend_visualization(payload: dict) -> dict:
    columns = [str(c) for c in payload.get("columns") or []]
    types = [str(t).lower() for t in payload.get("column_types") or []]
    rows = int(payload.get("row_count") or 0)
    prompt = str(payload.get("user_prompt") or "").lower()
    types += [""] * (len(columns) - len(types))
    numeric = [c for c, t in zip(columns, types, strict=False)
               if any(k in t for k in ("int", "num", "float", "real", "double", "decimal"))]
    temporal = [c for c, t in zip(columns, types, strict=False) if "time" in t or "date" in t]
    categorical = [c for c in columns if c not in numeric and c not in temporal]
    title = (payload.get("user_prompt") or "Query result").strip().rstrip("?")[:80]
    if rows <= 1 and len(columns) <= 2:
        return {"recommended_type": "table", "x_axis": None, "y_axis": numeric[0] if numeric else None,
                "title": title, "config": {"display": "single_value"}}
    if temporal and numeric:
        return {"recommended_type": "line", "x_axis": temporal[0], "y_axis": numeric[0], "title": title,
                "config": {"sort": "x_ascending"}}
    if categorical and numeric:
        share = re.search(r"\bshare\b|\bproportion\b|\bdistribution\b|\bbreakdown\b|\bsplit\b", prompt)
        kind = "pie" if share and rows <= 8 else "bar"
        return {"recommended_type": kind, "x_axis": categorical[0], "y_axis": numeric[0], "title": title,
                "config": {"sort": "y_descending"}}
    return {"recommended_type": "table", "x_axis": None, "y_axis": None, "title": title,
            "config": {"columns": columns}}


def _as_rows(columns: list[str], sample: list) -> list[dict]:
    rows = []
    for row in sample or []:
        if isinstance(row, dict):
            rows.append(row)
        elif isinstance(row, list | tuple):
            rows.append(dict(zip(columns, row, strict=False)))
    return rows


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def task_explain_results(payload: dict) -> dict:
    columns = [str(c) for c in payload.get("query_result_columns") or []]
    rows = _as_rows(columns, payload.get("query_result_sample") or [])
    total = payload.get("total_rows")
    total = int(total) if isinstance(total, int) else len(rows)
    notes, suggestions = [], []
    if not rows:
        return {"explanation": "The query returned no rows: nothing matches the question's conditions.",
                "confidence": 0.7, "suggestions": ["Widen the time window or remove a filter."],
                "data_quality_notes": []}
    if len(rows) == 1 and len(columns) == 1 and _is_number(rows[0].get(columns[0])):
        value = rows[0][columns[0]]
        explanation = f"The answer is {value} ({columns[0]})."
        confidence = 0.9
        suggestions.append("Break the number down by another column, for example by status or priority.")
    elif len(rows) == 1 and len(columns) == 2 and _is_number(rows[0].get(columns[1])):
        explanation = f"{rows[0].get(columns[0])} ({columns[1]} {rows[0].get(columns[1])})."
        confidence = 0.85
    elif len(columns) == 2 and all(_is_number(r.get(columns[1])) for r in rows):
        parts = ", ".join(f"{r.get(columns[0])}: {r.get(columns[1])}" for r in rows[:10])
        overall = sum(r.get(columns[1]) for r in rows)
        additive = not columns[1].lower().startswith(("avg", "min", "max"))  # a total of averages means nothing
        explanation = (f"{columns[1]} per {columns[0]}: {parts}"
                       + (f" (and {total - 10} more groups)" if total > 10 else "") + "."
                       + (f" Total: {overall}." if additive else ""))
        confidence = 0.85
        suggestions.append(f"Chart {columns[1]} by {columns[0]} as a bar chart.")
    else:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in list(r.items())[:4]) for r in rows[:5])
        explanation = f"The query returned {total} row{'s' if total != 1 else ''}. First rows: {shown}."
        confidence = 0.8
        if total > len(rows):
            notes.append(f"Only {len(rows)} of {total} rows were included in this explanation.")
    nulls = sorted({k for r in rows for k, v in r.items() if v is None})
    if nulls:
        notes.append("Empty values in: " + ", ".join(nulls) + ".")
    return {"explanation": explanation, "confidence": confidence, "suggestions": suggestions,
            "data_quality_notes": notes}


def task_generate_agent(payload: dict) -> dict:
    from executions.engine.generate import offline_configuration

    return offline_configuration(payload)


TASKS = {
    "classify_intent": task_classify_intent,
    "generate_query": task_generate_query,
    "recommend_visualization": task_recommend_visualization,
    "explain_results": task_explain_results,
    "generate_agent": task_generate_agent,
}


# --- the agent's brain ---------------------------------------------------------------------------


@dataclass
class Observation:
    name: str
    ok: bool
    body: object
    arguments: dict

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
            error = body.get("error") if isinstance(body.get("error"), dict) else {}
            return error.get("message") or "it failed"
        if body.get("success") is False:
            return str(body.get("message") or "it reported no success")
        return None


@dataclass
class Conversation:
    system: str
    prompt: str
    calls: dict[str, dict] = field(default_factory=dict)  # call id -> {name, arguments}
    observations: dict[str, Observation] = field(default_factory=dict)  # tool name -> latest observation
    called: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    notice: str | None = None
    turn: int = 0


def _observation(call: dict, content: str) -> tuple[str, bool, object] | None:
    """(tool name, ok, JSON body) of a tool message. The name comes from the assistant's
    structured call with the same id, never from the text; the runner's envelope for that
    name is stripped exactly and the rest is decoded as JSON."""
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return None
    for ok, verb in ((True, "returned"), (False, "failed")):
        envelope = f"[Tool Result] Tool '{name}' {verb}: "
        if content.startswith(envelope):
            text = content[len(envelope):]
            try:
                return name, ok, json.loads(text)
            except json.JSONDecodeError:
                return name, ok, text
    return None


def read_conversation(messages: list[dict]) -> Conversation:
    system = str(messages[0].get("content") or "") if messages and messages[0].get("role") == "system" else ""
    prompt = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    convo = Conversation(system=system, prompt=prompt)
    for message in messages[1:]:
        role = message.get("role")
        if role == "assistant":
            convo.turn += 1
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                convo.calls[call.get("id")] = {"name": function.get("name"), "arguments": arguments}
                convo.called.append(function.get("name"))
        elif role == "tool":
            call = convo.calls.get(message.get("tool_call_id")) or {}
            observed = _observation(call, str(message.get("content") or ""))
            if observed is None:
                continue
            name, ok, body = observed
            convo.observations[name] = Observation(name=name, ok=ok, body=body, arguments=call.get("arguments") or {})
            if name == "ask_user" and isinstance(body, dict) and "user_response" in body:
                convo.answers.append(_answer_text(body["user_response"]))
        elif role == "system":
            content = str(message.get("content") or "")
            for name in re.findall(r"- called ([a-z_]+)\(", content):  # compressed history
                convo.called.append(name)
            convo.notice = content if not content.startswith("Summary of earlier turns") else convo.notice
        elif role == "user" and message is not messages[1]:
            convo.answers.append(str(message.get("content") or ""))
    last = messages[-1] if messages else {}
    if last.get("role") != "system":
        convo.notice = None
    return convo


def _answer_text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(_answer_text(v) for v in value)
    if isinstance(value, dict):
        return " ".join(_answer_text(v) for v in value.values())
    return str(value)


def _section(system: str, title: str) -> str:
    parts = system.split(f"## {title}\n", 1)
    return parts[1].split("\n## ", 1)[0].strip() if len(parts) == 2 else ""


class Plan:
    """One decision: a tool call or a final answer."""

    def __init__(self, *, tool: str | None = None, arguments: dict | None = None, answer: str | None = None,
                 thought: str | None = None):
        self.tool, self.arguments, self.answer, self.thought = tool, arguments or {}, answer, thought


def plan_next(messages: list[dict], offered: list[str]) -> Plan:
    convo = read_conversation(messages)
    tables = tables_from_prompt(convo.system)
    generic = convo.prompt.strip() == "Handle this trigger according to your instructions."
    working = convo.prompt
    if generic:
        working = " ".join([_section(convo.system, "Goal"), _section(convo.system, "Instructions"),
                            _section(convo.system, "Trigger")])
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
    classified = classify(working, tables)
    if intent_obs is not None and intent_obs.ok and isinstance(intent_obs.body, dict):
        intent = str(intent_obs.body.get("intent_type") or classified["intent_type"])
    else:
        intent = classified["intent_type"]
    reading = read_prompt(lowered, tables, want_change=True)
    if intent not in DATA_INTENTS and reading.actionable and classified["intent_type"] in DATA_INTENTS:
        intent = classified["intent_type"]

    manual = "triggered by: manual" in convo.system or "## Trigger" not in convo.system
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
        return Plan(answer=_final(convo, tables, note=(
            "I could not match the request to any table, column or value of the connected data sources, "
            "so I did not run anything.")))

    if intent in DATA_INTENTS and tables:
        return _data_plan(convo, reading, intent, working, fresh)
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


def _data_plan(convo: Conversation, reading: Reading, intent: str, working: str, fresh) -> Plan:
    table = reading.table
    obs = convo.observations
    if fresh("search_catalog") and "generate_query" not in convo.called:
        arguments = {"query": working, "top_k": 5}
        if table.source_id is not None:
            arguments["data_source_ids"] = [table.source_id]
        return Plan(tool="search_catalog", arguments=arguments,
                    thought=f"Looking up the tables and columns that match the request in {table.source_name}.")
    if intent == "DATA_DISCOVERY" and reading.change is None and not (reading.count or reading.filters):
        return Plan(answer=_final(convo, [table], change=reading.change))
    if fresh("generate_query"):
        return Plan(tool="generate_query", thought=f"Writing a query over {table.name}.", arguments={
            "user_prompt": working, "intent_type": "ACTION_EXECUTION" if reading.change else intent,
            "data_sources": [table.source_id] if table.source_id is not None else [],
        })
    generated = obs.get("generate_query")
    if generated is None or generated.problem or not isinstance(generated.body, dict):
        return Plan(answer=_final(convo, [table], change=reading.change))
    if fresh("execute_query"):
        source_ids = generated.body.get("data_source_ids") or [table.source_id]
        return Plan(tool="execute_query", thought="Running the generated query (read-only).",
                    arguments={"data_source_id": source_ids[0],
                                                     "query": generated.body.get("query", "")})
    executed = obs.get("execute_query")
    if executed is None or executed.problem or not isinstance(executed.body, dict):
        return Plan(answer=_final(convo, [table], change=reading.change))
    columns = [str(c) for c in executed.body.get("columns") or []]
    rows = _as_rows(columns, executed.body.get("rows") or [])
    if reading.change is not None and fresh("write_back") and rows:
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
    return Plan(answer=_final(convo, [table], change=reading.change))


def _type_of(rows: list[dict], column: str) -> str:
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
        rows = _as_rows(columns, executed.body.get("rows") or [])
        total = executed.body.get("total_rows", len(rows))
        source = next((t.source_name for t in tables if t.source_name), "")
        if change is not None or written is not None:
            lines.insert(0, f"Found {total} matching row(s).")
        elif len(rows) == 1 and len(columns) == 1:
            lines.insert(0, f"Answer: {rows[0][columns[0]]}.")
        elif explained is not None and not explained.problem and isinstance(explained.body, dict):
            lines.insert(0, str(explained.body.get("explanation") or ""))
        else:
            lines.insert(0, task_explain_results({"query_result_columns": columns, "query_result_sample":
                                                  rows[:SAMPLE_ROWS], "total_rows": total})["explanation"])
        if generated is not None and isinstance(generated.body, dict):
            lines.append(f"How: {generated.body.get('explanation', '')} Query: {generated.body.get('query', '')}"
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
        lines.insert(0, "I could not answer that.")
        lines.append("I answer counts, sums, averages, minimums and maximums over the connected tables, grouped "
                     "by a column or a related table, top-N lists, joins along their keys and filters on values "
                     "that occur in the data; rephrase the question with the tables and columns it is about.")
    answer = " ".join(line for line in lines if line).strip()
    return f"{answer}\n\n{SIGNATURE}"


_CHAIN = {"classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results",
          "recommend_visualization", "write_back", "ask_user"}


def _brief(body) -> str:
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


# --- the litellm provider -------------------------------------------------------------------


def _estimate_tokens(value) -> int:
    return max(1, len(json.dumps(value, default=str)) // 4)


def respond(messages: list[dict], tools: list[dict]) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) for one completion request."""
    first = str(messages[0].get("content") or "") if messages else ""
    if first.startswith(TASK_MARKER):
        task = first[len(TASK_MARKER):].strip().split()[0] if first[len(TASK_MARKER):].strip() else ""
        handler = TASKS.get(task)
        if handler is None:
            return json.dumps({"error": f"unknown task {task!r}"}), []
        payload_text = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "{}")
        try:
            payload = json.loads(payload_text)
        except json.JSONDecodeError:
            return json.dumps({"error": "the task payload is not JSON"}), []
        return json.dumps(handler(payload), default=str), []
    offered = [t.get("function", {}).get("name") for t in tools or [] if t.get("type") == "function"]
    offered = [name for name in offered if name and name != "finalize"]
    plan = plan_next(messages, offered)
    if plan.tool is None:
        return plan.answer, []
    turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
    call = {"id": f"offline-{turn}-{plan.tool}-{uuid.uuid4().hex[:6]}", "type": "function",
            "function": {"name": plan.tool, "arguments": json.dumps(plan.arguments, default=str)}}
    return plan.thought, [call]


class OfflinePlanner(CustomLLM):
    def completion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose, encoding,
                   api_key, logging_obj, optional_params, acompletion=None, litellm_params=None, logger_fn=None,
                   headers=None, timeout=None, client=None) -> ModelResponse:
        tools = optional_params.get("tools") or []
        content, calls = respond(messages, tools)
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        prompt_tokens = _estimate_tokens(messages) + (_estimate_tokens(tools) if tools else 0)
        completion_tokens = _estimate_tokens(content or calls)
        return ModelResponse(
            model=MODEL, created=int(time.time()),
            choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                   "total_tokens": prompt_tokens + completion_tokens},
        )


_planner = OfflinePlanner()


def ensure_registered() -> None:
    """Register the planner with litellm (idempotent), with a price of zero."""
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": _planner})
        litellm.register_model({MODEL: {
            "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "cache_creation_input_token_cost": 0.0,
            "cache_read_input_token_cost": 0.0, "litellm_provider": PROVIDER, "mode": "chat",
        }})
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
