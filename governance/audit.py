"""The audit trail: append-only entries, HMAC-chained per organization, anchored.

Writing never waits on another run: ``audit_record`` inserts the entry *pending*
(no ``seq`` yet) in the caller's transaction and takes no lock. After that
transaction commits, the organization's sealer (``audit_seal``: one at a time per
organization, under a transaction-scoped advisory lock) gives each committed
pending entry, in id order, the next ``seq``, the previous entry's MAC and its own
MAC: HMAC-SHA256 under the current key of ``RIVER_AUDIT_HMAC_KEYS``, whose id is
stored in the entry so keys can rotate. Only the sealer's short transaction is
serialized, never the callers' transactions, and the caller does not run it: the
commit hands the organization to this process's sealer thread (``audit_sealer``),
which seals every organization handed to it since its last pass in one pass each.
So a governed turn pays one INSERT for its audit entry, and the runs of an
organization never queue on its chain lock; ``audit_seal_wait`` waits until what was
handed over is sealed (tests, and the process at exit).

``audit_anchor`` records the sealed head (count and MAC) in ``AuditAnchor`` and in
the log, so that losing the newest entries, or all of them, is detected.
``audit_verify`` gives each organization exactly one verdict: ``ok``,
``broken at entry N``, ``truncated after anchor K`` or ``empty but anchored``.
See docs/audit.md for the threat model.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import hmac
import json
import logging
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, DivisionByZero, InvalidOperation, Overflow
from uuid import UUID

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from common.compiled import CompiledInsert
from governance.models import AuditAnchor, AuditLogEntry

logger = logging.getLogger("river.audit")

GENESIS = "0" * 64
SEAL_BATCH = 500
# The least time between two of a process's sealing passes (AuditSealer).
SEAL_PASS_GAP_SECONDS = 0.1
MAINTENANCE_ROLE = "river_audit_maintenance"

VERDICT_OK = "ok"
VERDICT_EMPTY_BUT_ANCHORED = "empty but anchored"

# Reasons a link is broken (``BrokenLink.reason``).
HASH_MISMATCH = "hash mismatch"
MISSING_SEQ = "missing seq"
PREV_HASH_MISMATCH = "prev_hash mismatch"
UNKNOWN_KEY = "unknown key id"


# --- keys and MACs -------------------------------------------------------------------


def _keys() -> dict[str, bytes]:
    return settings.RIVER_AUDIT_HMAC_KEYS


def current_key_id() -> str:
    return next(iter(_keys()))


def _mac(key_id: str, message: str) -> str | None:
    key = _keys().get(key_id)
    if key is None:
        return None
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


# The canonical form's own decimal context, so the form never depends on the thread's
# ambient context (a library or a context copied between threads may have changed its
# precision or traps). Its settings are Python's default context, the one every stored
# entry was hashed under, so existing chains keep verifying.
_CANONICAL = Context(prec=28, rounding=ROUND_HALF_EVEN, Emin=-999999, Emax=999999, capitals=1, clamp=0,
                     flags=[], traps=[InvalidOperation, DivisionByZero, Overflow])


def _number(value):
    """A number as the canonical form sees it: PostgreSQL's jsonb may give 1e20 back
    as an integer and -0.0 as 0.0, so numbers are compared by their normalized decimal."""
    if value == 0:  # jsonb has no negative zero
        return {"#": "0"}
    return {"#": str(Decimal(repr(value)).normalize(context=_CANONICAL))}


def _canonical_json(value):
    """Stable across a database round trip and injective: a number becomes
    ``{"#": decimal}``, and a real object that has a ``#`` or ``{}`` key is wrapped
    as ``{"{}": object}``, so the two can never be confused."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_canonical_json(item) for item in value]
    if isinstance(value, dict):
        body = {key: _canonical_json(item) for key, item in value.items()}
        return {"{}": body} if "#" in body or "{}" in body else body
    return str(value)


