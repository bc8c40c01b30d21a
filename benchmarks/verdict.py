"""The word printed beside a figure held to its target.

A smoke run (``--smoke``) runs every section at a size too small for its figures to
mean anything, so it prints ``SMOKE`` where a full run prints ``PASS`` or ``FAIL`` for a
performance target: the smoke proves each section runs to the end, not that River meets
its targets. A check of correctness (``target=False``: every run completed, no event
lost, only the expected status codes) is judged at any size."""

from __future__ import annotations

_judging = True


def verdict(ok: bool | None, *, target: bool = True) -> str:
    if target and not _judging:
        return "SMOKE"
    return "PASS" if ok else "FAIL"


def targets_judge(*, judging: bool) -> None:
    """Set once by the command, before any section runs."""
    global _judging
    _judging = judging
