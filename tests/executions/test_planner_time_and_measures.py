"""Time buckets, two periods compared, several aggregates in one answer, derived
measures and top N, answered by the offline planner on a schema River does not ship
(a maintenance fleet: depots, parts, work orders and the parts each one used, keys not
declared), on SQLite and on PostgreSQL. Each question goes through the real
generate_query tool and River's guarded query path; the expected rows are computed in
Python from the rows inserted, not by SQL."""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal

from tests.datasources.fixtures import pg_admin_connect, pg_relay, pg_server, sqlite_dir  # noqa: F401
from tests.executions.test_planner_questions import (  # noqa: F401
    ask,
    normalise,
    offline_llm,
    pg_reset,
    pg_source,
    sqlite_source,
)

FLEET_SCHEMA = """
CREATE TABLE depots (id INTEGER PRIMARY KEY, city VARCHAR(40) NOT NULL);
CREATE TABLE parts (id INTEGER PRIMARY KEY, label VARCHAR(40) NOT NULL, unit_cost NUMERIC(8, 2) NOT NULL);
CREATE TABLE work_orders (id INTEGER PRIMARY KEY, depot_id INTEGER NOT NULL, opened_at DATE NOT NULL,
                          labour_hours INTEGER NOT NULL);
CREATE TABLE work_order_parts (id INTEGER PRIMARY KEY, work_order_id INTEGER NOT NULL, part_id INTEGER NOT NULL,
                               qty INTEGER NOT NULL);
"""


def month_before(month: str) -> str:
    year, number = int(month[:4]), int(month[5:])
    return f"{year - 1}-12" if number == 1 else f"{year}-{number - 1:02d}"


def fleet_rows(this_month: str) -> dict[str, list[tuple]]:
    """Work orders in 2024, 2025, this month and last month (as the database's clock
    says), with distinct totals so rankings have no ties."""
    last_month = month_before(this_month)
    depots = [(1, "Oslo"), (2, "Bergen"), (3, "Tromso"), (4, "Stavanger")]
    parts = [(i, f"Part {i:02d}", f"{(i * 37) % 90 + 10}.{i * 7 % 100:02d}") for i in range(1, 9)]
    months = ([f"2024-{m:02d}" for m in (1, 4, 4, 7, 11)] + [f"2025-{m:02d}" for m in (2, 3, 3, 3, 6, 9, 12)]
              + [this_month] * 3 + [last_month] * 5)
    orders = [(i, (i * 7) % 4 + 1, f"{month}-{(i * 5) % 27 + 1:02d}", (i * 3) % 11 + 1)
              for i, month in enumerate(months, start=1)]
    used = [(i, (i * 5) % len(orders) + 1, (i * 3) % 8 + 1, i % 4 + 1) for i in range(1, 41)]
    return {"depots": depots, "parts": parts, "work_orders": orders, "work_order_parts": used}


def expected_answers(rows: dict[str, list[tuple]], this_month: str) -> dict[str, list[tuple]]:
    """What each question must return, from the rows in Python."""
    city = dict(rows["depots"])
    cost = {pid: Decimal(c) for pid, _, c in rows["parts"]}
    label = {pid: name for pid, name, _ in rows["parts"]}
    orders = {oid: (depot, day, hours) for oid, depot, day, hours in rows["work_orders"]}
    per_month = Counter(day[:7] for _, day, _ in orders.values())
    hours_per_year: dict[str, int] = defaultdict(int)
    hours_per_quarter: dict[str, int] = defaultdict(int)
    count_per_depot: Counter[int] = Counter()
    hours_per_depot: dict[int, int] = defaultdict(int)
    for depot, day, hours in orders.values():
        hours_per_year[day[:4]] += hours
        hours_per_quarter[f"{day[:4]}-Q{(int(day[5:7]) + 2) // 3}"] += hours
        count_per_depot[depot] += 1
        hours_per_depot[depot] += hours
    spend_per_part: dict[int, Decimal] = defaultdict(Decimal)
    spend_per_depot: dict[int, Decimal] = defaultdict(Decimal)
    for _, order, part, qty in rows["work_order_parts"]:
        spend_per_part[part] += cost[part] * qty
        spend_per_depot[orders[order][0]] += cost[part] * qty
    all_hours = [h for _, _, h in orders.values()]
    this_count, last_count = per_month[this_month], per_month[month_before(this_month)]
    ranked_parts = sorted(spend_per_part, key=lambda p: (-spend_per_part[p], label[p]))[:3]
    busiest = min(per_month, key=lambda m: (-per_month[m], m))
    return {
        "How many work orders per month?": sorted(per_month.items()),
        "Total labour hours by year": sorted(hours_per_year.items()),
        "total labour hours per quarter": sorted(hours_per_quarter.items()),
        "What is the total and average labour hours?": [(sum(all_hours), sum(all_hours) / len(all_hours))],
        "Top 3 parts by unit cost times qty": [(label[p], spend_per_part[p]) for p in ranked_parts],
        "Labour hours in 2025 compared to 2024": [
            (hours_per_year["2025"], hours_per_year["2024"], hours_per_year["2025"] - hours_per_year["2024"])],
        "How many work orders this month vs last month?": [(this_count, last_count, this_count - last_count)],
        "Which month had the most work orders?": [(busiest, per_month[busiest])],
        "Number of work orders and total labour hours per depot": [
            (city[d], count_per_depot[d], hours_per_depot[d])
            for d in sorted(count_per_depot, key=lambda d: (-count_per_depot[d], city[d]))],
        "Total cost as unit cost × qty per depot": [
            (city[d], spend_per_depot[d]) for d in sorted(spend_per_depot, key=lambda d: (-spend_per_depot[d],
                                                                                          city[d]))],
        "top 3 work orders by labour hours": [
            (oid, orders[oid][2]) for oid in sorted(orders, key=lambda o: (-orders[o][2], o))[:3]],
    }


def wrong_answers(source, llm, expected: dict[str, list[tuple]]) -> list[str]:
    wrong = []
    for question, rows in expected.items():
        generated, got = ask(source, llm, question)
        if got != normalise(rows):
            wrong.append(f"{question!r} -> {generated.query} gave {got[:6]}, expected {normalise(rows)[:6]}")
    return wrong


def test_time_buckets_periods_and_derived_measures_on_sqlite(workspace, sqlite_dir, offline_llm):  # noqa: F811
    path = sqlite_dir / str(workspace.pk) / "fleet.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        this_month = conn.execute("SELECT strftime('%Y-%m', 'now')").fetchone()[0]
        rows = fleet_rows(this_month)
        conn.executescript(FLEET_SCHEMA)
        for table, values in rows.items():
            conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(values[0]))})", values)
        conn.commit()
    finally:
        conn.close()
    source = sqlite_source(workspace, path, "Fleet SQLite")
    assert wrong_answers(source, offline_llm, expected_answers(rows, this_month)) == []


def test_time_buckets_periods_and_derived_measures_on_postgresql(workspace, pg_server, offline_llm):  # noqa: F811
    pg_reset(pg_server, FLEET_SCHEMA)
    with pg_admin_connect(pg_server) as conn, conn.cursor() as cur:
        this_month = conn.execute("SELECT to_char(now(), 'YYYY-MM')").fetchone()[0]
        rows = fleet_rows(this_month)
        for table, values in rows.items():
            cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(values[0]))})", values)
    source = pg_source(workspace, pg_server, "Fleet PG")
    assert wrong_answers(source, offline_llm, expected_answers(rows, this_month)) == []
