"""Deleting an organization (or a user) archives the audit trail instead of cascading into it."""

from django.contrib.auth import get_user_model

from governance.audit import audit_record, audit_seal, audit_verify
from governance.models import AuditAnchor, AuditLogEntry
from tenancy.models import Organization


def test_deleting_an_organization_keeps_its_trail_sealed_anchored_and_verifiable(
    org, workspace, owner, django_capture_on_commit_callbacks
):
    org_id = org.pk
    for i in range(3):
        audit_record(organization_id=org_id, workspace_id=workspace.pk, actor=owner, event_type=f"e{i}")
    audit_seal(organization_id=org_id)
    with django_capture_on_commit_callbacks(execute=True):
        org.delete()
    assert not Organization.objects.filter(pk=org_id).exists()
    entries = list(AuditLogEntry.objects.filter(organization_id=org_id).order_by("seq", "id"))
    assert [entry.event_type for entry in entries] == ["e0", "e1", "e2", "organization_deleted"]
    assert entries[-1].details == {"name": "Acme", "slug": org.slug}
    assert entries[0].workspace_id == workspace.pk  # the ids are kept as they were
    anchor = AuditAnchor.objects.get(organization_id=org_id)
    assert (anchor.number, anchor.entry_count) == (1, 4)
    report = audit_verify().organizations
    assert [(r.organization_id, r.verdict, r.entries_checked) for r in report] == [(org_id, "ok", 4)]


def test_deleting_a_user_keeps_their_entries(org, owner):
    audit_record(organization_id=org.pk, actor=owner, event_type="by owner")
    user_id = owner.pk
    get_user_model().objects.filter(pk=user_id).delete()
    entry = AuditLogEntry.objects.get(event_type="by owner")
    assert (entry.actor_id, entry.actor_label) == (user_id, "owner")
    assert audit_verify(organization_id=org.pk).organizations[0].verdict == "ok"
