"""Blocking calls from a live loop (rivercore.ports.blocking_call): inline when driven
without a loop, else on the executor a run host installs (its I/O threads), each call
wrapped as the host asks, and one caller's calls in the order it awaits them."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rivercore.ports import blocking_call, blocking_executor_install, drive


@pytest.fixture
def io_threads():
    executor = ThreadPoolExecutor(max_workers=3, thread_name_prefix="test-io")
    wrapped: list[str] = []

    def wrap(fn):
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                wrapped.append(fn.__name__)
        return call

    blocking_executor_install(executor, wrap)
    yield wrapped
    blocking_executor_install(None)
    executor.shutdown(wait=True)


def where(label: str) -> tuple[str, str]:
    return label, threading.current_thread().name


def test_off_loop_calls_go_to_the_installed_executor_wrapped(io_threads):
    async def main():
        return [await blocking_call(False, where, f"call {i}") for i in range(6)]

    results = asyncio.run(main())
    assert [label for label, _ in results] == [f"call {i}" for i in range(6)]  # awaited in turn, in order
    assert all(thread.startswith("test-io") for _, thread in results)
    assert io_threads == ["where"] * 6


def test_calls_of_different_callers_run_at_once_on_the_executor(io_threads):
    both_in = threading.Barrier(2, timeout=10)

    def meet(label):
        both_in.wait()  # only passes if the two calls are on two threads at the same time
        return label

    async def main():
        return await asyncio.gather(blocking_call(False, meet, "a"), blocking_call(False, meet, "b"))

    assert asyncio.run(main()) == ["a", "b"]


def test_inline_calls_never_leave_the_driving_thread(io_threads):
    async def main():
        return await blocking_call(True, where, "inline")

    assert drive(main()) == ("inline", threading.current_thread().name)
    assert io_threads == []
