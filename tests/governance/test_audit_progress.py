"""audit_verify_progress: the chain checked a bounded number of entries at a time, from
where the last call stopped, with the newest anchor checked every time."""

import pytest
from django.core.cache import cache
from django.db import connection

from governance.audit import (
    _PROGRESS_KEY,
    HASH_MISMATCH,
    MISSING_SEQ,
    audit_anchor,
    audit_maintenance,
    audit_record,
    audit_seal,
    audit_verify_progress,
)
from governance.models import AuditLogEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def trail(org):
    cache.delete(_PROGRESS_KEY.format(organization_id=org.pk))
    for index in range(25):
        audit_record(organization_id=org.pk, event_type="event", details={"n": index})
    audit_seal(organization_id=org.pk)
    yield org
    cache.delete(_PROGRESS_KEY.format(organization_id=org.pk))


def _tamper(**changes):
    """Edit entries as an attacker with the triggers off would: on PostgreSQL by switching
    them off for the transaction, on SQLite (no roles) through the maintenance path that
    lifts them (as tests/governance/test_audit_chain.py does)."""
    where = changes.pop("where")
    if connection.vendor != "postgresql":
        with audit_maintenance():
            AuditLogEntry.objects.filter(**where).update(**changes)
        return
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
    AuditLogEntry.objects.filter(**where).update(**changes)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = origin")


def test_progress_moves_forward_by_the_budget_and_catches_up(trail):
    first = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert (first.verified_up_to, first.head, first.checked_now, first.ok, first.caught_up) == (10, 25, 10, True,
                                                                                                  False)
    second = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert (second.verified_up_to, second.checked_now) == (20, 10)
    third = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert (third.verified_up_to, third.checked_now, third.caught_up) == (25, 5, True)
    idle = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert (idle.verified_up_to, idle.checked_now) == (25, 0)


def test_an_edited_entry_ahead_is_found_and_progress_stops_before_it(trail):
    _tamper(where={"organization_id": trail.pk, "seq": 15}, details={"n": "edited"})
    audit_verify_progress(organization_id=trail.pk, budget=10)
    report = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert not report.ok and report.first_broken.seq == 15 and report.first_broken.reason == HASH_MISMATCH
    assert report.verified_up_to == 14
    again = audit_verify_progress(organization_id=trail.pk, budget=10)
    assert again.first_broken.seq == 15  # found again, at once, on every view


def test_a_changed_checkpoint_entry_restarts_from_the_first(trail):
    audit_verify_progress(organization_id=trail.pk, budget=10)
    _tamper(where={"organization_id": trail.pk, "seq": 10}, entry_hash="0" * 64)
    report = audit_verify_progress(organization_id=trail.pk, budget=30)
    assert report.checked_now == 10 and report.first_broken.seq == 10


def test_a_deleted_entry_is_a_missing_seq(trail):
    with audit_maintenance():
        AuditLogEntry.objects.filter(organization_id=trail.pk, seq=3).delete()
    report = audit_verify_progress(organization_id=trail.pk)
    assert (report.first_broken.seq, report.first_broken.reason) == (3, MISSING_SEQ)


def test_a_deleted_tail_is_seen_through_the_newest_anchor(trail):
    audit_anchor(organization_id=trail.pk)
    assert audit_verify_progress(organization_id=trail.pk).ok
    with audit_maintenance():
        AuditLogEntry.objects.filter(organization_id=trail.pk, seq__gte=20).delete()
    report = audit_verify_progress(organization_id=trail.pk)
    assert report.truncated_after_anchor == 1 and not report.ok


def test_pending_entries_are_counted_not_checked(trail):
    audit_record(organization_id=trail.pk, event_type="late")
    report = audit_verify_progress(organization_id=trail.pk)
    assert report.ok and report.head == 25 and report.pending == 1
