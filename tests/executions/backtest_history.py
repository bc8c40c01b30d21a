"""A hand-built history for backtests: runs with recorded tool calls and decided
approvals, written directly so every count a backtest reports is known in advance."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from executions.models import Execution, ExecutionStep
from governance.models import ApprovalRequest


def recorded_run(*, agent, days_ago: float, calls: list[tuple[str, dict]], status: str = "completed",
                 tokens: int = 0) -> Execution:
    """A finished run whose model asked for ``calls`` ((tool, arguments), in order)."""
    at = timezone.now() - dt.timedelta(days=days_ago)
    run = Execution.objects.create(workspace=agent.workspace, agent=agent, agent_version=agent.current_version,
                                   status=status, queued_at=at, started_at=at, finished_at=at)
    number = 0
    if tokens:
        number += 1
        ExecutionStep.objects.create(execution=run, step_number=number, step_type="reasoning",
                                     tokens={"input": tokens, "output": 0}, created_at=at)
    for offset, (tool, arguments) in enumerate(calls):
        number += 1
        ExecutionStep.objects.create(execution=run, step_number=number, step_type="tool_call", tool_name=tool,
                                     tool_category="execution", input=arguments,
                                     created_at=at + dt.timedelta(seconds=offset))
    return run


def decided_approval(*, agent, run: Execution, tool: str, arguments: dict, status: str, wait_minutes: float,
                     by, days_ago: float = 1, confidence: float | None = None) -> ApprovalRequest:
    decided_at = timezone.now() - dt.timedelta(days=days_ago)
    return ApprovalRequest.objects.create(
        workspace=agent.workspace, execution_id=run.pk, agent_id=agent.pk, tool_name=tool,
        proposed_payload=arguments, status=status, confidence_score=confidence, resolved_by=by,
        created_at=decided_at - dt.timedelta(minutes=wait_minutes), resolved_at=decided_at,
        expires_at=decided_at + dt.timedelta(days=1))
