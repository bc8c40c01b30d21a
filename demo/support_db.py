"""The demo's support database: a SQLite file of customers, tickets, charges and
comments generated from a fixed random seed, with timestamps placed relative to the
moment it is built, and the top-up that keeps the README walk-through's tickets there
(open, high priority and recent), so the approval flow pauses every time it is tried.
``demo.seed`` decides when each is used."""

from __future__ import annotations

import os
import random
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.utils import timezone

DATA_SEED = 20260522
SQLITE_TIME = "%Y-%m-%d %H:%M:%S"


# --- The support database -------------------------------------------------------

FIRST_NAMES = [
    "Amara",
    "Ben",
    "Chiara",
    "Dmitri",
    "Elena",
    "Farah",
    "Gustavo",
    "Hana",
    "Ivan",
    "Jia",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oscar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Yusuf",
]
LAST_NAMES = [
    "Okafor",
    "Lindqvist",
    "Moretti",
    "Petrov",
    "Garcia",
    "Haddad",
    "Silva",
    "Tanaka",
    "Novak",
    "Chen",
    "Mensah",
    "Fischer",
    "Rossi",
    "Kaur",
    "Dubois",
    "Nakamura",
    "Schmidt",
    "Alvarez",
    "Berg",
    "Khan",
]
COMPANIES = [
    "Northwind Traders",
    "Bluebird Logistics",
    "Copperleaf Health",
    "Driftwood Media",
    "Evergreen Foods",
    "Foxglove Studio",
    "Granite Analytics",
    "Harbor Outfitters",
    "Ironbark Security",
    "Juniper Schools",
    "Kestrel Airlines",
    "Lumen Energy",
    "Maple & Finch",
    "Nimbus Software",
    "Orchid Travel",
    "Pinecone Games",
]
PLANS = [("free", 30), ("starter", 35), ("pro", 25), ("enterprise", 10)]
REGIONS = ["NA", "EMEA", "APAC", "LATAM"]
CHANNELS = ["email", "chat", "web", "phone"]
PRIORITIES = [("low", 25), ("normal", 45), ("high", 22), ("urgent", 8)]

# (subject, description) pairs by topic; {company} and {amount} are filled in.
TICKET_TOPICS = {
    "billing": [
        ("Charged twice this month", "Our card shows two charges of {amount} for the same invoice. Please refund one."),
        ("Refund not received", "We cancelled an add-on two weeks ago and the refund of {amount} has not arrived."),
        ("Invoice shows the wrong company name", "Invoices should be addressed to {company}, not our old name."),
        ("Upgrade price higher than quoted", "We were quoted less than the {amount} charged for the upgrade."),
    ],
    "access": [
        ("Cannot log in after password reset", "The reset link works but the new password is rejected."),
        ("Two-factor codes not arriving", "Nobody at {company} receives SMS codes since this morning."),
        ("Locked out of admin account", "Our only admin left {company}; we need to transfer ownership."),
    ],
    "bug": [
        ("Export to CSV times out", "Exports with more than 10k rows fail after a minute."),
        ("Dashboard charts are blank", "All charts on the main dashboard render empty since the last update."),
        ("Webhook deliveries failing", "Our endpoint receives nothing; your delivery log shows HTTP 500."),
        ("Mobile app crashes on launch", "The app closes immediately after the splash screen on Android."),
    ],
    "how_to": [
        ("How do I add more seats?", "We hired three people at {company} and need accounts for them."),
        ("Connecting our data warehouse", "Which permissions does the integration user need?"),
        ("Changing the billing contact", "Invoices should go to finance@ instead of me."),
    ],
    "outage": [
        ("Service unavailable in EU", "Everyone in our Berlin office gets a 503 error."),
        ("API returning 502 errors", "About a third of our API calls fail with 502 since 08:00 UTC."),
    ],
}
CHARGE_DESCRIPTIONS = ["Monthly subscription", "Annual subscription", "Seat add-on", "Overage", "Onboarding package"]
COMMENT_BODIES = [
    "Thanks for reaching out, we are looking into this now.",
    "Could you send a screenshot of the error?",
    "Attached the screenshot you asked for.",
    "This has been escalated to our engineering team.",
    "Still happening for us, any update?",
    "We applied a fix; please confirm it works on your side.",
]

