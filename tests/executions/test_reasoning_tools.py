"""The model-backed reasoning tools, answered by the offline planner through the
router (litellm's custom-provider path); the generated SQL runs on real databases."""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from executions.routing import router_build
from executions.tools.reasoning import apply_row_limit
from rivercore.contracts import AgentConfig, DataSourceMetadata, UserContext
from rivercore.router import ProviderConfig, Router, offline_provider
from rivercore.tools import ToolContext, ToolError, ToolErrorKind, get_tool
from rivercore.types.agents import Tier

EXAMPLE = json.loads((Path(__file__).parent / "example_execution_request.json").read_text())
COUNT_PROMPT = "How many open high-priority tickets were created in the last 24 hours?"


def tickets_schema(*, described: bool) -> dict:
    def column(name, kind, description=""):
        return {"column_name": name, "data_type": kind, "is_nullable": name != "id", "is_primary_key": name == "id",
                "description": description if described else ""}

    return {"table_name": "tickets", "row_estimate": 9, "columns": [
        column("id", "integer"), column("subject", "text"),
        column("priority", "text", "low, normal, high, urgent"),
        column("status", "text", "open, pending, solved, closed"),
        column("customer_id", "integer"), column("created_at", "timestamp"),
    ]}


CUSTOMERS = {"table_name": "customers", "columns": [
    {"column_name": "id", "data_type": "integer", "is_primary_key": True},
    {"column_name": "name", "data_type": "text"}, {"column_name": "plan", "data_type": "text"}]}
CHARGES = {"table_name": "charges", "columns": [
    {"column_name": "id", "data_type": "integer", "is_primary_key": True},
    {"column_name": "customer_id", "data_type": "integer"}, {"column_name": "amount", "data_type": "numeric"},
    {"column_name": "status", "data_type": "text"}, {"column_name": "created_at", "data_type": "timestamp"}]}

# (priority, status, hours ago). Matching the question: open + high + within 24 h -> ids 1, 2, 3.
TICKETS = [
    ("high", "open", 1), ("high", "open", 5), ("high", "open", 23.5),
    ("high", "open", 30), ("high", "solved", 2), ("low", "open", 2),
    ("urgent", "open", 3), ("high", "pending", 4), ("normal", "closed", 100),
]


def make_context(*, source_type: str, described: bool, llm) -> ToolContext:
    source = DataSourceMetadata(data_source_id=7, name="Support DB", type=source_type, access_level="read_write",
                                schemas=[tickets_schema(described=described), CUSTOMERS, CHARGES])
    return ToolContext(
        execution_id=1, user=UserContext.model_validate(EXAMPLE["user_context"]),
        agent=AgentConfig.model_validate(EXAMPLE["agent_config"]), data_sources=[source], input_prompt=None, llm=llm,
    )


def run(tool_name: str, ctx: ToolContext, arguments: dict):
    tool = get_tool(tool_name)
    output = tool.handler(ctx, tool.input_model.model_validate(arguments))
    return tool.output_model.model_validate(output.model_dump())


@pytest.fixture
def offline_llm() -> Router:
    return router_build([offline_provider()])


@pytest.fixture
def sqlite_db(tmp_path) -> sqlite3.Connection:
    db = sqlite3.connect(tmp_path / "support.db")
    db.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, subject TEXT, priority TEXT, status TEXT, "
               "customer_id INTEGER, created_at TIMESTAMP)")
    now = datetime.now(UTC)
    for index, (priority, status, hours) in enumerate(TICKETS, start=1):
        created = now - timedelta(hours=hours)
        # Mixed but valid ISO forms, as real exports contain.
        stamp = created.strftime("%Y-%m-%d %H:%M:%S") if index % 2 else created.isoformat()
        db.execute("INSERT INTO tickets VALUES (?, ?, ?, ?, ?, ?)",
                   (index, f"Ticket {index}", priority.title() if index == 2 else priority, status, 1, stamp))
    db.commit()
    yield db
    db.close()


