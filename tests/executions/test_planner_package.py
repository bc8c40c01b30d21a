"""The planner package on its own: plain Python values in, one guarded SELECT or an
honest refusal out. No database is touched here; test_planner_questions.py runs the
answers against real ones."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from datasources.sqlguard import query_check
from rivercore.planner import graph_from_source, question_plan
from rivercore.planner.schema import name_words

ROOT = Path(__file__).resolve().parents[2]


def column(name, data_type="integer", *, pk=False, fk=None, values=()):
    return {"column_name": name, "data_type": data_type, "is_primary_key": pk, "foreign_key": fk,
            "sample_values": list(values)}


def shop(dialect="sqlite") -> dict:
    """snake_case keys, none declared."""
    return {"data_source_id": 3, "name": "shop", "type": dialect, "dialect": dialect, "schemas": [
        {"table_name": "customers", "columns": [column("id", pk=True), column("full_name", "text"),
                                                column("region", "text", values=["North", "South"])]},
        {"table_name": "orders", "columns": [column("id", pk=True), column("customer_id"),
                                             column("amount", "numeric(10,2)"), column("placed_on", "date")]},
        {"table_name": "order_lines", "columns": [column("id", pk=True), column("order_id"),
                                                  column("sku_id"), column("units")]},
    ]}


def music() -> dict:
    """PascalCase keys, declared on one table and left to naming on the other."""
    return {"data_source_id": 4, "name": "music", "type": "postgresql", "dialect": "postgresql", "schemas": [
        {"table_name": "Band", "columns": [column("BandId", pk=True), column("Name", "character varying(80)")]},
        {"table_name": "Record", "columns": [column("RecordId", pk=True), column("Title", "text"),
                                             column("BandId", fk="Band.BandId")]},
        {"table_name": "Song", "columns": [column("SongId", pk=True), column("RecordId"),
                                           column("Seconds", "integer")]},
    ]}


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


def test_a_two_hop_question_joins_along_inferred_keys_and_passes_the_guard():
    planned = question_plan(question="Which band has the most songs?", sources=[music()], row_limit=100)
    assert planned.answered, planned.tried
    assert 'JOIN "Record"' in planned.query and 'JOIN "Band"' in planned.query and planned.query.endswith("LIMIT 1")
    verdict = query_check(sql=planned.query, dialect="postgresql", allowed_tables=["Band", "Record", "Song"])
    assert verdict.allowed, verdict.reason


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


@pytest.mark.parametrize(("dialect", "condition"), [
    ("sqlite", "strftime('%Y', t0.\"placed_on\") = '2024'"),
    ("postgresql", "EXTRACT(YEAR FROM t0.\"placed_on\") = 2024"),
])
def test_a_year_filters_the_only_date_column_in_the_sources_dialect(dialect, condition):
    planned = question_plan(question="How many orders were placed in 2024?", sources=[shop(dialect)], row_limit=10)
    assert planned.answered, planned.tried
    assert planned.query == f'SELECT COUNT(*) AS "count" FROM "orders" t0 WHERE {condition}'
    assert query_check(sql=planned.query, dialect=dialect, allowed_tables=["orders"]).allowed


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


def test_the_planner_package_imports_no_django():
    code = ("import sys; import rivercore.planner; "
            "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


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
