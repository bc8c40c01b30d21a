"""The condition language: the spec's examples, precedence, null handling, errors with positions."""

import pytest

from governance import expressions
from governance.expressions import ExpressionEvalError, ExpressionSyntaxError, matches

FACTS = {
    "cost": {"tokens": 150_000},
    "agent": {"tool_calls_this_hour": 101},
    "rows": 20_000,
    "table": {"name": "customers", "classification": "pii"},
    "time": {"hour": 19, "minute": 5},
    "tool": {"name": "write_back"},
    "args": {"message": "Reach me at jane.doe@example.com", "count": 3},
    "confidence_score": 0.97,
}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("cost.tokens > 100000", True),
        ("agent.tool_calls_this_hour > 100", True),
        ("rows > 10000 AND table.classification == 'pii'", True),
        ("time.hour >= 18 OR time.hour < 6", True),
        ("tool.name IN ['delete_data_source', 'write_back']", True),
        ("contains_pii(args.message) == true", True),
        ("confidence_score > 0.95", True),
    ],
)
def test_spec_examples_hold(source, expected):
    assert matches(source, FACTS) is expected


@pytest.mark.parametrize(
    ("source", "facts", "expected"),
    [
        ("cost.tokens > 100000", {"cost": {"tokens": 100_000}}, False),
        ("agent.tool_calls_this_hour > 100", {"agent": {"tool_calls_this_hour": 100}}, False),
        ("rows > 10000 AND table.classification == 'pii'", {"rows": 20_000, "table": {"classification": "public"}},
         False),
        ("time.hour >= 18 OR time.hour < 6", {"time": {"hour": 12}}, False),
        ("time.hour >= 18 OR time.hour < 6", {"time": {"hour": 5}}, True),
        ("tool.name IN ['delete_data_source', 'write_back']", {"tool": {"name": "execute_query"}}, False),
        ("contains_pii(args.message) == true", {"args": {"message": "Ticket solved, thanks!"}}, False),
        ("confidence_score > 0.95", {"confidence_score": 0.95}, False),
    ],
)
def test_spec_examples_do_not_hold(source, facts, expected):
    assert matches(source, facts) is expected


def test_and_binds_tighter_than_or():
    assert matches("true OR false AND false", {}) is True
    assert matches("(true OR false) AND false", {}) is False


def test_not_binds_looser_than_comparison():
    assert matches("NOT rows > 5", {"rows": 3}) is True
    assert matches("NOT rows > 5", {"rows": 9}) is False
    assert matches("NOT NOT true", {}) is True


def test_keywords_are_case_insensitive():
    assert matches("rows > 1 and Table.x == null Or FALSE", {"rows": 2}) is True
    assert matches("tool.name not in ['a', 'b']", {"tool": {"name": "c"}}) is True
    assert matches("tool.name NOT IN ['a', 'b']", {"tool": {"name": "a"}}) is False


def test_strings_in_both_quotes_with_escapes():
    assert matches('args.q == "it\'s"', {"args": {"q": "it's"}}) is True
    assert matches("args.q == 'say \\'hi\\''", {"args": {"q": "say 'hi'"}}) is True


def test_unknown_names_are_null():
    # Documented: an absent fact is null; ordering comparisons with null are false.
    assert matches("args.missing == null", {"args": {}}) is True
    assert matches("args.missing > 5", {"args": {}}) is False
    assert matches("args.missing < 5", {"args": {}}) is False
    assert matches("contains_pii(args.missing) == false", {}) is True


def test_functions():
    assert matches("lower(tool.name) == 'write_back'", {"tool": {"name": "WRITE_Back"}}) is True
    assert matches("len(args.items) >= 2", {"args": {"items": [1, 2]}}) is True
    assert matches("len(args.text) == 5", {"args": {"text": "hello"}}) is True


def test_numbers_negative_and_float():
    assert matches("args.delta < -1.5", {"args": {"delta": -2}}) is True
    assert matches("args.n == 2", {"args": {"n": 2.0}}) is True
    assert matches("args.n == 1e3", {"args": {"n": 1000}}) is True


def test_mixed_type_equality_is_false_not_error():
    assert matches("args.n == '5'", {"args": {"n": 5}}) is False
    assert matches("args.flag == 1", {"args": {"flag": True}}) is False


@pytest.mark.parametrize(
    ("source", "position", "reason"),
    [
        ("rows >", 6, "expected a value, found end of expression"),
        ("rows = 5", 5, "use '==' to compare"),
        ("(rows > 5", 9, "expected ')'"),
        ("rows > 5 AND", 12, "expected a value"),
        ("args.m == 'abc", 10, "unterminated string"),
        ("rows > 1 > 2", 9, "comparisons cannot be chained"),
        ("rows > 5 rows", 9, "unexpected 'rows'"),
        ("tool.name IN ['a',]", 18, "expected a value, found ']'"),
        ("rows > 5 && rows < 9", 9, "use AND instead of '&&'"),
        ("eval('1')", 0, "unknown function 'eval'"),
        ("__import__('os')", 0, "unknown function '__import__'"),
        ("len(rows, rows)", 0, "len() takes 1 argument, got 2"),
        ("rows > 5 $", 9, "unexpected character '$'"),
        ("", 0, "empty expression"),
        ("42", 0, "a condition must be true or false"),
        ("rows > 5abc", 8, "unexpected character 'a' after number"),
        ("table. == 1", 5, "a name cannot end with '.'"),
    ],
)
def test_syntax_errors_carry_position_and_reason(source, position, reason):
    with pytest.raises(ExpressionSyntaxError) as caught:
        expressions.parse(source)
    assert caught.value.position == position
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"position {position}: ")


@pytest.mark.parametrize(
    ("source", "position", "reason"),
    [
        ("time.hours > 3", 0, "unknown name 'time.hours'"),
        ("rows > 1 AND secrets.key == 1", 13, "unknown name 'secrets.key'"),
        ("table == 'x'", 0, "'table' needs a field"),
        ("rows.count > 1", 0, "'rows' has no fields"),
    ],
)
def test_validation_refuses_names_river_never_provides(source, position, reason):
    expressions.parse(source)  # syntactically fine
    with pytest.raises(ExpressionSyntaxError) as caught:
        expressions.expression_validate(source, known_names=True)
    assert caught.value.position == position
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("source", "facts", "position"),
    [
        ("args.n > 5", {"args": {"n": "ten"}}, 7),
        ("args.n AND true", {"args": {"n": 3}}, 7),
        ("tool.name IN args.n", {"tool": {"name": "x"}, "args": {"n": 3}}, 10),
        ("lower(args.n) == 'a'", {"args": {"n": 3}}, 0),
        ("rows", {"rows": 5}, 0),
    ],
)
def test_evaluation_errors_carry_position(source, facts, position):
    with pytest.raises(ExpressionEvalError) as caught:
        matches(source, facts)
    assert caught.value.position == position


def test_tree_is_interpreted_not_evaluated_as_python():
    # Python syntax that would do something under eval() is simply not part of the language.
    for source in ["rows.__class__ == 1", "[x for x in rows]", "rows if true else 1", "lambda: 1"]:
        with pytest.raises(expressions.ExpressionError):
            expressions.expression_validate(source)
