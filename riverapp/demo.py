"""The demo River starts with: an organization, a workspace, an admin, a support
database and two agents. ``seed_demo`` calls :func:`demo_seed`; running it again
finds everything in place and changes nothing it does not have to.

The support database is a SQLite file generated from a fixed random seed. Its
timestamps are placed relative to the moment it is built. An existing file is left
alone (agents may have written to it), except that every seed tops up the tickets
the README's walk-through closes (:func:`demo_tickets_top_up`): open, high priority
and recent. So the approval flow pauses again after a restart, however often it was
tried and however old the file is. ``manage.py demo_reset`` (or ``seed_demo
--refresh-data``) puts freshly generated tables in place of whatever is there.
"""

from __future__ import annotations

import os
import random
import secrets
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents.models import Agent, AgentVersion
from datasources.models import DataSource
from datasources.services import data_source_discover
from governance.models import WorkspaceSettings
from tenancy.models import Membership, Organization, OrganizationMember, Workspace
from tenancy.permissions import Role

ORG_NAME, ORG_SLUG = "Demo Org", "demo-org"
WORKSPACE_NAME, WORKSPACE_SLUG = "Support", "support"
ADMIN_USERNAME = "admin"
# A second person for the approval gate: runs the admin starts need someone else's
# approval (segregation of duties), so the demo seeds an editor who may approve.
APPROVER_USERNAME = "approver"
DATA_SOURCE_NAME = "Support desk (demo)"
DATA_SEED = 20260522
SQLITE_TIME = "%Y-%m-%d %H:%M:%S"

SUPPORT_SPECIALIST = "L1 Support Specialist"
SUPPORT_ANALYST = "Support Analyst"


@dataclass
class SeedReport:
    created: list[str]
    admin_password: str | None = None  # set only when the admin was created with a generated password
    approver_password: str | None = None  # likewise for the approver
    database_path: Path | None = None
    warnings: list[str] = field(default_factory=list)  # what is wrong but did not stop the seed

    @property
    def changed(self) -> bool:
        return bool(self.created)


# Relative to the demo workspace's directory, RIVER_SQLITE_DATA_DIR/<workspace id>/,
# the only place the workspace's SQLite data sources may live.
DEMO_DATABASE = "demo/support.sqlite3"


def demo_database_path(workspace_id: int | None = None) -> Path:
    """The support database's file; by default the seeded demo workspace's."""
    if workspace_id is None:
        workspace_id = Workspace.objects.get(organization__slug=ORG_SLUG, slug=WORKSPACE_SLUG).pk
    return Path(settings.RIVER_SQLITE_DATA_DIR) / str(workspace_id) / DEMO_DATABASE


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


# --- River objects ------------------------------------------------------------------

SPECIALIST_TOOLS = [
    "classify_intent",
    "check_governance",
    "generate_query",
    "search_catalog",
    "recommend_visualization",
    "explain_results",
    "execute_query",
    "write_back",
    "ask_user",
]
ANALYST_TOOLS = [
    "classify_intent",
    "search_catalog",
    "generate_query",
    "execute_query",
    "explain_results",
    "recommend_visualization",
]

DEMO_AGENTS = [
    {
        "name": SUPPORT_SPECIALIST,
        "business_function": "customer_support",
        "domain": "Customer Success",
        "description": "Works the first-line support queue of the demo help desk.",
        "version": {
            "goal": (
                "Keep the first-line support queue moving: find the tickets that need attention, "
                "work out what each customer needs from their history and charges, and propose "
                "the ticket updates that resolve them."
            ),
            "instructions": (
                "Start with priority: urgent and high tickets first, newest first. Look the customer "
                "up before answering and, for billing questions, check their charges for duplicates, "
                "failures or refunds. Say what you found and why before proposing any change. Every "
                "change to a ticket is a write-back and waits for a person to approve it; never "
                "change customers or charges. Ask the user when a ticket is ambiguous."
            ),
            "action_level": "act_with_approval",
            "tools": SPECIALIST_TOOLS,
            "approval_rules": {
                "require_approval_for": ["write_back"],
                "approver_roles": ["admin", "editor"],
                "escalation_timeout_minutes": 1440,
            },
            "notification_config": {"channels": ["in_app"], "notify_on": ["failed", "approval_expired"]},
        },
    },
    {
        "name": SUPPORT_ANALYST,
        "business_function": "data_analyst",
        "domain": "Customer Success",
        "description": "Answers questions about the help desk's tickets, customers and charges.",
        "version": {
            "goal": (
                "Answer questions about the support desk with numbers taken from its database: ticket "
                "volumes, backlogs, response times, customers and their charges."
            ),
            "instructions": (
                "Find the relevant tables in the catalog, write one read-only query that answers the "
                "question, run it and explain the result in plain words, including the time window and "
                "filters you used. Suggest a chart when the answer is a series. Never try to change data."
            ),
            "action_level": "read_only",
            "tools": ANALYST_TOOLS,
            "approval_rules": {},
            "notification_config": {},
        },
    },
]


