"""The offline planner's single-table rules: reading a prompt against one table
(filters on enum-like values, time windows, record changes), writing its SQL, and
classifying a prompt's intent. Plain Python over the tools' schema payloads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot

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


def column_from(data: dict[str, Any]) -> Column:
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


def tables_from_sources(sources: list[dict[str, Any]]) -> list[Table]:
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


def time_window(text: str) -> tuple[str, int, str, str] | None:
    """The time window a (lower-case) text names: (op, amount, unit, the phrase as written)."""
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
    for column in table.columns:
        if column.is_text:
            _text_filters(reading, text, tokens, column, excluded)
    score += 2 * len(reading.filters)
    score += 2 * _numeric_filters(reading, text, table)
    time_columns = [c for c in table.columns if c.is_time]
    window = time_window(text)
    if window and time_columns:
        preferred = next((c for c in time_columns if c.name.split("_")[0] in tokens), None)
        preferred = preferred or next((c for c in time_columns if "created" in c.name), time_columns[0])
        reading.time = (preferred.name, window[0], window[1], window[2])
        reading.time_phrase = window[3]
        score += 1
    reading.count = bool(re.search(r"\bhow many\b|\bcount\b|\bnumber of\b", text))
    _group_and_aggregate(reading, text, table)
    _order_and_limit(reading, text, table, time_columns)
    if change and (reading.filters or reading.time or reading.numeric_filters):
        score += 1
    elif change:
        reading.change = None  # no conditions: never propose a change to every row of a table
    reading.score = score
    return reading


def _add_filter(reading: Reading, column: Column, value: str, *, exact: bool) -> None:
    values = reading.filters.setdefault(column.name, [])
    if value not in values:
        values.append(value)
    reading.exact[column.name] = reading.exact.get(column.name, True) and exact


def _filter_word_ok(word: str, table: Table, excluded: set[str]) -> bool:
    return word not in STOP and word not in excluded and not _is_schema_word(word, table) and not word.isdigit()


def _text_filters(reading: Reading, text: str, tokens: set[str], column: Column, excluded: set[str]) -> None:
    """Filters on one text column: values its description documents, "high-priority" /
    "status is open" phrasings, and the status / priority vocabulary."""
    table = reading.table
    assert table is not None
    for value in column.values:  # values the schema documents
        if value.lower() not in excluded and re.search(rf"\b{re.escape(value.lower())}\b", text):
            _add_filter(reading, column, value, exact=True)
    for form in _forms(column.name):  # "high-priority", "priority high", "status is open"
        for found in re.finditer(rf"\b([a-z0-9_]+)[- ]{re.escape(form)}\b", text):
            word = found.group(1)
            if _filter_word_ok(word, table, excluded) and column.name not in reading.filters:
                _add_filter(reading, column, word, exact=False)
        for found in re.finditer(rf"\b{re.escape(form)}\b\s*(is\s+|=\s*|:\s*|equals\s+)?([a-z0-9_]+)\b", text):
            word = found.group(2)
            known = word in STATUS_WORDS | PRIORITY_WORDS
            if (found.group(1) or known) and _filter_word_ok(word, table, excluded) \
                    and column.name not in reading.filters:
                _add_filter(reading, column, word, exact=False)
    vocabulary = STATUS_WORDS if column.name in STATUS_COLUMNS else \
        PRIORITY_WORDS if column.name in PRIORITY_COLUMNS else set()
    if column.name not in reading.filters:
        for word in sorted(vocabulary & tokens - excluded):
            if word == "new" and not re.search(r"\bnew\s+(?:status|state)\b|\bstatus\s+new\b", text):
                continue  # "new" is too common to be a status by itself
            _add_filter(reading, column, word, exact=False)


_THRESHOLD_OPS = {"over": ">", "above": ">", "greater than": ">", "more than": ">", "under": "<", "below": "<",
                  "less than": "<", "at least": ">=", "at most": "<="}


def _numeric_filters(reading: Reading, text: str, table: Table) -> int:
    """"amount over 100": thresholds on numeric columns (the table's name stands for its
    only measure); returns how many were found."""
    measures = [c for c in table.columns if c.is_numeric and not c.primary_key and c.name != "id"
                and not c.name.endswith("_id")]
    found_count = 0
    for column in table.columns:
        if not column.is_numeric:
            continue
        forms = _forms(column.name) | (_forms(table.name) if measures == [column] else set())
        for form in forms:
            found = re.search(rf"\b{re.escape(form)}\s+({'|'.join(_THRESHOLD_OPS)})\s+\$?(\d+(?:\.\d+)?)", text)
            if found:
                reading.numeric_filters.append((column.name, _THRESHOLD_OPS[found.group(1)], found.group(2)))
                found_count += 1
                break
    return found_count


_AGGREGATE_RULES = ((r"\b(?:sum of|total)\s+(?:the\s+)?([a-z_]+)", "SUM"),
                    (r"\b(?:average|avg|mean)\s+(?:of\s+)?(?:the\s+)?([a-z_]+)", "AVG"),
                    (r"\b(?:highest|maximum|max|largest)\s+([a-z_]+)", "MAX"),
                    (r"\b(?:lowest|minimum|min|smallest)\s+([a-z_]+)", "MIN"))


def _group_and_aggregate(reading: Reading, text: str, table: Table) -> None:
    found = re.search(r"\b(?:by|per|for each|each|grouped by|broken down by|breakdown by)\s+([a-z_]+(?: [a-z_]+)?)",
                      text)
    if found:
        phrase = found.group(1)
        column = next((c for c in table.columns if _mentions(phrase, c.name)), None)
        if column is not None:
            reading.group_by = column.name
            reading.filters.pop(column.name, None)
    for pattern, func in _AGGREGATE_RULES:
        found = re.search(pattern, text)
        if found:
            column = next((c for c in table.columns if c.is_numeric and _mentions(found.group(1), c.name)), None)
            if column is not None:
                reading.aggregate = (func, column.name)
                break


def _order_and_limit(reading: Reading, text: str, table: Table, time_columns: list[Column]) -> None:
    """"top 5" on the numeric column mentioned; "latest 10" / "3 oldest" on the creation time."""
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
    assert reading.time is not None
    column, op, amount, unit = reading.time
    if op == "today":
        return f"{column} is today"
    if op == "month":
        return f"{column} is in this month"
    span = f"{amount} {unit[:-1] if amount == 1 else unit}"
    return f"{column} is within the last {span}" if op == ">=" else f"{column} is older than {span}"


def build_query(reading: Reading, *, dialect: str, row_limit: int) -> dict[str, Any]:
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
        time_column, op, amount, unit = reading.time
        conditions.append(_time_condition(time_column, op, amount, unit, write_dialect))
        said.append(_describe_time(reading))

    key = table.key
    operations: list[dict[str, Any]] = []
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
            func, measured = reading.aggregate
            measure = f"{func}({_quote_ident(measured)}) AS {func.lower()}_{measured}"
            order_by = f"{func.lower()}_{measured}"
        else:
            measure, order_by = "COUNT(*) AS count", "count"
        select = f"{group}, {measure}"
        order = f" GROUP BY {group} ORDER BY {order_by} DESC"
        limit = min(reading.limit or row_limit, row_limit)
        what = f"{'Aggregates' if reading.aggregate else 'Counts'} {table.name} rows per {reading.group_by}"
        operations.append({"operation": "group_by", "column": reading.group_by})
    elif reading.aggregate:
        func, measured = reading.aggregate
        select, order, limit = f"{func}({_quote_ident(measured)}) AS {func.lower()}_{measured}", "", None
        what = f"Computes {func} of {measured} over {table.name}"
        operations.append({"operation": "aggregate", "function": func, "column": measured})
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


def classify(text: str, tables: list[Table], available: list[str] | None = None) -> dict[str, Any]:
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
    entities: dict[str, Any] = {}
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

