import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from agents.models import Agent
from datasources.models import DataSource
from demo.seed import ANALYST_TOOLS, SPECIALIST_TOOLS, demo_database_path
from demo.support_db import (
    FRESH_TICKETS_MINIMUM,
    FRESH_TICKETS_TARGET,
    FRESH_WINDOW,
    TICKET_TOPICS,
    demo_database_build,
    demo_tickets_top_up,
)
from governance.models import WorkspaceSettings
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


# --- Fresh tickets for the walk-through, and the reset ------------------------------


def _rows(path, sql, params=()):
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql, params).fetchall()


def _open_high_since(path, moment: datetime) -> int:
    return _rows(
        path,
        "SELECT count(*) FROM tickets WHERE status = 'open' AND priority = 'high' AND created_at >= ?",
        (moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),),
    )[0][0]


def _close_open_high_tickets(path, *, keep: int = 0) -> None:
    """What the approved write-back does, leaving the ``keep`` newest open."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE tickets SET status = 'closed' WHERE status = 'open' AND priority = 'high' AND id NOT IN "
            "(SELECT id FROM tickets WHERE status = 'open' AND priority = 'high' ORDER BY created_at DESC LIMIT ?)",
            (keep,),
        )


def _dump(path) -> dict:
    tables = [name for (name,) in _rows(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {table: _rows(path, f"SELECT * FROM {table} ORDER BY id") for table in tables}  # noqa: S608


def test_repeated_seeding_adds_no_tickets_while_enough_fresh_ones_are_open():
    seed()
    path = demo_database_path()
    before = _dump(path)
    assert _open_high_since(path, datetime.now(UTC) - FRESH_WINDOW) >= FRESH_TICKETS_MINIMUM
    for _ in range(3):
        assert seed().strip() == "Demo already in place; nothing to do."
    assert _dump(path) == before


@pytest.mark.parametrize(("left_open", "added"), [(0, 6), (3, 3), (4, 2), (5, 0)])
def test_a_seed_after_the_tickets_were_closed_tops_them_up_to_six(left_open, added):
    seed()
    path = demo_database_path()
    _close_open_high_tickets(path, keep=left_open)
    tickets_before = _rows(path, "SELECT count(*) FROM tickets")[0][0]
    output = seed()
    assert _rows(path, "SELECT count(*) FROM tickets")[0][0] == tickets_before + added
    fresh = _open_high_since(path, datetime.now(UTC) - FRESH_WINDOW)
    assert fresh == max(left_open, FRESH_TICKETS_TARGET) if added else fresh == left_open
    assert (f"created {added} open high-priority tickets" in output) is bool(added)
    assert seed().strip() == "Demo already in place; nothing to do."  # and no second batch


def test_topped_up_tickets_are_recent_realistic_and_keep_the_rest():
    seed()
    path = demo_database_path()
    _close_open_high_tickets(path)
    before = _dump(path)
    started = datetime.now(UTC).replace(microsecond=0)
    seed()
    after = _dump(path)
    new = after["tickets"][len(before["tickets"]):]
    assert after["tickets"][: len(before["tickets"])] == before["tickets"]  # nothing rewritten
    assert after["customers"] == before["customers"] and after["charges"] == before["charges"]
    customers = {row[0] for row in before["customers"]}
    subjects = {subject for topic in TICKET_TOPICS.values() for subject, _ in topic}
    assert len(new) == FRESH_TICKETS_TARGET
    for _id, customer_id, subject, description, priority, status, _channel, created, updated in new:
        moment = datetime.strptime(created, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        assert started - timedelta(hours=2) <= moment <= datetime.now(UTC)
        assert (priority, status, updated) == ("high", "open", created)
        assert customer_id in customers and subject in subjects and "{" not in description
    assert len({row[7] for row in new}) == len(new)  # distinct times, like a real queue


def test_walk_through_tickets_outlast_the_seed_by_twelve_hours():
    """Whatever a seed leaves is still "created in the last 24 hours" half a day later."""
    seed()
    path = demo_database_path()
    for _ in range(2):
        seeded_at = datetime.now(UTC)
        assert _open_high_since(path, seeded_at + timedelta(hours=12) - timedelta(hours=24)) >= FRESH_TICKETS_MINIMUM
        _close_open_high_tickets(path)
        seed()


def test_an_old_demo_database_gets_fresh_tickets_on_the_next_seed():
    seed()
    path = demo_database_path()
    demo_database_build(path=path, now=datetime.now(UTC) - timedelta(days=3))  # a file left from days ago
    assert _open_high_since(path, datetime.now(UTC) - timedelta(hours=24)) == 0
    output = seed()
    assert "created 6 open high-priority tickets" in output
    assert _open_high_since(path, datetime.now(UTC) - timedelta(hours=2)) == FRESH_TICKETS_TARGET


def test_a_demo_database_without_tickets_warns_and_names_the_reset():
    seed()
    path = demo_database_path()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE ticket_comments")
        db.execute("DROP TABLE tickets")
    out, err = StringIO(), StringIO()
    call_command("seed_demo", stdout=out, stderr=err)
    assert "not topped up" in err.getvalue() and "demo_reset" in err.getvalue()
    assert out.getvalue().strip() == "Demo already in place; nothing to do."
    call_command("demo_reset", stdout=StringIO())
    assert _open_high_since(path, datetime.now(UTC) - FRESH_WINDOW) >= FRESH_TICKETS_MINIMUM


@pytest.fixture
def frozen_now(monkeypatch):
    moment = datetime.now(UTC).replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: moment)
    return moment


def test_demo_reset_restores_every_table_to_a_fresh_generated_state(tmp_path, frozen_now):
    seed()
    path = demo_database_path()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE tickets SET status = 'closed', subject = 'edited'")
        db.execute("DELETE FROM charges")
        db.execute("INSERT INTO customers VALUES (999, 'X', 'x@x.example', 'X', 'free', 'NA', '2020-01-01 00:00:00')")
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    source = DataSource.objects.get()
    DataSource.objects.filter(pk=source.pk).update(schema_cache=[])

    output = StringIO()
    call_command("demo_reset", stdout=output)

    expected = tmp_path / "expected.sqlite3"
    demo_database_build(path=expected, now=frozen_now)
    demo_tickets_top_up(path=expected, now=frozen_now)
    assert _dump(path) == _dump(expected)
    assert f"created fresh demo data in {path}" in output.getvalue()
    assert {table["table_name"] for table in DataSource.objects.get().schema_cache} == {
        "customers", "tickets", "charges", "ticket_comments"
    }
    assert _rows(path, "PRAGMA integrity_check") == [("ok",)]


def test_demo_reset_replaces_a_file_that_is_not_a_database():
    seed()
    path = demo_database_path()
    path.write_bytes(b"not a database at all" * 100)
    call_command("demo_reset", stdout=StringIO())
    assert _rows(path, "SELECT count(*) FROM customers") == [(120,)]
    assert _open_high_since(path, datetime.now(UTC) - FRESH_WINDOW) >= FRESH_TICKETS_MINIMUM
    assert not path.with_name(path.name + ".fresh").exists()


def test_demo_reset_on_a_fresh_install_creates_the_demo():
    output = StringIO()
    call_command("demo_reset", stdout=output)
    assert "Demo login: admin / " in output.getvalue()
    assert Agent.objects.filter(name="L1 Support Specialist").exists()
    assert _open_high_since(demo_database_path(), datetime.now(UTC) - FRESH_WINDOW) >= FRESH_TICKETS_MINIMUM


def test_reset_and_reseed_keep_the_demo_objects_and_passwords():
    seed()
    before = snapshot()
    call_command("demo_reset", stdout=StringIO())
    seed()
    assert snapshot() == before
