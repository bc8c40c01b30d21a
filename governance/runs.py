"""What governance needs from the runs its approvals pause: a port, so governance never
imports executions (which sits above it). Executions installs its implementation when
the app is ready; without one, resolving an approval is refused rather than left
half-done."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol

from rivercore.ports import Installed


class RunLock(StrEnum):
    LOCKED = "locked"  # the run's row is locked by this transaction
    BUSY = "busy"  # another transaction holds it (only with skip_locked)
    GONE = "gone"  # the run no longer exists


class RunControl(Protocol):
    def lock(self, execution_id: int, *, skip_locked: bool = False) -> RunLock:
        """Lock the run's row in the caller's transaction (runs are locked before their
        approval requests, everywhere, so the two never deadlock)."""

    def resume_after_resolution(self, execution_id: int, *, call_id: str, resolution: dict[str, Any]) -> None:
        """Record the approver's decision as a step and queue the run (in the caller's
        transaction)."""

    def end_expired(self, execution_id: int) -> None:
        """End a run whose approval expired (in the caller's transaction)."""


_control: Installed[RunControl] = Installed("run control", "approvals cannot resume or end runs")
run_control_install = _control.install  # executions installs its implementation in ready()
run_control = _control.get
