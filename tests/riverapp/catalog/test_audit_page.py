"""The audit page: entries with filters, paginated and bounded, and the chain's verdict
for organization admins."""

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance.audit import _PROGRESS_KEY, PROGRESS_BUDGET, audit_maintenance, audit_record, audit_seal
from governance.models import AuditLogEntry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_progress(org):
    cache.delete(_PROGRESS_KEY.format(organization_id=org.pk))
    yield
    cache.delete(_PROGRESS_KEY.format(organization_id=org.pk))


@pytest.fixture
def entries(org, workspace, owner, agent):
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="agent_version_deployed",
                 actor=owner, agent_id=agent.pk, details={"version": 1, "note": "<b>bold</b>"})
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="approval_requested",
                 actor_label="approver-bot", execution_id=42)
    audit_record(organization_id=org.pk, event_type="organization_level")
    audit_seal(organization_id=org.pk)


def test_entries_are_listed_with_plain_words_and_escaped_details(client_for, org_admin, owner, entries):
    page = client_for(owner).get("/audit/").content.decode()
    assert "Agent version deployed" in page and "Triage" in page and "/runs/42/" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    assert "Organization level" not in page  # not of this workspace


def test_filters(client_for, owner, agent, entries):
    client = client_for(owner)
    assert "approver-bot" not in client.get("/audit/?action=agent_version_deployed").content.decode()
    assert "Triage" not in client.get("/audit/?run=42").content.decode().split("<tbody>")[-1]
    assert "approver-bot" in client.get("/audit/?actor=bot").content.decode()
    assert "approver-bot" not in client.get(f"/audit/?agent={agent.pk}").content.decode().split("<tbody>")[-1]
    assert "No entry matches" in client.get("/audit/?since=2000-01-01&until=2000-01-02").content.decode()
    bad = client.get("/audit/?since=2020-02-02&until=2020-01-01&run=abc")
    assert bad.status_code == 400 and 'id="id_until_error"' in bad.content.decode()
    assert 'id="id_run_error"' in bad.content.decode()


def test_org_admins_see_the_verdict_and_the_whole_organization(client_for, org_admin, entries):
    client = client_for(org_admin)
    page = client.get("/audit/").content.decode()
    assert "Chain intact up to entry 3" in page
    assert "Organization level" in client.get("/audit/?scope=organization").content.decode()


def test_members_do_not_see_the_verdict(client_for, member, entries):
    page = client_for(member).get("/audit/?scope=organization").content.decode()
    assert "shown to organization admins" in page and "Chain intact" not in page
    assert "Organization level" not in page  # the scope choice is an admin's only


def test_a_broken_chain_names_the_first_broken_entry(client_for, org_admin, org, entries):
    with audit_maintenance():
        AuditLogEntry.objects.filter(organization_id=org.pk, seq=2).delete()
    page = client_for(org_admin).get("/audit/").content.decode()
    assert "The chain is broken" in page and "First broken entry: 2" in page


def test_the_page_is_bounded_on_a_long_trail(client_for, org_admin, org, workspace, entries):
    AuditLogEntry.objects.bulk_create([
        AuditLogEntry(organization_id=org.pk, workspace_id=workspace.pk, event_type="governance_decision",
                      details={"i": i}) for i in range(10_000)], batch_size=2000)  # pending, never sealed
    client = client_for(org_admin)
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/audit/?page=2")
    assert response.status_code == 200 and "Page 2 of" in response.content.decode()
    # The frame's Approvals badge reads the user's roles (it counts only requests they
    # may decide): a fixed cost per page, not per row.
    assert len(queries) <= 19, "\n".join(q["sql"][:120] for q in queries.captured_queries)
    assert PROGRESS_BUDGET <= 5_000


def test_outsiders_see_nothing_of_it(client_for, outsider, entries):
    page = client_for(outsider).get("/audit/?scope=organization").content.decode()
    assert "approver-bot" not in page and "Triage" not in page and "/runs/42/" not in page


def test_anonymous_visitors_are_sent_to_sign_in(client):
    assert "/accounts/login/" in client.get("/audit/")["Location"]
