"""The planner's grammar tables, one group of tests per table, in plain Python: no
database, no Django models. They pin what each phrase means; the end-to-end answers
are in tests/executions/test_planner_time_and_measures.py."""

from __future__ import annotations

import pytest

from rivercore.planner import grammar, graph_from_source, question_plan
from rivercore.planner.question import intent_read

# --- AGGREGATE_WORDS --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "grouped", "expected"), [
    ("how many parcels", False, "count"),
    ("the number of parcels", False, "count"),
    ("average weight", False, "avg"),
    ("average number of parcels", False, "avg"),  # precedence: average before count
    ("total weight", False, "sum"),
    ("heaviest", False, None),
    ("highest weight", False, "max"),
    ("highest weight", True, None),  # with a dimension "highest" ranks the groups
    ("cheapest fare", False, "min"),
    ("list the parcels", False, None),
])
def test_aggregate_words_follow_their_precedence(text, grouped, expected):
    assert grammar.aggregate_first(text, grouped=grouped) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("total and average weight", ["sum", "avg"]),
    ("the minimum and maximum fare", ["min", "max"]),
    ("number of parcels and their total weight", ["count", "sum"]),
    ("total, average and maximum weight", ["sum", "avg", "max"]),
    ("average weight as well as the total", ["avg", "sum"]),
    ("total weight", []),
    ("how many parcels are from oslo and what is the total", []),  # two questions, not one list
])
def test_an_aggregate_list_needs_its_words_joined_by_and(text, expected):
    assert [w.aggregate for w in grammar.aggregate_list(text)] == expected


# --- ORDER_WORDS, TOP_N and the group leads ---------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("which depot has the most parcels", "desc"),
    ("the 3 lightest", None),
    ("which depot has the fewest parcels", "asc"),
    ("the least expensive fare", "asc"),
    ("the most expensive fare", "desc"),
])
def test_order_words_give_the_ranking_direction(text, expected):
    assert grammar.order_read(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("top 5 depots", 5), ("the 3 biggest depots", 3), ("which 10 couriers", 10), ("bottom 2 routes", 2),
    ("parcels in 2024", None),
])
def test_top_n_reads_how_many_rows_to_keep(text, expected):
    assert grammar.top_n_read(text) == expected


@pytest.mark.parametrize(("before", "expected"), [
    ("parcels per ", True), ("parcels grouped by ", True), ("top 3 ", True), ("weight for each ", True),
    ("parcels sent by ", False),  # "by" names who did it
    ("parcels from ", False),
])
def test_group_leads_make_the_next_name_the_dimension(before, expected):
    assert grammar.grouping_lead(before) is expected


# --- NUMBER_COMPARISONS -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "op", "number"), [
    ("weight more than 30", ">", "30"), ("weight at least 2.5", ">=", "2.5"), ("fare under $12", "<", "12"),
    ("at most 4 stops", "<=", "4"), ("fewer than 3", "<", "3"),
])
def test_number_comparisons_map_words_to_operators(text, op, number):
    (found,) = grammar.number_comparisons(text)
    assert (found.op, found.number) == (op, number)


# --- TIME_BUCKETS -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "bucket", "ranked"), [
    ("parcels per month", "month", False),
    ("weight by year", "year", False),
    ("monthly weight", "month", False),
    ("annual fares", "year", False),
    ("daily parcels", "day", False),
    ("parcels each quarter", "quarter", False),
    ("which month had the most parcels", "month", True),
    ("top 3 months by weight", "month", True),
    ("parcels in 2024", None, None),
])
def test_time_buckets_are_read_with_whether_they_are_ranked(text, bucket, ranked):
    found = grammar.bucket_read(text)
    assert (found.bucket if found else None, found.ranked if found else None) == (bucket, ranked)


def test_bucket_sql_labels_read_the_same_on_both_dialects():
    assert grammar.bucket_sql("month", "d", "sqlite") == "strftime('%Y-%m', d)"
    assert grammar.bucket_sql("month", "d", "postgresql") == "to_char(d, 'YYYY-MM')"
    assert grammar.bucket_sql("year", "d", "sqlite") == "strftime('%Y', d)"
    assert grammar.bucket_sql("year", "d", "postgresql") == "to_char(d, 'YYYY')"


# --- PERIODS and PERIOD_COMPARISONS -----------------------------------------------------------


@pytest.mark.parametrize(("text", "first", "second"), [
    ("weight in 2025 compared to 2024", "2025", "2024"),
    ("parcels this month vs last month", "this month", "last month"),
    ("fares march 2025 versus march 2024", "2025-03", "2024-03"),
    ("weight last year against this year", "last year", "this year"),
    ("parcels this quarter compared with the previous quarter", "this quarter", "last quarter"),
])
def test_two_periods_joined_by_a_comparison_phrase_are_read(text, first, second):
    found = grammar.comparison_read(text)
    assert found is not None and (found.first.label, found.second.label) == (first, second)


