"""The database refuses rewriting the audit tables; only a maintenance role may empty them."""

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from governance.audit import audit_anchor, audit_maintenance, audit_record, audit_seal
from governance.models import AuditAnchor, AuditLogEntry

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the roles and the TRUNCATE trigger are PostgreSQL's"
)

RUNTIME_ROLE = "river_audit_test_runtime"


@pytest.fixture
def sealed(org):
    for i in range(3):
        audit_record(organization_id=org.pk, event_type=f"e{i}", details={"n": i})
    audit_seal(organization_id=org.pk)
    audit_anchor(organization_id=org.pk)
    return list(AuditLogEntry.objects.filter(organization_id=org.pk).order_by("seq", "id"))


def _refused(sql: str, params=None) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.parametrize("sql", [
    "UPDATE governance_auditlogentry SET details = '{}'::jsonb WHERE id = %s",
    "UPDATE governance_auditlogentry SET entry_hash = 'f' WHERE id = %s",
    "UPDATE governance_auditlogentry SET seq = NULL WHERE id = %s",
    "DELETE FROM governance_auditlogentry WHERE id = %s",
    "DELETE FROM governance_auditlogentry WHERE id >= %s",
], ids=["content", "mac", "unseal", "delete", "delete-all"])
def test_sealed_entries_cannot_be_rewritten_or_deleted(sealed, sql):
    if connection.vendor != "postgresql":
        sql = sql.replace("'{}'::jsonb", "'{}'")
    _refused(sql, [sealed[0].pk])
    assert AuditLogEntry.objects.get(pk=sealed[0].pk).entry_hash == sealed[0].entry_hash


@postgres_only
def test_truncate_is_refused_on_both_tables(sealed):
    _refused("TRUNCATE governance_auditlogentry")
    _refused("TRUNCATE governance_auditanchor")
    _refused("UPDATE governance_auditanchor SET entry_count = 1")
    _refused("DELETE FROM governance_auditanchor")
    assert (AuditLogEntry.objects.count(), AuditAnchor.objects.count()) == (3, 1)


def test_a_pending_entry_may_only_be_sealed_once_with_its_content_unchanged(org):
    pending = audit_record(organization_id=org.pk, event_type="pending", details={"n": 1})
    _refused("UPDATE governance_auditlogentry SET details = '{\"n\": 2}' WHERE id = %s", [pending.pk])
    _refused("UPDATE governance_auditlogentry SET seq = 1, event_type = 'other' WHERE id = %s", [pending.pk])
    _refused("UPDATE governance_auditlogentry SET seq = 1, key_id = 'other' WHERE id = %s", [pending.pk])
    _refused("UPDATE governance_auditlogentry SET seq = 1, content_hash = 'f' WHERE id = %s", [pending.pk])
    assert audit_seal(organization_id=org.pk) == 1
    _refused("UPDATE governance_auditlogentry SET seq = 7, entry_hash = '' WHERE id = %s", [pending.pk])


@postgres_only
def test_the_maintenance_flag_alone_does_not_let_a_runtime_role_through(sealed):
    """A role like River's production runtime role: it may insert, select and even
    holds DELETE and TRUNCATE grants, but is not a member of river_audit_maintenance."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{RUNTIME_ROLE}') "
            f"THEN CREATE ROLE {RUNTIME_ROLE} NOLOGIN; END IF; END $$"
        )
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON governance_auditlogentry, "
                       f"governance_auditanchor TO {RUNTIME_ROLE}")
    attempts = [
        ("DELETE FROM governance_auditlogentry", "append-only"),
        ("TRUNCATE governance_auditlogentry", "append-only"),
        ("DELETE FROM governance_auditanchor", "append-only"),
        ("ALTER TABLE governance_auditlogentry DISABLE TRIGGER USER", "must be owner"),
        ("SET LOCAL session_replication_role = replica", "permission denied"),
    ]
    for sql, refusal in attempts:
        with pytest.raises(DatabaseError, match=refusal), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL ROLE {RUNTIME_ROLE}")
            cursor.execute("SET LOCAL river.audit_maintenance = 'on'")
            cursor.execute(sql)
    assert (AuditLogEntry.objects.count(), AuditAnchor.objects.count()) == (3, 1)


def test_the_maintenance_path_deletes_for_a_member_and_is_closed_after(sealed):
    with audit_maintenance():
        AuditLogEntry.objects.filter(pk=sealed[2].pk).delete()
    assert AuditLogEntry.objects.count() == 2
    _refused("DELETE FROM governance_auditlogentry")


@pytest.mark.django_db(transaction=True)
def test_flush_empties_the_audit_tables(org):
    audit_record(organization_id=org.pk, event_type="before flush")
    audit_anchor(organization_id=org.pk)
    assert AuditAnchor.objects.count() == 1
    call_command("flush", interactive=False, verbosity=0)
    assert (AuditLogEntry.objects.count(), AuditAnchor.objects.count()) == (0, 0)


def _deadlock_error():
    """What Django raises when PostgreSQL aborts a statement in a deadlock."""
    import psycopg
    from django.db import OperationalError

    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


@pytest.mark.django_db(transaction=True)
def test_flush_tries_again_when_a_reader_deadlocks_it_and_gives_up_on_anything_else(org, monkeypatch):
    from django.core.management.base import CommandError

    from governance.management.commands import flush as river_flush

    pauses: list[float] = []
    monkeypatch.setattr(river_flush.time, "sleep", pauses.append)
    real = connection.ops.execute_sql_flush
    failures = [_deadlock_error(), _deadlock_error()]

    def flaky(sql_list):
        if failures:
            raise failures.pop(0)
        return real(sql_list)

    monkeypatch.setattr(connection.ops, "execute_sql_flush", flaky)
    audit_record(organization_id=org.pk, event_type="before flush")
    call_command("flush", interactive=False, verbosity=0)
    assert AuditLogEntry.objects.count() == 0 and pauses == [0.2, 0.4]  # the third attempt emptied it

    # Deadlocked every time: it gives up after DEADLOCK_ATTEMPTS, with Django's error.
    pauses.clear()

    def deadlocked(sql_list):
        raise _deadlock_error()

    monkeypatch.setattr(connection.ops, "execute_sql_flush", deadlocked)
    with pytest.raises(CommandError, match="couldn't be flushed"):
        call_command("flush", interactive=False, verbosity=0)
    assert len(pauses) == river_flush.DEADLOCK_ATTEMPTS - 1

    # Any other failure is not retried.
    pauses.clear()

    def broken(sql_list):
        raise DatabaseError("permission denied")

    monkeypatch.setattr(connection.ops, "execute_sql_flush", broken)
    with pytest.raises(CommandError):
        call_command("flush", interactive=False, verbosity=0)
    assert pauses == []