def _content_canonical(entry: AuditLogEntry) -> str:
    body = {
        "organization": entry.organization_id,
        "workspace": entry.workspace_id,
        "event_type": entry.event_type,
        "actor": entry.actor_id,
        "actor_label": entry.actor_label,
        "execution_id": entry.execution_id,
        "agent_id": str(entry.agent_id) if entry.agent_id else None,
        "policy_id": str(entry.policy_id) if entry.policy_id else None,
        "approval_id": str(entry.approval_id) if entry.approval_id else None,
        "details": _canonical_json(entry.details),
        "created_at": entry.created_at.isoformat(),
        "key_id": entry.key_id,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _chain_canonical(entry: AuditLogEntry) -> str:
    body = {
        "organization": entry.organization_id,
        "seq": entry.seq,
        "prev_hash": entry.prev_hash,
        "content_hash": entry.content_hash,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def content_mac(entry: AuditLogEntry) -> str | None:
    """The MAC of what the entry says, computed when it is written; ``None`` if the
    key its ``key_id`` names is unknown."""
    return _mac(entry.key_id, _content_canonical(entry))


def entry_mac(entry: AuditLogEntry) -> str | None:
    """The chain link: the entry's position, its predecessor and its content MAC."""
    return _mac(entry.key_id, _chain_canonical(entry))


def _anchor_canonical(anchor: AuditAnchor) -> str:
    body = {
        "organization": anchor.organization_id,
        "number": anchor.number,
        "entry_count": anchor.entry_count,
        "head_hash": anchor.head_hash,
        "key_id": anchor.key_id,
        "created_at": anchor.created_at.isoformat(),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def anchor_mac(anchor: AuditAnchor) -> str | None:
    return _mac(anchor.key_id, _anchor_canonical(anchor))


# --- writing -------------------------------------------------------------------------


def _json_safe(value):
    """JSON-ready, with NUL characters replaced: PostgreSQL's jsonb refuses them, and an
    audit write must not fail on hostile text (a tool argument, a model's output)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {_json_safe(str(key)): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _uuid(value) -> UUID | None:
    """Ids are MACed as the database returns them, so normalise before storing."""
    return UUID(str(value)) if value else None


def audit_record(
    *,
    organization_id: int,
    event_type: str,
    workspace_id: int | None = None,
    actor=None,
    actor_label: str = "",
    execution_id: int | None = None,
    agent_id: UUID | str | None = None,
    policy_id: UUID | str | None = None,
    approval_id: UUID | str | None = None,
    details: dict | None = None,
) -> AuditLogEntry:
    """Append one entry in the caller's transaction, without taking any lock.

    The entry is pending until the caller commits; the sealer then chains it. If
    the caller rolls back, the entry never existed."""
    entry = AuditLogEntry(
        organization_id=int(organization_id),
        workspace_id=int(workspace_id) if workspace_id is not None else None,
        seq=None,
        event_type=_json_safe(event_type)[:60],
        actor=actor if getattr(actor, "pk", None) else None,
        actor_label=_json_safe(actor_label or (getattr(actor, "username", "") if actor else "system"))[:200],
        execution_id=int(execution_id) if execution_id is not None else None,
        agent_id=_uuid(agent_id),
        policy_id=_uuid(policy_id),
        approval_id=_uuid(approval_id),
        details=_json_safe(json.loads(json.dumps(details or {}, default=str))),
        created_at=timezone.now(),
        key_id=current_key_id(),
    )
    entry.content_hash = content_mac(entry)
    _INSERT.insert(entry)
    _seal_on_commit(entry.organization_id)
    return entry


# An entry's INSERT, built by the ORM once per process (common.compiled): on a governed
# turn the journal writes one in its transaction, and ``save()`` compiled it every time.
_INSERT = CompiledInsert(AuditLogEntry)


def _seal_on_commit(organization_id: int) -> None:
    """Once per organization per transaction: the sealer chains all of them anyway.
    A callback dropped with a rolled-back savepoint is no longer in the list, so
    it is registered again."""
    db = transaction.get_connection()
    for _savepoints, callback, _robust in getattr(db, "run_on_commit", ()):
        if getattr(callback, "audit_organization_id", None) == organization_id:
            return
    callback = functools.partial(audit_sealer.request, organization_id)
    callback.audit_organization_id = organization_id
    transaction.on_commit(callback)


class AuditSealer:
    """The process's sealer thread: organizations whose entries committed are sealed off
    the committing thread, each once per pass however many entries it got. Started on
    first use, and again in a forked child. Its connection is closed whenever it has
    nothing left to do."""

    def __init__(self, pass_gap: float = SEAL_PASS_GAP_SECONDS):
        self._lock = threading.Condition()
        self._organizations: set[int] = set()
        self._busy = False
        self._hurry = False  # someone waits for the seal: no gap before the next pass
        self._pid: int | None = None
        self.pass_gap = pass_gap
        self.passes = 0  # passes made in this process (tests, the bench)

    def request(self, organization_id: int) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child (the parent's thread is not here)
                self._pid, self._organizations, self._busy = os.getpid(), set(), False
                threading.Thread(target=self._run, name="river-audit-sealer", daemon=True).start()
            self._organizations.add(int(organization_id))
            self._lock.notify_all()

    def wait(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over so far is sealed; False on timeout."""
        with self._lock:
            self._hurry = True
            self._lock.notify_all()
            return self._lock.wait_for(lambda: not self._organizations and not self._busy, timeout=timeout)

    def _run(self) -> None:
        last_pass = -math.inf
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._organizations)
                # Under load, a pass at most every ``pass_gap`` seconds: the entries committed
                # meanwhile are sealed together, a few statements for all of them instead of
                # the same few for each. An entry waits that long at most to be chained; one
                # that comes after a quiet spell is sealed at once.
                while not self._hurry and (gap := last_pass + self.pass_gap - time.monotonic()) > 0:
                    self._lock.wait(gap)
                organizations, self._organizations, self._busy = self._organizations, set(), True
                self._hurry = False
                self.passes += 1
            try:
                for organization_id in sorted(organizations):
                    _seal_after_commit(organization_id)
            finally:
                last_pass = time.monotonic()
                with self._lock:
                    self._busy = False
                    idle = not self._organizations
                    self._lock.notify_all()
                if idle:
                    connection.close()


audit_sealer = AuditSealer()
atexit.register(audit_sealer.wait, 5.0)


def audit_seal_wait(timeout: float = 10.0) -> bool:
    """Wait until every entry this process committed so far is sealed (or the timeout)."""
    return audit_sealer.wait(timeout)


def _seal_after_commit(organization_id: int) -> None:
    """Never fails the caller, whose entry is committed already: a sealing error is
    logged and the entry is sealed by the next ``audit_anchor`` run or verification."""
    try:
        audit_seal(organization_id=organization_id)
    except Exception:
        logger.warning("audit entries of organization %s left pending; the next anchor run seals them",
                       organization_id, exc_info=True)


def _chain_lock(organization_id: int) -> None:
    """The organization's sealer lock, held to the end of the current transaction.
    Only sealers and anchor writers take it; ``audit_record`` never does. On SQLite
    the database's single writer serializes sealers already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                           [f"river.audit.chain:{organization_id}"])


def _head(organization_id: int) -> tuple[int, str]:
    last = (
        AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=False)
        .order_by("-seq")
        .values_list("seq", "entry_hash")
        .first()
    )
    return last if last else (0, GENESIS)


def _seal_batch(organization_id: int) -> int:
    """Seal up to SEAL_BATCH committed pending entries; the caller holds the chain lock."""
    pending = list(
        AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=True).order_by("id")[:SEAL_BATCH]
    )
    if not pending:
        return 0
    seq, prev_hash = _head(organization_id)
    for entry in pending:
        seq += 1
        entry.seq, entry.prev_hash = seq, prev_hash
        # A row someone inserted with a key id River does not have is still chained
        # (under the current key) so the chain goes on; verification names it.
        entry.entry_hash = entry_mac(entry) or _mac(current_key_id(), _chain_canonical(entry))
        prev_hash = entry.entry_hash
    # One statement text for every entry, sent as a batch (psycopg pipelines it): the ORM's
    # bulk_update built a CASE per column per entry, most of a busy sealer's CPU.
    table = connection.ops.quote_name(AuditLogEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET seq = %s, prev_hash = %s, entry_hash = %s WHERE id = %s",  # noqa: S608 - the model's own table name
                           [(entry.seq, entry.prev_hash, entry.entry_hash, entry.pk) for entry in pending])
    return len(pending)


def audit_seal(*, organization_id: int) -> int:
    """Chain the organization's committed pending entries in id order; returns how many."""
    total = 0
    while True:
        with transaction.atomic():
            _chain_lock(organization_id)
            sealed = _seal_batch(organization_id)
        total += sealed
        if sealed < SEAL_BATCH:
            return total


def audit_seal_pending() -> int:
    """Seal every organization's pending entries (the anchor task does this first)."""
    organization_ids = (
        AuditLogEntry.objects.filter(seq__isnull=True).order_by().values_list("organization_id", flat=True).distinct()
    )
    return sum(audit_seal(organization_id=organization_id) for organization_id in list(organization_ids))


def audit_anchor(*, organization_id: int) -> AuditAnchor | None:
    """Seal, then anchor the head if it moved since the last anchor; log the anchor.

    The log line is the copy outside the database: compare it with the anchor table
    when the table itself is in doubt."""
    audit_seal(organization_id=organization_id)
    with transaction.atomic():
        _chain_lock(organization_id)
        entry_count, head_hash = _head(organization_id)
        last = AuditAnchor.objects.filter(organization_id=organization_id).order_by("-number").first()
        if entry_count == 0 or (last and last.entry_count == entry_count and last.head_hash == head_hash):
            return None
        anchor = AuditAnchor(
            organization_id=organization_id,
            number=(last.number + 1) if last else 1,
            entry_count=entry_count,
            head_hash=head_hash,
            key_id=current_key_id(),
            created_at=timezone.now(),
        )
        anchor.anchor_hash = anchor_mac(anchor)
        anchor.save(force_insert=True)
    logger.info(
        "audit_anchor %s",
        json.dumps({"organization_id": organization_id, "anchor": anchor.number, "entry_count": entry_count,
                    "head_hash": head_hash, "key_id": anchor.key_id, "anchor_hash": anchor.anchor_hash,
                    "created_at": anchor.created_at.isoformat()}, sort_keys=True),
    )
    return anchor


def audit_anchor_all() -> list[AuditAnchor]:
    """Anchor every organization that has entries (including archived ones with pending entries)."""
    audit_seal_pending()
    organization_ids = AuditLogEntry.objects.order_by().values_list("organization_id", flat=True).distinct()
    anchors = [audit_anchor(organization_id=organization_id) for organization_id in sorted(set(organization_ids))]
    return [anchor for anchor in anchors if anchor is not None]


def audit_organization_archive(*, organization_id: int, name: str, slug: str, actor=None) -> AuditLogEntry:
    """The organization is being deleted: its entries stay where they are (nothing
    references it with a database constraint) and this closing entry, sealed and
    anchored after the deletion commits, records what the trail belonged to."""
    entry = audit_record(
        organization_id=organization_id, event_type="organization_deleted", actor=actor,
        details={"name": name, "slug": slug},
    )
    transaction.on_commit(lambda: audit_anchor(organization_id=organization_id))
    return entry


AUDIT_TABLES = ("governance_auditlogentry", "governance_auditanchor")


@contextmanager
def audit_maintenance(*, using: str = DEFAULT_DB_ALIAS):
    """The privileged path: DELETE and TRUNCATE on the audit tables inside this block.

    PostgreSQL: sets ``river.audit_maintenance`` for the transaction; the trigger
    honours it only when the connected role is a member of
    ``river_audit_maintenance``, which River's runtime role should not be
    (docs/audit.md). SQLite has no roles: the audit triggers are lifted for this
    transaction and put back before it commits. Used by ``flush`` (the test
    suite's database resets); verification still reports what was removed."""
    db = connections[using]
    with transaction.atomic(using=using), db.cursor() as cursor:
        if db.vendor == "postgresql":
            cursor.execute("SET LOCAL river.audit_maintenance = 'on'")
            yield
            # Inside an outer transaction (a test) the flag would outlive this block.
            cursor.execute("SET LOCAL river.audit_maintenance = 'off'")
        elif db.vendor == "sqlite":
            placeholders = ", ".join(["%s"] * len(AUDIT_TABLES))
            cursor.execute(
                f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ({placeholders})",
                list(AUDIT_TABLES),
            )
            triggers = cursor.fetchall()
            for name, _sql in triggers:
                cursor.execute(f'DROP TRIGGER "{name}"')
            yield
            for _name, sql in triggers:
                cursor.execute(sql)
        else:
            yield


# --- verification --------------------------------------------------------------------


@dataclass
class BrokenLink:
    seq: int
    reason: str  # HASH_MISMATCH | MISSING_SEQ | PREV_HASH_MISMATCH | UNKNOWN_KEY
    entry_id: int | None = None
    detail: str = ""


@dataclass
class ChainReport:
    organization_id: int
    entries_checked: int = 0
    anchors_checked: int = 0
    first_broken: BrokenLink | None = None
    truncated_after_anchor: int | None = None
    empty_but_anchored: bool = False
    pending: int = 0
    rejected_anchors: list[int] = field(default_factory=list)
    detail: str = ""

    @property
    def verdict(self) -> str:
        if self.empty_but_anchored:
            return VERDICT_EMPTY_BUT_ANCHORED
        if self.first_broken is not None:
            return f"broken at entry {self.first_broken.seq}"
        if self.truncated_after_anchor is not None:
            return f"truncated after anchor {self.truncated_after_anchor}"
        return VERDICT_OK

    @property
    def ok(self) -> bool:
        return self.verdict == VERDICT_OK

    def as_dict(self) -> dict:
        return {
            "organization_id": self.organization_id,
            "verdict": self.verdict,
            "ok": self.ok,
            "entries_checked": self.entries_checked,
            "anchors_checked": self.anchors_checked,
            "pending": self.pending,
            "first_broken": (
                {"seq": self.first_broken.seq, "reason": self.first_broken.reason,
                 "entry_id": self.first_broken.entry_id, "detail": self.first_broken.detail}
                if self.first_broken else None
            ),
            "rejected_anchors": self.rejected_anchors,
            "detail": self.detail,
        }


@dataclass
class AuditVerification:
    organizations: list[ChainReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(report.ok for report in self.organizations)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "organizations": [report.as_dict() for report in self.organizations]}


def _trusted_anchors(organization_id: int, report: ChainReport) -> list[AuditAnchor]:
    """Anchors whose MAC verifies. One that does not was not written by River; it is
    listed in ``rejected_anchors`` and cannot move the verdict either way."""
    trusted = []
    for anchor in AuditAnchor.objects.filter(organization_id=organization_id).order_by("number"):
        mac = anchor_mac(anchor)
        if mac is not None and hmac.compare_digest(mac, anchor.anchor_hash):
            trusted.append(anchor)
        else:
            report.rejected_anchors.append(anchor.number)
    return trusted


def _entry_problem(entry: AuditLogEntry, expected_seq: int, prev_hash: str) -> BrokenLink | None:
    """Why ``entry`` does not continue a chain whose next entry should be
    ``expected_seq`` linked to ``prev_hash``; None when it does."""
    if entry.seq != expected_seq:
        return BrokenLink(expected_seq, MISSING_SEQ, entry.pk, f"expected seq {expected_seq}, found {entry.seq}")
    if entry.prev_hash != prev_hash:
        return BrokenLink(entry.seq, PREV_HASH_MISMATCH, entry.pk, "prev_hash does not match the previous entry's MAC")
    content, link = content_mac(entry), entry_mac(entry)
    if content is None or link is None:
        return BrokenLink(entry.seq, UNKNOWN_KEY, entry.pk, f"key id {entry.key_id!r} is not in RIVER_AUDIT_HMAC_KEYS")
    if not hmac.compare_digest(content, entry.content_hash):
        return BrokenLink(entry.seq, HASH_MISMATCH, entry.pk,
                          "the entry's content does not match its MAC (edited, or not written by River)")
    if not hmac.compare_digest(link, entry.entry_hash):
        return BrokenLink(entry.seq, HASH_MISMATCH, entry.pk, "the entry's chain MAC does not match")
    return None


def _walk_chain(organization_id: int, report: ChainReport, anchored_seqs: set[int]) -> dict[int, str]:
    """Check every sealed entry in order; returns the MACs at the anchored positions."""
    expected_seq, prev_hash = 1, GENESIS
    seen_at_anchors: dict[int, str] = {}
    entries = AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=False).order_by("seq")
    for entry in entries.iterator(chunk_size=1000):
        report.entries_checked += 1
        broken = _entry_problem(entry, expected_seq, prev_hash)
        if broken is not None:
            report.first_broken = broken
            break
        if entry.seq in anchored_seqs:
            seen_at_anchors[entry.seq] = entry.entry_hash
        expected_seq, prev_hash = entry.seq + 1, entry.entry_hash
    return seen_at_anchors


def _verify_organization(organization_id: int) -> ChainReport:
    report = ChainReport(organization_id=organization_id)
    audit_seal(organization_id=organization_id)
    # Anchors first: an anchor written while the entries are read refers only to
    # entries that were sealed before it, which the walk below sees.
    anchors = _trusted_anchors(organization_id, report)
    report.anchors_checked = len(anchors)
    seen = _walk_chain(organization_id, report, {anchor.entry_count for anchor in anchors})
    report.pending = AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=True).count()
    if report.entries_checked == 0 and anchors:
        report.empty_but_anchored = True
        report.detail = (f"no entries, but anchor {anchors[-1].number} recorded {anchors[-1].entry_count}")
        return report
    if report.first_broken is not None:
        return report
    for anchor in anchors:
        if seen.get(anchor.entry_count) != anchor.head_hash:
            report.truncated_after_anchor = anchor.number
            report.detail = (
                f"anchor {anchor.number} recorded {anchor.entry_count} entries ending in {anchor.head_hash[:12]}…; "
                f"the chain now has {report.entries_checked}"
                + ("" if anchor.entry_count > report.entries_checked else " and a different entry at that position")
            )
            break
    return report