def _admin(report: SeedReport):
    User = get_user_model()  # noqa: N806
    admin = User.objects.filter(username=ADMIN_USERNAME).first()
    if admin is not None:
        return admin
    password = settings.RIVER_ADMIN_PASSWORD
    if not password:
        password = secrets.token_urlsafe(12)
        report.admin_password = password
    admin = User.objects.create_user(
        username=ADMIN_USERNAME, email="admin@demo.example", password=password, is_staff=True, is_superuser=True
    )
    report.created.append(f"user {ADMIN_USERNAME}")
    return admin


def _approver(*, workspace: Workspace, report: SeedReport):
    """The demo's approver: a workspace editor (editors hold approval:resolve and the
    demo agent's approver_roles name them). Password from RIVER_APPROVER_PASSWORD, or
    generated and reported once; never a fixed password."""
    User = get_user_model()  # noqa: N806
    approver = User.objects.filter(username=APPROVER_USERNAME).first()
    if approver is None:
        password = settings.RIVER_APPROVER_PASSWORD
        if not password:
            password = secrets.token_urlsafe(12)
            report.approver_password = password
        approver = User.objects.create_user(
            username=APPROVER_USERNAME, email="approver@demo.example", password=password
        )
        report.created.append(f"user {APPROVER_USERNAME}")
    _, created = Membership.objects.get_or_create(
        workspace=workspace, user=approver, defaults={"role": Role.EDITOR}
    )
    if created:
        report.created.append("workspace editor membership (approver)")
    return approver


def _agent(*, workspace: Workspace, owner, data_source: DataSource, spec: dict, report: SeedReport) -> Agent:
    agent = Agent.objects.filter(workspace=workspace, name=spec["name"]).first()
    if agent is not None:
        return agent
    agent = Agent.objects.create(
        workspace=workspace,
        name=spec["name"],
        business_function=spec["business_function"],
        domain=spec["domain"],
        description=spec["description"],
        owner=owner,
        status=Agent.Status.ACTIVE,
    )
    version = AgentVersion.objects.create(agent=agent, version=1, created_by=owner, **spec["version"])
    version.data_sources.set([data_source])
    agent.current_version = version
    agent.save(update_fields=["current_version", "updated_at"])
    report.created.append(f"agent {agent.name}")
    return agent


def demo_seed(*, refresh_data: bool = False) -> SeedReport:
    """Create whatever part of the demo is missing and top up the walk-through's
    tickets; with ``refresh_data``, put fresh tables in the demo database first. Safe
    to run any number of times, also beside a running server. Runs, approvals and the
    audit trail are River's rows, never touched here."""
    report = SeedReport(created=[])
    with transaction.atomic():
        org, created = Organization.objects.get_or_create(slug=ORG_SLUG, defaults={"name": ORG_NAME})
        if created:
            report.created.append(f"organization {org.name}")
        workspace, created = Workspace.objects.get_or_create(
            organization=org, slug=WORKSPACE_SLUG, defaults={"name": WORKSPACE_NAME, "time_zone": "UTC"}
        )
        if created:
            report.created.append(f"workspace {workspace.name}")

    # The file lives in the workspace's own directory, so it is built once the
    # workspace exists (and outside a transaction: no I/O inside one).
    path = demo_database_path(workspace.pk)
    report.database_path = path
    rebuilt = refresh_data or not path.exists()
    if not path.exists():
        demo_database_build(path=path)
        report.created.append(f"demo database {path}")
    elif refresh_data:
        demo_database_reset(path=path)
        report.created.append(f"fresh demo data in {path}")
    try:
        added = demo_tickets_top_up(path=path)
    except DemoDataUnusable as exc:
        report.warnings.append(
            f"The demo tickets were not topped up ({exc}); `manage.py demo_reset` rebuilds the demo data."
        )
    else:
        if added:
            report.created.append(f"{added} open high-priority tickets from the last two hours in the demo database")

    with transaction.atomic():
        admin = _admin(report)
        _, created = OrganizationMember.objects.get_or_create(
            organization=org, user=admin, defaults={"role": OrganizationMember.OrgRole.ADMIN}
        )
        if created:
            report.created.append("organization admin membership")
        _, created = Membership.objects.get_or_create(workspace=workspace, user=admin, defaults={"role": Role.ADMIN})
        if created:
            report.created.append("workspace admin membership")
        _approver(workspace=workspace, report=report)
        _, created = WorkspaceSettings.objects.get_or_create(
            workspace=workspace, defaults={"approval_notification_config": {"in_app": {"enabled": True}}}
        )
        if created:
            report.created.append("workspace settings (in-app approval notifications)")
        data_source, created = DataSource.objects.get_or_create(
            workspace=workspace,
            name=DATA_SOURCE_NAME,
            defaults={
                "description": "Generated help-desk data: customers, tickets, ticket comments and charges.",
                "type": DataSource.Type.SQLITE,
                "connection_config": {"path": DEMO_DATABASE},
                "access_level": DataSource.AccessLevel.READ_WRITE,
                "classifications": {"customers": "pii"},
            },
        )
        if created:
            report.created.append(f"data source {data_source.name}")
        for spec in DEMO_AGENTS:
            _agent(workspace=workspace, owner=admin, data_source=data_source, spec=spec, report=report)

    # Discovery reads the file, so it runs after the transaction (no I/O inside one).
    if data_source.schema_discovered_at is None or rebuilt:
        data_source_discover(data_source=data_source)
        report.created.append("schema cache")
    return report
