"""The offline planner, called through litellm.completion like any model.

Conversations are run states built with the engine's own context builder and steps;
the planner gets the run's structured view (rivercore.view) as request metadata next
to the chat messages, exactly as the router sends it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import litellm
import pytest

from rivercore.context import FINALIZE_SCHEMA, SUMMARY_REQUEST
from rivercore.contracts import ExecutionRequest, StepStatus, StepType
from rivercore.llm import LLMToolCall
from rivercore.planner import rules as offline_rules
from rivercore.planner.provider import NO_VIEW, ensure_registered
from rivercore.runner import new_state
from rivercore.state import RunState, step
from rivercore.steps import tool_message
from rivercore.view import VIEW_KEY, run_view

EXAMPLE = json.loads((Path(__file__).parent / "example_execution_request.json").read_text())
ALL_TOOLS = ["classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results",
             "write_back", "ask_user"]
TICKETS = {
    "table_name": "tickets",
    "columns": [
        {"column_name": "id", "data_type": "integer", "is_nullable": False, "is_primary_key": True},
        {"column_name": "subject", "data_type": "text"},
        {"column_name": "priority", "data_type": "text", "description": "low, normal, high, urgent"},
        {"column_name": "status", "data_type": "text", "description": "open, pending, solved, closed"},
        {"column_name": "customer_id", "data_type": "integer"},
        {"column_name": "created_at", "data_type": "timestamp"},
    ],
}
CUSTOMERS = {"table_name": "customers", "columns": [
    {"column_name": "id", "data_type": "integer"}, {"column_name": "name", "data_type": "text"},
    {"column_name": "plan", "data_type": "text"}]}


@pytest.fixture(autouse=True)
def _registered():
    ensure_registered()


def conversation(prompt: str | None, *, trigger: str = "manual") -> RunState:
    data = json.loads(json.dumps(EXAMPLE))
    data["input_prompt"] = prompt
    data["trigger_context"]["trigger_type"] = trigger
    data["data_source_metadata"] = [{
        "data_source_id": 7, "name": "Support DB", "type": "sqlite", "status": "connected",
        "access_level": "read_write", "schemas": [TICKETS, CUSTOMERS],
    }]
    state, _ = new_state(ExecutionRequest.model_validate(data))
    return state


def schemas(names: list[str]) -> list[dict]:
    tools = [{"type": "function", "function": {"name": name, "description": name,
                                               "parameters": {"type": "object", "properties": {}}}}
             for name in names]
    return [*tools, FINALIZE_SCHEMA]


def think(state: RunState, offered: list[str] | None):
    extra = {"tools": schemas(offered)} if offered is not None else {}
    return litellm.completion(model=offline_rules.MODEL, messages=state.messages(),
                              metadata={VIEW_KEY: {"run": run_view(state).model_dump(mode="json")}}, **extra)


def next_call(state, offered=ALL_TOOLS):
    message = think(state, offered).choices[0].message
    assert message.tool_calls, f"expected a tool call, got {message.content!r}"
    call = message.tool_calls[0]
    return call.id, call.function.name, json.loads(call.function.arguments)


def observe(state: RunState, call, result, *, ok=True) -> None:
    """The steps the runner records for a call and its observation."""
    call_id, name, arguments = call
    tool_call = LLMToolCall(id=call_id, name=name, arguments=arguments)
    state.apply(step(state, StepType.REASONING, turn=state.turn + 1,
                     output={"content": None, "tool_calls": [tool_call.model_dump()]},
                     messages=[{"role": "assistant", "content": None, "tool_calls": [
                         {"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(arguments)}}]}]))
    output = {"result": result, "_dispatched": True} if ok else {**result, "_dispatched": True}
    state.apply(step(state, StepType.OBSERVATION, tool_name=name, call_id=call_id, input=arguments,
                     status=StepStatus.COMPLETED if ok else StepStatus.FAILED, output=output,
                     messages=[tool_message(call_id, name, result, ok=ok)]))


def notice(state: RunState, text: str) -> None:
    state.apply(step(state, StepType.REASONING, input={"notice": text}, output={"notice": True},
                     messages=[{"role": "system", "content": text}]))


def final_answer(messages, offered=ALL_TOOLS) -> str:
    message = think(messages, offered).choices[0].message
    assert not message.tool_calls, f"expected an answer, got a call to {message.tool_calls[0].function.name}"
    return message.content


COUNT_PROMPT = "How many open high-priority tickets were created in the last 24 hours?"


def test_the_first_move_is_classify_intent_and_usage_is_estimated():
    messages = conversation(COUNT_PROMPT)
    response = think(messages, ALL_TOOLS)
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "classify_intent"
    assert json.loads(call.function.arguments) == {"user_prompt": COUNT_PROMPT}
    size = len(json.dumps(messages.messages())) + len(json.dumps(schemas(ALL_TOOLS)))
    assert response.usage.prompt_tokens == pytest.approx(size / 4, abs=2)
    assert response.usage.completion_tokens > 0


def test_a_question_runs_the_whole_chain_and_answers_with_the_observed_number():
    messages = conversation(COUNT_PROMPT)
    call = next_call(messages)
    observe(messages, call, {"intent_type": "DATA_QUERY", "confidence": 0.9, "sub_intents": [], "entities": {}})

    call = next_call(messages)
    assert call[1] == "search_catalog"
    assert call[2]["query"] == COUNT_PROMPT and call[2]["data_source_ids"] == [7]
    observe(messages, call, {"matches": [{"table_name": "tickets", "score": 0.9}], "total_results": 1})

    call = next_call(messages)
    assert call[1] == "generate_query"
    assert call[2] == {"user_prompt": COUNT_PROMPT, "intent_type": "DATA_QUERY", "data_sources": [7]}
    query = ("SELECT COUNT(*) AS count FROM tickets WHERE status = 'open' AND priority = 'high' "
             "AND datetime(created_at) >= datetime('now', '-24 hours')")
    observe(messages, call, {"query": query, "dialect": "sqlite", "explanation": "Counts tickets rows where ...",
                             "operations": [], "plan_type": "query", "data_source_ids": [7]})

    call = next_call(messages)
    assert call[1:] == ("execute_query", {"data_source_id": 7, "query": query})
    observe(messages, call, {"columns": ["count"], "rows": [[3]], "total_rows": 1, "execution_time_ms": 2})

    call = next_call(messages)
    assert call[1] == "explain_results"
    assert call[2]["query_result_columns"] == ["count"] and call[2]["query_result_sample"] == [[3]]
    observe(messages, call, {"explanation": "The answer is 3 (count).", "confidence": 0.9, "suggestions": [],
                             "data_quality_notes": []})

    answer = final_answer(messages)
    assert answer.startswith("Answer: 3.")
    assert "How: " in answer and query not in answer  # the SQL is in the steps, behind "Show query" on the pages
    assert "offline planner" in answer


def test_only_offered_tools_are_used():
    messages = conversation(COUNT_PROMPT)
    call = next_call(messages, ["generate_query", "execute_query"])
    assert call[1] == "generate_query"


def test_an_unclear_prompt_asks_the_user_then_continues_with_the_answer():
    messages = conversation("do the thing")
    offered = ["classify_intent", "generate_query", "execute_query", "ask_user"]
    call = next_call(messages, offered)
    observe(messages, call, {"intent_type": "PLATFORM_EXPLANATION", "confidence": 0.3, "sub_intents": [],
                             "entities": {}})

    call = next_call(messages, offered)
    assert call[1] == "ask_user"
    assert call[2]["interaction_type"] == "clarification_request"
    assert "tickets" in call[2]["message"] and "customers" in call[2]["message"]
    observe(messages, call, {"user_response": "how many tickets are pending"})

    # The answer changes the request: classified again (the run's intent and turn
    # allowance follow it), then planned.
    call = next_call(messages, offered)
    assert call[1] == "classify_intent" and "pending" in call[2]["user_prompt"]
    observe(messages, call, {"intent_type": "DATA_QUERY", "confidence": 0.9, "sub_intents": [], "entities": {}})

    call = next_call(messages, offered)
    assert call[1] == "generate_query"
    assert "pending" in call[2]["user_prompt"]


def test_no_second_question_when_the_answer_is_still_unclear():
    messages = conversation("do the thing")
    offered = ["ask_user", "generate_query"]
    call = next_call(messages, offered)
    assert call[1] == "ask_user"
    observe(messages, call, {"user_response": "whatever you like"})
    answer = final_answer(messages, offered)
    assert "could not match" in answer
    assert "offline planner" in answer


def test_a_failed_query_is_explained_not_retried():
    messages = conversation(COUNT_PROMPT)
    offered = ["generate_query", "execute_query", "explain_results"]
    call = next_call(messages, offered)
    observe(messages, call, {"query": "SELECT COUNT(*) FROM tickets", "dialect": "sqlite", "explanation": "",
                             "operations": [], "plan_type": "query", "data_source_ids": [7]})
    call = next_call(messages, offered)
    observe(messages, call, {"error": {"code": "AGENT_ERROR", "message": "no such table: tickets",
                                       "details": {}}, "status": "error"}, ok=False)
    answer = final_answer(messages, offered)
    assert "execute_query did not succeed: no such table: tickets" in answer
    assert "did not retry" in answer


def test_a_change_request_proposes_write_back_from_the_query_result():
    prompt = "Close all open low-priority tickets older than 7 days"
    messages = conversation(prompt)
    offered = ["generate_query", "execute_query", "write_back", "explain_results"]
    call = next_call(messages, offered)
    assert call[2]["intent_type"] == "ACTION_EXECUTION"
    observe(messages, call, {"query": "SELECT id, status, priority FROM tickets WHERE ...", "dialect": "sqlite",
                             "explanation": "", "operations": [], "plan_type": "query", "data_source_ids": [7]})
    call = next_call(messages, offered)
    observe(messages, call, {"columns": ["id", "status", "priority"],
                             "rows": [[101, "open", "low"], [102, "open", "low"]], "total_rows": 2})

    call = next_call(messages, offered)
    assert call[1:] == ("write_back", {"data_source_id": 7, "table_name": "tickets", "operation": "update",
                                       "data": {"status": "closed"}, "conditions": {"id": [101, 102]}})
    observe(messages, call, {"rejected": True, "comment": "not these"}, ok=False)

    call = next_call(messages, offered)
    assert call[1] == "explain_results"  # the rejection does not repeat the write
    observe(messages, call, {"explanation": "Two open low-priority tickets.", "confidence": 0.8,
                             "suggestions": [], "data_quality_notes": []})
    answer = final_answer(messages, offered)
    assert "write_back did not succeed: the approver rejected it (not these)" in answer


def test_an_approved_write_is_reported_with_rows_affected():
    prompt = "Mark open urgent tickets as solved"
    messages = conversation(prompt)
    offered = ["generate_query", "execute_query", "write_back"]
    call = next_call(messages, offered)
    observe(messages, call, {"query": "SELECT id FROM tickets", "dialect": "sqlite", "explanation": "",
                             "operations": [], "plan_type": "query", "data_source_ids": [7]})
    call = next_call(messages, offered)
    observe(messages, call, {"columns": ["id", "status"], "rows": [{"id": 5, "status": "open"}], "total_rows": 1})
    call = next_call(messages, offered)
    assert call[2]["data"] == {"status": "solved"} and call[2]["conditions"] == {"id": 5}
    observe(messages, call, {"success": True, "rows_affected": 1, "message": "updated"})
    answer = final_answer(messages, offered)
    assert "Updated 1 row(s) in tickets: set status = 'solved'." in answer


def test_a_runner_notice_gets_a_final_answer():
    messages = conversation(COUNT_PROMPT)
    call = next_call(messages, ["generate_query"])
    observe(messages, call, {"query": "SELECT 1", "dialect": "sqlite", "explanation": "", "operations": [],
                             "plan_type": "query", "data_source_ids": [7]})
    notice(messages, SUMMARY_REQUEST)
    response = think(messages, None)  # the runner offers no tools here
    message = response.choices[0].message
    assert not message.tool_calls
    assert message.content.startswith("The turn limit was reached")


def test_a_scheduled_run_without_prompt_works_from_the_agents_goal():
    messages = conversation(None, trigger="scheduled")
    # The example agent's goal and instructions mention tickets and priority.
    call = next_call(messages, ["ask_user", "generate_query"])
    assert call[1] == "generate_query"


def test_platform_questions_get_an_honest_answer_without_tools():
    messages = conversation("What can you do? help")
    call = next_call(messages, ["classify_intent", "generate_query", "ask_user"])
    observe(messages, call, offline_rules.classify("What can you do? help", []))
    answer = final_answer(messages, ["classify_intent", "generate_query", "ask_user"])
    assert "I am River's offline planner" in answer
    assert "tickets" in answer


def test_a_change_without_write_back_says_what_it_would_have_done():
    messages = conversation("Close the open low-priority tickets")
    offered = ["generate_query", "execute_query"]
    call = next_call(messages, offered)
    observe(messages, call, {"query": "SELECT id, status FROM tickets", "dialect": "sqlite", "explanation": "",
                             "operations": [], "plan_type": "query", "data_source_ids": [7]})
    call = next_call(messages, offered)
    observe(messages, call, {"columns": ["id", "status"], "rows": [[4, "open"], [9, "open"]], "total_rows": 2})
    answer = final_answer(messages, offered)
    assert "write_back is not available to this agent" in answer
    assert "status = 'closed' on the 2 row(s)" in answer


def test_a_change_to_every_row_is_never_proposed():
    tables = offline_rules.tables_from_sources([{"data_source_id": 7, "schemas": [TICKETS]}])
    assert offline_rules.read_prompt("close all tickets", tables, want_change=True).change is None
    scoped = offline_rules.read_prompt("close all pending tickets", tables, want_change=True)
    assert scoped.change.data == {"status": "closed"} and scoped.filters == {"status": ["pending"]}


# --- through the real engine, tools and a real SQLite data source ----------------------------


@pytest.fixture
def support_source(workspace, tmp_path, settings):
    from datetime import UTC, datetime, timedelta

    from datasources import services as data_sources

    settings.RIVER_SQLITE_DATA_DIR = str(tmp_path)
    path = tmp_path / str(workspace.pk) / "support.db"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, subject TEXT NOT NULL, priority TEXT, status TEXT, "
               "created_at TIMESTAMP)")
    now = datetime.now(UTC)
    rows = [("high", "open", 1), ("high", "open", 5), ("high", "open", 30), ("low", "open", 200),
            ("low", "open", 300), ("low", "solved", 300), ("high", "pending", 2)]
    for index, (priority, status, hours) in enumerate(rows, start=1):
        created = (now - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
        db.execute("INSERT INTO tickets VALUES (?, ?, ?, ?, ?)", (index, f"Ticket {index}", priority, status, created))
    db.commit()
    db.close()
    source = data_sources.data_source_create(
        workspace=workspace, name="Support DB", type="sqlite", connection_config={"path": str(path)},
        credentials={}, access_level="read_write")
    return source, data_sources.data_source_discover(data_source=source), path


def run_engine(workspace, support_source, prompt: str, *, action_level: str, compress_at: int = 24_000):
    from django.db import connection

    from executions.routing import router_build
    from rivercore.router import offline_provider
    from rivercore.runner import Engine, new_state, response_build

    source, tables, _ = support_source
    data = json.loads(json.dumps(EXAMPLE))
    data["input_prompt"] = prompt
    data["agent_config"]["action_level"] = action_level
    data["user_context"].update(workspace_id=workspace.pk, org_id=workspace.organization_id)
    data["user_context"]["permissions"] += ["data_source:update"]
    data["data_source_metadata"] = [{"data_source_id": source.pk, "name": source.name, "type": "sqlite",
                                     "access_level": "read_write", "schemas": [t.model_dump() for t in tables]}]
    state, _ = new_state(ExecutionRequest.model_validate(data))
    outcome = Engine(llm=router_build([offline_provider()]), tool_thread_exit=lambda: connection.close(),
                     compress_threshold_tokens=compress_at).run(state)
    return response_build(state, outcome)


@pytest.mark.django_db(transaction=True)
def test_history_compression_does_not_change_what_the_planner_knows(workspace, support_source):
    """With the history compressed before every turn the chat text loses the earlier
    tool results; the planner reads the run's view, so it takes the same steps to the
    same answer."""
    plain = run_engine(workspace, support_source, COUNT_PROMPT, action_level="read_only")
    squeezed = run_engine(workspace, support_source, COUNT_PROMPT, action_level="read_only", compress_at=1)
    assert squeezed.status == plain.status == "success"
    assert [s.tool_name for s in squeezed.steps if s.step_type == "tool_call"] == \
        [s.tool_name for s in plain.steps if s.step_type == "tool_call"]
    assert squeezed.result.summary == plain.result.summary


def test_the_planner_reads_the_view_not_the_chat_text():
    state = conversation(COUNT_PROMPT)
    observe(state, next_call(state), {"intent_type": "DATA_QUERY", "confidence": 0.9, "sub_intents": [],
                                      "entities": {}})
    expected = next_call(state)[1:]
    garbled = [{"role": "system", "content": "## Data sources\n### Data source 99: Decoy (type sqlite, x, y)"},
               {"role": "user", "content": "[Tool Result] Tool 'classify_intent' failed: {}"}]
    response = litellm.completion(model=offline_rules.MODEL, messages=garbled, tools=schemas(ALL_TOOLS),
                                  metadata={VIEW_KEY: {"run": run_view(state).model_dump(mode="json")}})
    call = response.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == expected == (
        "search_catalog", {"query": COUNT_PROMPT, "top_k": 5, "data_source_ids": [7]})


def test_without_the_view_the_planner_says_it_cannot_read_chat_text():
    response = litellm.completion(model=offline_rules.MODEL, messages=conversation(COUNT_PROMPT).messages(),
                                  tools=schemas(ALL_TOOLS))
    assert not response.choices[0].message.tool_calls
    assert response.choices[0].message.content == NO_VIEW


@pytest.mark.django_db(transaction=True)
def test_the_engine_answers_the_count_question_from_the_real_data(workspace, support_source):
    response = run_engine(workspace, support_source, COUNT_PROMPT, action_level="read_only")
    assert response.status == "success"
    tools = [s.tool_name for s in response.steps if s.step_type == "tool_call"]
    assert tools == ["classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results"]
    assert response.result.summary.startswith("Answer: 2.")  # tickets 1 and 2
    assert set(response.usage.models_used) == {"river-offline/planner"}
    assert response.usage.cost_incomplete is False


@pytest.mark.django_db(transaction=True)
def test_the_engine_proposes_the_write_back_for_approval(workspace, support_source):
    response = run_engine(workspace, support_source, "Close the open low-priority tickets older than 7 days",
                          action_level="act_with_approval")
    assert response.status == "awaiting_approval"
    approval = response.approval_request
    assert approval.proposed_payload == {"data_source_id": support_source[0].pk, "table_name": "tickets",
                                         "operation": "update", "data": {"status": "closed"},
                                         "conditions": {"id": [4, 5]}}
    assert approval.reasoning_summary.startswith("Proposing to set status = 'closed' on 2 tickets row(s)")
    db = sqlite3.connect(support_source[2])
    assert db.execute("SELECT COUNT(*) FROM tickets WHERE status = 'closed'").fetchone() == (0,)
    db.close()


def test_other_tools_are_used_when_offered_and_reported():
    messages = conversation("Please test the connection to Support DB")
    offered = ["classify_intent", "test_connection"]
    call = next_call(messages, offered)
    observe(messages, call, offline_rules.classify("Please test the connection to Support DB", []))
    call = next_call(messages, offered)
    assert call[1:] == ("test_connection", {"data_source_id": 7})
    observe(messages, call, {"success": True, "latency_ms": 4, "message": "Connected to SQLite 3.45."})
    answer = final_answer(messages, offered)
    assert answer.startswith("test_connection: Connected to SQLite 3.45.")