def audit_organization_ids() -> list[int]:
    """Every organization with a trail: entries or anchors, deleted organizations included."""
    ids = set(AuditLogEntry.objects.order_by().values_list("organization_id", flat=True).distinct())
    ids |= set(AuditAnchor.objects.order_by().values_list("organization_id", flat=True).distinct())
    return sorted(ids)


def audit_verify(*, organization_id: int | None = None, organization_ids: list[int] | None = None) -> AuditVerification:
    """One report per organization: pending committed entries are sealed first, then
    the chain is walked and compared with the trusted anchors."""
    if organization_id is not None:
        ids = [organization_id]
    elif organization_ids is not None:
        ids = list(organization_ids)
    else:
        ids = audit_organization_ids()
    return AuditVerification(organizations=[_verify_organization(org_id) for org_id in sorted(set(ids))])


# --- verification a page can afford ----------------------------------------------------

PROGRESS_BUDGET = 2_000
_PROGRESS_KEY = "river:audit:verified-up-to:{organization_id}"


@dataclass
class ChainProgress:
    """How far one organization's chain is known to be intact (``audit_verify_progress``)."""

    organization_id: int
    verified_up_to: int = 0  # the last entry (seq) checked and found linked, from entry 1
    head: int = 0  # the newest sealed entry
    checked_now: int = 0
    pending: int = 0
    first_broken: BrokenLink | None = None
    truncated_after_anchor: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.first_broken is None and self.truncated_after_anchor is None

    @property
    def caught_up(self) -> bool:
        return self.verified_up_to >= self.head


