"""Through the engine: a policy on table ``canary`` holds whether the model's query or
write-back call spells it ``canary``, ``Canary``, ``public.canary`` or
``"public"."canary"``; the rows never reach the model and the write never runs."""

from __future__ import annotations

import sqlite3

import pytest

from datasources.selectors import data_source_prompt_metadata
from datasources.services import data_source_create, data_source_discover
from rivercore.contracts import DataSourceMetadata, StepType
from rivercore.runner import Engine, new_state, response_build
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import sqlite_count
from tests.executions import engine_support as support
from tests.factories import ScriptedLLM, text_reply, tool_reply

# Tool handlers run on a worker thread with its own database connection.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def canary_source(workspace, sqlite_file):
    conn = sqlite3.connect(sqlite_file)
    conn.executescript("CREATE TABLE canary (id INTEGER PRIMARY KEY, secret TEXT);"
                       "INSERT INTO canary VALUES (1, 'tweet');")
    conn.close()
    source = data_source_create(workspace=workspace, name="Canary", type="sqlite",
                                connection_config={"path": sqlite_file.name}, credentials={}, access_level="read_write")
    data_source_discover(data_source=source)
    return source


def _run(owner, workspace, source, *, policy: dict, call: tuple[str, dict]):
    request = support.request_for(tools=["execute_query", "write_back"], policies=[policy])
    request = request.model_copy(update={
        "user_context": request.user_context.model_copy(update={
            "user_id": owner.pk, "org_id": workspace.organization_id, "workspace_id": workspace.pk}),
        "data_source_metadata": [DataSourceMetadata.model_validate(data_source_prompt_metadata(data_source=source))],
    })
    name, arguments = call
    state, _ = new_state(request)
    llm = ScriptedLLM([tool_reply(name, {"data_source_id": source.pk, **arguments}, "c1"), text_reply("Done.")])
    outcome = Engine(llm=llm, sleep=lambda s: None).run(state)
    return response_build(state, outcome), llm


EXPORT_BLOCK = {"name": "No canary export", "policy_type": "data_export_limit",
                "conditions": {"expression": "table.name == 'canary'"}, "enforcement": "block"}


@pytest.mark.parametrize("spelling", ["canary", "Canary", '"CANARY"', "main.canary", '"main"."Canary"', "[Canary]"])
def test_query_rows_of_canary_never_reach_the_model(owner, workspace, canary_source, spelling):
    response, llm = _run(owner, workspace, canary_source, policy=EXPORT_BLOCK,
                         call=("execute_query", {"query": f"SELECT secret FROM {spelling}"}))
    checks = [s for s in response.steps if s.step_type == StepType.GOVERNANCE_CHECK and s.status == "blocked"]
    assert checks and checks[-1].output["policy_matched"] == "No canary export"
    told = " ".join(str(m.get("content")) for m in llm.requests[-1]["messages"])
    assert "tweet" not in told


WRITE_BLOCK = {"name": "Canary is read only", "conditions": {
    "expression": "tool.name == 'write_back' AND args.table_name == 'canary'"}, "enforcement": "block"}


@pytest.mark.parametrize("spelling", ["canary", "CANARY", '"Canary"', "main.canary", "[canary]"])
def test_write_back_to_canary_is_blocked_in_every_spelling(owner, workspace, canary_source, sqlite_file, spelling):
    arguments = {"table_name": spelling, "operation": "update", "data": {"secret": "x"}, "conditions": {"id": 1}}
    response, _ = _run(owner, workspace, canary_source, policy=WRITE_BLOCK, call=("write_back", arguments))
    checks = [s for s in response.steps if s.step_type == StepType.GOVERNANCE_CHECK]
    assert checks[0].governance_decision == "BLOCKED"
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM canary WHERE secret = 'tweet'") == 1
