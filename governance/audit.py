"""The audit trail: append-only entries, hash-chained per organization.

Each entry's hash covers its content and the previous entry's hash, so editing or
deleting any row breaks the chain from that point on. Callers append through
``audit_record`` only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from governance.models import AuditLogEntry
from tenancy.models import Organization

GENESIS = "0" * 64


def _canonical(entry: AuditLogEntry) -> str:
    body = {
        "organization": entry.organization_id,
        "workspace": entry.workspace_id,
        "seq": entry.seq,
        "event_type": entry.event_type,
        "actor": entry.actor_id,
        "actor_label": entry.actor_label,
        "execution_id": entry.execution_id,
        "agent_id": str(entry.agent_id) if entry.agent_id else None,
        "policy_id": str(entry.policy_id) if entry.policy_id else None,
        "approval_id": str(entry.approval_id) if entry.approval_id else None,
        "details": entry.details,
        "created_at": entry.created_at.isoformat(),
        "prev_hash": entry.prev_hash,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)


def entry_hash(entry: AuditLogEntry) -> str:
    return hashlib.sha256(_canonical(entry).encode()).hexdigest()


def _uuid(value) -> UUID | None:
    """Ids are hashed as the database returns them, so normalise before hashing."""
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
    """Append one entry. Serialised per organization by locking the organization row."""
    with transaction.atomic():
        Organization.objects.select_for_update().only("id").get(pk=organization_id)
        last = (
            AuditLogEntry.objects.filter(organization_id=organization_id)
            .order_by("-seq")
            .values("seq", "entry_hash")
            .first()
        )
        entry = AuditLogEntry(
            organization_id=organization_id,
            workspace_id=workspace_id,
            seq=(last["seq"] + 1) if last else 1,
            event_type=event_type,
            actor=actor if getattr(actor, "pk", None) else None,
            actor_label=actor_label or (getattr(actor, "username", "") if actor else "system"),
            execution_id=int(execution_id) if execution_id is not None else None,
            agent_id=_uuid(agent_id),
            policy_id=_uuid(policy_id),
            approval_id=_uuid(approval_id),
            details=json.loads(json.dumps(details or {}, default=str)),
            created_at=timezone.now(),
            prev_hash=last["entry_hash"] if last else GENESIS,
        )
        entry.entry_hash = entry_hash(entry)
        entry.save(force_insert=True)
    return entry


# --- verification ------------------------------------------------------------------

HASH_MISMATCH = "hash mismatch"
MISSING_SEQ = "missing seq"
PREV_HASH_MISMATCH = "prev_hash mismatch"


@dataclass
class BrokenLink:
    seq: int
    reason: str  # HASH_MISMATCH | MISSING_SEQ | PREV_HASH_MISMATCH
    entry_id: int | None = None
    detail: str = ""


@dataclass
class ChainReport:
    organization_id: int
    entries_checked: int = 0
    first_broken: BrokenLink | None = None

    @property
    def ok(self) -> bool:
        return self.first_broken is None

    def as_dict(self) -> dict:
        return {
            "organization_id": self.organization_id,
            "ok": self.ok,
            "entries_checked": self.entries_checked,
            "first_broken": asdict(self.first_broken) if self.first_broken else None,
        }


@dataclass
class AuditVerification:
    organizations: list[ChainReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(report.ok for report in self.organizations)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "organizations": [report.as_dict() for report in self.organizations]}


def _verify_chain(organization_id: int) -> ChainReport:
    report = ChainReport(organization_id=organization_id)
    expected_seq, prev_hash = 1, GENESIS
    entries = AuditLogEntry.objects.filter(organization_id=organization_id).order_by("seq")
    for entry in entries.iterator(chunk_size=500):
        report.entries_checked += 1
        if entry.seq != expected_seq:
            report.first_broken = BrokenLink(
                seq=expected_seq, reason=MISSING_SEQ, entry_id=entry.pk,
                detail=f"expected seq {expected_seq}, found {entry.seq}",
            )
            break
        if entry.prev_hash != prev_hash:
            report.first_broken = BrokenLink(
                seq=entry.seq, reason=PREV_HASH_MISMATCH, entry_id=entry.pk,
                detail="prev_hash does not match the previous entry's hash",
            )
            break
        if entry_hash(entry) != entry.entry_hash:
            report.first_broken = BrokenLink(
                seq=entry.seq, reason=HASH_MISMATCH, entry_id=entry.pk,
                detail="the entry's content does not match its hash",
            )
            break
        expected_seq, prev_hash = entry.seq + 1, entry.entry_hash
    return report


def audit_verify(*, organization_id: int | None = None, organization_ids: list[int] | None = None) -> AuditVerification:
    """Walk each organization's chain and report the first broken link in each.

    Detects an edited entry (hash mismatch), a deleted entry (missing seq) and a
    re-chained entry (prev_hash mismatch). Deleting the newest entries leaves a
    shorter valid chain; that is not detectable from the chain alone.
    """
    if organization_id is not None:
        ids = [organization_id]
    elif organization_ids is not None:
        ids = list(organization_ids)
    else:
        ids = list(AuditLogEntry.objects.order_by().values_list("organization_id", flat=True).distinct())
    return AuditVerification(organizations=[_verify_chain(org_id) for org_id in sorted(set(ids))])
