"""The word printed beside a figure held to its target.

A smoke run (``--smoke``) runs every section at a size too small for its figures to
mean anything, so it prints ``SMOKE`` where a full run prints ``PASS`` or ``FAIL``:
the smoke proves each section runs to the end, not that River meets its targets."""

from __future__ import annotations

_judging = True


def verdict(ok: bool | None) -> str:
    if not _judging:
        return "SMOKE"
    return "PASS" if ok else "FAIL"


def targets_judge(*, judging: bool) -> None:
    """Set once by the command, before any section runs."""
    global _judging
    _judging = judging
