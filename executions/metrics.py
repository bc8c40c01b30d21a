"""Run-level metrics, recorded once per run as post-processing ends it (a run-end handler:
the watchdog's post-processing of a crashed run counts too, and a run is post-processed once)."""

from __future__ import annotations

from django.db import transaction

from executions.runend import RunEnded
from telemetry.metrics import run_ended_record


def run_ended_metrics(ended: RunEnded) -> None:
    from executions.models import Execution

    if ended.action_level is not None:  # post-processing read them with the run
        wait, action_level = ended.queue_wait_seconds, ended.action_level
    else:
        row = (Execution.objects.filter(pk=ended.execution_id)
               .values("queued_at", "started_at", "agent_version__action_level").first())
        if row is None:
            return
        wait = None
        if row["started_at"] is not None and row["queued_at"] is not None:
            wait = (row["started_at"] - row["queued_at"]).total_seconds()
        action_level = row["agent_version__action_level"]
    values = {"status": str(ended.status), "outcome": ended.outcome or "",
              "action_level": action_level or "",
              "agent_id": ended.agent_id, "trigger_type": ended.trigger_type or "", "queue_wait_seconds_value": wait}
    # Counted once the post-processing that claims the run commits (never for a rolled-back claim).
    transaction.on_commit(lambda: run_ended_record(**values))