def audit_verify_progress(*, organization_id: int, budget: int = PROGRESS_BUDGET) -> ChainProgress:
    """Carry the verification of one organization's chain forward by at most ``budget``
    entries, from where the previous call stopped, and check its newest trusted anchor.

    The position reached (a seq and that entry's MAC) is kept in the cache; it is used
    only while the entry at that position still has that MAC, otherwise the walk starts
    again at entry 1. So a page pays for at most ``budget`` entries whatever the trail's
    size, and a trail of N entries is fully walked after N / budget calls. What this
    cannot see: an entry changed *behind* the position reached after it was checked
    (its own MAC no longer matches, but nothing re-reads it). ``audit_verify`` (the
    ``verify_audit`` command and ``/api/v1/audit/verify``) walks everything."""
    from django.core.cache import cache
    from django.db.models import Max

    progress = ChainProgress(organization_id=organization_id)
    key = _PROGRESS_KEY.format(organization_id=organization_id)
    sealed = AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=False)
    progress.head = sealed.aggregate(head=Max("seq"))["head"] or 0
    progress.pending = AuditLogEntry.objects.filter(organization_id=organization_id, seq__isnull=True).count()
    expected_seq, prev_hash = 1, GENESIS
    saved = cache.get(key)
    if isinstance(saved, dict) and isinstance(saved.get("seq"), int) and saved["seq"] > 0:
        still = sealed.filter(seq=saved["seq"]).values_list("entry_hash", flat=True).first()
        if still is not None and hmac.compare_digest(still, str(saved.get("hash", ""))):
            expected_seq, prev_hash = saved["seq"] + 1, still
    progress.verified_up_to = expected_seq - 1
    for entry in sealed.filter(seq__gte=expected_seq).order_by("seq")[:max(budget, 0)]:
        progress.checked_now += 1
        broken = _entry_problem(entry, expected_seq, prev_hash)
        if broken is not None:
            progress.first_broken = broken
            progress.detail = broken.detail
            break
        expected_seq, prev_hash = entry.seq + 1, entry.entry_hash
    progress.verified_up_to = expected_seq - 1
    if progress.verified_up_to:
        cache.set(key, {"seq": progress.verified_up_to, "hash": prev_hash}, timeout=None)
    if progress.first_broken is None:
        _check_latest_anchor(progress, sealed)
    return progress


def _check_latest_anchor(progress: ChainProgress, sealed) -> None:
    """The newest anchor River wrote must still find its head entry in the chain."""
    anchor = AuditAnchor.objects.filter(organization_id=progress.organization_id).order_by("-number").first()
    if anchor is None:
        return
    mac = anchor_mac(anchor)
    if mac is None or not hmac.compare_digest(mac, anchor.anchor_hash):
        return  # not written by River: it can move no verdict (as in audit_verify)
    at_head = sealed.filter(seq=anchor.entry_count).values_list("entry_hash", flat=True).first()
    if anchor.entry_count and (at_head is None or not hmac.compare_digest(at_head, anchor.head_hash)):
        progress.truncated_after_anchor = anchor.number
        progress.detail = (f"anchor {anchor.number} recorded {anchor.entry_count} entries; the chain now has "
                           f"{progress.head}" + ("" if at_head is None else " and a different entry at that position"))
