"""The workspace storage quota (RIVER_STORAGE_QUOTA_BYTES) holds uploads and the files
runs save: a file that would take the workspace past it is a 413 naming the field and
leaves nothing behind; the quota counts the same bytes get_storage_info reports (files,
table files, stored run results), per workspace; two uploads racing for the last of the
quota cannot both get in."""

from __future__ import annotations

import io
import threading

import pytest
from django.db import connection

from agents.models import Agent, AgentVersion
from artifacts import services
from artifacts.errors import StorageQuotaExceeded
from artifacts.models import Artifact
from artifacts.quota import workspace_stored_bytes
from executions.models import Execution, ExecutionStep
from executions.services import execution_run_segment, execution_start, person_run_request
from executions.tools.data import storage_usage
from tests.artifacts.conftest import SALES_CSV, files_under, nothing_stored, upload
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)  # the race uses two real connections

NOTES = b"Quarterly notes.\n" * 60  # 1020 bytes, not a table


def refused_for_quota(response, field: str = "file") -> str:
    assert response.status_code == 413, response.content[:500]
    error = response.json()["error"]
    assert error["code"] == "storage_quota_exceeded"
    return " ".join(error["details"][field])


def test_an_upload_past_the_quota_is_413_and_the_earlier_files_stay(api_client_for, owner, workspace, artifact_dirs,
                                                                     settings):
    settings.RIVER_STORAGE_QUOTA_BYTES = 1500
    client = api_client_for(owner)
    first = upload(client, workspace, "notes.txt", NOTES)
    assert first.status_code == 201, first.content
    assert "480 bytes left, 1020 needed" in refused_for_quota(upload(client, workspace, "more.txt", NOTES))
    assert list(Artifact.objects.values_list("name", flat=True)) == ["notes.txt"]
    store, _sqlite = artifact_dirs
    assert len(files_under(store)) == 1
    # Deleting a file frees its bytes, and the same upload then fits.
    assert client.delete(f"/api/v1/artifacts/{first.json()['id']}/").status_code == 204
    assert upload(client, workspace, "more.txt", NOTES).status_code == 201


def test_the_table_file_of_a_csv_counts(api_client_for, owner, workspace, artifact_dirs, settings):
    """The CSV alone fits, the SQLite table imported from it does not: refused whole."""
    settings.RIVER_STORAGE_QUOTA_BYTES = len(SALES_CSV) + 100
    refused_for_quota(upload(api_client_for(owner), workspace, "sales.csv", SALES_CSV))
    assert nothing_stored(artifact_dirs)


def test_stored_run_results_count_and_other_workspaces_do_not(api_client_for, owner, outsider, workspace,
                                                              other_workspace, artifact_dirs, settings):
    agent = Agent.objects.create(workspace=workspace, name="A", business_function="customer_support", owner=owner)
    version = AgentVersion.objects.create(agent=agent, version=1, goal="g", instructions="i", action_level="read_only")
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=version, requested_by=owner,
                                   result={"summary": "x" * 3000})
    ExecutionStep.objects.create(execution=run, step_number=1, step_type="observation", output={"rows": "y" * 1000})
    used = workspace_stored_bytes(workspace_id=workspace.pk)
    assert used == storage_usage(workspace_id=workspace.pk).total_size_bytes  # the figure a run sees
    assert used > 4000
    settings.RIVER_STORAGE_QUOTA_BYTES = used + len(NOTES) - 1
    refused_for_quota(upload(api_client_for(owner), workspace, "notes.txt", NOTES))
    assert nothing_stored(artifact_dirs)
    # Another workspace's runs are not counted against this one, nor this one's against it.
    assert workspace_stored_bytes(workspace_id=other_workspace.pk) == 0
    assert upload(api_client_for(outsider), other_workspace, "notes.txt", NOTES).status_code == 201


def test_a_run_saving_past_the_quota_gets_a_validation_error_and_nothing_is_stored(owner, workspace, artifact_dirs,
                                                                                    settings, monkeypatch):
    from executions import tasks

    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)
    settings.RIVER_STORAGE_QUOTA_BYTES = 100
    agent = make_agent(workspace=workspace, owner=owner, tools=["save_artifact"])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="Export."))
    execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
        tool_reply("save_artifact", {"name": "report.txt", "content": "z" * 500}),
        text_reply("The workspace is full."),
    ]))
    step = ExecutionStep.objects.get(execution=execution, step_type="observation", tool_name="save_artifact")
    assert step.output["error"]["code"] == "VALIDATION_ERROR"
    assert "storage quota" in " ".join(step.output["error"]["details"]["content"])
    assert nothing_stored(artifact_dirs)


def test_two_uploads_racing_for_the_last_of_the_quota_cannot_both_get_in(owner, workspace, artifact_dirs, settings,
                                                                         monkeypatch):
    """Both uploads pass the early check. Each then waits, after its final check, for the
    other to arrive at the same point: without the workspace lock both would get there,
    both would be stored, and the quota would be exceeded. With it, the second waits for
    the first to commit, sees its file, and is refused."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL")
    settings.RIVER_STORAGE_QUOTA_BYTES = len(NOTES) + 500  # room for one of the two
    checked = threading.Barrier(2, timeout=3)
    calls = threading.local()
    real_check = services.storage_quota_check

    def check_then_meet(**kwargs):
        real_check(**kwargs)
        calls.count = getattr(calls, "count", 0) + 1
        if calls.count == 2:  # the final check, inside the transaction
            try:
                checked.wait()
            except threading.BrokenBarrierError:
                pass  # the other upload is held at the lock: the expected case

    monkeypatch.setattr(services, "storage_quota_check", check_then_meet)
    outcomes: list[str] = []

    def upload_one(name: str) -> None:
        try:
            services.artifact_create(workspace=workspace, stream=io.BytesIO(NOTES), file_name=name, created_by=owner)
            outcomes.append("stored")
        except StorageQuotaExceeded:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=upload_one, args=(f"notes-{i}.txt",)) for i in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["refused", "stored"]
    assert Artifact.objects.count() == 1
    store, _sqlite = artifact_dirs
    assert len(files_under(store)) == 1
