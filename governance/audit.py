"""The audit trail: append-only entries, hash-chained per organization.

Each entry's hash covers its content and the previous entry's hash, so editing or
deleting any row breaks the chain from that point on. Callers append through
``audit_record`` only.
"""

from __future__ import annotations

import hashlib
import json
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
            execution_id=execution_id,
            agent_id=agent_id,
            policy_id=policy_id,
            approval_id=approval_id,
            details=json.loads(json.dumps(details or {}, default=str)),
            created_at=timezone.now(),
            prev_hash=last["entry_hash"] if last else GENESIS,
        )
        entry.entry_hash = entry_hash(entry)
        entry.save(force_insert=True)
    return entry
