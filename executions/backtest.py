"""The policy backtest over recorded runs (docs/changing-safely.md "Backtest a policy").

Every tool call the workspace's runs asked for in the window (their ``tool_call``
steps, as recorded) is decided twice by ``governance.checker.check_tool_call``, the
evaluator the gate uses: with the policies active now, and with the proposed change
applied. Nothing is dispatched, no data source is touched and no model is called; the
facts are the recorded ones (arguments, the version's action level and approval rules,
tokens used so far, the time the call was made, the agent's calls in that hour).

Runs are read in batches of ``BATCH`` ids and their steps as plain values, so memory
stays bounded whatever the window holds; at most ``RIVER_BACKTEST_MAX_RUNS`` runs (the
newest) are considered. The row (``governance.PolicyBacktest``) is governance's: it is
claimed, advanced and finished through ``governance.backtests``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Q

from agents.models import AgentVersion
from executions.models import Execution, ExecutionStep
from governance import checker
from governance.backtest_models import PolicyBacktest
from governance.backtests import (
    MAX_EXAMPLES,
    PROPOSED_ID,
    PolicyProposal,
    auto_approve_backtest_run,
    backtest_claim,
    backtest_fail,
    backtest_finish,
    backtest_policy_sets,
    backtest_progress,
    backtest_window,
    decision_minutes,
)
from rivercore.tools import get_tool
from rivercore.types.governance import CallFacts, Decision, GovernancePolicySpec

logger = logging.getLogger("river.executions")

BATCH = 250
AUTO_CACHE_MAX = 10_000  # remembered auto-approve answers, so memory stays bounded
AUTO_APPROVED = "AUTO_APPROVED"  # a verdict: approval required, granted by the version's own conditions
STEP_FIELDS = ("execution_id", "step_number", "step_type", "tool_name", "tool_category", "input", "tokens",
               "created_at")


@dataclass(frozen=True)
class VersionRules:
    action_level: str
    require_approval_for: list[str]
    auto_approve: list[tuple[str, str]]  # (tool, condition)


@dataclass
class Tally:
    runs_considered: int = 0
    calls_considered: int = 0
    calls_matched: int = 0
    calls_changed: int = 0
    would_block: int = 0
    would_unblock: int = 0
    would_need_approval: int = 0
    approvals_before: int = 0
    approvals_after: int = 0
    runs_affected: set[int] = field(default_factory=set)
    runs_blocked: set[int] = field(default_factory=set)
    examples: list[dict] = field(default_factory=list)
    calls_this_hour: Counter = field(default_factory=Counter)


def backtest_run(*, backtest_id: int) -> str | None:
    """Claim the backtest and run it to its end; None when it was not claimable
    (finished, running elsewhere, or gone): safe to run twice."""
    backtest = backtest_claim(backtest_id=backtest_id)
    if backtest is None:
        return None
    if backtest.kind == PolicyBacktest.Kind.AUTO_APPROVE:
        auto_approve_backtest_run(backtest=backtest)
        return backtest.kind
    try:
        result = policy_backtest_compute(backtest=backtest)
    except Exception as exc:  # a backtest that cannot finish says so on its row
        logger.exception("policy backtest %s failed", backtest.pk)
        backtest_fail(backtest=backtest, error=f"{type(exc).__name__}: {exc}")
        return None
    backtest_finish(backtest=backtest, result=result)
    return backtest.kind


def _version_rules(version_ids: set[int], known: dict[int, VersionRules]) -> None:
    wanted = version_ids - known.keys()
    for version in AgentVersion.objects.filter(pk__in=wanted):
        rules = version.rules
        known[version.pk] = VersionRules(
            action_level=version.action_level, require_approval_for=list(rules.require_approval_for),
            auto_approve=[(rule.tool, rule.condition) for rule in rules.auto_approve_conditions])


def _verdict(result_decision: Decision, *, rules: VersionRules, tool_name: str, arguments: dict,
             auto_cache: dict) -> str:
    """The decision as a person would feel it: an approval the version's own auto-approve
    conditions grant is no human approval (the model's confidence is not recorded with the
    call, so a condition on it does not hold here)."""
    if result_decision != Decision.APPROVAL_REQUIRED:
        return result_decision.value
    key = (id(rules), tool_name, repr(sorted(arguments.items())) if arguments else "")
    if key not in auto_cache:
        facts = {"confidence_score": None, "tool": {"name": tool_name}, "args": arguments}
        auto_cache[key] = any(tool == tool_name and checker.auto_approve_matches(condition=condition, facts=facts)
                              for tool, condition in rules.auto_approve)
    return AUTO_APPROVED if auto_cache[key] else result_decision.value


def _decide(facts: CallFacts, policies: list[GovernancePolicySpec], *, now, calls: int):
    return checker.check_tool_call(facts.model_copy(update={"policies": policies}), now=now, count=False,
                                   recorded_calls_this_hour=calls)


def policy_backtest_compute(*, backtest: PolicyBacktest) -> dict:
    proposal = PolicyProposal.model_validate(backtest.proposal)
    before_set, after_set = backtest_policy_sets(backtest=backtest)
    proposed_id = proposal.replaces or PROPOSED_ID
    since, until = backtest_window(backtest)
    workspace = backtest.workspace
    runs = Execution.objects.filter(workspace_id=workspace.pk, queued_at__gte=since, queued_at__lt=until)
    total = runs.count()
    if total > settings.RIVER_BACKTEST_MAX_RUNS:  # the newest ones: from the Nth newest on
        first_at, first_pk = (runs.order_by("-queued_at", "-pk").values_list("queued_at", "pk")
                              [settings.RIVER_BACKTEST_MAX_RUNS - 1])
        runs = runs.filter(Q(queued_at__gt=first_at) | Q(queued_at=first_at, pk__gte=first_pk))
        total = settings.RIVER_BACKTEST_MAX_RUNS
    tally = Tally(runs_considered=total)
    versions: dict[int, VersionRules] = {}
    auto_cache: dict = {}
    done, last = 0, None
    while True:  # oldest first, a batch of ids at a time: the hour's call counts build up in order
        page = runs.order_by("queued_at", "pk")
        if last is not None:
            page = page.filter(Q(queued_at__gt=last[0]) | Q(queued_at=last[0], pk__gt=last[1]))
        batch = list(page.values_list("pk", "agent_id", "agent_version_id", "queued_at")[:BATCH])
        if not batch:
            break
        last = (batch[-1][3], batch[-1][0])
        _version_rules({row[2] for row in batch}, versions)
        if len(auto_cache) > AUTO_CACHE_MAX:
            auto_cache.clear()
        _backtest_batch([row[:3] for row in batch], tally=tally, versions=versions, before_set=before_set,
                        after_set=after_set, proposed_id=proposed_id, workspace=workspace, auto_cache=auto_cache)
        done += len(batch)
        backtest_progress(backtest=backtest, progress=done * 100 // max(total, 1))
    tally.runs_considered = done
    minutes = decision_minutes(workspace=workspace, since=since)
    added = tally.approvals_after - tally.approvals_before
    per_day = added / backtest.days
    return {
        "runs_considered": tally.runs_considered,
        "calls_considered": tally.calls_considered,
        "calls_matched": tally.calls_matched,
        "calls_changed": tally.calls_changed,
        "runs_affected": len(tally.runs_affected),
        "runs_blocked": len(tally.runs_blocked),
        "would_block": tally.would_block,
        "would_unblock": tally.would_unblock,
        "would_need_approval": tally.would_need_approval,
        "approvals_added": added,
        "approvals_added_per_day": round(per_day, 1),
        "approver_minutes_estimate": round(added * minutes["minutes"], 1),
        "approver_minutes_per_day": round(per_day * minutes["minutes"], 1),
        "decision_minutes": minutes,
        "window": {"since": since.isoformat(), "until": until.isoformat(), "days": backtest.days,
                   "max_runs": settings.RIVER_BACKTEST_MAX_RUNS},
        "examples": tally.examples,
    }


def _backtest_batch(batch, *, tally: Tally, versions: dict[int, VersionRules], before_set, after_set,
                    proposed_id: str, workspace, auto_cache: dict) -> None:
    run_of = {pk: (agent_id, version_id) for pk, agent_id, version_id in batch}
    steps = (ExecutionStep.objects.filter(execution_id__in=run_of.keys(), step_type__in=(
        ExecutionStep.StepType.REASONING, ExecutionStep.StepType.TOOL_CALL))
        .order_by("execution_id", "step_number").values_list(*STEP_FIELDS))
    tokens: dict[int, int] = {}
    calls = []
    for execution_id, number, step_type, tool_name, category, arguments, used, created_at in steps.iterator(2000):
        if step_type == ExecutionStep.StepType.REASONING:
            if isinstance(used, dict):
                tokens[execution_id] = tokens.get(execution_id, 0) + int(used.get("input") or 0) + int(
                    used.get("output") or 0)
            continue
        calls.append((created_at, execution_id, number, tool_name, category,
                      arguments if isinstance(arguments, dict) else {}, tokens.get(execution_id, 0)))
    calls.sort(key=lambda call: (call[0], call[1], call[2]))  # the order they were made in
    time_zone = workspace.time_zone or "UTC"
    for created_at, execution_id, number, tool_name, category, arguments, used in calls:
        agent_id, version_id = run_of[execution_id]
        rules = versions.get(version_id)
        if rules is None:
            continue
        tool = get_tool(tool_name)
        hour = (agent_id, int(created_at.timestamp()) // 3600)
        tally.calls_this_hour[hour] += 1
        facts = CallFacts(
            tool_name=tool_name, tool_category=category or (tool.category.value if tool else ""),
            writes=bool(tool.writes) if tool else True,  # a tool River no longer has is treated as a write
            arguments=arguments, action_level=rules.action_level, require_approval_for=rules.require_approval_for,
            org_id=workspace.organization_id, workspace_id=workspace.pk, agent_id=str(agent_id),
            execution_id=execution_id, tokens_used=used, time_zone=time_zone,
        )
        count = tally.calls_this_hour[hour]
        before = _decide(facts, before_set, now=created_at, calls=count)
        after = _decide(facts, after_set, now=created_at, calls=count)
        tally.calls_considered += 1
        if any(match.policy_id == proposed_id for match in after.matched):
            tally.calls_matched += 1
        verdict_before = _verdict(before.decision, rules=rules, tool_name=tool_name, arguments=arguments,
                                  auto_cache=auto_cache)
        verdict_after = _verdict(after.decision, rules=rules, tool_name=tool_name, arguments=arguments,
                                 auto_cache=auto_cache)
        needs_before = verdict_before == Decision.APPROVAL_REQUIRED.value
        needs_after = verdict_after == Decision.APPROVAL_REQUIRED.value
        tally.approvals_before += needs_before
        tally.approvals_after += needs_after
        if verdict_before == verdict_after:
            continue
        tally.calls_changed += 1
        tally.runs_affected.add(execution_id)
        if verdict_after == Decision.BLOCKED.value:
            tally.would_block += 1
            tally.runs_blocked.add(execution_id)
        elif verdict_before == Decision.BLOCKED.value:
            tally.would_unblock += 1
        if needs_after and not needs_before:
            tally.would_need_approval += 1
        if len(tally.examples) < MAX_EXAMPLES:
            tally.examples.append({"execution_id": execution_id, "step": number, "tool": tool_name,
                                   "verdict_before": verdict_before, "verdict_after": verdict_after,
                                   "policy": after.policy_matched if verdict_after != verdict_before else None})
