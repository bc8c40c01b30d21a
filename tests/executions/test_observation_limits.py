"""What reaches the model and the journal from a tool: at most the workspace's
observation byte limit, text PostgreSQL can store, and an honest summary when no
data could be read. Runs go through the durable path (DbJournal on PostgreSQL)."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection
from pydantic import BaseModel, ConfigDict

from datasources.services import data_source_discover
from executions import tasks
from executions.models import Execution, ExecutionStep
from executions.services import execution_run_segment, execution_start, person_run_request
from rivercore.tools import Tool, ToolCategory, get_tool, register
from tests.datasources.fixtures import *  # noqa: F403
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in worker threads

FORTY_MB = 40 * 1024 * 1024


class BigIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str


class BigOut(BaseModel):
    model_config = ConfigDict(extra="allow")


def _big(ctx, args: BigIn) -> dict:
    if args.kind == "huge":
        return {"text": "z" * FORTY_MB}
    if args.kind == "nul":
        return {"text": "before\x00after", "bad\x00key": ["\ud800 lone", {"nested": "\x00"}]}
    return {"text": "fine"}


if get_tool("test_big_output") is None:
    register(Tool(name="test_big_output", description="Returns an output of the asked kind.",
                  category=ToolCategory.EXECUTION, input_model=BigIn, output_model=BigOut, handler=_big,
                  idempotent=True))


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def big_source(sqlite_source, sqlite_file):
    """A table of 2,048 rows of 20 KB: a 40 MB result for SELECT *."""
    with sqlite3.connect(sqlite_file) as db:
        db.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO big VALUES (?, ?)", ((i, "b" * 20_480) for i in range(2048)))
        # A NUL inside text, and text that is not UTF-8 (an encoded lone surrogate).
        db.execute("INSERT INTO customers (id, name, email, company) VALUES (9, ?, 'n@x', CAST(? AS TEXT))",
                   ("Null\x00Name", b"Sur\xed\xa0\x80rogate"))
    data_source_discover(data_source=sqlite_source)
    return sqlite_source


def _run(workspace, owner, replies, *, tools, sources=()):
    agent = make_agent(workspace=workspace, owner=owner, tools=tools, action_level="automated",
                       data_sources=sources)
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    llm = ScriptedLLM(replies)
    execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution, llm


def _stored_bytes(execution_id: int) -> list[tuple[str, int]]:
    """(step type, octet length of the stored output and messages) per journal row."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT step_type, coalesce(octet_length(output::text), 0) + coalesce(octet_length(messages::text), 0) "
            f"FROM {ExecutionStep._meta.db_table} WHERE execution_id = %s ORDER BY step_number",
            [execution_id],
        )
        return cur.fetchall()


def _tool_message_sizes(llm: ScriptedLLM) -> list[int]:
    return [len(m.get("content") or "") for r in llm.requests for m in r["messages"] if m.get("role") == "tool"]


def test_a_40_mb_tool_output_never_reaches_the_model_or_the_journal(workspace, owner, sent):
    execution, llm = _run(workspace, owner, [
        tool_reply("test_big_output", {"kind": "huge"}), text_reply("done"),
    ], tools=["test_big_output"])
    assert execution.status == Execution.Status.COMPLETED
    sizes = _stored_bytes(execution.pk)
    assert max(size for _, size in sizes) < 3 * 65536  # output plus the tool message, each cut
    assert max(_tool_message_sizes(llm)) < 66_000
    observation = ExecutionStep.objects.get(execution=execution, step_type="observation").output["result"]
    assert observation["cut"] is True and observation["original_bytes"] > FORTY_MB
    assert "observation byte limit" in observation["note"]


def test_a_40_mb_query_result_is_cut_by_the_tool_and_the_engine(workspace, owner, sent, big_source):
    execution, llm = _run(workspace, owner, [
        tool_reply("execute_query", {"data_source_id": big_source.pk, "query": "SELECT id, body FROM big",
                                     "max_rows": 10000}),
        text_reply("done"),
    ], tools=["execute_query"], sources=[big_source])
    assert execution.status == Execution.Status.COMPLETED
    assert max(size for _, size in _stored_bytes(execution.pk)) < 3 * 65536
    result = ExecutionStep.objects.get(execution=execution, step_type="observation").output["result"]
    assert result["truncated"] is True and 1 <= len(result["rows"]) < 5
    assert "observation byte limit" in result["note"]
    assert max(_tool_message_sizes(llm)) < 66_000


