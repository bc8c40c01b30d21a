"""Artifacts in real runs (durable path, scripted model): an uploaded CSV or workbook
attached to a run is queried through execute_query with the guard and the caps of any
source; load_artifact reads text files of the run's workspace only; save_artifact is a
governed write whose file is referenced, never copied, in the run's result."""

from __future__ import annotations

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create
from executions import tasks
from executions.models import Execution, ExecutionStep
from executions.services import execution_run_segment, execution_start, person_run_request
from rivercore.errors import InvalidInput
from tests.artifacts.conftest import SALES_CSV, upload, xlsx_bytes
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in worker threads


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _observation(execution: Execution, tool: str) -> dict:
    return ExecutionStep.objects.get(execution=execution, step_type="observation", tool_name=tool).output


def _run(execution: Execution, replies: list) -> tuple[Execution, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    execution_run_segment(execution_id=execution.pk, llm=llm)
    execution.refresh_from_db()
    return execution, llm


def test_an_uploaded_csv_is_queried_with_a_correct_aggregate(api_client_for, owner, workspace, artifact_dirs, sent):
    client = api_client_for(owner)
    artifact = upload(client, workspace, "sales.csv", SALES_CSV).json()
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"])
    started = client.post(f"/api/v1/agents/{agent.pk}/run",
                          {"input_prompt": "Revenue per region?", "artifacts": [artifact["id"]]})
    assert started.status_code == 202, started.json()
    execution = Execution.objects.get(pk=started.json()["execution_id"])
    query = f"SELECT region, SUM(amount) AS revenue, COUNT(*) AS orders FROM {artifact['table']} " \
            "GROUP BY region ORDER BY region"
    execution, llm = _run(execution, [
        tool_reply("execute_query", {"data_source_id": artifact["data_source_id"], "query": query}),
        text_reply("North leads with 220."),
    ])
    assert execution.status == Execution.Status.COMPLETED
    result = _observation(execution, "execute_query")["result"]
    assert result["columns"] == ["region", "revenue", "orders"]
    assert result["rows"] == [["East", 200.0, 1], ["North", 220.0, 2], ["South", 80.0, 1]]
    assert result["tables"] == ["sales"]
    prompt = "\n".join(str(m.get("content")) for m in llm.requests[0]["messages"])
    assert f"Data source {artifact['data_source_id']}: Artifact {artifact['id']}: sales.csv" in prompt
    assert f"artifact {artifact['id']}, version 1" in execution.input_prompt  # the placeholder naming the file
    assert "North,120.50" not in execution.input_prompt  # a reference, never the content


def test_the_guard_applies_to_an_artifact_table(owner, workspace, artifact_dirs, sent):
    artifact = _upload_service(workspace, owner, "sales.csv", SALES_CSV)
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"])
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="go", attachments=[artifact.pk]))
    execution, _ = _run(execution, [
        tool_reply("execute_query", {"data_source_id": artifact.data_source_id,
                                     "query": "DELETE FROM sales WHERE 1 = 1"}),
        tool_reply("execute_query", {"data_source_id": artifact.data_source_id,
                                     "query": "SELECT name FROM sqlite_master"}, call_id="call_2"),
        text_reply("refused twice"),
    ])
    errors = [step.output["error"]["code"] for step in ExecutionStep.objects.filter(
        execution=execution, step_type="observation", tool_name="execute_query").order_by("step_number")]
    assert errors == ["VALIDATION_ERROR", "VALIDATION_ERROR"]
    assert Artifact.objects.get().data_source.schema_cache[0]["row_estimate"] == 4  # nothing was deleted


def test_a_workbook_sheet_is_queried_too(owner, workspace, artifact_dirs, sent):
    artifact = _upload_service(workspace, owner, "plan.xlsx", xlsx_bytes({
        "Actuals": [["Region", "Amount"], ["North", 10], ["North", 5.5], ["South", 3]],
        "Targets": [["Region", "Target"], ["North", 20], ["South", 4]],
    }))
    assert artifact.tables == ["actuals", "targets"] and artifact.table == "actuals"
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"])
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="Against target?", attachments=[artifact.pk]))
    query = ("SELECT a.region, SUM(a.amount) AS actual, MAX(t.target) AS target FROM actuals a "
             "JOIN targets t ON t.region = a.region GROUP BY a.region ORDER BY a.region")
    execution, _ = _run(execution, [
        tool_reply("execute_query", {"data_source_id": artifact.data_source_id, "query": query}),
        text_reply("done"),
    ])
    assert _observation(execution, "execute_query")["result"]["rows"] == [["North", 15.5, 20], ["South", 3.0, 4]]


def test_an_artifact_not_attached_to_the_run_cannot_be_queried(owner, workspace, artifact_dirs, sent):
    artifact = _upload_service(workspace, owner, "sales.csv", SALES_CSV)
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    execution, _ = _run(execution, [
        tool_reply("execute_query", {"data_source_id": artifact.data_source_id, "query": "SELECT 1 FROM sales"}),
        text_reply("no"),
    ])
    error = _observation(execution, "execute_query")["error"]
    assert error["code"] == "GOVERNANCE_BLOCKED" and "not bound to this agent" in error["message"]
    assert "rows" not in str(_observation(execution, "execute_query"))


