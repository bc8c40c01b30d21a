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

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from agents.models import Agent, AgentVersion
from datasources.models import DataSource
from datasources.services import data_source_discover
from demo.support_db import DemoDataUnusable, demo_database_build, demo_database_reset, demo_tickets_top_up
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