def test_a_smaller_workspace_limit_cuts_every_observation(workspace, owner, sent):
    workspace.observation_byte_limit = 2048
    workspace.save()
    execution, llm = _run(workspace, owner, [
        tool_reply("test_big_output", {"kind": "huge"}), text_reply("done"),
    ], tools=["test_big_output"])
    assert max(_tool_message_sizes(llm)) < 2600
    assert execution.status == Execution.Status.COMPLETED


def test_nul_and_lone_surrogates_in_outputs_and_rows_are_stored_escaped(workspace, owner, sent, big_source):
    execution, llm = _run(workspace, owner, [
        tool_reply("test_big_output", {"kind": "nul"}, call_id="c1"),
        tool_reply("execute_query", {"data_source_id": big_source.pk,
                                     "query": "SELECT name, company FROM customers WHERE id = 9"}, call_id="c2"),
        text_reply("The name is Null\x00Name \ud800"),
    ], tools=["test_big_output", "execute_query"], sources=[big_source])
    assert execution.status == Execution.Status.COMPLETED, execution.error
    assert execution.attempts == 1  # no retry loop
    outputs = [s.output for s in ExecutionStep.objects.filter(execution=execution, step_type="observation")
               .order_by("step_number")]
    assert outputs[0]["result"]["text"] == "before\\0after"
    assert outputs[0]["result"]["bad\\0key"] == ["\ufffd lone", {"nested": "\\0"}]
    name, company = outputs[1]["result"]["rows"][0]
    assert name == "Null\\0Name"
    assert company.startswith("Sur\ufffd") and company.endswith("rogate")
    assert execution.result["summary"] == "The name is Null\\0Name \ufffd"


def test_when_every_data_call_failed_the_summary_says_so(workspace, owner, sent, sqlite_source):
    # The schema was never discovered, so both queries fail.
    execution, _ = _run(workspace, owner, [
        tool_reply("execute_query", {"data_source_id": sqlite_source.pk, "query": "SELECT 1"}, call_id="a"),
        tool_reply("execute_query", {"data_source_id": sqlite_source.pk, "query": "SELECT 2"}, call_id="b"),
        text_reply("There are 42 open tickets."),
    ], tools=["execute_query"], sources=[sqlite_source])
    summary = execution.result["summary"]
    assert summary.startswith("No data was retrieved: all 2 data tool calls failed (execute_query:")
    assert "not been discovered" in summary
    assert "not based on data" in summary


def test_a_successful_data_call_keeps_the_answer_as_is(workspace, owner, sent, big_source):
    execution, _ = _run(workspace, owner, [
        tool_reply("execute_query", {"data_source_id": big_source.pk, "query": "SELECT 1"}, call_id="a"),
        tool_reply("execute_query", {"data_source_id": big_source.pk, "query": "SELECT count(*) FROM customers"},
                   call_id="b"),
        text_reply("There are 4 customers."),
    ], tools=["execute_query"], sources=[big_source])
    assert execution.result["summary"] == "There are 4 customers."


def test_nul_in_a_users_answer_is_stored_escaped_and_the_run_goes_on(workspace, owner, sent):
    from executions.services import execution_respond

    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"], action_level="automated")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    question = {"interaction_type": "clarification_request", "message": "Which customer?"}
    assert execution_run_segment(execution_id=execution.pk,
                                 llm=ScriptedLLM([tool_reply("ask_user", question, "q1")])) == "awaiting_interaction"
    execution.refresh_from_db()
    execution_respond(execution=execution, user=owner, user_response="Ada\x00 \ud800Lovelace")
    llm = ScriptedLLM([text_reply("Noted.")])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    answer = ExecutionStep.objects.filter(execution=execution, tool_name="ask_user").order_by("-step_number")[0]
    assert answer.output["result"]["user_response"] == "Ada\\0 \ufffdLovelace"
