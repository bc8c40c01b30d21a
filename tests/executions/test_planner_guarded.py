"""The planner's queries pass the data sources' guard (datasources.sqlguard): what the
planner writes from plain values, hostile ones included, is one allowed SELECT or an
honest refusal. No database is touched; the planner's own rules are in
tests/rivercore/test_planner_package.py."""

from __future__ import annotations

import random

import pytest

from datasources.sqlguard import query_check
from rivercore.planner import question_plan
from tests.rivercore.planner_sources import column, music, shop


def test_a_two_hop_question_joins_along_inferred_keys_and_passes_the_guard():
    planned = question_plan(question="Which band has the most songs?", sources=[music()], row_limit=100)
    assert planned.answered, planned.tried
    assert 'JOIN "Record"' in planned.query and 'JOIN "Band"' in planned.query and planned.query.endswith("LIMIT 1")
    verdict = query_check(sql=planned.query, dialect="postgresql", allowed_tables=["Band", "Record", "Song"])
    assert verdict.allowed, verdict.reason


@pytest.mark.parametrize(("dialect", "condition"), [
    ("sqlite", "strftime('%Y', t0.\"placed_on\") = '2024'"),
    ("postgresql", "EXTRACT(YEAR FROM t0.\"placed_on\") = 2024"),
])
def test_a_year_filters_the_only_date_column_in_the_sources_dialect(dialect, condition):
    planned = question_plan(question="How many orders were placed in 2024?", sources=[shop(dialect)], row_limit=10)
    assert planned.answered, planned.tried
    assert planned.query == f'SELECT COUNT(*) AS "count" FROM "orders" t0 WHERE {condition}'
    assert query_check(sql=planned.query, dialect=dialect, allowed_tables=["orders"]).allowed


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_hostile_values_and_names_stay_literals_and_identifiers(dialect):
    rng = random.Random(7)
    alphabet = "ab'\"; -)(/*\\x%_\u00e9"
    tables = ["customers", "orders", 'we"ird']
    answered = 0
    for _ in range(60):
        value = "V" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 20)))
        source = shop(dialect)
        source["schemas"][0]["columns"][2]["sample_values"] = ["North", value]
        source["schemas"].append({"table_name": 'we"ird', "columns": [column("id", pk=True),
                                                                       column("customer_id")]})
        planned = question_plan(question=f"How many orders come from customers in {value}?", sources=[source],
                                row_limit=50)
        if not planned.answered:
            continue  # a value the reader could not isolate is refused, which is safe
        verdict = query_check(sql=planned.query, dialect=dialect, allowed_tables=tables)
        assert verdict.allowed, (planned.query, verdict.reason)
        assert "'" + value.replace("'", "''") + "'" in planned.query
        answered += 1
    assert answered >= 30


def test_any_text_gives_a_guarded_query_or_a_refusal_never_an_exception():
    rng = random.Random(12)
    pieces = ["how many", "orders", "customers", "by", "per", "region", "North", "top", "3", "average", "amount",
              "'", '"', "in 2024", "not", "which", "most", "\u00e9\u4e2d", "\x00", ";", "--", "*/", "%", "(", "units"]
    for _ in range(300):
        question = " ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        planned = question_plan(question=question, sources=[shop()], row_limit=10)
        if planned.answered:
            verdict = query_check(sql=planned.query, dialect="sqlite", allowed_tables=["customers", "orders",
                                                                                    "order_lines"])
            assert verdict.allowed, (question, planned.query, verdict.reason)
        else:
            assert planned.tried and planned.query == ""
    planned = question_plan(question="how many orders " * 500, sources=[shop()], row_limit=10)
    assert not planned.answered and "longer than" in planned.tried[0]
