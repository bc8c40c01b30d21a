"""Pages of evaluations and the promotion gate (docs/changing-safely.md): each version's
latest evaluation next to Deploy on the agent page, an Evaluate button, an admin's
override with a reason, the workspace's minimum scores, an evaluation's page (its
progress while it runs, then its scores and runs, pinned ones first), and the pin
button of a run's page.

Role rules as in the API: evaluating, pinning and deploying need ``agent:create``;
overriding the gate and setting its minimums need ``policy:create``.
"""

from __future__ import annotations

import json
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from agents.evaluation_selectors import (
    evaluation_get_for_user,
    evaluation_runs,
    evaluations_latest_by_version,
    promotion_gate_get,
    test_set_pin_of_run,
)
from agents.evaluations import (
    EVALUATION_DEFAULT_DAYS,
    EVALUATION_MAX_DAYS,
    OVERRIDE_REASON_MAX,
    promotion_gate_set,
    promotion_gate_shortfalls,
    test_set_pin,
    test_set_unpin,
)
from agents.selectors import agent_get_with_permissions, agent_version_get
from agents.services import agent_version_deploy
from executions.selectors import execution_get_for_user
from executions.services.evaluation import evaluation_start
from rivercore.errors import RiverError
from tenancy.permissions import AGENT_CREATE, POLICY_CREATE
from web.page_tools import or_404, page_login_required, require

SCORE_LABELS = {"approvals": "Approvals", "rejections": "Rejections", "edits": "Edits"}


class EvaluateForm(forms.Form):
    days = forms.IntegerField(
        min_value=1, max_value=EVALUATION_MAX_DAYS, initial=EVALUATION_DEFAULT_DAYS, label="Days of runs"
    )


class OverrideForm(forms.Form):
    override_reason = forms.CharField(
        max_length=OVERRIDE_REASON_MAX, label="Reason for deploying anyway", widget=forms.Textarea(attrs={"rows": 2})
    )


class GateForm(forms.Form):
    """Minimums as percentages (0-100); empty means not checked."""

    min_approvals = forms.DecimalField(
        min_value=0, max_value=100, decimal_places=1, required=False, label="Agreement with approvals (%)"
    )
    min_rejections = forms.DecimalField(
        min_value=0, max_value=100, decimal_places=1, required=False, label="Agreement with rejections (%)"
    )
    min_edits = forms.DecimalField(
        min_value=0, max_value=100, decimal_places=1, required=False, label="Agreement with edits (%)"
    )


class PinForm(forms.Form):
    label = forms.ChoiceField(choices=[("good", "Good example"), ("bad", "Bad example")])
    note = forms.CharField(max_length=500, required=False)


def _scores_view(scores: dict | None) -> list[dict]:
    scores = scores or {}
    return [
        {
            "name": name,
            "label": label,
            "value": scores.get(name),
            "percent": None if scores.get(name) is None else round(float(scores[name]) * 100),
        }
        for name, label in SCORE_LABELS.items()
    ]


def agent_evaluation_context(*, agent, versions, granted) -> dict:
    """For the agent page: each shown version gets ``latest_evaluation``,
    ``evaluation_scores`` and ``gate_shortfalls`` (what the gate would refuse), and
    the page the gate's minimums and the forms."""
    latest = evaluations_latest_by_version(agent=agent)
    gate = promotion_gate_get(workspace_id=agent.workspace_id)
    minimums = gate.minimums() if gate else {}
    for version in versions:
        evaluation = latest.get(version.pk)
        version.latest_evaluation = evaluation
        version.evaluation_scores = _scores_view(evaluation.scores if evaluation else None)
        if not minimums or version.pk == agent.current_version_id:
            version.gate_shortfalls = []
        elif evaluation is None or evaluation.status != "done":
            version.gate_shortfalls = ["no finished evaluation"]
        else:
            version.gate_shortfalls = [
                f"{key.split('.', 1)[1]} {text[0]}"
                for key, text in promotion_gate_shortfalls(minimums=minimums, scores=evaluation.scores).items()
            ]
    return {
        "gate_minimums": [
            {"label": SCORE_LABELS[name], "percent": round(value * 100, 1)} for name, value in minimums.items()
        ],
        "gate_form": GateForm(
            initial={f"min_{name}": Decimal(str(round(value * 100, 1))) for name, value in minimums.items()}
        ),
        "may_set_gate": POLICY_CREATE in granted,
        "may_override": POLICY_CREATE in granted,
        "evaluate_form": EvaluateForm(),
        "override_form": OverrideForm(),
    }


def _agent(request, agent_id):
    return or_404(agent_get_with_permissions, user=request.user, agent_id=agent_id)


@require_POST
@page_login_required
def agent_evaluate(request, agent_id, version):
    agent, granted = _agent(request, agent_id)
    require(granted, AGENT_CREATE)
    chosen = or_404(agent_version_get, agent=agent, version=version)
    form = EvaluateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not evaluated: " + " ".join(form.errors.get("days", ["invalid days"])))
        return redirect("agent-page", agent_id=agent.pk)
    evaluation = evaluation_start(agent=agent, version=chosen, actor=request.user, days=form.cleaned_data["days"])
    return redirect("evaluation-page", evaluation_id=evaluation.pk)


