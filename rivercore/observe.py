"""Observers: what the apps above the core learn of a run as it goes, without the core
knowing who listens (metrics, logs, traces).

The engine tells its observers two things: every step it adds (after its journal has
it) and every model call, with the exact request it sent and the reply or error it got.
Observers are installed by name (installing a name again replaces it) and are called on
the thread driving the run, which for hosted runs is an event loop shared by hundreds of
runs: an observer must be quick and must not block (no database or network call; hand
the work to a queue of its own if it has any). One that raises is logged and never stops
the run or the other observers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rivercore.contracts import Step
    from rivercore.llm import LLMError, LLMReply
    from rivercore.state import RunState

logger = logging.getLogger("river.engine")


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call of a run: the request as sent and what came back."""

    turn: int
    tier: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    timeout_seconds: float
    started_at: float  # epoch seconds
    duration_ms: int
    reply: LLMReply | None = None
    error: LLMError | None = None


class Observer(Protocol):
    def step_added(self, state: RunState, step: Step) -> None: ...

    def model_called(self, state: RunState, call: ModelCall) -> None: ...


_observers: dict[str, Observer] = {}
# True while a replay drives the engine: a replay is not a run, so no observer (metrics,
# logs, traces, recorded model calls) may count its steps or model calls.
_unobserved: ContextVar[bool] = ContextVar("river_unobserved", default=False)


@contextmanager
def unobserved() -> Iterator[None]:
    """Steps and model calls made inside this block reach no observer (replays)."""
    token = _unobserved.set(True)
    try:
        yield
    finally:
        _unobserved.reset(token)


def observer_install(name: str, observer: Observer) -> None:
    _observers[name] = observer


def observer_remove(name: str) -> None:
    _observers.pop(name, None)


def step_added(state: RunState, step: Step) -> None:
    if _unobserved.get():
        return
    for name, observer in list(_observers.items()):
        try:
            observer.step_added(state, step)
        except Exception:  # noqa: BLE001 - observing never stops a run
            logger.exception("observer %s failed on step %s", name, step.step_number)


def model_called(state: RunState, call: ModelCall) -> None:
    if _unobserved.get():
        return
    for name, observer in list(_observers.items()):
        try:
            observer.model_called(state, call)
        except Exception:  # noqa: BLE001 - observing never stops a run
            logger.exception("observer %s failed on a model call of turn %s", name, call.turn)
