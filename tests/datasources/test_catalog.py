"""Catalog search ranks the right table first on a realistic 24-table schema."""

from __future__ import annotations

import pytest

from datasources.catalog import catalog_search, stem, tokenize
from datasources.models import DataSource


def _table(name, columns, description=""):
    return {
        "table_name": name,
        "description": description,
        "columns": [
            {"column_name": c, "data_type": t, "description": d}
            for c, t, d in (col if len(col) == 3 else (*col, "") for col in columns)
        ],
    }


SCHEMA = [
    _table(
        "customers",
        [
            ("id", "integer"),
            ("full_name", "text"),
            ("email", "text"),
            ("company_id", "integer"),
            ("created_at", "timestamp"),
        ],
    ),
    _table("companies", [("id", "integer"), ("legal_name", "text"), ("industry", "text"), ("country", "text")]),
    _table(
        "tickets",
        [
            ("id", "integer"),
            ("customer_id", "integer"),
            ("subject", "text"),
            ("priority", "text"),
            ("status", "text"),
            ("created_at", "timestamp"),
            ("assignee_id", "integer"),
        ],
        "Support requests raised by customers",
    ),
    _table(
        "ticket_comments", [("id", "integer"), ("ticket_id", "integer"), ("body", "text"), ("author_id", "integer")]
    ),
    _table(
        "charges",
        [
            ("id", "integer"),
            ("customer_id", "integer"),
            ("amount_cents", "integer"),
            ("currency", "text"),
            ("status", "text"),
            ("charged_at", "timestamp"),
        ],
    ),
    _table("refunds", [("id", "integer"), ("charge_id", "integer"), ("amount_cents", "integer"), ("reason", "text")]),
    _table(
        "subscriptions",
        [
            ("id", "integer"),
            ("customer_id", "integer"),
            ("plan_id", "integer"),
            ("started_at", "timestamp"),
            ("cancelled_at", "timestamp"),
        ],
    ),
    _table("plans", [("id", "integer"), ("name", "text"), ("monthly_price_cents", "integer")]),
    _table("products", [("id", "integer"), ("sku", "text"), ("title", "text"), ("list_price", "numeric")]),
    _table(
        "orders", [("id", "integer"), ("customer_id", "integer"), ("ordered_at", "timestamp"), ("total", "numeric")]
    ),
    _table(
        "order_lines", [("id", "integer"), ("order_id", "integer"), ("product_id", "integer"), ("quantity", "integer")]
    ),
    _table(
        "shipments",
        [
            ("id", "integer"),
            ("order_id", "integer"),
            ("carrier", "text"),
            ("tracking_number", "text"),
            ("shipped_at", "timestamp"),
        ],
    ),
    _table(
        "addresses",
        [("id", "integer"), ("customer_id", "integer"), ("street", "text"), ("city", "text"), ("postal_code", "text")],
    ),
    _table("employees", [("id", "integer"), ("name", "text"), ("team", "text"), ("hired_on", "date")]),
    _table("teams", [("id", "integer"), ("name", "text"), ("manager_id", "integer")]),
    _table(
        "sla_policies",
        [("id", "integer"), ("priority", "text"), ("response_minutes", "integer")],
        "Service level targets per priority",
    ),
    _table(
        "kb_articles",
        [("id", "integer"), ("title", "text"), ("body", "text"), ("published", "boolean")],
        "Knowledge base help articles",
    ),
    _table(
        "satisfaction_surveys",
        [("id", "integer"), ("ticket_id", "integer"), ("score", "integer"), ("feedback", "text")],
    ),
    _table(
        "login_events",
        [("id", "integer"), ("user_id", "integer"), ("ip_address", "inet"), ("occurred_at", "timestamp")],
    ),
    _table("feature_flags", [("id", "integer"), ("key", "text"), ("enabled", "boolean")]),
    _table(
        "invoices_archive",
        [("id", "integer"), ("number", "text"), ("issued_on", "date")],
        "Legacy invoice numbers before 2020",
    ),
    _table("marketing_campaigns", [("id", "integer"), ("name", "text"), ("budget", "numeric"), ("channel", "text")]),
    _table(
        "phone_calls",
        [("id", "integer"), ("customer_id", "integer"), ("duration_seconds", "integer"), ("recorded_at", "timestamp")],
    ),
    _table("warehouses", [("id", "integer"), ("city", "text"), ("capacity", "integer")]),
]


@pytest.fixture
def catalog_source(workspace):
    return DataSource.objects.create(
        workspace=workspace,
        name="Warehouse",
        type="sqlite",
        connection_config={"path": "w.sqlite3"},
        schema_cache=SCHEMA,
    )


def test_schema_is_big_enough():
    assert len(SCHEMA) >= 20


@pytest.mark.parametrize(
    ("query", "expected_table"),
    [
        ("How many open high-priority tickets were created in the last 24 hours?", "tickets"),
        ("list our clients", "customers"),
        ("total payments received last month", "charges"),
        ("refunds issued for failed charges and their reason", "refunds"),
        ("which carrier delivered the shipments", "shipments"),
        ("response time targets by severity", "sla_policies"),
        ("comments written on a support case", "ticket_comments"),
        ("help articles in the knowledge base", "kb_articles"),
        ("customer satisfaction feedback scores", "satisfaction_surveys"),
        ("staff hired this year per team", "employees"),
        ("products with their SKU and price", "products"),
        ("postal code and city of customer addresses", "addresses"),
    ],
)
def test_expected_table_ranks_first(catalog_source, query, expected_table):
    result = catalog_search(data_sources=[catalog_source], query=query, top_k=100)
    tables = [m for m in result.matches if m.kind == "table"]
    assert tables, query
    assert tables[0].table_name == expected_table, [(m.table_name, m.score) for m in tables]


def test_columns_are_ranked_with_scores(catalog_source):
    result = catalog_search(data_sources=[catalog_source], query="ticket priority", top_k=20)
    columns = [(m.table_name, m.column_name) for m in result.matches if m.kind == "column"]
    assert columns[0] == ("tickets", "priority")
    assert all(0 < m.score <= 1 for m in result.matches)
    assert [m.score for m in result.matches] == sorted((m.score for m in result.matches), reverse=True)
    assert result.total_results >= len(result.matches)


def test_search_is_deterministic_and_respects_top_k(catalog_source):
    first = catalog_search(data_sources=[catalog_source], query="customer email", top_k=3)
    second = catalog_search(data_sources=[catalog_source], query="customer email", top_k=3)
    assert first == second
    assert len(first.matches) == 3


def test_unrelated_query_matches_nothing(catalog_source):
    result = catalog_search(data_sources=[catalog_source], query="zebra xylophone", top_k=5)
    assert result.matches == [] and result.total_results == 0


def test_tokenizer_folds_plurals_tenses_synonyms_and_identifiers():
    assert stem("tickets") == stem("ticket") == "ticket"
    assert stem("created") == stem("create") == stem("creating")
    assert tokenize("createdAt") == tokenize("created_at") == ["create"]
    assert tokenize("clients") == tokenize("customer") == ["customer"]
    assert tokenize("issues") == ["ticket"]
    assert tokenize("invoice payments") == ["charge", "charge"]
