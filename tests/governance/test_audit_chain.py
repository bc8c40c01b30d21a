"""The audit trail is HMAC-chained and anchored: every kind of tampering gets its verdict."""

import base64
import hashlib
import hmac
import json
import logging
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from governance.audit import (
    GENESIS,
    HASH_MISMATCH,
    MISSING_SEQ,
    UNKNOWN_KEY,
    _chain_canonical,
    _content_canonical,
    audit_anchor,
    audit_maintenance,
    audit_record,
    audit_seal,
    audit_verify,
    entry_mac,
)
from governance.models import AuditAnchor, AuditLogEntry

TEST_KEYS = {"tests": base64.b64decode("cml2ZXItdGVzdHMtb25seS1hdWRpdC1obWFjLWtleSE=")}


@contextmanager
def superuser_bypass():
    """Tamper like an attacker holding a superuser connection: triggers switched off
    for the transaction. River's code never does this; the MACs still catch it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        yield
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = origin")
    else:
        with audit_maintenance():
            yield


@pytest.fixture(autouse=True)
def _test_keys():
    with override_settings(RIVER_AUDIT_HMAC_KEYS=TEST_KEYS):
        yield


@pytest.fixture
def chain(org):
    for i in range(1, 6):
        audit_record(organization_id=org.pk, event_type=f"event_{i}", details={"n": i},
                     agent_id=uuid.uuid4().hex, execution_id=str(100 + i))
    audit_seal(organization_id=org.pk)
    return list(AuditLogEntry.objects.filter(organization_id=org.pk).order_by("seq", "id"))


def _report(org):
    return audit_verify(organization_id=org.pk).organizations[0]


def _delete(**filters):
    with audit_maintenance():
        AuditLogEntry.objects.filter(**filters).delete()


def test_a_sealed_chain_verifies_ok_per_organization(chain, org, other_org):
    audit_record(organization_id=other_org.pk, event_type="elsewhere")
    result = audit_verify()
    assert result.ok
    by_org = {report.organization_id: report for report in result.organizations}
    assert (by_org[org.pk].verdict, by_org[org.pk].entries_checked) == ("ok", 5)
    assert (by_org[other_org.pk].verdict, by_org[other_org.pk].entries_checked) == ("ok", 1)
    assert [entry.seq for entry in chain] == [1, 2, 3, 4, 5]
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.entry_hash for a, b in zip(chain, chain[1:], strict=False))
    assert {entry.key_id for entry in chain} == {"tests"}


def test_entries_are_pending_until_sealed_in_id_order(org):
    written = [audit_record(organization_id=org.pk, event_type=f"e{i}") for i in range(3)]
    assert [(entry.seq, entry.key_id) for entry in written] == [(None, "tests")] * 3
    assert all(len(entry.content_hash) == 64 for entry in written)
    assert audit_seal(organization_id=org.pk) == 3
    assert audit_seal(organization_id=org.pk) == 0
    sealed = dict(AuditLogEntry.objects.filter(organization_id=org.pk).values_list("pk", "seq"))
    assert [sealed[entry.pk] for entry in written] == [1, 2, 3]


def test_the_mac_is_keyed_not_a_plain_hash(chain):
    entry = chain[2]
    message_without_key = hashlib.sha256(entry.event_type.encode()).hexdigest()
    assert entry.entry_hash != message_without_key
    assert entry.entry_hash == entry_mac(entry)
    with override_settings(RIVER_AUDIT_HMAC_KEYS={"tests": b"another key of thirty-two bytes!!"}):
        assert entry_mac(entry) != entry.entry_hash


def test_an_edited_entry_is_broken_at_that_entry(chain, org):
    with superuser_bypass():
        AuditLogEntry.objects.filter(pk=chain[2].pk).update(details={"n": 999})
    report = _report(org)
    assert report.verdict == "broken at entry 3"
    assert report.first_broken.reason == HASH_MISMATCH


def test_an_edited_timestamp_is_broken_at_that_entry(chain, org):
    with superuser_bypass():
        AuditLogEntry.objects.filter(pk=chain[1].pk).update(created_at=timezone.now() - timedelta(days=1))
    assert _report(org).verdict == "broken at entry 2"


def _forge(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest() if key else \
        hashlib.sha256(message.encode()).hexdigest()


@pytest.mark.parametrize("forger_key", [b"", b"a guessed key, e.g. SECRET_KEY"], ids=["sha256", "wrong-key"])
def test_a_rehashed_chain_without_the_audit_key_does_not_verify(chain, org, forger_key):
    """The attacker rewrites entry 2 and re-chains everything after it, computing each
    digest the way the old unkeyed chain did, or with a key they guessed."""
    prev = chain[0].entry_hash
    with superuser_bypass():
        for entry in chain[1:]:
            if entry.seq == 2:
                entry.details = {"n": "forged"}
                entry.content_hash = _forge(forger_key, _content_canonical(entry))
            entry.prev_hash = prev
            entry.entry_hash = _forge(forger_key, _chain_canonical(entry))
            AuditLogEntry.objects.filter(pk=entry.pk).update(
                details=entry.details, content_hash=entry.content_hash, prev_hash=prev, entry_hash=entry.entry_hash
            )
            prev = entry.entry_hash
    report = _report(org)
    assert report.verdict == "broken at entry 2"
    assert report.first_broken.reason == HASH_MISMATCH


def test_a_row_inserted_behind_rivers_back_is_sealed_but_does_not_verify(chain, org):
    """Whoever can INSERT into the table but lacks the key cannot make a believable
    entry: the sealer chains it (so the chain goes on) and verification names it."""
    forged = AuditLogEntry(organization_id=org.pk, event_type="approval_approved", actor_label="ceo",
                           details={"approved": True}, created_at=timezone.now(), key_id="tests")
    forged.content_hash = _forge(b"guess", _content_canonical(forged))
    AuditLogEntry.objects.bulk_create([forged])  # a plain INSERT, not audit_record
    audit_record(organization_id=org.pk, event_type="later, genuine")
    report = _report(org)
    assert (report.verdict, report.first_broken.reason, report.entries_checked) == \
        ("broken at entry 6", HASH_MISMATCH, 6)


def test_a_replayed_copy_of_an_entry_is_refused(chain):
    copy = AuditLogEntry.objects.get(pk=chain[1].pk)
    copy.pk, copy.seq, copy.prev_hash, copy.entry_hash = None, None, "", ""
    with pytest.raises(IntegrityError), transaction.atomic():
        copy.save(force_insert=True)


def test_an_unknown_key_id_is_broken(chain, org):
    with superuser_bypass():
        AuditLogEntry.objects.filter(pk=chain[3].pk).update(key_id="gone")
    report = _report(org)
    assert (report.verdict, report.first_broken.reason) == ("broken at entry 4", UNKNOWN_KEY)


def test_rotated_keys_keep_old_entries_verifiable(chain, org):
    rotated = {"next": b"the next audit key, thirty-two b!", **TEST_KEYS}
    with override_settings(RIVER_AUDIT_HMAC_KEYS=rotated):
        audit_record(organization_id=org.pk, event_type="after rotation")
        report = _report(org)
        assert (report.verdict, report.entries_checked) == ("ok", 6)
        assert AuditLogEntry.objects.get(organization_id=org.pk, seq=6).key_id == "next"
    with override_settings(RIVER_AUDIT_HMAC_KEYS={"next": rotated["next"]}):
        report = _report(org)
        assert (report.verdict, report.first_broken.reason) == ("broken at entry 1", UNKNOWN_KEY)


def test_a_deleted_middle_entry_is_broken_there(chain, org):
    _delete(pk=chain[1].pk)
    report = _report(org)
    assert (report.verdict, report.first_broken.reason) == ("broken at entry 2", MISSING_SEQ)


def test_a_deleted_first_entry_is_broken_at_entry_1(chain, org):
    _delete(pk=chain[0].pk)
    assert _report(org).verdict == "broken at entry 1"


def test_a_deleted_tail_is_truncated_after_the_anchor(chain, org):
    assert audit_anchor(organization_id=org.pk).number == 1
    _delete(organization_id=org.pk, seq__gte=4)
    report = _report(org)
    assert report.verdict == "truncated after anchor 1"
    assert report.entries_checked == 3


def test_the_newest_anchor_whose_head_is_gone_is_named(chain, org):
    _delete(organization_id=org.pk, seq__gte=4)  # before any anchor: not detectable...
    audit_anchor(organization_id=org.pk)  # ...anchor 1 records 3 entries
    audit_record(organization_id=org.pk, event_type="later")
    audit_record(organization_id=org.pk, event_type="later still")
    audit_anchor(organization_id=org.pk)  # anchor 2 records 5
    assert _report(org).verdict == "ok"
    _delete(organization_id=org.pk, seq=5)
    assert _report(org).verdict == "truncated after anchor 2"


def test_a_tail_deleted_then_regrown_is_truncated_after_the_anchor(chain, org):
    audit_anchor(organization_id=org.pk)
    _delete(organization_id=org.pk, seq__gte=4)
    for i in range(3):
        audit_record(organization_id=org.pk, event_type=f"new_{i}")
    report = _report(org)
    assert report.entries_checked == 6
    assert report.verdict == "truncated after anchor 1"


def test_an_emptied_trail_is_empty_but_anchored(chain, org):
    audit_anchor(organization_id=org.pk)
    _delete(organization_id=org.pk)
    assert _report(org).verdict == "empty but anchored"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="TRUNCATE is PostgreSQL's")
def test_a_truncated_table_is_empty_but_anchored_for_everyone(chain, org, other_org):
    audit_record(organization_id=other_org.pk, event_type="elsewhere")
    audit_anchor(organization_id=org.pk)
    audit_anchor(organization_id=other_org.pk)
    with audit_maintenance(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE governance_auditlogentry")
    result = audit_verify()
    assert {report.organization_id: report.verdict for report in result.organizations} == {
        org.pk: "empty but anchored", other_org.pk: "empty but anchored",
    }
    assert not result.ok


def test_a_forged_anchor_is_ignored_and_reported(chain, org):
    audit_anchor(organization_id=org.pk)
    AuditAnchor.objects.create(organization_id=org.pk, number=2, entry_count=500, head_hash="f" * 64,
                               key_id="tests", anchor_hash="0" * 64)
    report = _report(org)
    assert report.verdict == "ok"
    assert (report.anchors_checked, report.rejected_anchors) == (1, [2])


def test_an_anchor_is_logged_once_per_head_without_the_key(chain, org, caplog):
    with caplog.at_level(logging.INFO, logger="river.audit"):
        anchor = audit_anchor(organization_id=org.pk)
        assert audit_anchor(organization_id=org.pk) is None
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("audit_anchor ")]
    assert len(lines) == 1
    logged = json.loads(lines[0].removeprefix("audit_anchor "))
    assert logged == {
        "organization_id": org.pk, "anchor": 1, "entry_count": 5, "head_hash": chain[-1].entry_hash,
        "key_id": "tests", "anchor_hash": anchor.anchor_hash, "created_at": anchor.created_at.isoformat(),
    }
    secret = TEST_KEYS["tests"]
    assert not any(secret.decode() in text or base64.b64encode(secret).decode() in text for text in caplog.text.split())


def test_hostile_details_are_stored_and_verify(org):
    audit_record(
        organization_id=org.pk, event_type="x\x00y" * 40, actor_label="\x00" * 500,
        details={"nul\x00key": ["a\x00b", {"deep": "\x00"}], "big": 10**30, "emoji": "\U0001f600", "float": 1.5,
                 "exp": 1e20, "tiny": 1.5e-7, "inf": float("inf"), "lone": "\ud800", "#": {"#": "1"}, "{}": [1.0, 1]},
    )
    report = _report(org)
    assert (report.verdict, report.entries_checked) == ("ok", 1)
    entry = AuditLogEntry.objects.get(organization_id=org.pk)
    assert entry.details["nul\ufffdkey"] == ["a\ufffdb", {"deep": "\ufffd"}]
    assert len(entry.event_type) == 60


def test_verify_audit_command_prints_verdicts_and_fails_unless_ok(chain, org, capsys):
    call_command("verify_audit")
    assert f"organization {org.pk}: ok (5 entries, 0 anchors)" in capsys.readouterr().out
    audit_anchor(organization_id=org.pk)
    _delete(organization_id=org.pk, seq=5)
    with pytest.raises(CommandError) as caught:
        call_command("verify_audit", "--organization", str(org.pk))
    assert caught.value.returncode == 1
    assert f"organization {org.pk}: truncated after anchor 1 (4 entries, 1 anchors)" in capsys.readouterr().out
    assert f"organization {org.pk}: truncated after anchor 1" in str(caught.value)
