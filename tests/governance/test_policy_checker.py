"""Each policy type with each enforcement, at the point the spec evaluates it."""

from datetime import UTC, datetime

import pytest

from governance import counters
from governance.checker import auto_approve_matches, check_llm_call, check_query_result, check_tool_call
from rivercore.types.governance import Decision
from tests.governance.policy_support import facts, policy

ENFORCEMENTS = {
    "block": Decision.BLOCKED,
    "require_approval": Decision.APPROVAL_REQUIRED,
    "warn": Decision.PROCEED,
    "log_only": Decision.PROCEED,
}
EVENING = datetime(2024, 6, 3, 20, 15, tzinfo=UTC)  # 20:15 UTC, a Monday
NOON = datetime(2024, 6, 3, 12, 0, tzinfo=UTC)


def _assert_enforced(result, spec, enforcement):
    assert result.decision == ENFORCEMENTS[enforcement]
    assert result.policy_matched == spec.name
    assert result.policy_id == spec.policy_id
    assert result.enforcement == enforcement
    assert [m.name for m in result.matched] == [spec.name]
    if enforcement == "warn":
        assert any(spec.name in warning for warning in result.warnings)
    else:
        assert result.warnings == []


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_tool_restriction(enforcement):
    spec = policy("tool.name IN ['delete_data_source', 'write_back']", enforcement, "tool_restriction", "No writes")
    _assert_enforced(check_tool_call(facts(policies=[spec])), spec, enforcement)
    other = check_tool_call(facts(tool_name="update_data_source", policies=[spec]))
    assert other.decision == Decision.PROCEED and other.policy_matched is None


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_content(enforcement):
    spec = policy("contains_pii(args.message) == true", enforcement, "content", "No PII out")
    leaking = facts(policies=[spec], arguments={"message": "Card 4111 1111 1111 1111 on file"})
    _assert_enforced(check_tool_call(leaking), spec, enforcement)
    clean = check_tool_call(facts(policies=[spec], arguments={"message": "Your refund is on its way."}))
    assert clean.decision == Decision.PROCEED and clean.policy_matched is None


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_time_window(enforcement):
    spec = policy("time.hour >= 18 OR time.hour < 6", enforcement, "time_window", "Office hours")
    _assert_enforced(check_tool_call(facts(policies=[spec]), now=EVENING), spec, enforcement)
    assert check_tool_call(facts(policies=[spec]), now=NOON).policy_matched is None
    # Time windows guard write tools only.
    read = check_tool_call(facts(policies=[spec], tool_name="execute_query", writes=False), now=EVENING)
    assert read.decision == Decision.PROCEED and read.policy_matched is None


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_budget_before_tool(enforcement):
    spec = policy("cost.tokens > 100000", enforcement, "budget", "Token budget")
    _assert_enforced(check_tool_call(facts(policies=[spec], tokens_used=100_001)), spec, enforcement)
    assert check_tool_call(facts(policies=[spec], tokens_used=100_000)).policy_matched is None


@pytest.mark.parametrize(
    ("enforcement", "expected"),
    [("block", Decision.BLOCKED), ("require_approval", Decision.PROCEED), ("warn", Decision.PROCEED),
     ("log_only", Decision.PROCEED)],
)
def test_budget_before_llm_call(enforcement, expected):
    spec = policy("cost.tokens > 100000", enforcement, "budget", "Token budget")
    kwargs = {"org_id": 1, "workspace_id": 1, "agent_id": "a", "execution_id": 1}
    result = check_llm_call(policies=[spec], tokens_used=120_000, **kwargs)
    assert result.decision == expected
    assert result.policy_matched == "Token budget"
    # Nothing to approve before a model call: require_approval warns here, acts at the next tool call.
    assert bool(result.warnings) == (enforcement in ("warn", "require_approval"))
    assert check_llm_call(policies=[spec], tokens_used=99_000, **kwargs).policy_matched is None
    # Only budget policies are looked at before a model call.
    tool_rule = policy("tool.name == 'write_back'", "block", "tool_restriction")
    assert check_llm_call(policies=[tool_rule], tokens_used=0, **kwargs).decision == Decision.PROCEED


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_rate_limit(db, enforcement):
    spec = policy("agent.tool_calls_this_hour > 2", enforcement, "rate_limit", "Call rate")
    call = facts(policies=[spec])
    first, second = check_tool_call(call, now=NOON), check_tool_call(call, now=NOON)
    assert first.decision == second.decision == Decision.PROCEED and first.policy_matched is None
    _assert_enforced(check_tool_call(call, now=NOON), spec, enforcement)
    key = f"agent:{call.agent_id}:tool_calls"
    # A blocked call gives its slot back; any other outcome keeps it counted.
    assert counters.counter_value(key=key, window=3600, now=NOON) == (2 if enforcement == "block" else 3)


@pytest.mark.parametrize("enforcement", ENFORCEMENTS)
def test_data_export_limit(enforcement):
    spec = policy("rows > 10000 AND table.classification == 'pii'", enforcement, "data_export_limit", "PII export")
    classifications = {"customers": "pii", "orders": "internal"}
    result = check_query_result(facts=facts(policies=[spec]), rows=20_000, tables=["orders", "customers"],
                                classifications=classifications)
    _assert_enforced(result, spec, enforcement)
    small = check_query_result(facts=facts(policies=[spec]), rows=500, tables=["customers"],
                               classifications=classifications)
    assert small.decision == Decision.PROCEED and small.policy_matched is None
    internal = check_query_result(facts=facts(policies=[spec]), rows=20_000, tables=["orders"],
                                  classifications=classifications)
    assert internal.policy_matched is None
    # Not evaluated before the tool runs.
    assert check_tool_call(facts(policies=[spec])).policy_matched is None