@pytest.mark.parametrize("described", [True, False])
def test_generate_query_counts_open_high_priority_tickets_on_sqlite(sqlite_db, offline_llm, described):
    ctx = make_context(source_type="sqlite", described=described, llm=offline_llm)
    result = run("generate_query", ctx, {"user_prompt": COUNT_PROMPT, "intent_type": "DATA_QUERY",
                                         "data_sources": [7]})
    assert result.dialect == "sqlite"
    assert result.data_source_ids == [7]
    assert result.plan_type == "query"
    assert "datetime('now', '-24 hours')" in result.query
    [(count,)] = sqlite_db.execute(result.query).fetchall()
    # Without documented values the filters compare case-insensitively (ticket 2 is "High").
    assert count == (2 if described else 3)
    assert "status is 'open'" in result.explanation and "last 24 hours" in result.explanation


@pytest.mark.django_db
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="runs the generated SQL on PostgreSQL")
def test_generate_query_counts_open_high_priority_tickets_on_postgresql(offline_llm):
    table = f"tickets_{uuid.uuid4().hex[:8]}"
    schema = tickets_schema(described=False)
    schema["table_name"] = table
    source = DataSourceMetadata(data_source_id=9, name="Support PG", type="postgresql", schemas=[schema])
    ctx = make_context(source_type="postgresql", described=False, llm=offline_llm)
    ctx = ToolContext(execution_id=1, user=ctx.user, agent=ctx.agent, data_sources=[source], llm=offline_llm)
    now = datetime.now(UTC)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {table} (id integer primary key, subject text, priority text, status text, "
                       "customer_id integer, created_at timestamptz)")
        for index, (priority, status, hours) in enumerate(TICKETS, start=1):
            cursor.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s)",
                           [index, "t", priority, status, 1, now - timedelta(hours=hours)])
        prompt = COUNT_PROMPT.replace("tickets", table)
        result = run("generate_query", ctx, {"user_prompt": prompt, "intent_type": "DATA_QUERY"})
        assert result.dialect == "postgresql"
        assert "now() - interval '24 hours'" in result.query
        cursor.execute(result.query)
        assert cursor.fetchall() == [(3,)]


