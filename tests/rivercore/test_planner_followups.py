"""The offline planner's reading of a follow-up against the previous question (plain
text in, plain text out; rivercore/planner/followup.py)."""

import pytest

from rivercore.planner.followup import followup_resolve

PREVIOUS = "How many open high-priority tickets were created in the last 24 hours?"


@pytest.mark.parametrize(("follow_up", "resolved"), [
    ("and in the last 7 days?", "How many open high-priority tickets were created in the last 7 days?"),
    ("and last month?", "How many open high-priority tickets were created in the last month?"),
    ("last month?", "How many open high-priority tickets were created in the last month?"),
    ("What about the past 3 days?", "How many open high-priority tickets were created in the past 3 days?"),
    ("and today?", "How many open high-priority tickets were created today?"),
    ("and urgent ones?", "How many open high-priority tickets were created in the last 24 hours urgent?"),
])
def test_a_follow_up_is_the_previous_question_changed(follow_up, resolved):
    assert followup_resolve(follow_up, PREVIOUS) == resolved


def test_a_window_is_added_to_a_question_that_had_none():
    assert followup_resolve("and last month?", "How many tickets are open?") == \
        "How many tickets are open in the last month?"


@pytest.mark.parametrize("prompt", ["How many customers are there?", "and?", "", "Show me the last 5 tickets"])
def test_anything_else_is_not_a_follow_up(prompt):
    assert followup_resolve(prompt, PREVIOUS) is None


def test_without_a_previous_question_nothing_is_resolved():
    assert followup_resolve("and last month?", "") is None


@pytest.mark.parametrize(("previous", "follow_up", "resolved"), [
    ("How many tickets were created today?", "and this month?", "How many tickets were created this month?"),
    ("How many tickets were created today?", "and last 3 days?", "How many tickets were created in the last 3 days?"),
])
def test_the_preposition_follows_the_window(previous, follow_up, resolved):
    assert followup_resolve(follow_up, previous) == resolved