def test_spec_example_policy_without_type_is_a_data_export_limit():
    from rivercore.types.governance import GovernancePolicySpec

    spec = GovernancePolicySpec(
        policy_id="f9a2c4d6-8b1e-4f7a-a3c5-2d4e6f8b1a3c", name="PII Export Limit", scope="workspace",
        conditions={"rows_gt": 10000, "table_classification": "pii"}, enforcement="require_approval",
    )
    result = check_query_result(facts=facts(policies=[spec], tool_name="execute_query", writes=False), rows=10_001,
                                tables=["users"], classifications={"users": "pii"})
    assert result.decision == Decision.APPROVAL_REQUIRED
    assert result.policy_type == "data_export_limit"
    assert result.matched[0].expression == "rows > 10000 AND table.classification == 'pii'"


def test_strictest_policy_wins():
    warn = policy("tool.name == 'write_back'", "warn", name="warn me")
    approve = policy("tool.name == 'write_back'", "require_approval", name="ask first")
    block = policy("contains_pii(args.message) == true", "block", name="no pii")
    both = check_tool_call(facts(policies=[warn, approve, block], arguments={"message": "a@b.io"}))
    assert both.decision == Decision.BLOCKED and both.policy_matched == "no pii"
    two = check_tool_call(facts(policies=[warn, approve]))
    assert two.decision == Decision.APPROVAL_REQUIRED and two.policy_matched == "ask first"
    assert any("warn me" in w for w in two.warnings)


def test_a_blocked_action_level_is_never_loosened():
    loose = policy("tool.name == 'write_back'", "log_only")
    result = check_tool_call(facts(action_level="read_only", policies=[loose]))
    assert result.decision == Decision.BLOCKED


def test_require_approval_does_not_turn_a_suggestion_into_an_approval():
    approve = policy("tool.name == 'write_back'", "require_approval")
    block = policy("tool.name == 'write_back'", "block")
    assert check_tool_call(facts(action_level="recommend", policies=[approve])).decision == Decision.SUGGEST_ONLY
    assert check_tool_call(facts(action_level="recommend", policies=[block])).decision == Decision.BLOCKED


def test_approval_required_by_rules_stays_with_a_warn_policy():
    warn = policy("tool.name == 'write_back'", "warn")
    result = check_tool_call(facts(action_level="act_with_approval", require_approval_for=["write_back"],
                                   policies=[warn]))
    assert result.decision == Decision.APPROVAL_REQUIRED
    assert result.warnings


def test_unevaluable_condition_counts_as_matched():
    spec = policy("args.amount > 100", "block", "content", "Amount cap")
    result = check_tool_call(facts(policies=[spec], arguments={"amount": "lots"}))
    assert result.decision == Decision.BLOCKED
    assert "could not evaluate" in result.matched[0].error


def test_malformed_policy_in_agent_config_denies_whatever_its_enforcement():
    for enforcement in ("require_approval", "warn", "log_only"):
        spec = policy("rows >", enforcement, "tool_restriction", "Broken")
        result = check_tool_call(facts(policies=[spec]))
        assert result.decision == Decision.BLOCKED, enforcement
        assert "invalid condition" in result.matched[0].error
        assert "Broken" in result.reason and "invalid condition" in result.reason


def test_unevaluable_warn_policy_blocks_instead_of_warning():
    spec = policy("args.amount > 100", "warn", "content", "Amount watch")
    result = check_tool_call(facts(policies=[spec], arguments={"amount": "lots"}))
    assert result.decision == Decision.BLOCKED
    assert "could not evaluate" in result.reason


def test_log_only_is_logged(caplog):
    spec = policy("tool.name == 'write_back'", "log_only", name="Audit writes")
    with caplog.at_level("INFO", logger="governance.checker"):
        result = check_tool_call(facts(policies=[spec]))
    assert result.decision == Decision.PROCEED
    assert "Audit writes" in caplog.text


@pytest.mark.parametrize(
    ("score", "expected"), [(0.97, True), (0.95, False), (0.5, False), (None, False)]
)
def test_auto_approve_conditions(score, expected):
    facts_ = {"confidence_score": score, "tool": {"name": "write_back"}, "args": {}}
    assert auto_approve_matches(condition="confidence_score > 0.95", facts=facts_) is expected


def test_auto_approve_never_on_a_broken_condition():
    assert auto_approve_matches(condition="confidence_score >", facts={"confidence_score": 1.0}) is False
    assert auto_approve_matches(condition="confidence_score > 'x'", facts={"confidence_score": 1.0}) is False


@pytest.mark.parametrize("condition", ["", "   ", "true", "TRUE", "1 == 1", "NOT false", "(true)", "'a' == 'a'",
                                       "true OR confidence_score > 2 AND false", "confidence_score == null",
                                       "NOT confidence_score > 0.5", "args.note != 'x'", "rows > 0",
                                       "time.hour >= 0", "confidence_score > 0.9 OR 1 == 1"])
def test_auto_approve_never_on_an_empty_constant_or_foreign_condition(condition):
    facts_ = {"confidence_score": 0.99, "tool": {"name": "write_back"}, "args": {}, "rows": 5, "time": {"hour": 3}}
    assert auto_approve_matches(condition=condition, facts=facts_) is False
