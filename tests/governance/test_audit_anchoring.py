"""The beat task seals and anchors every chain whose head moved; the admin shows verdicts."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from governance.audit import audit_maintenance, audit_record
from governance.models import AuditAnchor, AuditLogEntry
from governance.tasks import audit_anchor as audit_anchor_task


def test_the_anchor_task_is_on_the_beat_schedule():
    entry = settings.CELERY_BEAT_SCHEDULE["governance-audit-anchor"]
    assert entry["task"] == "governance.audit_anchor"
    assert entry["schedule"].total_seconds() == settings.RIVER_AUDIT_ANCHOR_SECONDS


def test_the_anchor_task_seals_and_anchors_each_moved_head_once(org, other_org):
    audit_record(organization_id=org.pk, event_type="a")
    audit_record(organization_id=org.pk, event_type="b")
    audit_record(organization_id=other_org.pk, event_type="c")
    assert audit_anchor_task.run() == 2
    assert not AuditLogEntry.objects.filter(seq__isnull=True).exists()
    assert sorted(AuditAnchor.objects.values_list("organization_id", "number", "entry_count")) == sorted(
        [(org.pk, 1, 2), (other_org.pk, 1, 1)]
    )
    assert audit_anchor_task.run() == 0  # nothing moved: nothing new, safe to run twice
    audit_record(organization_id=org.pk, event_type="d")
    assert audit_anchor_task.run() == 1
    assert AuditAnchor.objects.filter(organization_id=org.pk).order_by("-number").first().entry_count == 3


@pytest.fixture
def admin_client(db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_changelist_shows_each_verdict(admin_client, org, other_org):
    audit_record(organization_id=org.pk, event_type="a")
    audit_record(organization_id=other_org.pk, event_type="b")
    audit_anchor_task.run()
    with audit_maintenance():
        AuditLogEntry.objects.filter(organization_id=other_org.pk).delete()
    response = admin_client.get("/admin/governance/auditlogentry/")
    assert response.status_code == 200
    shown = [str(message) for message in response.context["messages"]]
    assert any(f"organization {org.pk}: ok (1 entries, 1 anchors)" in text for text in shown)
    assert any(f"organization {other_org.pk}: empty but anchored" in text for text in shown)


def test_anchors_are_view_only_in_the_admin(admin_client, org):
    audit_record(organization_id=org.pk, event_type="a")
    anchor = audit_anchor_task.run() and AuditAnchor.objects.get(organization_id=org.pk)
    assert admin_client.get("/admin/governance/auditanchor/").status_code == 200
    assert admin_client.get(f"/admin/governance/auditanchor/{anchor.pk}/delete/").status_code == 403
    assert admin_client.post(f"/admin/governance/auditanchor/{anchor.pk}/change/", {"entry_count": 9}).status_code \
        == 403
    assert AuditAnchor.objects.get(pk=anchor.pk).entry_count == 1
