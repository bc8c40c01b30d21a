"""The prompt template and the threshold expression: small grammars checked at save time."""

import pytest

from rivercore import limits
from triggers.prompt import VALUE_MAX, PromptTemplateError, prompt_render, prompt_validate
from triggers.threshold import ThresholdSyntaxError, threshold_parse


def test_placeholders_take_payload_paths_and_missing_ones_render_empty():
    template = "Triage ticket {{ payload.id }} ({{payload.meta.priority}}) from {{ payload.nobody }}."
    assert prompt_render(template, {"id": 42, "meta": {"priority": "high"}}) == "Triage ticket 42 (high) from ."


def test_non_string_values_are_json_and_list_indexes_work():
    assert prompt_render("{{ payload.tags }} {{ payload.tags.1 }} {{ payload.ok }}",
                         {"tags": ["a", "b"], "ok": True}) == '["a","b"] b true'


def test_values_and_the_whole_prompt_are_capped():
    assert len(prompt_render("{{ payload.x }}", {"x": "y" * 10_000})) == VALUE_MAX + 1
    rendered = prompt_render("{{ payload.x }}" * 50, {"x": "y" * 10_000})
    assert len(rendered) == limits.PROMPT


def test_a_value_that_looks_like_a_placeholder_is_not_expanded_again():
    assert prompt_render("{{ payload.a }}", {"a": "{{ payload.b }}", "b": "secret"}) == "{{ payload.b }}"


@pytest.mark.parametrize("template", ["{{ user.password }}", "{{ payload }}", "{{ payload.__class__.x|safe }}",
                                      "{% load x %}{{ settings.SECRET_KEY }}", "{{ payload.a + 1 }}"])
def test_anything_but_a_payload_path_is_refused(template):
    with pytest.raises(PromptTemplateError):
        prompt_validate(template)


def test_threshold_expressions_parse_to_a_rule():
    rule = threshold_parse("cpu_percent > 90 for 5m")
    assert (rule.metric, rule.aggregate, rule.op, rule.value, rule.window_seconds) == ("cpu_percent", None, ">",
                                                                                       90.0, 300)
    avg = threshold_parse("  AVG( latency_ms )>=500.5 for 10m ")
    assert (avg.metric, avg.aggregate, avg.op, avg.value, avg.window_seconds) == ("latency_ms", "avg", ">=",
                                                                                  500.5, 600)
    assert avg.source == "avg(latency_ms) >= 500.5 for 10m"
    assert rule.holds(91) and not rule.holds(90)


@pytest.mark.parametrize("text", ["", "cpu > ninety for 5m", "cpu >> 90 for 5m", "cpu > 90", "cpu > 90 for 5",
                                  "cpu > 90 for 2d", "avg(cpu > 90 for 5m", "sum(cpu) > 1 for 1m",
                                  "cpu > 90 for 25h", "cpu > 90 for 0s", "avg > 1 for 1m", "cpu > 1e999 for 1m"])
def test_bad_threshold_expressions_say_why(text):
    with pytest.raises(ThresholdSyntaxError) as raised:
        threshold_parse(text)
    assert str(raised.value)
