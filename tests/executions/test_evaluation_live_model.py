"""An evaluation replays with the version's model through the real router and litellm,
here against the local fake OpenAI server (docs/changing-safely.md): only where the
version's run is replayed does it ask the model, and the scores follow its answers."""

from __future__ import annotations

import pytest

from agents import evaluations as agent_evaluations
from executions.services.evaluation import evaluation_run
from tests.executions import durable_support
from tests.executions.evaluation_support import WRITE, agent_for_history, recorded_run, version_with

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


@pytest.fixture
def model(fake_openai, settings):
    server = fake_openai()
    settings.RIVER_LLM_MODEL = "fake-model"
    settings.RIVER_LLM_BASE_URL = server.base_url
    return server


@pytest.fixture
def agent(workspace, owner, editor):
    made = agent_for_history(workspace=workspace, owner=owner)
    recorded_run(agent=made, owner=owner, approver=editor, prompt="Record gamma")  # people rejected the write
    durable_support.CALLS.clear()
    return made


def evaluate(agent, owner) -> dict:
    version = version_with(agent, "Never record gamma.")
    evaluation = agent_evaluations.evaluation_create(agent=agent, version=version, actor=owner, days=14)
    assert evaluation_run(evaluation_id=evaluation.pk) == "done"  # no llm given: the organization's router
    evaluation.refresh_from_db()
    return {"scores": evaluation.scores, "row": evaluation.runs.get().row}


def test_a_model_that_no_longer_proposes_the_rejected_write_agrees(agent, owner, model):
    model.text("I will not record gamma: it was rejected before.")

    result = evaluate(agent, owner)

    assert result["scores"]["rejections"] == 1.0
    assert result["row"]["rejected"][0]["outcome"] == "no_longer_proposes"
    assert result["row"]["answer"] == "different"
    assert len(model.requests) == 1
    system = next(m["content"] for m in model.requests[0]["messages"] if m["role"] == "system")
    assert "Never record gamma." in system  # the version's own instructions reached the model
    assert durable_support.CALLS == []


def test_a_model_that_proposes_it_again_disagrees_and_never_writes(agent, owner, model):
    model.tool_call(WRITE, {"marker": "gamma"}).text("Recorded.")

    result = evaluate(agent, owner)

    assert result["scores"]["rejections"] == 0.0
    assert result["row"]["rejected"][0]["outcome"] == "still_proposes"
    assert len(model.requests) == 2  # the recorded rejection was applied, and the model answered it
    assert durable_support.CALLS == []
