"""Two runs of one organization write audit entries without waiting on each other's lock."""

import threading
import time

import pytest
from django.db import close_old_connections, connection, transaction

from governance.audit import audit_record, audit_seal_wait, audit_verify
from governance.models import AuditLogEntry

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent transactions"),
]

DEADLINE = 20.0


def test_an_open_transaction_with_an_entry_does_not_block_another_runs_entry(org):
    opened, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run_a():
        try:
            with transaction.atomic():
                audit_record(organization_id=org.pk, event_type="governance_decision", execution_id=1)
                opened.set()
                # Hold the transaction (as a governed turn does until its flush
                # commits) until run B has finished, or give up at the deadline.
                release.wait(DEADLINE)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    holder = threading.Thread(target=run_a)
    holder.start()
    try:
        assert opened.wait(DEADLINE), "run A never opened its transaction"
        started = time.monotonic()
        with transaction.atomic():
            audit_record(organization_id=org.pk, event_type="governance_decision", execution_id=2)
        elapsed = time.monotonic() - started
        # B committed and was sealed while A's transaction is still open.
        assert audit_seal_wait(DEADLINE)
        assert holder.is_alive() and not release.is_set()
        b_entry = AuditLogEntry.objects.get(execution_id=2)
        assert b_entry.seq == 1
        assert not AuditLogEntry.objects.filter(execution_id=1).exists()  # A is not committed yet
    finally:
        release.set()
        holder.join(DEADLINE)
    assert not holder.is_alive() and not errors, errors
    # B's write did not wait for A (it would have until the deadline with a lock).
    assert elapsed < DEADLINE / 4, f"run B waited {elapsed:.2f}s"
    assert audit_seal_wait(DEADLINE)
    a_entry = AuditLogEntry.objects.get(execution_id=1)
    assert a_entry.seq == 2  # sealed after A's commit, after B's
    report = audit_verify(organization_id=org.pk).organizations[0]
    assert (report.verdict, report.entries_checked) == ("ok", 2)


def test_concurrent_writers_get_one_gapless_chain(org):
    """Eight threads, five entries each, every one its own transaction: the sealer
    orders them into a single verified chain with no gap and no duplicate seq."""
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def writer(n: int):
        try:
            start.wait(DEADLINE)
            for i in range(5):
                with transaction.atomic():
                    audit_record(organization_id=org.pk, event_type="write", details={"writer": n, "i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE * 2)
    assert not errors, errors
    assert audit_seal_wait(DEADLINE)
    assert sorted(AuditLogEntry.objects.filter(organization_id=org.pk).values_list("seq", flat=True)) == \
        list(range(1, 41))
    report = audit_verify(organization_id=org.pk).organizations[0]
    assert (report.verdict, report.entries_checked, report.pending) == ("ok", 40, 0)


def test_entries_are_sealed_at_commit_even_after_a_rolled_back_savepoint(org):
    with transaction.atomic():
        try:
            with transaction.atomic():
                audit_record(organization_id=org.pk, event_type="rolled back")
                raise RuntimeError("undo the savepoint")
        except RuntimeError:
            pass
        for i in range(3):
            audit_record(organization_id=org.pk, event_type=f"kept {i}")
        assert AuditLogEntry.objects.filter(organization_id=org.pk, seq__isnull=True).count() == 3
    # Committed: sealed by the process's sealer thread, with no verification call.
    assert audit_seal_wait(DEADLINE)
    assert list(AuditLogEntry.objects.filter(organization_id=org.pk).order_by("seq")
                .values_list("seq", "event_type")) == [(1, "kept 0"), (2, "kept 1"), (3, "kept 2")]


def test_the_committing_thread_does_not_seal(org, monkeypatch):
    """A commit hands its organization to the sealer thread and goes on: the chain lock
    and the sealing statements are never on the caller's thread."""
    from governance import audit

    callers: list[str] = []
    real = audit._seal_after_commit

    def seal(organization_id):
        callers.append(threading.current_thread().name)
        real(organization_id)

    monkeypatch.setattr(audit, "_seal_after_commit", seal)
    for i in range(3):
        with transaction.atomic():
            audit_record(organization_id=org.pk, event_type=f"turn {i}")
    assert audit_seal_wait(DEADLINE)
    assert callers and set(callers) == {"river-audit-sealer"}
    assert list(AuditLogEntry.objects.filter(organization_id=org.pk).order_by("seq").values_list("seq", flat=True)) \
        == [1, 2, 3]


def _sealed_until(predicate) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, "the entries were not sealed in time"
        time.sleep(0.02)


def test_under_load_the_sealer_chains_the_entries_of_a_burst_in_one_pass(org, monkeypatch):
    """A pass at most every ``pass_gap`` seconds: what commits meanwhile is sealed together
    (a handful of statements for the burst, not for each entry); the first entry after a
    quiet spell is sealed without waiting; someone waiting for the seal cuts the gap short."""
    from governance import audit

    sealer = audit.AuditSealer(pass_gap=DEADLINE)  # a gap no part of this test outlasts
    monkeypatch.setattr(audit, "audit_sealer", sealer)
    with transaction.atomic():
        audit_record(organization_id=org.pk, event_type="governance_decision", execution_id=1)
    _sealed_until(lambda: AuditLogEntry.objects.filter(execution_id=1, seq=1).exists())  # no gap after quiet
    assert sealer.passes == 1

    for execution_id in range(2, 7):  # five commits, each asking for a seal
        with transaction.atomic():
            audit_record(organization_id=org.pk, event_type="governance_decision", execution_id=execution_id)
    assert AuditLogEntry.objects.filter(seq__isnull=True).count() == 5  # waiting out the gap

    assert sealer.wait(DEADLINE)  # a waiter: the next pass at once
    assert sealer.passes == 2
    assert list(AuditLogEntry.objects.order_by("seq").values_list("execution_id", "seq")) == [
        (n, n) for n in range(1, 7)]
    assert audit.audit_verify(organization_id=org.pk).ok
