"""Durable runs, one module per job; this package is their public face.

- ``start``: one ``RunRequest`` (``executions.types``) in, the run created (the only
  place that creates one) and its first segment queued after commit;
- ``queue``: sending task messages after commit, never failing the caller;
- ``claim`` and ``load``: take a queued run's lease, and build the request it loads
  (its agent's version, the requester's roles now, the policies now);
- ``segment``: claim the lease, replay the committed steps, run the loop, record how
  the segment ended (paused, or ended through ``finish``);
- ``resume``: an answer or an approver's decision appended, the run queued again; cancel;
- ``finish``: every way a run ends, each in one place (``run_end``), and the
  post-processing that follows (agent health and memory through ``agents.services``,
  notifications);
- ``watchdog``: runs no worker will pick up, runs out of attempts, lost post-processing,
  parents whose delegated run ended without resuming them;
- ``delegation``: ``delegate_to_agent``'s child runs, the parent's resume, cancel cascade;
- ``sessions``: conversations run by run (the queue, history and summaries), teams and
  ``transfer_to_agent`` hand-offs (docs/sessions.md);
- ``approvals``: the run-control port through which governance's approval
  resolution and expiry resume or end runs.

They read in one direction, start -> queue -> claim/load -> segment -> finish, checked
by import-linter (``pyproject.toml``); the one loop left is the task messages ``queue``
sends, whose tasks call back into these services.
"""

from executions.services.claim import execution_claim
from executions.services.finish import execution_end_expired, execution_post_process, memory_write
from executions.services.resume import execution_cancel, execution_respond, execution_resume_after_resolution
from executions.services.segment import execution_run_segment, execution_segment_end, state_load
from executions.services.start import execution_start, person_run_request
from executions.services.watchdog import (
    execution_fail_exhausted,
    executions_post_process_missed,
    executions_requeue_stale,
    executions_resume_waiting_parents,
)

__all__ = [
    "execution_cancel",
    "execution_claim",
    "execution_end_expired",
    "execution_fail_exhausted",
    "execution_post_process",
    "execution_respond",
    "execution_resume_after_resolution",
    "execution_run_segment",
    "execution_segment_end",
    "execution_start",
    "executions_post_process_missed",
    "executions_requeue_stale",
    "executions_resume_waiting_parents",
    "memory_write",
    "person_run_request",
    "state_load",
]
