"""The extension point a run's end offers to the apps above ``executions``.

``triggers`` (pipelines) and delegation need to act when a run ends, but ``executions``
may not import them. They register a handler here in their ``AppConfig.ready()``;
post-processing calls every handler once per run, inside the same transaction that
claims the run's post-processing (or, for a handler that only observes, right after it
commits). A handler therefore writes its own rows (an outbox
row, a firing) atomically with that claim: if the process dies before the commit,
nothing is written and the watchdog post-processes the run again; after the commit the
rows are the durable record of what must follow. Handlers must not make network calls
or send task messages directly (use ``transaction.on_commit``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rivercore.types.runs import RunStatus

logger = logging.getLogger("river.executions")


@dataclass(frozen=True, slots=True)
class RunEnded:
    """What a handler learns about a run that ended (ids and a few facts, never the run's data)."""

    execution_id: int
    workspace_id: Any
    agent_id: Any
    status: RunStatus
    summary: str
    trigger_type: str
    trigger_id: Any
    parent_execution_id: int | None
    requested_by_id: int | None
    session_id: int | None = None  # the session the run answered in (docs/sessions.md)
    outcome: str | None = None  # whether it did the job (rivercore.outcome.Outcome; docs/engine.md)
    # Facts post-processing has already read, so a handler need not read the run again
    # (None when the caller did not give them: a handler reads them itself).
    queue_wait_seconds: float | None = None
    action_level: str | None = None


RunEndHandler = Callable[[RunEnded], None]


@dataclass(frozen=True, slots=True)
class _Registered:
    handler: RunEndHandler
    applies: Callable[[RunEnded], bool] | None
    after_commit: bool


_handlers: dict[str, _Registered] = {}


def run_end_handler_register(name: str, handler: RunEndHandler, *,
                             applies: Callable[[RunEnded], bool] | None = None,
                             after_commit: bool = False) -> None:
    """Register ``handler`` under ``name`` (registering the same name again replaces it,
    so an app's ``ready()`` running twice in tests does not call it twice).

    ``applies``: a test of the ``RunEnded`` alone (no query) that says whether the handler
    has anything to do for this run; when it says no, the handler is not called and
    costs no savepoint. ``after_commit``: the handler writes no rows (it counts, it
    observes), so it runs once post-processing has committed, outside the transaction;
    a post-processing that rolls back and is done again then counts once."""
    _handlers[name] = _Registered(handler, applies, after_commit)


def run_end_handlers_call(ended: RunEnded) -> None:
    """Caller holds the post-processing transaction. A handler that raises rolls back
    its own savepoint and is logged; it never undoes the others or the post-processing."""
    from django.db import transaction

    for name, registered in list(_handlers.items()):
        if registered.applies is not None and not registered.applies(ended):
            continue
        if registered.after_commit:
            transaction.on_commit(lambda name=name, registered=registered: _observe(name, registered.handler, ended))
            continue
        try:
            with transaction.atomic():
                registered.handler(ended)
        except Exception:  # noqa: BLE001 - one handler's fault never blocks a run's end
            logger.exception("run-end handler %s failed for execution %s", name, ended.execution_id)


def _observe(name: str, handler: RunEndHandler, ended: RunEnded) -> None:
    try:
        handler(ended)
    except Exception:  # noqa: BLE001 - an observer's fault never reaches the run
        logger.exception("run-end handler %s failed for execution %s", name, ended.execution_id)