@require_POST
@page_login_required
def agent_deploy_override(request, agent_id, version):
    agent, granted = _agent(request, agent_id)
    require(granted, AGENT_CREATE)
    require(granted, POLICY_CREATE)
    chosen = or_404(agent_version_get, agent=agent, version=version)
    form = OverrideForm(request.POST)
    if not form.is_valid() or not form.cleaned_data["override_reason"].strip():
        messages.error(request, f"Version {chosen.version} was not deployed: an override needs a reason.")
        return redirect("agent-page", agent_id=agent.pk)
    try:
        agent_version_deploy(
            agent=agent, version=chosen, actor=request.user, override_reason=form.cleaned_data["override_reason"]
        )
    except RiverError as exc:
        messages.error(request, f"Version {chosen.version} was not deployed: {exc.message}")
    else:
        messages.success(request, f"Version {chosen.version} is deployed (gate overridden; the reason is audited).")
    return redirect("agent-page", agent_id=agent.pk)


@require_POST
@page_login_required
def agent_promotion_gate(request, agent_id):
    agent, granted = _agent(request, agent_id)
    require(granted, POLICY_CREATE)
    form = GateForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{form.fields[name].label}: {' '.join(errors)}" for name, errors in form.errors.items())
        messages.error(request, f"The promotion gate was not saved: {problems}")
        return redirect("agent-page", agent_id=agent.pk)
    minimums = {name: (None if value is None else value / 100) for name, value in form.cleaned_data.items()}
    try:
        promotion_gate_set(workspace=agent.workspace, actor=request.user, **minimums)
    except RiverError as exc:
        messages.error(request, f"The promotion gate was not saved: {exc.message}")
    else:
        messages.success(request, "Promotion gate saved: deploys of this workspace's agents are checked against it.")
    return redirect("agent-page", agent_id=agent.pk)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _run_view(row: dict) -> dict:
    """A run's row with each call's arguments as compact JSON text, as people type them."""
    for kind in ("approved", "rejected", "edited", "new_writes"):
        row[kind] = [
            {
                **call,
                "arguments": _json(call.get("arguments")),
                **({"edited_arguments": _json(call["edited_arguments"])} if "edited_arguments" in call else {}),
            }
            for call in row.get(kind) or []
        ]
    if row.get("different_read"):
        row["different_read"] = {**row["different_read"], "arguments": _json(row["different_read"].get("arguments"))}
    return row


def _evaluation_context(evaluation) -> dict:
    runs = [_run_view({**run.row, "pinned": run.pinned}) for run in evaluation_runs(evaluation=evaluation)]
    progress = evaluation.runs_done * 100 // evaluation.runs_total if evaluation.runs_total else 0
    return {
        "evaluation": evaluation,
        "scores": _scores_view(evaluation.scores),
        "totals": evaluation.totals or {},
        "runs": runs,
        "progress": progress,
    }


@require_GET
@page_login_required
def evaluation_page(request, evaluation_id):
    evaluation = or_404(evaluation_get_for_user, user=request.user, evaluation_id=evaluation_id)
    context = _evaluation_context(evaluation)
    if request.headers.get("HX-Request"):
        return render(request, "evaluations/_body.html", context)
    return render(request, "evaluations/detail.html", context)


def run_pin_context(*, user, execution) -> dict:
    """For the run page: whether the run is pinned to its agent's test set, and
    whether the user may pin it."""
    _agent_row, granted = agent_get_with_permissions(user=user, agent_id=execution.agent_id)
    return {
        "test_set_pin": test_set_pin_of_run(agent_id=execution.agent_id, execution_id=execution.pk),
        "may_pin": AGENT_CREATE in granted and execution.is_terminal,
        "pin_form": PinForm(),
    }


@require_POST
@page_login_required
def run_pin(request, execution_id):
    execution = or_404(execution_get_for_user, user=request.user, execution_id=execution_id)
    agent, granted = _agent(request, execution.agent_id)
    require(granted, AGENT_CREATE)
    if request.POST.get("unpin"):
        test_set_unpin(agent=agent, execution_id=execution.pk, actor=request.user)
        messages.success(request, "The run is no longer in the agent's test set.")
        return redirect("run-page", execution_id=execution.pk)
    form = PinForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not pinned: choose good or bad; a note is at most 500 characters.")
        return redirect("run-page", execution_id=execution.pk)
    try:
        test_set_pin(
            agent=agent,
            execution_id=execution.pk,
            label=form.cleaned_data["label"],
            note=form.cleaned_data["note"],
            actor=request.user,
        )
    except RiverError as exc:
        messages.error(request, f"Not pinned: {exc.message}")
    else:
        messages.success(request, "Pinned: every evaluation of this agent replays this run first.")
    return redirect("run-page", execution_id=execution.pk)


urlpatterns = [
    path("agents/<str:agent_id>/versions/<int:version>/evaluate", agent_evaluate, name="agent-evaluate"),
    path(
        "agents/<str:agent_id>/versions/<int:version>/deploy-override",
        agent_deploy_override,
        name="agent-deploy-override",
    ),
    path("agents/<str:agent_id>/promotion-gate", agent_promotion_gate, name="agent-promotion-gate"),
    path("evaluations/<str:evaluation_id>/", evaluation_page, name="evaluation-page"),
    path("runs/<int:execution_id>/pin", run_pin, name="run-pin"),
]
