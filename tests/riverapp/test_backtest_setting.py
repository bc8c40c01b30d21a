"""RIVER_BACKTEST_MAX_RUNS is checked at startup, naming the variable."""

import pytest

from tests.riverapp.test_settings import _check


@pytest.mark.parametrize("value, message", [
    ("0", "RIVER_BACKTEST_MAX_RUNS must be at least 1"),
    ("many", "RIVER_BACKTEST_MAX_RUNS must be an integer"),
    ("2000000", "RIVER_BACKTEST_MAX_RUNS must be at most 1000000"),
])
def test_a_bad_max_runs_stops_startup(value, message):
    result = _check({"DEBUG": "true", "RIVER_BACKTEST_MAX_RUNS": value})
    assert result.returncode != 0
    assert message in result.stderr


def test_a_good_max_runs_starts():
    result = _check({"DEBUG": "true", "RIVER_BACKTEST_MAX_RUNS": "500"})
    assert result.returncode == 0, result.stderr
