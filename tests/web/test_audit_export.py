"""The audit page's downloads (/audit/export.csv, /audit/export.jsonl): the entries the
page selects for the same query, every page of them, tenant-scoped, streamed a chunk at a
time; CSV cells never start a formula; one JSON object per line."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from common.spreadsheet import csv_cell
from governance.audit import audit_record, audit_seal
from governance.models import AuditLogEntry
from tenancy.models import Workspace
from tests.factories import make_agent
from web import audit_export
from web.audit_export import export_chunks, export_chunks_async

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _body(response) -> str:
    assert response.streaming, "the download is streamed"
    return b"".join(response.streaming_content).decode()


def _csv(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(_body(response))))


def _jsonl(response) -> list[dict]:
    return [json.loads(line) for line in _body(response).split("\n") if line]


@pytest.fixture
def entries(org, workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Triage")
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="agent_version_deployed",
                 actor=owner, agent_id=agent.pk, details={"version": 1})
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="approval_requested",
                 actor_label="=HYPERLINK(\"http://evil\",\"x\")", execution_id=42,
                 details={"note": "-2+3", "text": "line\nbreak \u2028 sep", "html": "<b>bold</b>"})
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="governance_decision",
                 actor_label="@sum", execution_id=43, details={"decision": "BLOCK"})
    audit_record(organization_id=org.pk, event_type="organization_level", details={"secret": "org only"})
    audit_seal(organization_id=org.pk)
    return agent


def test_csv_has_every_entry_of_the_workspace_with_its_columns(owner, entries, workspace):
    response = _client(owner).get("/audit/export.csv")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="river-audit-support-{timezone.localdate().isoformat()}.csv"')
    rows = _csv(response)
    assert [row["action"] for row in rows] == ["governance_decision", "approval_requested", "agent_version_deployed"]
    deployed = rows[2]
    assert deployed["action_label"] == "Agent version deployed" and deployed["agent"] == "Triage"
    assert deployed["agent_id"] == str(entries.pk) and deployed["actor"] == "owner"
    assert json.loads(deployed["details"]) == {"version": 1} and deployed["workspace_id"] == str(workspace.pk)
    assert all(row["entry"].isdigit() and len(row["entry_hash"]) == 64 for row in rows)
    assert "org only" not in _body(_client(owner).get("/audit/export.csv"))


def test_csv_cells_never_start_a_formula(owner, entries):
    rows = {row["action"]: row for row in _csv(_client(owner).get("/audit/export.csv"))}
    assert rows["approval_requested"]["actor"] == "'=HYPERLINK(\"http://evil\",\"x\")"
    assert rows["governance_decision"]["actor"] == "'@sum"
    assert rows["approval_requested"]["run"] == "42"  # numbers stay numbers
    details = json.loads(rows["approval_requested"]["details"])
    assert details["text"] == "line\nbreak \u2028 sep"  # quoted by the CSV writer, not split


@pytest.mark.parametrize("value, cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("plain", "plain"), (" =1", " =1"), (7, "7"), (-7, "-7"), (-0.5, "-0.5"), (None, ""), (True, "true"),
    ({"a": "=x"}, '{"a": "=x"}'), (["=x"], '["=x"]'),
])
def test_csv_cell(value, cell):
    assert csv_cell(value) == cell


def test_jsonl_is_one_parseable_object_per_entry(owner, entries):
    response = _client(owner).get("/audit/export.jsonl")
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert response["Content-Disposition"].endswith('.jsonl"')
    body = _body(_client(owner).get("/audit/export.jsonl"))
    assert body.endswith("\n") and "\u2028" not in body  # escaped: no reader splits the entry
    lines = _jsonl(response)
    assert len(lines) == 3 == len(body.splitlines())
    requested = next(line for line in lines if line["action"] == "approval_requested")
    assert requested["details"] == {"note": "-2+3", "text": "line\nbreak \u2028 sep", "html": "<b>bold</b>"}
    assert requested["actor"] == '=HYPERLINK("http://evil","x")'  # JSON is not a spreadsheet: kept as is
    assert requested["run"] == 42 and requested["agent"] is None


def test_the_page_filters_apply(owner, entries):
    client = _client(owner)
    assert [r["action"] for r in _csv(client.get("/audit/export.csv?action=approval_requested"))] == [
        "approval_requested"]
    assert [r["run"] for r in _jsonl(client.get("/audit/export.jsonl?run=43"))] == [43]
    assert [r["actor"] for r in _jsonl(client.get("/audit/export.jsonl?actor=sum"))] == ["@sum"]
    assert [r["agent"] for r in _jsonl(client.get(f"/audit/export.jsonl?agent={entries.pk}"))] == ["Triage"]
    assert _jsonl(client.get("/audit/export.jsonl?since=2000-01-01&until=2000-01-02")) == []
    today = timezone.localdate().isoformat()
    assert len(_jsonl(client.get(f"/audit/export.jsonl?since={today}&until={today}&page=3"))) == 3


def test_invalid_filters_are_refused_naming_the_field(owner, entries):
    response = _client(owner).get("/audit/export.csv?since=2020-02-02&until=2020-01-01&run=abc&agent=nope")
    assert response.status_code == 400 and not response.streaming
    text = response.content.decode()
    assert "To: The end comes before the start." in text and "Run number:" in text and "Agent:" in text


def test_the_whole_organization_only_for_its_admins(owner, org_admin, entries):
    # A workspace admin's scope=organization is not a filter they have: ignored, workspace only.
    assert "organization_level" not in {r["action"] for r in _jsonl(
        _client(owner).get("/audit/export.jsonl?scope=organization"))}
    response = _client(org_admin).get("/audit/export.jsonl?scope=organization")
    assert "organization_level" in {r["action"] for r in _jsonl(response)}
    assert "-organization-" in response["Content-Disposition"]


def test_another_workspace_and_another_organization_see_none_of_it(owner, outsider, entries, org):
    sibling = Workspace.objects.create(organization=org, name="Billing", slug="billing")
    audit_record(organization_id=org.pk, workspace_id=sibling.pk, event_type="governance_decision",
                 actor_label="billing-bot", details={})
    assert "billing-bot" not in _body(_client(owner).get("/audit/export.csv"))
    for path in ("/audit/export.csv", "/audit/export.jsonl", "/audit/export.jsonl?scope=organization",
                 "/audit/export.jsonl?run=42"):
        body = _body(_client(outsider).get(path))
        assert "HYPERLINK" not in body and "Triage" not in body and "org only" not in body
    # Another organization's agent is not a choice of the filter: refused, nothing sent.
    refused = _client(outsider).get(f"/audit/export.jsonl?agent={entries.pk}")
    assert refused.status_code == 400 and "HYPERLINK" not in refused.content.decode()


def test_without_a_workspace_or_the_permission_it_is_refused(owner, entries, monkeypatch, django_user_model):
    nobody = django_user_model.objects.create_user(username="nobody", password="pw-nobody")
    assert _client(nobody).get("/audit/export.csv").status_code == 404
    assert "/accounts/login/" in Client().get("/audit/export.jsonl")["Location"]
    assert Client().post("/audit/export.csv").status_code in (302, 405)
    from web import audit

    def no_permissions(request):
        workspace, _ = real(request)
        return workspace, frozenset()

    real = audit.workspace_and_permissions
    monkeypatch.setattr(audit, "workspace_and_permissions", no_permissions)
    assert _client(owner).get("/audit/export.csv").status_code == 403


def test_the_buttons_keep_the_pages_filters(owner, entries):
    html = _client(owner).get("/audit/?action=approval_requested&actor=HYP&page=1").content.decode()
    assert 'href="/audit/export.csv?action=approval_requested&amp;actor=HYP"' in html
    assert 'href="/audit/export.jsonl?action=approval_requested&amp;actor=HYP"' in html
    assert "Download this entry (with these filters)" in html
    assert "export.csv" not in _client(owner).get("/audit/?action=agent_health_changed").content.decode()


def test_a_long_trail_streams_in_chunks_with_a_bounded_number_of_queries(owner, org, workspace, entries,
                                                                          monkeypatch):
    monkeypatch.setattr(audit_export, "EXPORT_CHUNK", 500)
    start = timezone.now() - dt.timedelta(days=1)
    AuditLogEntry.objects.bulk_create([
        AuditLogEntry(organization_id=org.pk, workspace_id=workspace.pk, event_type="governance_decision",
                      agent_id=entries.pk, created_at=start + dt.timedelta(seconds=i), details={"i": i})
        for i in range(5_000)], batch_size=2000)
    response = _client(owner).get("/audit/export.jsonl")
    assert response.streaming
    with CaptureQueriesContext(connection) as queries:
        chunks = [chunk.decode() for chunk in response.streaming_content]
    assert len(chunks) == 11  # 5,003 entries, 500 at a time
    assert all(chunk.count("\n") <= 500 for chunk in chunks)
    lines = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert len(lines) == 5_003
    numbered = [line["details"]["i"] for line in lines if "i" in line["details"]]
    assert numbered == list(range(4_999, -1, -1))  # newest first, as on the page
    assert {line["agent"] for line in lines if "i" in line["details"]} == {"Triage"}
    # The cursor's fetches and one agent-name query per chunk: not one per entry.
    assert len(queries) <= 3 * len(chunks) + 5, [q["sql"][:80] for q in queries.captured_queries]


def test_under_asgi_each_chunk_is_read_as_it_is_sent(owner, entries, monkeypatch):
    monkeypatch.setattr(audit_export, "EXPORT_CHUNK", 1)
    rows = AuditLogEntry.objects.filter(workspace_id=entries.workspace_id).order_by("-created_at", "-id")
    chunks = export_chunks(rows, organization_id=entries.workspace.organization_id, fmt="csv", labels=str)
    read = []

    async def first_two():
        stream = export_chunks_async(chunks)
        read.append(await stream.__anext__())
        read.append(await stream.__anext__())
        await stream.aclose()

    async_to_sync(first_two)()
    assert read[0].startswith("entry,recorded_at,action") and read[1].count("\r\n") == 1
    with pytest.raises(StopIteration):
        next(chunks)  # closed with the stream: the cursor is released
