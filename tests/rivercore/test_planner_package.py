"""The planner package on its own: plain Python values in, one SELECT or an honest
refusal out. No database and no River app; tests/executions/test_planner_guarded.py
puts the planner's queries through the data sources' guard, and
test_planner_questions.py runs the answers against real databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rivercore.planner import graph_from_source, question_plan
from rivercore.planner.schema import name_words
from tests.rivercore.planner_sources import music, shop

ROOT = Path(__file__).resolve().parents[2]


def test_identifier_words_fold_case_style_and_plurals():
    assert name_words("InvoiceLine") == ["invoice", "line"]
    assert name_words("order_items") == ["order", "item"]
    assert name_words("MediaTypeId") == ["media", "type", "id"]
    assert name_words("categories") == ["category"]


def test_keys_are_inferred_from_snake_and_pascal_names_and_declared_keys_are_kept():
    edges = {(e.table, e.column, e.ref_table, e.ref_column, e.inferred)
             for e in graph_from_source(shop(), dialect="sqlite").edges}
    assert edges == {("orders", "customer_id", "customers", "id", True),
                     ("order_lines", "order_id", "orders", "id", True)}  # sku_id names no table
    edges = {(e.table, e.column, e.ref_table, e.ref_column, e.inferred)
             for e in graph_from_source(music(), dialect="postgresql").edges}
    assert edges == {("Record", "BandId", "Band", "BandId", False), ("Song", "RecordId", "Record", "RecordId", True)}


def test_a_question_it_cannot_answer_says_so_and_what_it_tried():
    planned = question_plan(question="What is the average age of customers?", sources=[shop()], row_limit=100)
    assert not planned.answered and planned.query == ""
    assert "customers" in planned.tried[0] and "average" in planned.tried[0]
    planned = question_plan(question="Is it going to rain tomorrow?", sources=[shop()], row_limit=100)
    assert not planned.answered and "names no table" in planned.tried[0]


def test_a_value_missing_from_the_samples_is_refused_not_ignored():
    planned = question_plan(question="How many customers are in the East region?", sources=[shop()],
                            row_limit=100)
    assert not planned.answered
    assert "East" in planned.tried[0]


def test_distinct_values_are_counted_once_and_sums_follow_the_keys():
    planned = question_plan(question="How many distinct regions do customers come from?", sources=[shop()],
                            row_limit=10)
    assert planned.query == 'SELECT COUNT(DISTINCT t0."region") AS "count" FROM "customers" t0'
    planned = question_plan(question="What is the total amount of orders per region?", sources=[shop()],
                            row_limit=10)
    assert planned.query == (
        'SELECT t1."region" AS "region", SUM(t0."amount") AS "sum_amount" FROM "orders" t0 JOIN "customers" t1 '
        'ON t0."customer_id" = t1."id" GROUP BY t1."region" ORDER BY "sum_amount" DESC, t1."region" ASC LIMIT 10')


@pytest.mark.parametrize("question", [
    "How many customers have no orders?",
    "What is the most popular region?",
    "How many orders are there per week?",
])
def test_questions_it_would_get_wrong_are_refused(question):
    planned = question_plan(question=question, sources=[shop()], row_limit=10)
    assert not planned.answered, planned.query
    assert planned.tried and "I matched" in planned.tried[0]


def test_the_planner_package_imports_no_django():
    code = ("import sys; import rivercore.planner; "
            "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