def test_a_run_cannot_attach_another_workspaces_artifact(owner, outsider, workspace, other_workspace,
                                                         artifact_dirs, api_client_for):
    theirs = _upload_service(other_workspace, outsider, "secret.csv", SALES_CSV)
    agent = make_agent(workspace=workspace, owner=owner, tools=["execute_query"])
    with pytest.raises(InvalidInput) as caught:
        execution_start(agent=agent, request=person_run_request(
            agent=agent, user=owner, prompt="go", attachments=[theirs.pk]))
    assert "artifacts" in caught.value.details
    response = api_client_for(owner).post(f"/api/v1/agents/{agent.pk}/run", {"artifacts": [theirs.pk]})
    assert response.status_code == 400 and "artifacts" in response.json()["error"]["details"]
    assert not Execution.objects.exists()


def test_load_artifact_reads_text_of_the_runs_workspace_only(owner, outsider, workspace, other_workspace,
                                                             artifact_dirs, sent):
    notes = _upload_service(workspace, owner, "notes.md", b"# Q1\nChurn fell to 2 %.\n")
    theirs = _upload_service(other_workspace, outsider, "notes.md", b"# Their secret\n")
    agent = make_agent(workspace=workspace, owner=owner, tools=["load_artifact"])
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="What do the notes say?"))
    execution, _ = _run(execution, [
        tool_reply("load_artifact", {"name": "notes.md"}),
        tool_reply("load_artifact", {"artifact_id": theirs.pk}, call_id="call_2"),
        tool_reply("load_artifact", {"artifact_id": notes.pk, "offset": 5, "max_chars": 5}, call_id="call_3"),
        text_reply("Churn fell."),
    ])
    steps = list(ExecutionStep.objects.filter(execution=execution, step_type="observation",
                                              tool_name="load_artifact").order_by("step_number"))
    first, foreign, paged = (step.output for step in steps)
    assert first["result"]["text"] == "# Q1\nChurn fell to 2 %.\n" and first["result"]["artifact_id"] == notes.pk
    assert foreign["error"]["code"] == "NOT_FOUND" and "secret" not in str(foreign)
    assert (paged["result"]["text"], paged["result"]["truncated"]) == ("Churn", True)


def test_save_artifact_writes_a_file_referenced_by_the_run(owner, workspace, artifact_dirs, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["save_artifact"])
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=owner, prompt="Export the top regions."))
    execution, _ = _run(execution, [
        tool_reply("save_artifact", {"name": "top_regions.csv", "content": "region,revenue\nNorth,220\nEast,200\n"}),
        text_reply("Saved."),
    ])
    assert execution.status == Execution.Status.COMPLETED
    saved = Artifact.objects.get()
    assert (saved.name, saved.created_by_execution_id, saved.created_by_id, saved.tables) == (
        "top_regions.csv", execution.pk, owner.pk, ["top_regions"])
    [reference] = execution.result["output_artifacts"]
    assert reference == {"type": "artifact", "tool_name": "save_artifact", "call_id": "call_1",
                         "artifact_id": saved.pk, "name": "top_regions.csv", "version": 1,
                         "content_type": "text/csv", "data_source_id": saved.data_source_id, "table": "top_regions"}


def test_save_artifact_is_governed_as_a_write(owner, workspace, artifact_dirs, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["save_artifact"], action_level="read_only")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="Export."))
    execution, _ = _run(execution, [
        tool_reply("save_artifact", {"name": "x.txt", "content": "hello"}),
        text_reply("Could not save."),
    ])
    assert not Artifact.objects.exists()
    assert ExecutionStep.objects.filter(execution=execution, step_type="governance_check",
                                        tool_name="save_artifact", governance_decision="BLOCKED").exists()


def test_save_artifact_refuses_bad_content_and_stores_nothing(owner, workspace, artifact_dirs, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["save_artifact"])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="Export."))
    execution, _ = _run(execution, [
        tool_reply("save_artifact", {"name": "data.json", "content": "{not json"}),
        tool_reply("save_artifact", {"name": "../../escape.sh", "content": "rm -rf /"}, call_id="call_2"),
        text_reply("Could not save."),
    ])
    errors = [step.output["error"] for step in ExecutionStep.objects.filter(
        execution=execution, step_type="observation", tool_name="save_artifact").order_by("step_number")]
    assert [e["code"] for e in errors] == ["VALIDATION_ERROR", "VALIDATION_ERROR"]
    assert "content" in errors[0]["details"] and "content" in errors[1]["details"]
    assert not Artifact.objects.exists()
    store, sqlite = artifact_dirs
    assert not any(store.rglob("*")) and not any(p.is_file() for p in sqlite.rglob("*"))


def _upload_service(workspace, user, name: str, content: bytes) -> Artifact:
    import io

    return artifact_create(workspace=workspace, stream=io.BytesIO(content), file_name=name, created_by=user)
