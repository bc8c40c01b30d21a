"""The deadline of a tool call, shared by the engine and the write path it reaches.

The engine runs a tool in a worker thread and stops waiting at the tool's timeout.
Python cannot stop that thread, so a write it started could still commit after the
run was told "timeout". A ``WriteFence`` closes that gap: the engine binds one to the
worker thread; a connector reads it to give its statements a timeout no later than
the deadline, and commits only through ``fence.commit()``, which refuses once the
fence is closed. The engine closes the fence when it reports the timeout; closing
waits for a COMMIT already in flight, so after ``close()`` returns either the write
has committed (and the engine reports its result) or it never will.

Plain Python: the engine imports it and must not import Django.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class FenceClosed(Exception):
    """The call's deadline passed or the engine gave up on it: nothing may commit."""


class WriteFence:
    def __init__(self, *, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.deadline = deadline  # on ``clock``'s scale (time.monotonic)
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False

    def remaining_seconds(self) -> float:
        return self.deadline - self._clock()

    def remaining_ms(self) -> int:
        """Milliseconds left; raises FenceClosed when none are (a statement timeout of 0 means none)."""
        remaining = int(self.remaining_seconds() * 1000)
        if self._closed or remaining < 1:
            raise FenceClosed("The tool's timeout has passed; the write was not started.")
        return remaining

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, wait_seconds: float = 5.0) -> bool:
        """Refuse every later commit. Waits up to ``wait_seconds`` for a COMMIT in
        flight; False when it is still in flight (its outcome is then unknown)."""
        acquired = self._lock.acquire(timeout=wait_seconds)
        self._closed = True
        if acquired:
            self._lock.release()
        return acquired

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """Hold the fence open around the COMMIT; raise FenceClosed when it is shut or
        the deadline has passed (the caller then rolls back)."""
        with self._lock:
            if self._closed or self.remaining_seconds() <= 0:
                raise FenceClosed("The tool's timeout has passed; the write was rolled back.")
            yield


_bound = threading.local()


def current_fence() -> WriteFence | None:
    """The fence bound to this thread (None outside a tool call)."""
    return getattr(_bound, "fence", None)


@contextlib.contextmanager
def fence_bound(fence: WriteFence) -> Iterator[WriteFence]:
    previous = current_fence()
    _bound.fence = fence
    try:
        yield fence
    finally:
        _bound.fence = previous
