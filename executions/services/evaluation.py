"""Evaluating an agent version against what people decided (docs/changing-safely.md).

Every approval, edit and rejection in a recorded run is a label a person gave. An
evaluation what-if replays the version over the agent's pinned runs (its test set,
first) and the finished runs of a window of days (``replay.version_what_if``: recorded
tool results where the calls are the same, no live data access, never a write), and
compares what the version proposes with those labels:

- a call people **approved** is agreed with when the version still makes it;
- a call people **rejected** is agreed with when the version no longer proposes it;
- a call people **edited** is agreed with when the version proposes the edited form.

A call is the tool, its canonical arguments and its occurrence in the run (the n-th
same call), as replays name pauses. Where a replay stopped (a different read, or a
pause no recorded decision answers) before a labelled call came up, that label is
``unknown`` and left out of the scores: the replay cannot say what the version would
have done next. Scores are agreed / (agreed + disagreed), or None with nothing to count.

Runs in a Celery task (``executions.evaluate_version``); progress is the evaluation
row's ``runs_done``, each run's row appended as it is replayed.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from agents import evaluations as agent_evaluations
from agents.evaluation_models import Evaluation
from agents.evaluation_selectors import evaluation_for_task, test_set
from executions.models import Execution
from executions.services import replay
from executions.services.segment import state_load
from rivercore.contracts import Step, StepType
from rivercore.errors import RiverError
from telemetry.aftercommit import task_send_on_commit

logger = logging.getLogger("river.executions")

EVALUATE_TASK = "executions.evaluate_version"  # executions.tasks, sent by name
APPROVED, REJECTED, EDITED = "approved", "rejected", "edited_approved"
UNKNOWN = "unknown"


def _canonical(arguments: object) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)


def evaluation_start(*, agent, version, actor, days: int) -> Evaluation:
    """Create a queued evaluation and send its task once it is committed (a broker
    that is down leaves it queued: counted and logged, never raised)."""
    with transaction.atomic():
        evaluation = agent_evaluations.evaluation_create(agent=agent, version=version, actor=actor, days=days)
        task_send_on_commit(current_app.tasks[EVALUATE_TASK], str(evaluation.pk), subject=f"evaluation {evaluation.pk}")
    return evaluation


def evaluation_runs_select(*, evaluation: Evaluation) -> list[tuple[Execution, str]]:
    """The runs to replay, each with its test-set label ("" when not pinned): the
    agent's pinned runs first, in pin order, then its finished runs of the window,
    newest first, at most ``EVALUATION_MAX_RUNS``."""
    pins = {pin.execution_id: pin.label for pin in test_set(agent=evaluation.agent)}
    related = ("workspace", "agent", "agent_version")
    pinned = {
        run.pk: run
        for run in Execution.objects.filter(
            agent_id=evaluation.agent_id, workspace_id=evaluation.workspace_id, pk__in=list(pins)
        ).select_related(*related)
    }
    since = timezone.now() - timedelta(days=evaluation.days)
    window = (
        Execution.objects.filter(
            agent_id=evaluation.agent_id,
            workspace_id=evaluation.workspace_id,
            status__in=replay.REPLAYABLE,
            finished_at__gte=since,
        )
        .exclude(pk__in=list(pins))
        .select_related(*related)
        .order_by("-finished_at", "-id")[: agent_evaluations.EVALUATION_MAX_RUNS]
    )
    return [(pinned[pk], label) for pk, label in pins.items() if pk in pinned] + [(run, "") for run in window]


def labels_of(steps: list[Step]) -> list[dict[str, Any]]:
    """The decisions people gave in a recorded run: each approval pause that was
    approved, rejected or edited, with the call it paused on."""
    pauses, _calls = replay.recorded_pauses(steps)
    found = []
    for pause in pauses:
        view = pause.decision_view() if pause.kind == "approval" else None
        if not view or view.get("status") not in (APPROVED, REJECTED, EDITED):
            continue
        found.append(
            {
                "tool": pause.call.tool,
                "arguments": pause.call.arguments,
                "occurrence": pause.call.occurrence,
                "decision": view["status"],
                "edited_arguments": view.get("modified_args"),
            }
        )
    return found


def _replayed_cost_and_turns(rows: list[dict[str, Any]]) -> tuple[float, int]:
    cost, turns = 0.0, 0
    for row in rows:
        output = row.get("output") if isinstance(row.get("output"), dict) else {}
        if row.get("step_type") == StepType.REASONING.value and output.get("cost_usd") is not None:
            cost += float(output["cost_usd"])
        turns = max(turns, int(row.get("turn") or 0))
    return round(cost, 6), turns


def run_row(*, execution: Execution, recorded: list[Step], result: dict[str, Any]) -> dict[str, Any]:
    """One run's comparison of the replay with the labels of its recording."""
    stopped = bool(result["stopped"])
    proposed = Counter(
        (c["tool"], _canonical(c.get("arguments") or {})) for c in result["diff"]["tool_calls"]["replayed"]
    )
    approved, rejected, edited, reviewed = [], [], [], set()
    for label in labels_of(recorded):
        key = (label["tool"], _canonical(label["arguments"]))
        reviewed.add(key)
        makes = proposed[key] >= label["occurrence"]
        call = {"tool": label["tool"], "arguments": label["arguments"], "occurrence": label["occurrence"]}
        if label["decision"] == APPROVED:
            outcome = "still_makes" if makes else (UNKNOWN if stopped else "no_longer_makes")
            approved.append({**call, "outcome": outcome})
        elif label["decision"] == REJECTED:
            outcome = "still_proposes" if makes else (UNKNOWN if stopped else "no_longer_proposes")
            rejected.append({**call, "outcome": outcome})
        else:
            edited_key = (label["tool"], _canonical(label["edited_arguments"] or {}))
            reviewed.add(edited_key)
            if proposed[edited_key] >= 1:
                outcome = "proposes_edited"
            elif makes:
                outcome = "proposes_original"
            else:
                outcome = UNKNOWN if stopped else "proposes_neither"
            edited.append({**call, "edited_arguments": label["edited_arguments"], "outcome": outcome})
    new_writes = [w for w in result["would_write"] if (w["tool"], _canonical(w["arguments"])) not in reviewed]
    paused = result.get("paused_on") or {}
    if paused.get("kind") == "approval" and "new_call" in (paused.get("changed") or []):
        call = paused.get("replayed") or {}
        if (call.get("tool"), _canonical(call.get("arguments") or {})) not in reviewed:
            new_writes.append({"tool": call.get("tool"), "arguments": call.get("arguments"), "needs_approval": True})
    answer = result["diff"]["answer"]
    approvals = result["diff"]["approvals_needed"]
    cost, turns = _replayed_cost_and_turns(result["steps"])
    return {
        "execution_id": execution.pk,
        "answer": "none" if answer["replayed"] is None else ("different" if answer["changed"] else "same"),
        "identical": result["diff"]["identical"],
        "status": result["status"],
        "stopped": result["stopped"],
        "different_read": result.get("different_read"),
        "approved": approved,
        "rejected": rejected,
        "edited": edited,
        "new_writes": new_writes,
        "approvals_added": max(0, approvals["replayed"] - approvals["recorded"]),
        "cost_usd": {"recorded": float(execution.cost_usd or 0), "replayed": cost},
        "turns": {"recorded": execution.turn_count, "replayed": turns},
    }


