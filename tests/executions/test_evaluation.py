"""Evaluating a version against what people decided: exact scores over a hand-built
history with known labels (docs/changing-safely.md)."""

from __future__ import annotations

import pytest

from agents import evaluations as agent_evaluations
from agents.evaluation_models import Evaluation, EvaluationRun
from executions.services.evaluation import evaluation_run
from tests.executions import durable_support
from tests.executions.evaluation_support import (
    CURIOUS,
    EXTRA,
    LEARNED,
    READ,
    UNREVIEWED_WRITE,
    WRITE,
    ScriptedModel,
    agent_for_history,
    history,
    version_with,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_calls():
    durable_support.CALLS.clear()
    yield
    durable_support.CALLS.clear()


@pytest.fixture
def agent(workspace, owner):
    return agent_for_history(workspace=workspace, owner=owner)


@pytest.fixture
def runs(agent, owner, editor):
    return history(agent=agent, owner=owner, approver=editor)


def evaluate(agent, version, owner, *, days: int = 14) -> Evaluation:
    evaluation = agent_evaluations.evaluation_create(agent=agent, version=version, actor=owner, days=days)
    assert evaluation_run(evaluation_id=evaluation.pk, llm=ScriptedModel()) == "done"
    evaluation.refresh_from_db()
    return evaluation


def rows_by_run(evaluation: Evaluation, runs) -> dict[str, dict]:
    by_id = {run.row["execution_id"]: run.row for run in EvaluationRun.objects.filter(evaluation=evaluation)}
    return {prompt: by_id[execution.pk] for prompt, execution in runs.items()}


def test_the_version_that_made_the_history_agrees_with_approvals_only(agent, owner, runs):
    evaluation = evaluate(agent, agent.versions.get(version=1), owner)

    assert evaluation.status == "done"
    assert (evaluation.runs_done, evaluation.runs_total) == (4, 4)
    # 2 approved calls still made; the 2 rejected ones proposed again; the edit proposed in its original form.
    assert evaluation.scores == {"approvals": 1.0, "rejections": 0.0, "edits": 0.0}
    assert evaluation.totals["outcomes"] == {
        "approved.still_makes": 2,
        "edited.proposes_original": 1,
        "rejected.still_proposes": 2,
    }
    assert evaluation.totals["same_answer"] == 4
    assert durable_support.CALLS == []  # nothing was dispatched: an evaluation never writes


def test_a_version_that_learned_from_the_reviews_scores_full_marks(agent, owner, runs):
    evaluation = evaluate(agent, version_with(agent, LEARNED), owner)

    assert evaluation.scores == {"approvals": 1.0, "rejections": 1.0, "edits": 1.0}
    rows = rows_by_run(evaluation, runs)
    assert rows["Record gamma"]["rejected"] == [
        {"tool": WRITE, "arguments": {"marker": "gamma"}, "occurrence": 1, "outcome": "no_longer_proposes"}
    ]
    assert rows["Record beta"]["edited"][0]["outcome"] == "proposes_edited"
    assert rows["Record beta"]["edited"][0]["edited_arguments"] == {"marker": "beta-fixed"}
    twice = rows["Record twice"]
    assert [(c["occurrence"], c["outcome"]) for c in twice["approved"]] == [(1, "still_makes")]
    assert [(c["occurrence"], c["outcome"]) for c in twice["rejected"]] == [(2, "no_longer_proposes")]
    assert rows["Record gamma"]["answer"] == "same"  # the answer text names the prompt only
    assert durable_support.CALLS == []


def test_a_version_that_reverses_a_rejected_write_scores_lower(agent, owner, runs):
    learned = evaluate(agent, version_with(agent, LEARNED), owner)
    reckless = evaluate(agent, agent.versions.get(version=1), owner)

    assert reckless.scores["rejections"] < learned.scores["rejections"]
    gamma = rows_by_run(reckless, runs)["Record gamma"]
    assert gamma["rejected"][0]["outcome"] == "still_proposes"


def test_a_different_read_is_said_and_its_labels_are_unknown(agent, owner, runs):
    evaluation = evaluate(agent, version_with(agent, CURIOUS), owner)

    alpha = rows_by_run(evaluation, runs)["Record alpha"]
    assert alpha["different_read"] == {"tool": READ, "arguments": {"marker": "n2"}}
    assert alpha["stopped"]
    assert alpha["answer"] == "none"
    assert alpha["approved"][0]["outcome"] == "unknown"
    # the unknown label is left out: one approved call (twice) is counted, not two
    assert evaluation.totals["outcomes"]["approved.still_makes"] == 1
    assert evaluation.totals["different_reads"] == 1
    assert evaluation.scores["approvals"] == 1.0
    assert durable_support.CALLS == []  # the read was never made


def test_a_new_write_nobody_reviewed_is_listed_never_made(agent, owner, runs):
    evaluation = evaluate(agent, version_with(agent, EXTRA), owner)

    alpha = rows_by_run(evaluation, runs)["Record alpha"]
    # act_with_approval: the new write would wait for an approval nobody gave
    assert alpha["new_writes"] == [{"tool": UNREVIEWED_WRITE, "arguments": {"marker": "log"}, "needs_approval": True}]
    assert alpha["approvals_added"] == 1
    assert alpha["approved"][0]["outcome"] == "still_makes"
    assert evaluation.totals["new_writes"] == 1
    assert evaluation.totals["approvals_added"] == 1
    assert durable_support.CALLS == []


def test_cost_and_turns_are_reported_per_run(agent, owner, runs):
    evaluation = evaluate(agent, version_with(agent, LEARNED), owner)

    rows = rows_by_run(evaluation, runs)
    gamma = rows["Record gamma"]
    assert gamma["turns"]["recorded"] == runs["Record gamma"].turn_count
    assert gamma["turns"]["replayed"] < gamma["turns"]["recorded"]  # it answers at once
    assert set(gamma["cost_usd"]) == {"recorded", "replayed"}


def test_pinned_runs_come_first_and_outside_the_window(agent, owner, runs):
    from executions.models import Execution

    gamma = runs["Record gamma"]
    Execution.objects.filter(pk=gamma.pk).update(finished_at=gamma.finished_at.replace(year=2000))
    agent_evaluations.test_set_pin(
        agent=agent, execution_id=gamma.pk, label="bad", note="rejected for a reason", actor=owner
    )

    evaluation = evaluate(agent, version_with(agent, LEARNED), owner, days=1)

    ordered = list(EvaluationRun.objects.filter(evaluation=evaluation).order_by("position"))
    assert ordered[0].execution_id == gamma.pk and ordered[0].pinned == "bad"
    assert ordered[0].row["rejected"][0]["outcome"] == "no_longer_proposes"
    assert len(ordered) == 4 and all(run.pinned == "" for run in ordered[1:])


def test_running_it_twice_does_the_work_once(agent, owner, runs):
    evaluation = evaluate(agent, agent.versions.get(version=1), owner)

    assert evaluation_run(evaluation_id=evaluation.pk, llm=ScriptedModel()) is None
    assert EvaluationRun.objects.filter(evaluation=evaluation).count() == 4


def test_an_empty_window_has_no_scores(agent, owner):
    evaluation = evaluate(agent, agent.versions.get(version=1), owner)

    assert evaluation.scores == {"approvals": None, "rejections": None, "edits": None}
    assert evaluation.totals["runs"] == 0
