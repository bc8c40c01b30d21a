"""The order in which ``make test``'s two pytest-xdist workers take the suite's files.

pytest-xdist hands a worker one scope (a file, or a folder that must stay in one worker)
at a time, and by default the scopes with the most tests first. Test counts say little
about time here: the approval race is one test of more than a minute, a file of a hundred
serializer tests takes a second. Handed out last, a long file kept one worker busy for
minutes after the other had finished. So the scopes go out longest first, by the time
each took in an earlier run (``tests/durations.json``, seconds per scope, written by
``--record-durations``); a scope not in it is estimated from its tests' kinds. The order
inside a scope is left as it was (pytest-django's: database tests before transactional
ones). Without workers nothing is reordered.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parent / "durations.json"

# Files whose tests share nothing at module level and are long enough to be worth
# spreading over both workers test by test (the schema fuzz was a quarter of the suite).
XDIST_SPREAD = {"tests/riverapp/test_schema_fuzz.py"}

# What an unmeasured test is guessed to take: one that starts processes or commits
# (marked slow by the suite's conftest) against one that does neither.
GUESS_SLOW_SECONDS, GUESS_FAST_SECONDS = 3.0, 0.05


def scope_of(nodeid: str) -> str:
    """The unit a worker takes whole: the file; one scope for all browser tests (the
    River stack and Chromium start once) and one for the interop tests (their live
    ``runriver`` owns one database); each test of a file in XDIST_SPREAD alone."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/browser/"):
        return "tests/browser"
    if path.startswith("tests/interop/"):
        return "tests/interop"
    return nodeid if path in XDIST_SPREAD else path


def measured(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per scope from an earlier run; empty when there is no readable record."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(scope): float(seconds) for scope, seconds in data.items()
            if isinstance(seconds, (int, float)) and seconds >= 0}


def longest_first(items: list, *, is_slow, seconds: dict[str, float]) -> list:
    """``items`` regrouped by scope, the scopes in decreasing expected time (ties keep
    their first appearance), each scope's items in their original order."""
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[scope_of(item.nodeid)].append(item)

    def expected(scope: str) -> float:
        if scope in seconds:
            return seconds[scope]
        return sum(GUESS_SLOW_SECONDS if is_slow(item) else GUESS_FAST_SECONDS for item in groups[scope])

    order = sorted(groups, key=lambda scope: -expected(scope))  # sorted() is stable
    return [item for scope in order for item in groups[scope]]


class DurationRecorder:
    """Adds up each scope's setup, call and teardown times as the reports arrive (in
    the controlling process under xdist) and writes them, rounded, when the session
    ends. A scope that did not run keeps the time an earlier record gave it, unless its
    file is gone."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root  # root: where the scopes' paths start (pytest's rootdir)
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[scope_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        merged = {**measured(self.path), **{scope: round(s, 2) for scope, s in self.seconds.items()}}
        merged = {scope: s for scope, s in merged.items() if (self.root / scope.split("::", 1)[0]).exists()}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