def _ratio(agreed: int, disagreed: int) -> float | None:
    return round(agreed / (agreed + disagreed), 4) if agreed + disagreed else None


# The row keys of a replayed run that hold people's labelled calls.
LABEL_KINDS = ("approved", "rejected", "edited")


def scores_and_totals(rows: list[dict[str, Any]]) -> tuple[dict[str, float | None], dict[str, Any]]:
    counted = [row for row in rows if "skipped" not in row]
    outcomes: Counter[str] = Counter()
    for row in counted:
        for kind in LABEL_KINDS:
            for item in row[kind]:
                outcomes[f"{kind}.{item['outcome']}"] += 1
    scores = {
        "approvals": _ratio(outcomes["approved.still_makes"], outcomes["approved.no_longer_makes"]),
        "rejections": _ratio(outcomes["rejected.no_longer_proposes"], outcomes["rejected.still_proposes"]),
        "edits": _ratio(
            outcomes["edited.proposes_edited"],
            outcomes["edited.proposes_original"] + outcomes["edited.proposes_neither"],
        ),
    }
    totals = {
        "runs": len(rows),
        "runs_skipped": len(rows) - len(counted),
        "same_answer": sum(1 for row in counted if row["answer"] == "same"),
        "different_answer": sum(1 for row in counted if row["answer"] == "different"),
        "stopped": sum(1 for row in counted if row["stopped"]),
        "different_reads": sum(1 for row in counted if row["different_read"]),
        "outcomes": dict(sorted(outcomes.items())),
        "new_writes": sum(len(row["new_writes"]) for row in counted),
        "approvals_added": sum(row["approvals_added"] for row in counted),
        "cost_usd": {
            "recorded": round(sum(row["cost_usd"]["recorded"] for row in counted), 6),
            "replayed": round(sum(row["cost_usd"]["replayed"] for row in counted), 6),
        },
        "turns": {
            "recorded": sum(row["turns"]["recorded"] for row in counted),
            "replayed": sum(row["turns"]["replayed"] for row in counted),
        },
    }
    return scores, totals


def evaluation_run(*, evaluation_id, llm=None) -> str | None:
    """Replay the evaluation's runs and record their rows and the scores. Safe to run
    twice: only the worker that moves it from queued to running does the work."""
    evaluation = evaluation_for_task(evaluation_id=evaluation_id)
    if evaluation is None or evaluation.status != Evaluation.Status.QUEUED:
        return None
    runs = evaluation_runs_select(evaluation=evaluation)
    if not agent_evaluations.evaluation_claim(evaluation_id=evaluation.pk, runs_total=len(runs)):
        return None
    rows: list[dict[str, Any]] = []
    try:
        for position, (execution, pinned) in enumerate(runs):
            row = _one_run(execution=execution, version=evaluation.version, llm=llm)
            row["pinned"] = pinned or None
            rows.append(row)
            agent_evaluations.evaluation_run_record(
                evaluation_id=evaluation.pk, position=position, execution_id=execution.pk, pinned=pinned, row=row
            )
        scores, totals = scores_and_totals(rows)
        agent_evaluations.evaluation_finish(evaluation_id=evaluation.pk, scores=scores, totals=totals)
    except Exception as exc:
        logger.exception("evaluation %s failed", evaluation.pk)
        agent_evaluations.evaluation_fail(evaluation_id=evaluation.pk, error=f"{type(exc).__name__}")
        return Evaluation.Status.FAILED.value
    return Evaluation.Status.DONE.value


def _one_run(*, execution: Execution, version, llm) -> dict[str, Any]:
    try:
        result = replay.version_what_if(execution, version=version, llm=llm)
        recorded = state_load(execution).steps
    except RiverError as exc:  # not finished, cancelled, too long: said, not scored
        return {"execution_id": execution.pk, "skipped": exc.message}
    except Exception as exc:  # one run the engine could not replay never sinks the others
        logger.exception("evaluation: run %s could not be replayed", execution.pk)
        return {"execution_id": execution.pk, "skipped": f"the replay failed ({type(exc).__name__})"}
    return run_row(execution=execution, recorded=recorded, result=result)
