"""Pipelines pass artifact references, never the data: a file the upstream run saved is
named (id, name, version, type, table) in the downstream payload, and the downstream
agent reads it itself."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from executions import services as execution_services
from executions.models import Execution, ExecutionStep
from tests.artifacts.conftest import artifact_dirs  # noqa: F401 - shared fixture
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from triggers import tasks

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in worker threads

REPORT = "region,revenue\nNorth,220\nEast,200\nSouth,80\n"


@pytest.fixture(autouse=True)
def synchronous():
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"), \
            mock.patch.object(tasks.pipeline_handoff, "delay",
                              side_effect=lambda handoff_id: tasks.pipeline_handoff(handoff_id)):
        yield


def test_a_saved_file_is_handed_on_by_reference(workspace, owner, make_trigger, artifact_dirs):  # noqa: F811
    collect = make_agent(workspace=workspace, owner=owner, name="Collect", tools=["save_artifact"])
    analyse = make_agent(workspace=workspace, owner=owner, name="Analyse", tools=["load_artifact"])
    make_trigger(name="after-collect", agent=analyse, trigger_type="workflow",
                 prompt="Analyse the file {{ payload.upstream.artifacts.0.artifact_id }} "
                        "({{ payload.upstream.artifacts.0.name }}).",
                 config={"upstream_agent": str(collect.pk)})

    first = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="Collect revenue"))
    execution_services.execution_run_segment(execution_id=first.pk, llm=ScriptedLLM([
        tool_reply("save_artifact", {"name": "revenue.csv", "content": REPORT}), text_reply("Saved revenue.csv."),
    ]))
    execution_services.execution_post_process(execution_id=first.pk)

    second = Execution.objects.get(agent=analyse)
    [reference] = second.trigger_payload["upstream"]["artifacts"]
    saved_id = reference["artifact_id"]
    assert reference == {"artifact_id": saved_id, "name": "revenue.csv", "version": 1, "content_type": "text/csv",
                         "size": len(REPORT), "data_source_id": reference["data_source_id"], "table": "revenue"}
    assert "North" not in json.dumps(second.trigger_payload)  # the data itself never travels
    assert second.input_prompt == f"Analyse the file {saved_id} (revenue.csv)."

    execution_services.execution_run_segment(execution_id=second.pk, llm=ScriptedLLM([
        tool_reply("load_artifact", {"artifact_id": saved_id}), text_reply("North leads."),
    ]))
    observation = ExecutionStep.objects.get(execution=second, step_type="observation", tool_name="load_artifact")
    assert observation.output["result"]["text"] == REPORT
