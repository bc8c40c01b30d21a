"""Work sent once the transaction commits, that never fails the caller: a task message
for a committed row (a broker that is down), or a best-effort call such as a
notification. A failure is counted and logged as an infrastructure fault
(``telemetry.faults``), the same way wherever it happens; the committed row is the
record, and whoever owns it recovers (the runs' watchdog, the pipelines' retry pass,
the approvals' reminder sweep)."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from telemetry.faults import infra_fault_record


def task_send(task, *args, subject: str, **kwargs) -> bool:
    """Send a task message now; False (counted and logged, never raised) when the broker
    refused it. ``subject`` names what it was for (``execution 42``)."""
    try:
        task.delay(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the row's owner recovers it
        infra_fault_record(component="broker", operation=f"publish {task.name}", exc=exc, subject=subject)
        return False
    return True


def task_send_on_commit(task, *args, subject: str, on_failure: Callable[[], None] | None = None,
                        **kwargs) -> None:
    """After commit, send a task message (``task_send``); if it is refused, ``on_failure``
    runs (for example to mark the row unsent so its recovery does not wait)."""

    def send() -> None:
        if not task_send(task, *args, subject=subject, **kwargs) and on_failure is not None:
            on_failure()

    transaction.on_commit(send)


def call_on_commit(call: Callable[[], object], *, component: str, operation: str, subject: str) -> None:
    """After commit, make a best-effort call; whatever it raises is counted and logged
    as a fault of ``component``, never raised to the committing caller."""

    def run() -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - best effort by contract
            infra_fault_record(component=component, operation=operation, exc=exc, subject=subject)

    transaction.on_commit(run)
