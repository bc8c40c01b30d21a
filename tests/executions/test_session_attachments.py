"""Files sent with a session's messages (docs/sessions.md#attachments): the ids must be
artifacts of the session's workspace (at most 10), else a 400 naming ``attachments`` and
nothing written; the run gets them (a placeholder naming each file in its prompt, the
tables queryable); the history names them in later turns; a hand-off passes them on."""

from __future__ import annotations

import pytest

from executions import services, tasks
from executions.models import Execution, ExecutionStep, SessionMessage
from executions.services import sessions
from tests.artifacts import conftest as artifact_fixtures
from tests.artifacts.conftest import SALES_CSV, upload
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

artifact_dirs = artifact_fixtures.artifact_dirs  # a store and SQLite directory of the test's own

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quiet_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Analyst", tools=["execute_query"])


@pytest.fixture
def session(workspace, agent, owner):
    return sessions.session_create(workspace=workspace, agent=agent, user=owner)


def test_a_csv_sent_in_a_session_is_queried_with_a_correct_aggregate(session, owner, workspace, api_client_for,
                                                                      artifact_dirs):
    client = api_client_for(owner)
    artifact = upload(client, workspace, "sales.csv", SALES_CSV, session=session.pk).json()
    sent = client.post(f"/api/v1/sessions/{session.pk}/messages",
                       {"content": "Revenue per region?", "attachments": [artifact["id"]]}, format="json")
    assert sent.status_code == 202, sent.json()
    run = Execution.objects.get(pk=sent.json()["execution_id"])
    # The run names the file by a placeholder (never its content) and may query its table.
    assert f"[Attached file 'sales.csv': artifact {artifact['id']}, version 1" in run.input_prompt
    assert run.context["artifact_ids"] == [artifact["id"]]
    query = f"SELECT region, SUM(amount) AS revenue FROM {artifact['table']} GROUP BY region ORDER BY region"
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([
        tool_reply("execute_query", {"data_source_id": artifact["data_source_id"], "query": query}),
        text_reply("North leads with 220."),
    ]))
    assert services.execution_post_process(execution_id=run.pk) is True
    observed = ExecutionStep.objects.get(execution=run, step_type="observation", tool_name="execute_query").output
    assert observed["result"]["rows"] == [["East", 200.0], ["North", 220.0], ["South", 80.0]]
    # The message keeps the ids and names the file; the stream's user_message lists it.
    [message] = client.get(f"/api/v1/sessions/{session.pk}/messages").json()["results"][:1]
    assert message["attachments"] == [artifact["id"]]
    assert message["references"]["attachments"][0]["name"] == "sales.csv"
    events = client.get(f"/api/v1/sessions/{session.pk}/events").json()
    assert events[0]["type"] == "user_message" and events[0]["attachments"] == [artifact["id"]]
    # The next turn reads the first one with the file's placeholder.
    _second, follow = sessions.session_message_send(session=session, user=owner, content="And the total?")
    turns = follow.context["session"]["turns"]
    assert "Revenue per region?" in turns[0]["question"] and "artifact " + str(artifact["id"]) in turns[0]["question"]


@pytest.mark.parametrize("attachments", [[999_999], "other-workspace", list(range(1, 12)), ["x"], [True]])
def test_bad_attachments_are_a_400_naming_the_field_and_nothing_is_written(session, owner, outsider, other_workspace,
                                                                           api_client_for, artifact_dirs, attachments):
    if attachments == "other-workspace":
        theirs = upload(api_client_for(outsider), other_workspace, "theirs.csv", SALES_CSV).json()
        attachments = [theirs["id"]]
    response = api_client_for(owner).post(f"/api/v1/sessions/{session.pk}/messages",
                                          {"content": "Look at this", "attachments": attachments}, format="json")
    assert response.status_code == 400, response.json()
    assert "attachments" in response.json()["error"]["details"]
    assert not SessionMessage.objects.filter(session=session).exists()
    assert not Execution.objects.filter(session=session).exists()


def test_a_queued_message_keeps_its_files_for_its_run(session, owner, workspace, api_client_for, artifact_dirs):
    artifact = upload(api_client_for(owner), workspace, "notes.txt", b"Q3 was good.").json()
    _first, run = sessions.session_message_send(session=session, user=owner, content="Hello")
    second, queued = sessions.session_message_send(session=session, user=owner, content="Read this",
                                                   attachments=[artifact["id"]])
    assert queued is None and second.attachments == [artifact["id"]]
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("Hi.")]))
    assert services.execution_post_process(execution_id=run.pk) is True
    second.refresh_from_db()
    later = Execution.objects.get(pk=second.execution_id)
    assert later.context["artifact_ids"] == [artifact["id"]]
    assert "read it with load_artifact" in later.input_prompt


def test_a_follow_up_queries_the_table_an_earlier_message_sent(session, owner, workspace, api_client_for,
                                                                artifact_dirs):
    """Message 1 carries a CSV; message 2 ("and the total?") carries nothing, yet its run
    may query that table: the files of earlier messages stay queryable in the session,
    without being named again in the new prompt. A file deleted since is left out."""
    from artifacts.models import Artifact
    from artifacts.services import artifact_delete
    from executions.services.load import request_build

    client = api_client_for(owner)
    sales = upload(client, workspace, "sales.csv", SALES_CSV, session=session.pk).json()
    notes = upload(client, workspace, "notes.txt", b"Q3 was good.", session=session.pk).json()
    _first, run = sessions.session_message_send(session=session, user=owner, content="Revenue per region?",
                                                attachments=[sales["id"], notes["id"]])
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("North leads.")]))
    assert services.execution_post_process(execution_id=run.pk) is True

    _second, follow = sessions.session_message_send(session=session, user=owner, content="And the total?")
    assert sorted(follow.context["artifact_ids"]) == sorted([sales["id"], notes["id"]])
    assert follow.input_prompt == "And the total?"  # not named again: the history does that
    assert sales["data_source_id"] in {s.data_source_id for s in request_build(follow).data_source_metadata}
    services.execution_run_segment(execution_id=follow.pk, llm=ScriptedLLM([
        tool_reply("execute_query", {"data_source_id": sales["data_source_id"],
                                     "query": f"SELECT SUM(amount) AS total FROM {sales['table']}"}),
        text_reply("500 in all."),
    ]))
    assert services.execution_post_process(execution_id=follow.pk) is True
    observed = ExecutionStep.objects.get(execution=follow, step_type="observation", tool_name="execute_query")
    assert observed.status == "completed", observed.error
    assert observed.output["result"]["rows"] == [[500.0]]

    artifact_delete(artifact=Artifact.objects.get(pk=notes["id"]))
    _third, later = sessions.session_message_send(session=session, user=owner, content="And per unit?")
    assert later.context["artifact_ids"] == [sales["id"]]


def test_another_sessions_files_are_not_queryable(session, owner, workspace, agent, api_client_for, artifact_dirs):
    client = api_client_for(owner)
    other = sessions.session_create(workspace=workspace, agent=agent, user=owner)
    sales = upload(client, workspace, "sales.csv", SALES_CSV).json()
    _message, run = sessions.session_message_send(session=other, user=owner, content="Look",
                                                  attachments=[sales["id"]])
    services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM([text_reply("Seen.")]))
    assert services.execution_post_process(execution_id=run.pk) is True
    _message, mine = sessions.session_message_send(session=session, user=owner, content="Totals?")
    assert "artifact_ids" not in mine.context
