"""The offline planner answers plain questions on schemas River does not ship.

Two public-style schemas are built here: the Chinook music store (11 tables; PascalCase
``ArtistId`` keys on SQLite, snake_case ``artist_id`` on PostgreSQL, declared foreign
keys) and a small shop whose ``customer_id`` style keys are not declared at all, so its
joins must be inferred. Each question goes through the real ``generate_query`` tool (the
router calls the offline planner through litellm) and the query runs through
``query_execute`` with River's SQL guard; the answer is compared with one computed by
independent SQL on the same database.
"""

from __future__ import annotations

import random
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from datasources.services import data_source_create, data_source_discover, query_execute
from executions.routing import router_build
from rivercore.contracts import AgentConfig, DataSourceMetadata, UserContext
from rivercore.router import Router, offline_provider
from rivercore.tools import ToolContext, ToolError, get_tool
from tests.datasources.fixtures import pg_admin_connect, pg_relay, pg_server, sqlite_dir  # noqa: F401
from tests.executions.test_offline_planner import EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
CHINOOK = next((p / "shared" / "data" / "chinook" for p in ROOT.parents
                if (p / "shared" / "data" / "chinook" / "Chinook_Sqlite.sql").is_file()), None)
needs_chinook = pytest.mark.skipif(CHINOOK is None, reason="the Chinook sample files are not in ../shared/data/chinook")

UNANSWERABLE = "unanswerable"

# (kind, question, truth SQL); a truth of UNANSWERABLE means the planner must say it cannot.
CHINOOK_SQLITE = [
    ("count", "How many tracks are there?", 'SELECT COUNT(*) FROM "Track"'),
    ("count with a value filter", "How many customers are from Brazil?",
     "SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'"),
    ("sum", "What is the sum of all invoice totals?", "SELECT SUM(Total) FROM Invoice"),
    ("average", "What is the average unit price of tracks?", "SELECT AVG(UnitPrice) FROM Track"),
    ("top-N across a join", "Show the top 3 artists by number of albums",
     "SELECT ar.Name, COUNT(*) AS n FROM Album al JOIN Artist ar ON al.ArtistId = ar.ArtistId "
     "GROUP BY ar.ArtistId, ar.Name ORDER BY n DESC, ar.Name LIMIT 3"),
    ("group by a dimension", "How many tracks are there per media type?",
     "SELECT m.Name, COUNT(*) AS n FROM Track t JOIN MediaType m ON t.MediaTypeId = m.MediaTypeId "
     "GROUP BY m.MediaTypeId, m.Name ORDER BY n DESC, m.Name"),
    ("two-hop join", "Which artist has the most tracks?",
     "SELECT ar.Name, COUNT(*) AS n FROM Track t JOIN Album al ON t.AlbumId = al.AlbumId "
     "JOIN Artist ar ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId, ar.Name ORDER BY n DESC, ar.Name LIMIT 1"),
    ("max", "What is the longest track in milliseconds?", "SELECT MAX(Milliseconds) FROM Track"),
    ("filter on a related table's value", "How many tracks are in the Jazz genre?",
     "SELECT COUNT(*) FROM Track t JOIN Genre g ON t.GenreId = g.GenreId WHERE g.Name = 'Jazz'"),
    ("cannot answer", "What is the average age of employees?", UNANSWERABLE),
]

CHINOOK_PG = [
    ("count", "How many tracks are there?", "SELECT COUNT(*) FROM track"),
    ("count with a value filter", "How many customers are from Brazil?",
     "SELECT COUNT(*) FROM customer WHERE country = 'Brazil'"),
    ("sum", "What is the sum of all invoice totals?", "SELECT SUM(total) FROM invoice"),
    ("average", "What is the average unit price of tracks?", "SELECT AVG(unit_price) FROM track"),
    ("top-N across a join", "Show the top 3 artists by number of albums",
     "SELECT ar.name, COUNT(*) AS n FROM album al JOIN artist ar ON al.artist_id = ar.artist_id "
     "GROUP BY ar.artist_id, ar.name ORDER BY n DESC, ar.name LIMIT 3"),
    ("group by a dimension", "How many tracks are there per media type?",
     "SELECT m.name, COUNT(*) AS n FROM track t JOIN media_type m ON t.media_type_id = m.media_type_id "
     "GROUP BY m.media_type_id, m.name ORDER BY n DESC, m.name"),
    ("two-hop join", "Which artist has the most tracks?",
     "SELECT ar.name, COUNT(*) AS n FROM track t JOIN album al ON t.album_id = al.album_id "
     "JOIN artist ar ON al.artist_id = ar.artist_id GROUP BY ar.artist_id, ar.name ORDER BY n DESC, ar.name LIMIT 1"),
    ("max", "What is the longest track in milliseconds?", "SELECT MAX(milliseconds) FROM track"),
    ("filter on a related table's value", "How many tracks are in the Jazz genre?",
     "SELECT COUNT(*) FROM track t JOIN genre g ON t.genre_id = g.genre_id WHERE g.name = 'Jazz'"),
    ("cannot answer", "What is the average age of employees?", UNANSWERABLE),
]

