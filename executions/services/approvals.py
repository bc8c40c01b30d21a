"""Executions' side of approvals: the run-control port governance resolves and
expires approval requests through (``governance.runs``), installed when the app is
ready."""

from __future__ import annotations

from typing import Any

from common.compiled import CompiledQuery
from executions.models import Execution
from executions.services.finish import execution_end_expired
from executions.services.resume import execution_resume_after_resolution
from governance.runs import RunLock


def _lock_query(*, skip_locked: bool) -> CompiledQuery:
    """The run's row locked (its id only), compiled once per process (common.compiled)."""
    return CompiledQuery(
        lambda execution_id: Execution.objects.select_for_update(skip_locked=skip_locked).only("pk")
        .filter(pk=execution_id).order_by()[:1],
        execution_id=-(2**62) + 53,
    )


_LOCK = {skip: _lock_query(skip_locked=skip) for skip in (False, True)}


class ExecutionRunControl:
    def lock(self, execution_id: int, *, skip_locked: bool = False) -> RunLock:
        locked = _LOCK[skip_locked].first(execution_id=execution_id)
        if locked is not None:
            return RunLock.LOCKED
        return RunLock.BUSY if Execution.objects.filter(pk=execution_id).exists() else RunLock.GONE

    def resume_after_resolution(self, execution_id: int, *, call_id: str, resolution: dict[str, Any]) -> None:
        execution_resume_after_resolution(execution_id=execution_id, call_id=call_id, resolution=resolution)

    def end_expired(self, execution_id: int) -> None:
        execution_end_expired(execution_id=execution_id)
