"""Executions' side of approvals: the run-control port governance resolves and
expires approval requests through (``governance.runs``), installed when the app is
ready."""

from __future__ import annotations

from typing import Any

from executions.models import Execution
from executions.services.finish import execution_end_expired
from executions.services.resume import execution_resume_after_resolution
from governance.runs import RunLock


class ExecutionRunControl:
    def lock(self, execution_id: int, *, skip_locked: bool = False) -> RunLock:
        locked = (Execution.objects.select_for_update(skip_locked=skip_locked).filter(pk=execution_id)
                  .values_list("pk", flat=True).first())
        if locked is not None:
            return RunLock.LOCKED
        return RunLock.BUSY if Execution.objects.filter(pk=execution_id).exists() else RunLock.GONE

    def resume_after_resolution(self, execution_id: int, *, call_id: str, resolution: dict[str, Any]) -> None:
        execution_resume_after_resolution(execution_id=execution_id, call_id=call_id, resolution=resolution)

    def end_expired(self, execution_id: int) -> None:
        execution_end_expired(execution_id=execution_id)