SHOP = [
    ("count", "How many orders are there?", "SELECT COUNT(*) FROM orders"),
    ("count with a value filter", "How many customers are in Germany?",
     "SELECT COUNT(*) FROM customers WHERE country = 'Germany'"),
    ("sum", "What is the total quantity of order items?", "SELECT SUM(quantity) FROM order_items"),
    ("average", "What is the average price of products?", "SELECT AVG(price) FROM products"),
    ("top-N across a join", "What are the top 3 products by total quantity?",
     "SELECT p.name, SUM(i.quantity) AS n FROM order_items i JOIN products p ON i.product_id = p.id "
     "GROUP BY p.id, p.name ORDER BY n DESC, p.name LIMIT 3"),
    ("group by a dimension", "How many orders are there per status?",
     "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY n DESC, status"),
    ("two-hop join", "Which customer has the most order items?",
     "SELECT c.name, COUNT(*) AS n FROM order_items i JOIN orders o ON i.order_id = o.id "
     "JOIN customers c ON o.customer_id = c.id GROUP BY c.id, c.name ORDER BY n DESC, c.name LIMIT 1"),
    ("max", "What is the highest product price?", "SELECT MAX(price) FROM products"),
    ("filter on a related table's value", "How many orders contain products in the Books category?",
     "SELECT COUNT(DISTINCT o.id) FROM orders o JOIN order_items i ON i.order_id = o.id "
     "JOIN products p ON i.product_id = p.id WHERE p.category = 'Books'"),
    ("cannot answer", "What is the average age of customers?", UNANSWERABLE),
]

SHOP_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(80) NOT NULL, country VARCHAR(40) NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name VARCHAR(80) NOT NULL, category VARCHAR(40) NOT NULL,
                       price NUMERIC(8, 2) NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, status VARCHAR(20) NOT NULL,
                     ordered_on DATE NOT NULL);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, product_id INTEGER NOT NULL,
                          quantity INTEGER NOT NULL);
