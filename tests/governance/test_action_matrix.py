"""The action-level matrix, all twelve cells, through the checker.

River reads the spec's matrix strictly: at act_with_approval *every* write needs
approval, including one missing from ``require_approval_for`` (the spec's cell says
PROCEED; issue 11 closes that gap). Unknown levels deny everything."""

import pytest

from governance.checker import action_level_decision, check_tool_call
from rivercore.types.governance import Decision
from tests.governance.policy_support import facts

READ, WRITE_IN_RULES, WRITE_NOT_IN_RULES = "read", "write_in_rules", "write_not_in_rules"

MATRIX = [
    ("read_only", READ, Decision.PROCEED),
    ("read_only", WRITE_IN_RULES, Decision.BLOCKED),
    ("read_only", WRITE_NOT_IN_RULES, Decision.BLOCKED),
    ("recommend", READ, Decision.SUGGEST_ONLY),
    ("recommend", WRITE_IN_RULES, Decision.SUGGEST_ONLY),
    ("recommend", WRITE_NOT_IN_RULES, Decision.SUGGEST_ONLY),
    ("act_with_approval", READ, Decision.PROCEED),
    ("act_with_approval", WRITE_IN_RULES, Decision.APPROVAL_REQUIRED),
    ("act_with_approval", WRITE_NOT_IN_RULES, Decision.APPROVAL_REQUIRED),
    ("automated", READ, Decision.PROCEED),
    ("automated", WRITE_IN_RULES, Decision.PROCEED),
    ("automated", WRITE_NOT_IN_RULES, Decision.PROCEED),
]


def _call(level: str, column: str):
    if column == READ:
        return facts(action_level=level, tool_name="execute_query", writes=False, require_approval_for=["write_back"])
    if column == WRITE_IN_RULES:
        return facts(action_level=level, tool_name="write_back", writes=True, require_approval_for=["write_back"])
    return facts(action_level=level, tool_name="update_data_source", writes=True, require_approval_for=["write_back"])


@pytest.mark.parametrize(("level", "column", "expected"), MATRIX)
def test_matrix_cell(level, column, expected):
    call = _call(level, column)
    assert action_level_decision(
        action_level=level, writes=call.writes, requires_approval=call.tool_name in call.require_approval_for
    ) == expected
    result = check_tool_call(call)
    assert result.decision == expected
    assert result.policy_matched is None


@pytest.mark.parametrize("level", ["yolo", "", "Automated", "automated ", "AUTOMATED", "auto", "act_with_approval\x00"])
@pytest.mark.parametrize("writes", [True, False])
def test_unknown_action_level_blocks_reads_and_writes(level, writes):
    result = check_tool_call(facts(action_level=level, writes=writes, tool_name="execute_query"))
    assert result.decision == Decision.BLOCKED
    assert "Unknown action level" in result.reason


@pytest.mark.parametrize("rules", [[], ["execute_query"], ["some_other_tool"]])
def test_act_with_approval_write_pauses_whatever_require_approval_for_says(rules):
    result = check_tool_call(facts(action_level="act_with_approval", writes=True, require_approval_for=rules))
    assert result.decision == Decision.APPROVAL_REQUIRED


def test_a_log_only_or_warn_policy_cannot_loosen_act_with_approval():
    from tests.governance.policy_support import policy

    for enforcement in ("log_only", "warn"):
        spec = policy("tool.name == 'write_back'", enforcement)
        result = check_tool_call(facts(action_level="act_with_approval", policies=[spec]))
        assert result.decision == Decision.APPROVAL_REQUIRED