def test_group_by_question(sqlite_db, offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    result = run("generate_query", ctx, {"user_prompt": "How many open tickets by priority?",
                                         "intent_type": "DATA_QUERY"})
    rows = dict(sqlite_db.execute(result.query).fetchall())
    assert rows == {"high": 3, "High": 1, "urgent": 1, "low": 1}  # documented values match exactly
    assert "GROUP BY priority" in result.query


def test_list_question_gets_a_row_limit_from_governance(sqlite_db, offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    result = run("generate_query", ctx, {"user_prompt": "List the urgent tickets", "intent_type": "DATA_QUERY",
                                         "governance": {"row_limit": 5}})
    assert result.query.endswith("LIMIT 5")
    rows = sqlite_db.execute(result.query).fetchall()
    assert [row[0] for row in rows] == [7]


def test_a_models_query_is_capped_to_the_row_limit():
    capped, plan = apply_row_limit("SELECT id FROM tickets LIMIT 5000", dialect="postgresql", row_limit=100)
    assert capped == "SELECT id FROM tickets LIMIT 100" and plan == "query"
    kept, _ = apply_row_limit("SELECT COUNT(*) FROM tickets", dialect="sqlite", row_limit=100)
    assert kept == "SELECT COUNT(*) FROM tickets"
    _, plan = apply_row_limit("UPDATE tickets SET status = 'closed'", dialect="sqlite", row_limit=100)
    assert plan == "mutation"
    with pytest.raises(ToolError):
        apply_row_limit("SELECT 1; SELECT 2", dialect="sqlite", row_limit=100)


def test_a_data_source_outside_the_agent_is_not_found(offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    with pytest.raises(ToolError) as caught:
        run("generate_query", ctx, {"user_prompt": COUNT_PROMPT, "intent_type": "DATA_QUERY", "data_sources": [99]})
    assert caught.value.kind == ToolErrorKind.NOT_FOUND


def test_an_unanswerable_question_is_a_failed_observation(offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    with pytest.raises(ToolError) as caught:
        run("generate_query", ctx, {"user_prompt": "Is it going to rain?", "intent_type": "DATA_QUERY"})
    assert caught.value.kind == ToolErrorKind.FAILED
    assert "could not match" in caught.value.message


def test_classify_intent(offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    question = run("classify_intent", ctx, {"user_prompt": COUNT_PROMPT})
    assert question.intent_type == "DATA_QUERY"
    assert question.entities["tables"] == ["tickets"]
    assert question.entities["values"] == {"priority": ["high"], "status": ["open"]}
    assert question.entities["time_window"] == "last 24 hours"
    change = run("classify_intent", ctx, {"user_prompt": "Escalate the open high-priority tickets from today"})
    assert change.intent_type == "ACTION_EXECUTION"
    assert change.entities["change"] == {"priority": "urgent"}
    assert "DATA_QUERY" in change.sub_intents
    storage = run("classify_intent", ctx, {"user_prompt": "How much storage quota is left?"})
    assert storage.intent_type == "STORAGE_MANAGEMENT"


def test_explain_results_and_visualization(offline_llm):
    ctx = make_context(source_type="sqlite", described=True, llm=offline_llm)
    explained = run("explain_results", ctx, {
        "user_prompt": "How many open tickets by priority?", "query_result_columns": ["priority", "count"],
        "query_result_sample": [["high", 3], ["urgent", 1], ["low", 1]], "total_rows": 3})
    assert explained.explanation.startswith("count per priority: high: 3, urgent: 1, low: 1")
    assert "Total: 5" in explained.explanation
    chart = run("recommend_visualization", ctx, {"columns": ["priority", "count"],
                                                  "column_types": ["text", "integer"], "row_count": 3})
    assert (chart.recommended_type, chart.x_axis, chart.y_axis) == ("bar", "priority", "count")


def test_a_model_reply_that_is_not_valid_json_fails_the_tool(fake_openai):
    server = fake_openai()
    server.text("I think it is a data question.").text('{"intent_type": "WEATHER", "confidence": 2}')
    llm = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.FAST: "openai/m"},
                                 base_url=server.base_url)])
    ctx = make_context(source_type="sqlite", described=True, llm=llm)
    with pytest.raises(ToolError) as not_json:
        run("classify_intent", ctx, {"user_prompt": COUNT_PROMPT})
    assert not_json.value.kind == ToolErrorKind.FAILED
    with pytest.raises(ToolError) as invalid:
        run("classify_intent", ctx, {"user_prompt": COUNT_PROMPT})
    assert set(invalid.value.details["fields"]) == {"intent_type", "confidence"}
    sent = server.requests[0]["messages"]
    assert sent[0]["content"].startswith("RIVER-TOOL-TASK classify_intent")
    assert json.loads(sent[1]["content"])["user_prompt"] == COUNT_PROMPT
    assert "tools" not in server.requests[0]


def test_a_real_models_fenced_json_is_accepted(fake_openai):
    server = fake_openai()
    server.text('Here you go:\n```json\n{"intent_type": "DATA_QUERY", "confidence": 0.8}\n```')
    llm = router_build([ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.FAST: "openai/m"},
                                 base_url=server.base_url)])
    ctx = make_context(source_type="sqlite", described=True, llm=llm)
    result = run("classify_intent", ctx, {"user_prompt": COUNT_PROMPT})
    assert (result.intent_type, result.confidence) == ("DATA_QUERY", 0.8)


def test_tools_declare_the_spec_tiers():
    tiers = {name: get_tool(name).tier for name in
             ("classify_intent", "generate_query", "recommend_visualization", "explain_results")}
    assert tiers == {"classify_intent": Tier.FAST, "generate_query": Tier.CODING,
                     "recommend_visualization": Tier.FAST, "explain_results": Tier.BALANCED}
