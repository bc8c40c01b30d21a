"""Helpers for the core's ports: one the process installs once (the application wiring
it up when it is ready), refusing to be used before; and calling a blocking port from
the async loop, inline or off the loop."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast

from asgiref.sync import sync_to_async

T = TypeVar("T")
R = TypeVar("R")


class Installed(Generic[T]):
    def __init__(self, what: str, why: str):
        self.what = what
        self.why = why
        self._value: T | None = None

    def install(self, value: T) -> None:
        self._value = value

    def get(self) -> T:
        if self._value is None:
            raise RuntimeError(f"No {self.what} is installed: {self.why}.")
        return self._value


class _OffLoop:
    """Where blocking calls from a live loop go: asgiref's thread-sensitive thread unless
    the process installed an executor (a run host's I/O threads), with a wrapper around
    each call (say, to hand a database connection back when it is done)."""

    executor: ThreadPoolExecutor | None = None
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None


def blocking_executor_install(executor: ThreadPoolExecutor | None,
                              wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> None:
    """Send this process's off-loop blocking calls to ``executor`` (None: back to the
    thread-sensitive default). A caller's calls are awaited one at a time, so they keep
    their order even when consecutive ones run on different threads of the executor."""
    _OffLoop.executor, _OffLoop.wrap = executor, wrap


async def blocking_call(inline: bool, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Call a blocking port. ``inline``: here, on the thread driving the coroutine (which
    then never suspends, see ``drive``); otherwise off the event loop: on the executor
    installed with ``blocking_executor_install``, or else on the thread that drives the
    run (asgiref's thread-sensitive calls), so database connections and transactions
    stay where they were."""
    if inline:
        return fn(*args, **kwargs)
    if _OffLoop.executor is not None:
        call: Callable[..., R] = _OffLoop.wrap(fn) if _OffLoop.wrap is not None else fn
        return await sync_to_async(call, thread_sensitive=False, executor=_OffLoop.executor)(*args, **kwargs)
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


def drive(call: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine that never suspends (every await in it completes at once: its
    ports are called inline) to its result, without an event loop."""
    try:
        call.send(None)
    except StopIteration as done:
        return cast(R, done.value)
    call.close()
    raise RuntimeError("a blocking call tried to wait on an event loop")
