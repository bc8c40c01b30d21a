"""Time windows evaluate in the workspace's zone, correctly on DST change days."""

from datetime import UTC, datetime

import pytest

from governance.checker import check_tool_call, time_facts
from rivercore.types.governance import Decision
from tests.governance.policy_support import facts, policy

NY = "America/New_York"


@pytest.mark.parametrize(
    ("instant", "zone", "hour", "minute"),
    [
        # Spring forward, 2024-03-10: 01:59 EST is followed by 03:00 EDT.
        (datetime(2024, 3, 10, 6, 59, tzinfo=UTC), NY, 1, 59),
        (datetime(2024, 3, 10, 7, 0, tzinfo=UTC), NY, 3, 0),
        # Fall back, 2024-11-03: 01:xx happens twice, then 02:00 EST.
        (datetime(2024, 11, 3, 5, 30, tzinfo=UTC), NY, 1, 30),
        (datetime(2024, 11, 3, 6, 30, tzinfo=UTC), NY, 1, 30),
        (datetime(2024, 11, 3, 7, 0, tzinfo=UTC), NY, 2, 0),
        # Europe: 2024-03-31 01:00 UTC is 02:00 BST in London (00:59 UTC was 00:59 GMT).
        (datetime(2024, 3, 31, 0, 59, tzinfo=UTC), "Europe/London", 0, 59),
        (datetime(2024, 3, 31, 1, 0, tzinfo=UTC), "Europe/London", 2, 0),
    ],
)
def test_local_wall_clock(instant, zone, hour, minute):
    local, warning = time_facts(now=instant, time_zone=zone)
    assert (local["hour"], local["minute"]) == (hour, minute)
    assert warning is None


def test_spring_forward_skips_the_two_oclock_hour():
    spec = policy("time.hour == 2", "block", "time_window")
    call = facts(policies=[spec], time_zone=NY)
    for instant in (datetime(2024, 3, 10, 6, 59, tzinfo=UTC), datetime(2024, 3, 10, 7, 0, tzinfo=UTC)):
        assert check_tool_call(call, now=instant).decision == Decision.PROCEED
    three = policy("time.hour >= 3 AND time.hour < 4", "block", "time_window")
    # A fixed UTC-5 offset would say 02:00 here; the zone says 03:00.
    assert check_tool_call(facts(policies=[three], time_zone=NY),
                           now=datetime(2024, 3, 10, 7, 0, tzinfo=UTC)).decision == Decision.BLOCKED


def test_fall_back_repeats_the_one_oclock_hour():
    spec = policy("time.hour == 1", "require_approval", "time_window")
    call = facts(policies=[spec], time_zone=NY)
    for instant in (datetime(2024, 11, 3, 5, 30, tzinfo=UTC), datetime(2024, 11, 3, 6, 30, tzinfo=UTC)):
        assert check_tool_call(call, now=instant).decision == Decision.APPROVAL_REQUIRED
    assert check_tool_call(call, now=datetime(2024, 11, 3, 7, 0, tzinfo=UTC)).decision == Decision.PROCEED


def test_after_hours_window_across_midnight_in_zone():
    spec = policy("time.hour >= 18 OR time.hour < 6", "block", "time_window")
    # 23:30 UTC on a winter day is 18:30 in New York: blocked there, not in UTC+0.
    instant = datetime(2024, 1, 15, 23, 30, tzinfo=UTC)
    assert check_tool_call(facts(policies=[spec], time_zone=NY), now=instant).decision == Decision.BLOCKED
    assert check_tool_call(facts(policies=[spec], time_zone="Asia/Tokyo"), now=instant).decision == Decision.PROCEED


def test_weekday_and_day_name():
    local, _ = time_facts(now=datetime(2024, 6, 9, 3, 0, tzinfo=UTC), time_zone=NY)  # Sat 23:00 in New York
    assert (local["weekday"], local["day"], local["date"]) == (5, "saturday", "2024-06-08")


def test_unknown_zone_falls_back_to_utc_with_a_warning():
    spec = policy("time.hour == 12", "warn", "time_window")
    result = check_tool_call(facts(policies=[spec], time_zone="Mars/Olympus"),
                             now=datetime(2024, 6, 3, 12, 0, tzinfo=UTC))
    assert result.policy_matched == spec.name
    assert any("Unknown time zone" in w for w in result.warnings)
