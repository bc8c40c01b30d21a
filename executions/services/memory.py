"""The workspace memory a completed run leaves behind (docs/memory.md), written by a
run-end handler inside post-processing's transaction: it commits with the claim of the
run's post-processing or not at all, and a second post-processing writes nothing."""

from __future__ import annotations

from agents.services import workspace_memory_from_run, workspace_memory_owner
from executions.models import Execution, ExecutionStep
from executions.runend import RunEnded
from rivercore.contracts import StepStatus, StepType
from rivercore.outcome import Outcome

MEMORY_FACTS_MAX = 5


def _query_facts(execution_id: int) -> list[str]:
    """The queries the run answered from, as facts a later run can reuse: the SQL and
    how many rows it returned (never the rows)."""
    rows = (ExecutionStep.objects.filter(execution_id=execution_id, step_type=StepType.OBSERVATION,
                                         tool_name="execute_query", status=StepStatus.COMPLETED)
            .order_by("-step_number").only("input", "output")[:MEMORY_FACTS_MAX])
    facts = []
    for row in reversed(rows):
        sql = str((row.input or {}).get("sql") or "").strip()
        result = (row.output or {}).get("result") or {}
        if sql:
            total = result.get("total_rows") if isinstance(result, dict) else None
            facts.append(f"query {sql}" + (f" returned {total} row(s)" if total is not None else ""))
    return facts


def workspace_memory_on_run_end(ended: RunEnded) -> None:
    """An answered top-level run's question, answer and query facts, as the workspace's
    memory mode and the requester's consent allow. Child runs (delegation) leave none:
    the run that asked them remembers the outcome."""
    if ended.outcome != Outcome.ANSWERED or ended.parent_execution_id is not None or not ended.summary.strip():
        return
    owner = workspace_memory_owner(workspace_id=ended.workspace_id, user_id=ended.requested_by_id)
    if not owner[0]:  # the workspace keeps none of this run: its question and facts are not read
        return
    question = Execution.objects.filter(pk=ended.execution_id).values_list("input_prompt", flat=True).first()
    workspace_memory_from_run(
        workspace_id=ended.workspace_id, agent_id=ended.agent_id, user_id=ended.requested_by_id,
        execution_id=ended.execution_id, question=question or "", answer=ended.summary,
        facts=_query_facts(ended.execution_id), owner=owner,
    )