SCHEMA_SQL = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE,
    company TEXT NOT NULL,
    plan TEXT NOT NULL CHECK (plan IN ('free', 'starter', 'pro', 'enterprise')),
    region TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE tickets (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    subject TEXT NOT NULL,
    description TEXT NOT NULL,
    priority TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    status TEXT NOT NULL CHECK (status IN ('open', 'pending', 'solved', 'closed')),
    channel TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('succeeded', 'refunded', 'failed', 'disputed')),
    created_at TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE TABLE ticket_comments (
    id INTEGER PRIMARY KEY,
    ticket_id INTEGER NOT NULL REFERENCES tickets(id),
    author TEXT NOT NULL CHECK (author IN ('customer', 'agent')),
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX tickets_status_priority ON tickets (status, priority);
CREATE INDEX tickets_created_at ON tickets (created_at);
CREATE INDEX charges_customer ON charges (customer_id);
"""


def _weighted(rng: random.Random, pairs: list[tuple[str, int]]) -> str:
    return rng.choices([value for value, _ in pairs], weights=[weight for _, weight in pairs])[0]


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(SQLITE_TIME)


def _ticket_text(rng: random.Random, *, company: str) -> tuple[str, str, str]:
    """A ticket's (topic, subject, description) for a customer of ``company``."""
    topic = rng.choice(list(TICKET_TOPICS))
    subject, description = rng.choice(TICKET_TOPICS[topic])
    amount = f"${rng.randint(20, 900)}.{rng.randint(0, 99):02d}"
    return topic, subject, description.format(company=company, amount=amount)


def _ticket_status(rng: random.Random, age: timedelta) -> str:
    if age < timedelta(days=1):
        return rng.choices(["open", "pending", "solved"], weights=[70, 20, 10])[0]
    if age < timedelta(days=7):
        return rng.choices(["open", "pending", "solved", "closed"], weights=[30, 25, 30, 15])[0]
    return rng.choices(["open", "pending", "solved", "closed"], weights=[5, 5, 30, 60])[0]


def demo_database_build(*, path: Path, now: datetime | None = None, seed: int = DATA_SEED) -> dict[str, int]:
    """Write the demo support database to ``path`` (replacing it); returns row counts.

    The same ``seed`` and ``now`` always give the same rows. About one ticket in
    nine is from the last 24 hours, and at least five of those are open and high
    priority, so "open high-priority tickets from the last day" has an answer.
    """
    rng = random.Random(seed)
    now = (now or timezone.now()).astimezone(UTC).replace(microsecond=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".building")
    partial.unlink(missing_ok=True)

    customers = []
    for customer_id in range(1, 121):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        company = rng.choice(COMPANIES)
        domain = company.lower().replace(" & ", "-").replace(" ", "") + ".example"
        created = now - timedelta(days=rng.randint(30, 730), minutes=rng.randint(0, 1439))
        customers.append(
            (
                customer_id,
                f"{first} {last}",
                f"{first.lower()}.{last.lower()}{customer_id}@{domain}",
                company,
                _weighted(rng, PLANS),
                rng.choice(REGIONS),
                _ts(created),
            )
        )

    tickets = []
    for ticket_id in range(1, 541):
        customer = rng.choice(customers)
        # One in nine tickets is recent; the rest spread over the last 90 days.
        if ticket_id % 9 == 0:
            age = timedelta(minutes=rng.randint(5, 23 * 60 + 50))
        else:
            age = timedelta(days=rng.randint(1, 89), minutes=rng.randint(0, 1439))
        created = now - age
        topic, subject, description = _ticket_text(rng, company=customer[3])
        priority = "urgent" if topic == "outage" and rng.random() < 0.6 else _weighted(rng, PRIORITIES)
        status = _ticket_status(rng, age)
        updated = min(now, created + timedelta(minutes=rng.randint(0, max(1, int(age.total_seconds() // 60)))))
        tickets.append(
            [
                ticket_id,
                customer[0],
                subject,
                description,
                priority,
                status,
                rng.choice(CHANNELS),
                _ts(created),
                _ts(updated),
            ]
        )
    # Guarantee the headline case: open, high priority, from the last 24 hours.
    recent = [t for t in tickets if now - datetime.strptime(t[7], SQLITE_TIME).replace(tzinfo=UTC) < timedelta(days=1)]
    for ticket in recent[:6]:
        ticket[4], ticket[5] = "high", "open"

    charges = []
    for charge_id in range(1, 401):
        customer = rng.choice(customers)
        created = now - timedelta(days=rng.randint(0, 179), minutes=rng.randint(0, 1439))
        charges.append(
            (
                charge_id,
                customer[0],
                rng.choice([900, 2900, 4900, 9900, 19900, 49900]) * rng.choice([1, 1, 1, 2, 12]),
                rng.choices(["USD", "EUR", "GBP"], weights=[70, 20, 10])[0],
                rng.choices(["succeeded", "refunded", "failed", "disputed"], weights=[85, 6, 6, 3])[0],
                _ts(created),
                rng.choice(CHARGE_DESCRIPTIONS),
            )
        )
    # A duplicate charge behind one of the recent "Charged twice" tickets.
    billing = next((t for t in tickets if t[2] == "Charged twice this month"), None)
    if billing is not None:
        when = datetime.strptime(billing[7], SQLITE_TIME).replace(tzinfo=UTC) - timedelta(hours=3)
        for offset in (0, 2):
            charges.append(
                (
                    len(charges) + 1,
                    billing[1],
                    4900,
                    "USD",
                    "succeeded",
                    _ts(when + timedelta(minutes=offset)),
                    "Monthly subscription",
                )
            )

    comments = []
    for ticket in tickets:
        if rng.random() < 0.45:
            created = datetime.strptime(ticket[7], SQLITE_TIME).replace(tzinfo=UTC)
            for n in range(rng.randint(1, 3)):
                moment = min(now, created + timedelta(minutes=15 * (n + 1) + rng.randint(0, 240)))
                comments.append(
                    (
                        len(comments) + 1,
                        ticket[0],
                        "agent" if n % 2 == 0 else "customer",
                        rng.choice(COMMENT_BODIES),
                        _ts(moment),
                    )
                )

    with sqlite3.connect(partial) as db:
        db.executescript(SCHEMA_SQL)
        db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?, ?)", customers)
        db.executemany("INSERT INTO tickets VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", tickets)
        db.executemany("INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?, ?)", charges)
        db.executemany("INSERT INTO ticket_comments VALUES (?, ?, ?, ?, ?)", comments)
    db.close()
    os.replace(partial, path)
    return {
        "customers": len(customers),
        "tickets": len(tickets),
        "charges": len(charges),
        "ticket_comments": len(comments),
    }


# --- Keeping the walk-through's tickets there ---------------------------------------

# The README asks the specialist to close "the open high-priority tickets created in
# the last 24 hours". A seed counts such tickets from the last FRESH_WINDOW only, so
# whatever it leaves behind stays inside the 24 hours for at least 24h - FRESH_WINDOW
# (12 hours); when fewer than FRESH_TICKETS_MINIMUM are found it adds new ones, from
# the last FRESH_TICKET_MAX_AGE, until there are FRESH_TICKETS_TARGET.
FRESH_WINDOW = timedelta(hours=12)
FRESH_TICKET_MAX_AGE = timedelta(hours=2)
FRESH_TICKETS_MINIMUM = 5
FRESH_TICKETS_TARGET = 6


class DemoDataUnusable(Exception):
    """The demo database is not one River generated (a table is missing or empty);
    ``manage.py demo_reset`` rebuilds it."""


def demo_tickets_count_fresh(*, path: Path, now: datetime | None = None) -> int:
    """Open high-priority tickets created within FRESH_WINDOW of ``now``."""
    now = (now or timezone.now()).astimezone(UTC)
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)) as db:
        return _count_fresh(db, now=now)


def _count_fresh(db: sqlite3.Connection, *, now: datetime) -> int:
    (count,) = db.execute(
        "SELECT count(*) FROM tickets WHERE status = 'open' AND priority = 'high' AND created_at >= ?",
        (_ts(now - FRESH_WINDOW),),
    ).fetchone()
    return count


def demo_tickets_top_up(*, path: Path, now: datetime | None = None) -> int:
    """Add open high-priority tickets from the last two hours when the demo database
    has fewer than FRESH_TICKETS_MINIMUM from the last FRESH_WINDOW; returns how many
    were added (0 when enough are there, so repeated seeds add nothing).

    Only inserts: tickets, comments, customers and charges people and agents changed
    stay as they are. The count and the inserts share one ``BEGIN IMMEDIATE``
    transaction, so two seeds at once (or a seed beside a running write-back) cannot
    both top up. The new rows are generated from the file's own state (its customers,
    its next ticket id) and ``now``, so the same file at the same moment gets the same
    tickets. Raises :class:`DemoDataUnusable` when the tables are not the demo's.
    """
    now = (now or timezone.now()).astimezone(UTC).replace(microsecond=0)
    if not path.is_file():
        raise DemoDataUnusable(f"{path} does not exist")
    try:
        with closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=30, isolation_level=None)
        ) as db:
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("BEGIN IMMEDIATE")
            try:
                added = _top_up(db, now=now)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise DemoDataUnusable(f"{path.name}: {exc}") from None
    return added


def _top_up(db: sqlite3.Connection, *, now: datetime) -> int:
    fresh = _count_fresh(db, now=now)
    if fresh >= FRESH_TICKETS_MINIMUM:
        return 0
    missing = FRESH_TICKETS_TARGET - fresh
    customers = db.execute("SELECT id, company FROM customers ORDER BY id").fetchall()
    if not customers:
        raise DemoDataUnusable("the customers table is empty")
    (last_ticket,) = db.execute("SELECT coalesce(max(id), 0) FROM tickets").fetchone()
    rng = random.Random(f"{DATA_SEED}:top-up:{last_ticket}:{_ts(now)}")
    # Distinct ages, newest last, so the batch reads like a morning's queue.
    ages = sorted(rng.sample(range(5, int(FRESH_TICKET_MAX_AGE.total_seconds() // 60)), missing), reverse=True)
    for age_minutes in ages:
        customer_id, company = rng.choice(customers)
        _, subject, description = _ticket_text(rng, company=company)
        created = _ts(now - timedelta(minutes=age_minutes))
        cursor = db.execute(
            "INSERT INTO tickets (customer_id, subject, description, priority, status, channel, created_at, "
            "updated_at) VALUES (?, ?, ?, 'high', 'open', ?, ?, ?)",
            (customer_id, subject, description, rng.choice(CHANNELS), created, created),
        )
        if rng.random() < 0.4:
            db.execute(
                "INSERT INTO ticket_comments (ticket_id, author, body, created_at) VALUES (?, 'customer', ?, ?)",
                (cursor.lastrowid, "Still happening for us, any update?", created),
            )
    return missing


def demo_database_reset(*, path: Path, now: datetime | None = None) -> dict[str, int]:
    """Put freshly generated tables in place of the demo database's; returns row counts.

    The fresh file is copied over the live one with SQLite's backup API, which takes
    the file's write lock and swaps every page in one step: a connection open on it
    (a query, a write-back) sees the old tables or the new, never a mix, and tables
    added since the build are gone. A file SQLite cannot open as a database is
    replaced instead (with its journals, which belonged to the old file).
    """
    fresh = path.with_name(path.name + ".fresh")
    counts = demo_database_build(path=fresh, now=now)
    try:
        if path.exists():
            try:
                with closing(sqlite3.connect(fresh)) as source, closing(sqlite3.connect(path, timeout=30)) as target:
                    source.backup(target)
                return counts
            except sqlite3.DatabaseError:
                for suffix in ("-journal", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)
    return counts
