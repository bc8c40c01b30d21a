"""Workflow triggers (pipelines): a run of agent N ending starts agent N+1.

Durability: ``pipeline_run_ended`` is a run-end handler (executions.runend), so it runs
inside the upstream run's post-processing transaction. For each enabled workflow
trigger following the run's agent it writes a ``PipelineHandoff`` row (or, when the
run's status is not one the trigger follows, a ``filtered`` firing), and asks for
``triggers.pipeline_handoff`` after commit. The task calls ``pipeline_handoff_process``,
which fires the trigger with the dedupe key ``upstream:<execution id>`` and marks the
hand-off done, in one transaction. If that fails (the database hiccuped, the broker
lost the message, a worker died) the hand-off stays pending and the beat task
``triggers.pipeline_handoffs_retry`` tries again with a growing delay; after
``MAX_ATTEMPTS`` it records an ``error`` firing and stops. Nothing is lost and
nothing starts twice: the hand-off is unique per (trigger, upstream run), the firing's
dedupe key is unique per trigger.

The downstream payload is a reference, never the upstream's data: the upstream run's
id, agent, status and a capped summary, references to the files it saved (artifact id,
name, version, type, size and its table, if any; at most 20), and the pipeline depth.
The downstream agent reads those files itself (``load_artifact``, ``execute_query``).

Cycles are refused when a workflow trigger is saved (``pipeline_cycle_check``); the
depth limit (``RIVER_MAX_PIPELINE_DEPTH``) guards what configuration cannot see: a run
started at depth d starts its followers at depth d + 1, and a hand-off beyond the limit
is recorded as a ``depth`` skip.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from artifacts.selectors import artifact_refs_of_execution
from executions.models import Execution
from executions.runend import RunEnded
from rivercore.contracts import TriggerType
from rivercore.errors import InvalidInput
from telemetry.aftercommit import task_send_on_commit
from triggers.models import PipelineHandoff, Trigger, TriggerFiring
from triggers.types import WorkflowConfig

logger = logging.getLogger("river.triggers")

SUMMARY_MAX = 2000
MAX_ATTEMPTS = 10
RETRY_AFTER_SECONDS = 30  # a pending hand-off younger than this is left to its own task
Reason = TriggerFiring.Reason


def _source(trigger: Trigger) -> str:
    return f"workflow:{trigger.name}"


def pipeline_depth_of(*, execution: Execution) -> int:
    """How deep in a pipeline a run is: 0 unless a workflow trigger started it."""
    if execution.trigger_type != TriggerType.WORKFLOW:
        return 0
    pipeline = (execution.trigger_payload or {}).get("pipeline") or {}
    depth = pipeline.get("depth") if isinstance(pipeline, dict) else None
    return depth if isinstance(depth, int) and depth >= 0 else 1


def _followers(*, workspace_id, agent_id) -> list[tuple[Trigger, WorkflowConfig]]:
    from triggers.selectors import triggers_enabled_of_type

    followers = []
    for trigger in triggers_enabled_of_type(workspace_id=workspace_id, trigger_type=TriggerType.WORKFLOW):
        config = WorkflowConfig.model_validate(trigger.config)
        if str(config.upstream_agent) == str(agent_id):
            followers.append((trigger, config))
    return followers


def pipeline_run_ended(ended: RunEnded) -> None:
    """Run-end handler (caller holds post-processing's transaction): one durable hand-off
    per workflow trigger that follows this run's agent and status."""
    from triggers.services import trigger_firing_skip

    followers = _followers(workspace_id=ended.workspace_id, agent_id=ended.agent_id)
    if not followers:
        return
    execution = Execution.objects.only("id", "trigger_type", "trigger_payload", "agent_id").get(
        pk=ended.execution_id)
    depth = pipeline_depth_of(execution=execution) + 1
    summary = ended.summary or ""
    if len(summary) > SUMMARY_MAX:
        summary = summary[: SUMMARY_MAX - 1] + "…"
    payload = {
        "upstream": {"execution_id": ended.execution_id, "agent_id": str(ended.agent_id),
                     "status": str(ended.status), "outcome": ended.outcome, "summary": summary,
                     "artifacts": artifact_refs_of_execution(execution_id=ended.execution_id)},
        "pipeline": {"depth": depth},
    }
    dedupe_key = f"upstream:{ended.execution_id}"
    created: list[int] = []
    for trigger, config in followers:
        if ended.status not in config.on_statuses:
            trigger_firing_skip(trigger=trigger, source=_source(trigger), reason=Reason.FILTERED, payload=payload,
                                dedupe_key=dedupe_key,
                                detail=f"upstream run {ended.execution_id} ended {ended.status}; this stage follows "
                                       f"{', '.join(config.on_statuses)}")
            continue
        if config.on_outcomes is not None and ended.outcome not in config.on_outcomes:
            trigger_firing_skip(trigger=trigger, source=_source(trigger), reason=Reason.FILTERED, payload=payload,
                                dedupe_key=dedupe_key,
                                detail=f"upstream run {ended.execution_id} had outcome {ended.outcome}; this stage "
                                       f"follows {', '.join(config.on_outcomes)}")
            continue
        if depth > settings.RIVER_MAX_PIPELINE_DEPTH:
            trigger_firing_skip(trigger=trigger, source=_source(trigger), reason=Reason.DEPTH, payload=payload,
                                dedupe_key=dedupe_key,
                                detail=f"stage would be at depth {depth}, beyond RIVER_MAX_PIPELINE_DEPTH="
                                       f"{settings.RIVER_MAX_PIPELINE_DEPTH}")
            logger.warning("workflow trigger %s refused at depth %s (upstream run %s)", trigger.pk, depth,
                           ended.execution_id)
            continue
        try:
            with transaction.atomic():
                handoff = PipelineHandoff.objects.create(trigger=trigger, upstream_execution_id=ended.execution_id,
                                                         payload=payload, depth=depth)
            created.append(handoff.pk)
        except IntegrityError:
            pass  # already handed off (the run's end was seen before)
    if created:
        from triggers.tasks import pipeline_handoff

        for handoff_id in created:  # a refused send is left to the retry pass (pipeline_handoffs_retry)
            task_send_on_commit(pipeline_handoff, handoff_id=handoff_id, subject=f"pipeline hand-off {handoff_id}")


def _upstream_requester(execution_id: int):
    """The person answerable for the upstream run, who answers for the stage it starts
    too (segregation of duties: a pipeline does not launder who asked). None when the
    upstream run is gone or had nobody: the stage's trigger's responsible person then."""
    row = Execution.objects.filter(pk=execution_id).select_related("requester").only("requester").first()
    return row.requester if row is not None else None


def pipeline_handoff_process(*, handoff_id: int) -> TriggerFiring | None:
    """Fire the hand-off's trigger once and mark it done; on failure leave it pending
    with a later ``next_attempt_at``. Safe to run twice and concurrently (row lock,
    skip_locked: a second caller returns None)."""
    from triggers.services import trigger_fire, trigger_firing_skip

    try:
        with transaction.atomic():
            handoff = (PipelineHandoff.objects.select_for_update(skip_locked=True).select_related("trigger")
                       .filter(pk=handoff_id, done_at__isnull=True).first())
            if handoff is None:
                return None
            trigger = handoff.trigger
            dedupe_key = f"upstream:{handoff.upstream_execution_id}"
            if handoff.attempts >= MAX_ATTEMPTS:
                firing = trigger_firing_skip(
                    trigger=trigger, source=_source(trigger), reason=Reason.ERROR, payload=handoff.payload,
                    dedupe_key=dedupe_key,
                    detail=f"gave up after {handoff.attempts} attempts: {handoff.last_error}")
            else:
                firing = trigger_fire(trigger=trigger, payload=handoff.payload, source=_source(trigger),
                                      dedupe_key=dedupe_key,
                                      requester=_upstream_requester(handoff.upstream_execution_id))
            handoff.firing = firing
            handoff.done_at = timezone.now()
            handoff.save(update_fields=["firing", "done_at"])
            return firing
    except Exception as exc:  # noqa: BLE001 - recorded on the hand-off and retried
        logger.exception("pipeline hand-off %s failed; it will be retried", handoff_id)
        with transaction.atomic():
            handoff = PipelineHandoff.objects.select_for_update().filter(pk=handoff_id, done_at__isnull=True).first()
            if handoff is not None:
                handoff.attempts += 1
                handoff.last_error = f"{type(exc).__name__}: {exc}"[:500]
                handoff.next_attempt_at = timezone.now() + timedelta(
                    seconds=min(RETRY_AFTER_SECONDS * 2 ** (handoff.attempts - 1), 3600))
                handoff.save(update_fields=["attempts", "last_error", "next_attempt_at"])
        return None


def pipeline_handoffs_retry(*, now=None, limit: int = 200) -> int:
    """Process pending hand-offs whose time has come (the beat's safety net for a lost
    task message or a failed attempt); returns how many it tried."""
    now = now or timezone.now()
    pending = list(PipelineHandoff.objects.filter(
        done_at__isnull=True, next_attempt_at__lte=now - timedelta(seconds=RETRY_AFTER_SECONDS),
    ).order_by("next_attempt_at", "id").values_list("id", flat=True)[:limit])
    for handoff_id in pending:
        pipeline_handoff_process(handoff_id=handoff_id)
    return len(pending)


def pipeline_cycle_check(*, workspace, agent, config: WorkflowConfig) -> None:
    """Refuse a workflow trigger on ``agent`` following ``config.upstream_agent`` when the
    workspace's workflow triggers already lead from ``agent`` back to that upstream agent
    (every workflow trigger counts, enabled or not: enabling one must not close a loop).
    Locks the workspace row so two concurrent saves cannot each close half a loop; call it
    inside the saving transaction."""
    from tenancy.models import Workspace

    if str(config.upstream_agent) == str(agent.pk):
        raise InvalidInput("A pipeline stage cannot follow itself.",
                           details={"config.upstream_agent": ["Choose another agent than the trigger's own."]})
    edges: dict[str, set[str]] = {}
    # Outside the caller's transaction (an early check) the lock ends with this block;
    # inside it, it is held until the caller commits.
    with transaction.atomic():
        # NO KEY UPDATE: serializes cycle checks of the workspace without waiting on the
        # key-share locks that inserting rows referencing the workspace takes.
        list(Workspace.objects.select_for_update(no_key=True).filter(pk=workspace.pk).values_list("pk", flat=True))
        for row in Trigger.objects.filter(workspace=workspace, type=TriggerType.WORKFLOW).values("agent_id",
                                                                                                 "config"):
            upstream = (row["config"] or {}).get("upstream_agent")
            if upstream:
                edges.setdefault(str(upstream), set()).add(str(row["agent_id"]))
    target, start = str(config.upstream_agent), str(agent.pk)
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == target:
            break
        for nxt in sorted(edges.get(node, ())):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    if target not in previous:
        return
    path, node = [], target
    while node is not None:
        path.append(node)
        node = previous[node]
    path.reverse()  # start ... target; the new trigger closes target -> start
    names = _agent_names(path)
    loop = " -> ".join(names[a] for a in [*path, start])
    raise InvalidInput("This pipeline would loop.", details={"config.upstream_agent": [
        f"Following this agent closes a cycle: {loop}. Pipelines may not loop."]})


def _agent_names(ids: list[str]) -> dict[str, str]:
    from agents.models import Agent

    names = {str(pk): f"{name} ({pk})" for pk, name in Agent.objects.filter(pk__in=ids).values_list("pk", "name")}
    return {agent_id: names.get(agent_id, agent_id) for agent_id in ids}
