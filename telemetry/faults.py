"""Infrastructure faults that River rides out instead of failing a run.

Redis (cache, channel layer, Celery broker) going away must never end a run: the
calls that touch it on the run path are best effort. Each one that fails is
recorded here: a per-process counter by component and operation (what a metrics
exporter would read) and one warning line naming the component, the operation and
the exception's class. Only the class is logged, never its message: a driver's
message may carry a URL with credentials or a payload.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger("river.faults")

_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()


def infra_fault_record(
    *, component: str, operation: str, exc: BaseException, subject: str = "", log: bool = True
) -> None:
    """Count and log one best-effort call that failed. ``subject`` names what it was
    for (``execution 42``), never a value taken from the payload. ``log=False`` for a
    caller that writes its own line."""
    with _lock:
        _counts[(component, operation)] += 1
    if not log:
        return
    where = f" for {subject}" if subject else ""
    logger.warning("%s unavailable: %s%s failed (%s); carrying on", component, operation, where,
                   exc.__class__.__name__)


def infra_faults_snapshot() -> dict[str, int]:
    """``{"component.operation": count}`` for this process since it started."""
    with _lock:
        return {f"{component}.{operation}": count for (component, operation), count in sorted(_counts.items())}


def infra_fault_count(*, component: str, operation: str | None = None) -> int:
    with _lock:
        return sum(n for (c, o), n in _counts.items() if c == component and (operation is None or o == operation))