@pytest.mark.parametrize("text", ["parcels in 2025", "weight 2025 and 2024", "2025 vs 2025", "this month"])
def test_one_period_or_no_comparison_phrase_is_not_a_comparison(text):
    assert grammar.comparison_read(text) is None


def test_period_conditions_are_written_per_dialect():
    last_month = grammar.period_read("last month")
    assert last_month is not None
    assert grammar.period_condition(last_month, "d", "sqlite") == (
        "strftime('%Y-%m', d) = strftime('%Y-%m', 'now', 'start of month', '-1 month')")
    assert grammar.period_condition(last_month, "d", "postgresql") == (
        "to_char(d, 'YYYY-MM') = to_char(date_trunc('month', now()) - interval '1 month', 'YYYY-MM')")
    year = grammar.period_read("2024")
    assert year is not None and grammar.period_condition(year, "d", "postgresql") == "to_char(d, 'YYYY') = '2024'"


# --- PRODUCT_WORDS ----------------------------------------------------------------------------


@pytest.mark.parametrize(("gap", "expected"), [
    (" × ", True), (" * ", True), (" times ", True), (" multiplied by ", True), (" x ", True),
    (" and ", False), (" per ", False),
])
def test_product_words_multiply_two_columns(gap, expected):
    assert grammar.product_gap(gap) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("revenue as price × qty", "revenue"),
    ("spend (price * qty) by year", "spend"),
    ("price times qty as turnover", "turnover"),
    ("sum of price * qty", None),
])
def test_a_derived_measure_takes_the_name_the_question_gives_it(text, expected):
    start = text.index("price")
    end = text.index("qty") + 3
    found = grammar.product_name(text, start, end, reserved=frozenset({"sum", "of", "price", "qty"}))
    assert (found[0] if found else None) == expected


# --- the tables applied to a schema ------------------------------------------------------------


def column(name, data_type="integer", *, pk=False, values=()):
    return {"column_name": name, "data_type": data_type, "is_primary_key": pk, "sample_values": list(values)}


COURIER = {"data_source_id": 5, "name": "courier", "type": "postgresql", "dialect": "postgresql", "schemas": [
    {"table_name": "hubs", "columns": [column("id", pk=True), column("town", "text", values=["Lyon", "Nantes"])]},
    {"table_name": "tariffs", "columns": [column("id", pk=True), column("band", "text"),
                                          column("rate", "numeric(6,2)")]},
    {"table_name": "shipments", "columns": [column("id", pk=True), column("hub_id"), column("tariff_id"),
                                            column("sent_on", "date"), column("kilos", "numeric(8,2)")]},
]}


def read(question: str):
    return intent_read(question=question, graph=graph_from_source(COURIER, dialect="postgresql"))


def test_a_product_of_columns_on_two_tables_is_measured_per_row_of_the_referencing_one():
    intent = read("total freight as rate × kilos per town")
    assert intent.product == [("tariffs", "rate"), ("shipments", "kilos")]
    assert (intent.base, intent.measure_name, intent.group) == ("shipments", "freight", ("hubs", "town"))


def test_a_bucket_reads_the_date_of_the_table_the_measure_is_on():
    intent = read("kilos per month")
    assert (intent.bucket, intent.time_column, intent.aggregate) == ("month", ("shipments", "sent_on"), "sum")


def test_two_aggregates_become_one_answer_with_two_metrics():
    intent = read("number of shipments and their total kilos per town")
    assert intent.aggregate == "count" and [(m.aggregate, m.measure) for m in intent.metrics] == [
        ("sum", ("shipments", "kilos"))]


def test_top_n_rows_by_a_measure_rank_the_rows_themselves():
    planned = question_plan(question="top 4 shipments by kilos", sources=[COURIER], row_limit=100)
    assert planned.answered
    assert planned.query.endswith('ORDER BY t0."kilos" DESC LIMIT 4')


def test_a_comparison_on_a_schema_without_dates_is_refused_with_the_reason():
    no_dates = {**COURIER, "schemas": [COURIER["schemas"][0], COURIER["schemas"][1]]}
    planned = question_plan(question="average rate in 2025 compared to 2024", sources=[no_dates], row_limit=10)
    assert not planned.answered and "no date column" in planned.tried[0]


def test_a_product_across_a_fan_out_is_refused_not_summed_twice():
    planned = question_plan(question="sum of rate * kilos per band", sources=[COURIER], row_limit=10)
    assert planned.answered  # tariffs -> shipments: the product is per shipment, grouped by its tariff's band
    assert 'SUM(t1."rate" * t0."kilos")' in planned.query and 'FROM "shipments" t0' in planned.query


def test_a_product_after_by_is_the_measure_not_the_dimension():
    intent = read("top 3 months by rate × kilos")
    assert (intent.bucket, intent.group, intent.limit, intent.order) == ("month", None, 3, "desc")
    assert intent.product == [("tariffs", "rate"), ("shipments", "kilos")]
