"""The spec's keyed condition form, converted to expressions."""

import pytest

from governance.checker import conditions_expression
from governance.expressions import expression_validate, keyed_to_expression


@pytest.mark.parametrize(
    ("keyed", "expression"),
    [
        ({"rows_gt": 10000, "table_classification": "pii"}, "rows > 10000 AND table.classification == 'pii'"),
        ({"tool": "write_back"}, "tool.name == 'write_back'"),
        ({"cost_tokens_gt": 100000}, "cost.tokens > 100000"),
        ({"agent_tool_calls_this_hour_gt": 100}, "agent.tool_calls_this_hour > 100"),
        ({"time_hour_gte": 18}, "time.hour >= 18"),
        ({"time_hour_lt": 6, "time_weekday_lte": 4}, "time.hour < 6 AND time.weekday <= 4"),
        ({"tool_name_in": ["delete_data_source", "write_back"]}, "tool.name IN ['delete_data_source', 'write_back']"),
        ({"tool_name_not_in": ["execute_query"]}, "tool.name NOT IN ['execute_query']"),
        ({"confidence_score_gt": 0.95}, "confidence_score > 0.95"),
        ({"args_message_ne": "it's"}, "args.message != 'it\\'s'"),
        ({"tool_writes_eq": True}, "tool.writes == true"),
        ({"table": "customers"}, "table.name == 'customers'"),
    ],
)
def test_keyed_form_becomes_an_expression(keyed, expression):
    assert keyed_to_expression(keyed) == expression
    expression_validate(expression)  # and the result is itself valid


@pytest.mark.parametrize(
    "keyed",
    [{}, {"rows_in": 5}, {"Bad-Key": 1}, {"rows_gt": {"nested": 1}}],
)
def test_bad_keyed_forms_are_refused(keyed):
    with pytest.raises(ValueError):
        keyed_to_expression(keyed)


def test_conditions_shapes():
    assert conditions_expression({"expression": "rows > 1"}) == "rows > 1"
    assert conditions_expression({"rows_gt": 1}) == "rows > 1"
    with pytest.raises(ValueError, match="cannot be combined"):
        conditions_expression({"expression": "rows > 1", "rows_gt": 2})
    with pytest.raises(ValueError):
        conditions_expression(["rows > 1"])
