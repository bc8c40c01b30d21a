"""The suite's own scheduling (tests/scheduling.py): scopes handed to the xdist workers
longest first by recorded time, unmeasured scopes guessed from their tests' kinds, each
scope's tests kept together and in order; the recorder adds up what it is told."""

from __future__ import annotations

import json
from dataclasses import dataclass

from tests import scheduling


@dataclass
class Item:
    nodeid: str
    slow: bool = False


@dataclass
class Report:
    nodeid: str
    duration: float


def _order(items, seconds):
    return [item.nodeid for item in scheduling.longest_first(items, is_slow=lambda item: item.slow,
                                                            seconds=seconds)]


def test_scopes_go_out_longest_first_each_kept_whole_and_in_order():
    items = [Item("tests/a/test_many.py::one"), Item("tests/b/test_race.py::race", slow=True),
             Item("tests/a/test_many.py::two"), Item("tests/c/test_mid.py::x"), Item("tests/a/test_many.py::three")]
    seconds = {"tests/a/test_many.py": 1.5, "tests/b/test_race.py": 80.0, "tests/c/test_mid.py": 4.0}

    assert _order(items, seconds) == [
        "tests/b/test_race.py::race",
        "tests/c/test_mid.py::x",
        "tests/a/test_many.py::one", "tests/a/test_many.py::two", "tests/a/test_many.py::three",
    ]


def test_an_unmeasured_scope_is_guessed_from_its_tests_and_ties_keep_their_place():
    items = [Item("tests/x/test_quick.py::a"), Item("tests/x/test_quick.py::b"),
             Item("tests/y/test_new_server.py::a", slow=True), Item("tests/z/test_same.py::a"),
             Item("tests/w/test_same_too.py::a")]

    assert _order(items, {}) == [
        "tests/y/test_new_server.py::a",  # one slow test guessed longer than two quick ones
        "tests/x/test_quick.py::a", "tests/x/test_quick.py::b",
        "tests/z/test_same.py::a", "tests/w/test_same_too.py::a",  # equal guesses: as collected
    ]


def test_browser_and_interop_tests_are_one_scope_each_and_the_spread_file_one_per_test():
    spread = next(iter(scheduling.XDIST_SPREAD))
    assert scheduling.scope_of("tests/browser/test_a.py::t") == scheduling.scope_of("tests/browser/test_b.py::u")
    assert scheduling.scope_of("tests/interop/test_a.py::t") == "tests/interop"
    assert scheduling.scope_of(f"{spread}::one[1]") == f"{spread}::one[1]"
    assert scheduling.scope_of("tests/web/test_x.py::Class::test") == "tests/web/test_x.py"


def test_the_recorder_adds_setup_call_and_teardown_and_keeps_what_did_not_run(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_ran.py", "test_skipped_today.py"):
        (tmp_path / "tests" / name).touch()
    record = tmp_path / "tests" / "durations.json"
    record.write_text(json.dumps({"tests/test_skipped_today.py": 7.0, "tests/test_ran.py": 99.0,
                                  "tests/test_deleted.py": 3.0}))
    recorder = scheduling.DurationRecorder(record, tmp_path)
    for phase in (0.25, 1.5, 0.25):
        recorder.pytest_runtest_logreport(Report("tests/test_ran.py::t", phase))

    recorder.pytest_sessionfinish(session=None)

    assert json.loads(record.read_text()) == {"tests/test_ran.py": 2.0, "tests/test_skipped_today.py": 7.0}
    assert scheduling.measured(record) == {"tests/test_ran.py": 2.0, "tests/test_skipped_today.py": 7.0}


def test_an_unreadable_record_means_guessing(tmp_path):
    broken = tmp_path / "durations.json"
    broken.write_text("{not json")
    assert scheduling.measured(broken) == {}
    broken.write_text(json.dumps(["a list"]))
    assert scheduling.measured(broken) == {}
    assert scheduling.measured(tmp_path / "missing.json") == {}
    broken.write_text(json.dumps({"tests/a.py": "soon", "tests/b.py": -1, "tests/c.py": 2}))
    assert scheduling.measured(broken) == {"tests/c.py": 2.0}