"""


def shop_rows() -> dict[str, list[tuple]]:
    """A deterministic shop: no foreign keys are declared, so joins come from names."""
    rng = random.Random(12)
    countries = ["Germany", "France", "Japan", "Brazil", "Canada"]
    categories = ["Books", "Games", "Garden", "Music"]
    customers = [(i, f"Customer {i:02d}", countries[rng.randrange(5)]) for i in range(1, 31)]
    products = [(i, f"Product {i:02d}", categories[i % 4], f"{rng.randrange(200, 9000) / 100:.2f}")
                for i in range(1, 21)]
    orders = [(i, rng.randrange(1, 31), ["paid", "shipped", "cancelled"][rng.randrange(3)],
               f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}") for i in range(1, 121)]
    items = [(i, rng.randrange(1, 121), rng.randrange(1, 21), rng.randrange(1, 6)) for i in range(1, 401)]
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


@pytest.fixture
def offline_llm() -> Router:
    return router_build([offline_provider()])


def tool_context(source, llm) -> ToolContext:
    metadata = DataSourceMetadata(data_source_id=source.pk, name=source.name, type=source.type,
                                  access_level="read_only", schemas=source.schema_cache)
    return ToolContext(
        execution_id=1, user=UserContext.model_validate(EXAMPLE["user_context"]),
        agent=AgentConfig.model_validate(EXAMPLE["agent_config"]), data_sources=[metadata], input_prompt=None,
        llm=llm,
    )


def normalise(rows) -> list[tuple]:
    def one(value):
        if isinstance(value, Decimal | float):
            return round(float(value), 4)
        if isinstance(value, str):
            try:
                return round(float(value), 4)
            except ValueError:
                return value
        return value

    return [tuple(one(v) for v in row) for row in rows]


def ask(source, llm, question: str):
    """The planner's SQL through the generate_query tool, then River's guarded query path."""
    tool = get_tool("generate_query")
    arguments = tool.input_model.model_validate({"user_prompt": question, "intent_type": "DATA_QUERY",
                                                 "data_sources": [source.pk]})
    generated = tool.handler(tool_context(source, llm), arguments)
    result = query_execute(data_source=source, query=generated.query)
    return generated, normalise(result.rows)


def score(source, llm, questions, truth) -> tuple[list[str], list[str]]:
    right, wrong = [], []
    for kind, question, truth_sql in questions:
        if truth_sql == UNANSWERABLE:
            try:
                generated, rows = ask(source, llm, question)
            except ToolError as exc:
                honest = "could not" in exc.message and "matched" in exc.message
                (right if honest else wrong).append(f"{kind}: {exc.message}")
            else:
                wrong.append(f"{kind}: answered {rows} with {generated.query}")
            continue
        expected = normalise(truth(truth_sql))
        try:
            generated, rows = ask(source, llm, question)
        except ToolError as exc:
            wrong.append(f"{kind}: {question!r} failed: {exc.message}")
            continue
        (right if rows == expected else wrong).append(
            f"{kind}: {question!r} -> {generated.query} gave {rows[:5]}, truth {expected[:5]}")
    return right, wrong


def assert_all_right(right: list[str], wrong: list[str]) -> None:
    """The issue asks for at least 8 of 10; all 10 pass today, so any regression shows."""
    assert len(right) == 10, "\n".join(["wrong:", *wrong, "right:", *right])


def sqlite_source(workspace, path: Path, name: str):
    source = data_source_create(workspace=workspace, name=name, type="sqlite",
                                connection_config={"path": path.name}, credentials={})
    data_source_discover(data_source=source)
    return source


def sqlite_truth(path: Path):
    def truth(sql: str):
        conn = sqlite3.connect(path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    return truth


def pg_source(workspace, pg_server, name: str):  # noqa: F811
    source = data_source_create(
        workspace=workspace, name=name, type="postgresql",
        connection_config={"host": pg_server["host"], "port": pg_server["port"], "database": pg_server["database"]},
        credentials={"user": pg_server["user"], "password": pg_server["password"]},
    )
    data_source_discover(data_source=source)
    return source


def pg_truth(pg_server):  # noqa: F811
    def truth(sql: str):
        with pg_admin_connect(pg_server) as conn:
            return conn.execute(sql).fetchall()

    return truth


def pg_reset(pg_server, script: str) -> None:  # noqa: F811
    role = pg_server["user"]
    with pg_admin_connect(pg_server) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.execute(script)
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute("ANALYZE")


@needs_chinook
def test_chinook_on_sqlite_answers_all_ten_kinds(workspace, sqlite_dir, offline_llm):  # noqa: F811
    path = sqlite_dir / str(workspace.pk) / "chinook.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript((CHINOOK / "Chinook_Sqlite.sql").read_text(encoding="utf-8-sig"))
    finally:
        conn.close()
    source = sqlite_source(workspace, path, "Chinook SQLite")
    assert_all_right(*score(source, offline_llm, CHINOOK_SQLITE, sqlite_truth(path)))


@needs_chinook
def test_chinook_on_postgresql_answers_all_ten_kinds(workspace, pg_server, offline_llm):  # noqa: F811
    lines = (CHINOOK / "Chinook_PostgreSql.sql").read_text(encoding="utf-8-sig").splitlines()
    script = "\n".join(line for line in lines if not line.startswith(("DROP DATABASE", "CREATE DATABASE", "\\c")))
    pg_reset(pg_server, script)
    source = pg_source(workspace, pg_server, "Chinook PG")
    assert_all_right(*score(source, offline_llm, CHINOOK_PG, pg_truth(pg_server)))


def test_a_shop_with_undeclared_keys_on_sqlite_answers_all_ten_kinds(workspace, sqlite_dir, offline_llm):  # noqa: F811
    path = sqlite_dir / str(workspace.pk) / "shop.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SHOP_SCHEMA)
        for table, rows in shop_rows().items():
            conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        conn.commit()
    finally:
        conn.close()
    source = sqlite_source(workspace, path, "Shop SQLite")
    assert_all_right(*score(source, offline_llm, SHOP, sqlite_truth(path)))


def test_a_shop_with_undeclared_keys_on_postgresql_answers_all_ten_kinds(workspace, pg_server, offline_llm):  # noqa: F811
    pg_reset(pg_server, SHOP_SCHEMA)
    with pg_admin_connect(pg_server) as conn, conn.cursor() as cur:
        for table, rows in shop_rows().items():
            cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
    source = pg_source(workspace, pg_server, "Shop PG")
    assert_all_right(*score(source, offline_llm, SHOP, pg_truth(pg_server)))
