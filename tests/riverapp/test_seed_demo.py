import sqlite3
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents.models import Agent
from datasources.models import DataSource
from governance.models import WorkspaceSettings
from riverapp.demo import ANALYST_TOOLS, SPECIALIST_TOOLS, demo_database_build, demo_database_path
from tenancy.models import Membership, Organization, OrganizationMember, Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo_dirs(settings, tmp_path):
    settings.RIVER_SQLITE_DATA_DIR = tmp_path / "datasources"
    settings.RIVER_ADMIN_PASSWORD = None
    settings.RIVER_APPROVER_PASSWORD = None
    return tmp_path


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def snapshot() -> dict:
    return {
        model.__name__: sorted(model.objects.values_list("pk", flat=True))
        for model in (Organization, Workspace, Membership, OrganizationMember, Agent, DataSource, WorkspaceSettings)
    } | {"users": sorted(get_user_model().objects.values_list("username", "password"))}


def test_seed_creates_the_demo_and_prints_a_generated_password_once():
    output = seed()
    admin = get_user_model().objects.get(username="admin")
    password = next(line for line in output.splitlines() if line.startswith("Demo login: admin / ")).split(" / ")[1]
    assert admin.check_password(password)
    assert password not in admin.password  # stored as a hash only

    workspace = Workspace.objects.get(name="Support", organization__name="Demo Org")
    assert workspace.time_zone == "UTC"
    assert Membership.objects.get(workspace=workspace, user=admin).role == "admin"
    assert OrganizationMember.objects.get(organization=workspace.organization, user=admin).role == "admin"
    notification = WorkspaceSettings.objects.get(workspace=workspace).approval_notification_config
    assert notification["in_app"]["enabled"] is True


def test_seed_creates_an_approver_with_a_password_shown_once(settings):
    output = seed()
    approver = get_user_model().objects.get(username="approver")
    line = next(line for line in output.splitlines() if line.startswith("Demo approver login: approver / "))
    password = line.split(" / ")[1]
    assert approver.check_password(password) and password not in approver.password
    assert not approver.is_staff and not approver.is_superuser
    workspace = Workspace.objects.get(name="Support", organization__name="Demo Org")
    assert Membership.objects.get(workspace=workspace, user=approver).role == "editor"
    specialist = Agent.objects.get(name="L1 Support Specialist").current_version
    assert "editor" in specialist.rules.approver_roles
    assert "Demo approver login" not in seed()  # shown once


def test_approver_password_comes_from_the_environment_when_set(settings):
    settings.RIVER_APPROVER_PASSWORD = "a-chosen-approver-password"
    output = seed()
    assert "Demo approver login" not in output
    assert get_user_model().objects.get(username="approver").check_password("a-chosen-approver-password")


def test_demo_agents_are_active_with_the_spec_configuration():
    seed()
    source = DataSource.objects.get()
    specialist = Agent.objects.get(name="L1 Support Specialist")
    version = specialist.current_version
    assert specialist.status == Agent.Status.ACTIVE
    assert (specialist.business_function, specialist.domain) == ("customer_support", "Customer Success")
    assert version.action_level == "act_with_approval"
    assert version.tools == SPECIALIST_TOOLS
    assert set(SPECIALIST_TOOLS) == {
        "classify_intent",
        "check_governance",
        "generate_query",
        "search_catalog",
        "recommend_visualization",
        "explain_results",
        "execute_query",
        "write_back",
        "ask_user",
    }
    assert version.rules.require_approval_for == ["write_back"]
    assert version.rules.approver_roles == ["admin", "editor"]
    assert version.rules.escalation_timeout_minutes == 1440
    assert list(version.data_sources.all()) == [source]

    analyst = Agent.objects.get(name="Support Analyst")
    assert analyst.status == Agent.Status.ACTIVE
    assert analyst.current_version.action_level == "read_only"
    assert analyst.current_version.tools == ANALYST_TOOLS
    assert "write_back" not in analyst.current_version.tools


def test_demo_data_source_has_a_cached_schema():
    seed()
    source = DataSource.objects.get()
    assert source.type == "sqlite"
    assert source.access_level == "read_write"
    assert source.classifications == {"customers": "pii"}
    assert source.schema_discovered_at is not None
    tables = {table["table_name"]: table for table in source.schema_cache}
    assert {"customers", "tickets", "charges", "ticket_comments"} <= set(tables)
    assert tables["customers"]["classification"] == "pii"
    ticket_columns = {column["column_name"] for column in tables["tickets"]["columns"]}
    assert {
        "id",
        "customer_id",
        "subject",
        "priority",
        "status",
        "channel",
        "created_at",
        "updated_at",
    } <= ticket_columns


def test_second_run_changes_nothing_and_prints_no_secret():
    first = seed()
    path = demo_database_path()
    before, mtime = snapshot(), path.stat().st_mtime_ns
    second = seed()
    assert "Demo login" in first
    assert second.strip() == "Demo already in place; nothing to do."
    assert snapshot() == before
    assert path.stat().st_mtime_ns == mtime


def test_admin_password_comes_from_the_setting_and_is_not_printed(settings):
    settings.RIVER_ADMIN_PASSWORD = "a-chosen-demo-password"
    output = seed()
    assert get_user_model().objects.get(username="admin").check_password("a-chosen-demo-password")
    assert "a-chosen-demo-password" not in output
    assert "Demo login" not in output


def test_support_data_has_open_high_priority_tickets_from_the_last_day():
    seed()
    cutoff = (datetime.now(UTC) - timedelta(hours=24)).strftime("%Y-%m-%d %H:%M:%S")
    with sqlite3.connect(demo_database_path()) as db:
        (recent_open_high,) = db.execute(
            "SELECT count(*) FROM tickets WHERE status = 'open' AND priority = 'high' AND created_at >= ?", (cutoff,)
        ).fetchone()
        (recent,) = db.execute("SELECT count(*) FROM tickets WHERE created_at >= ?", (cutoff,)).fetchone()
        (total,) = db.execute("SELECT count(*) FROM tickets").fetchone()
        (orphans,) = db.execute(
            "SELECT count(*) FROM tickets t LEFT JOIN customers c ON c.id = t.customer_id WHERE c.id IS NULL"
        ).fetchone()
        priorities = {row[0] for row in db.execute("SELECT DISTINCT priority FROM tickets")}
        statuses = {row[0] for row in db.execute("SELECT DISTINCT status FROM tickets")}
        (charges,) = db.execute("SELECT count(*) FROM charges").fetchone()
    db.close()
    assert recent_open_high >= 5
    assert 0.08 * total <= recent < total / 2
    assert orphans == 0
    assert priorities == {"low", "normal", "high", "urgent"}
    assert statuses == {"open", "pending", "solved", "closed"}
    assert charges > 0


def test_demo_database_is_deterministic_for_a_given_moment(tmp_path):
    now = datetime(2026, 5, 22, 12, 0, tzinfo=UTC)

    def dump(path):
        with sqlite3.connect(path) as db:
            rows = [
                list(db.execute(f"SELECT * FROM {table} ORDER BY id")) for table in ("customers", "tickets", "charges")
            ]
        db.close()
        return rows

    demo_database_build(path=tmp_path / "a.sqlite3", now=now)
    demo_database_build(path=tmp_path / "b.sqlite3", now=now)
    assert dump(tmp_path / "a.sqlite3") == dump(tmp_path / "b.sqlite3")
    demo_database_build(path=tmp_path / "c.sqlite3", now=now, seed=7)
    assert dump(tmp_path / "a.sqlite3") != dump(tmp_path / "c.sqlite3")
