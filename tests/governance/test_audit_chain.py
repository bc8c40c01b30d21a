"""The audit trail is append-only and tamper-evident."""

import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from governance.audit import GENESIS, HASH_MISMATCH, MISSING_SEQ, PREV_HASH_MISMATCH, audit_record, audit_verify
from governance.models import AuditLogEntry

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger exists on PostgreSQL only")


@contextmanager
def trigger_bypassed():
    """Tamper like an attacker with database access: on PostgreSQL the trigger must be
    switched off first (a superuser can; the application's code never does)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = origin")
    else:
        yield


@pytest.fixture
def chain(org):
    return [
        audit_record(organization_id=org.pk, event_type=f"event_{i}", details={"n": i},
                     agent_id=uuid.uuid4().hex, execution_id=str(100 + i))
        for i in range(1, 6)
    ]


def _report(org):
    return audit_verify(organization_id=org.pk).organizations[0]


def test_intact_chain_verifies(chain, org, other_org):
    audit_record(organization_id=other_org.pk, event_type="elsewhere")
    result = audit_verify()
    assert result.ok
    by_org = {r.organization_id: r for r in result.organizations}
    assert by_org[org.pk].entries_checked == 5
    assert by_org[other_org.pk].entries_checked == 1
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.entry_hash for a, b in zip(chain, chain[1:], strict=False))


def test_modified_row_is_detected(chain, org):
    with trigger_bypassed():
        AuditLogEntry.objects.filter(pk=chain[2].pk).update(details={"n": 999})
    report = _report(org)
    assert not report.ok
    assert (report.first_broken.seq, report.first_broken.reason) == (3, HASH_MISMATCH)


def test_modified_timestamp_is_detected(chain, org):
    with trigger_bypassed():
        AuditLogEntry.objects.filter(pk=chain[1].pk).update(created_at=timezone.now() - timedelta(days=1))
    assert (_report(org).first_broken.seq, _report(org).first_broken.reason) == (2, HASH_MISMATCH)


def test_deleted_row_is_detected(chain, org):
    with trigger_bypassed():
        AuditLogEntry.objects.filter(pk=chain[1].pk).delete()
    report = _report(org)
    assert (report.first_broken.seq, report.first_broken.reason) == (2, MISSING_SEQ)


def test_rehashed_row_is_detected_at_the_next_link(chain, org):
    from governance.audit import entry_hash

    forged = AuditLogEntry.objects.get(pk=chain[1].pk)
    forged.details = {"n": "forged"}
    forged.entry_hash = entry_hash(forged)
    with trigger_bypassed():
        AuditLogEntry.objects.filter(pk=forged.pk).update(details=forged.details, entry_hash=forged.entry_hash)
    report = _report(org)
    assert (report.first_broken.seq, report.first_broken.reason) == (3, PREV_HASH_MISMATCH)


def test_verify_audit_command(chain, org, capsys):
    call_command("verify_audit")
    assert f"organization {org.pk}: ok (5 entries)" in capsys.readouterr().out
    with trigger_bypassed():
        AuditLogEntry.objects.filter(pk=chain[3].pk).update(event_type="nothing_to_see")
    with pytest.raises(CommandError) as caught:
        call_command("verify_audit", "--organization", str(org.pk))
    assert caught.value.returncode == 1
    out = capsys.readouterr().out
    assert f"organization {org.pk}: BROKEN at seq 4: hash mismatch" in out
    assert "seq 4 (hash mismatch)" in str(caught.value)


@postgres_only
def test_trigger_refuses_update_and_delete(chain):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditLogEntry.objects.filter(pk=chain[0].pk).update(details={"n": 0})
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditLogEntry.objects.filter(pk=chain[0].pk).delete()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM governance_auditlogentry")
    assert AuditLogEntry.objects.count() == 5
    assert AuditLogEntry.objects.get(pk=chain[0].pk).details == {"n": 1}


def test_appends_are_serialised_per_organization(org):
    entries = [audit_record(organization_id=org.pk, event_type="x") for _ in range(3)]
    assert [e.seq for e in entries] == [1, 2, 3]
    assert [e.prev_hash for e in entries[1:]] == [e.entry_hash for e in entries[:2]]
