"""Structured views (web/templatetags/river_struct.py): nested values as key/value lists,
hostile text escaped, depth and size bounded with "… N more", long text clamped, the raw
JSON behind a toggle, edits as before/after; and where the pages use them: the run
page's Why panel (tenant-scoped like the API's) and the audit page's entry details."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.template import engines
from django.test import Client
from django.utils import timezone

from executions.models import Execution, ExecutionStep
from governance.audit import audit_record
from governance.models import ApprovalRequest
from tests.factories import make_agent
from web.templatetags import river_struct
from web.templatetags.river_struct import key_words, struct_tree

HOSTILE = '<script>alert("x")</script>'


def _render(source: str, **context) -> str:
    return engines["django"].from_string("{% load river_struct %}" + source).render(context)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_keys_read_as_words():
    assert key_words("tool_name") == "Tool name"
    assert key_words("maxRows") == "Max rows"
    assert key_words("SQL_text") == "SQL text"
    assert key_words("") == "(blank)"
    assert len(key_words("k" * 500)) == river_struct.KEY_CHARS


def test_nested_values_render_as_key_value_lists_with_raw_json_behind_a_toggle():
    html = _render("{% struct value 'Arguments' %}", value={
        "table_name": "tickets", "filters": {"status": "open", "ids": [3, 4]}, "dry_run": False, "limit": None})
    assert '<dt title="table_name">Table name</dt>' in html
    assert '<dt title="status">Status</dt><dd><span class="struct-text">open</span>' in html
    assert '<ol class="struct-list"><li><span class="struct-number">3</span>' in html
    assert '<span class="struct-bool">no</span>' in html and '<span class="struct-null">none</span>' in html
    raw = re.search(r'<details class="struct-raw"><summary>Raw JSON.*?'
                    r'<pre class="struct-raw-text" tabindex="0">(.*?)</pre>', html, re.S)
    assert raw and "&quot;table_name&quot;: &quot;tickets&quot;" in raw.group(1)
    assert '\n  &quot;filters&quot;: {\n' in raw.group(1)  # pretty-printed


def test_hostile_keys_and_values_are_escaped_everywhere():
    html = _render("{% struct value %}{% struct_diff before after %}",
                   value={HOSTILE: HOSTILE, "list": [HOSTILE], "json": json.dumps({"k": HOSTILE})},
                   before={"to": HOSTILE}, after={"to": "ok", HOSTILE: 1})
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert 'title="&lt;script&gt;' in html  # the raw key, escaped in the attribute too


def test_depth_is_limited_and_the_rest_is_counted():
    deep: dict = {"leaf": 1}
    for _ in range(20):
        deep = {"inner": deep, "also": [1, 2]}
    tree = struct_tree(deep)
    depth, node = 0, tree
    while node.kind == "map":
        node = node.entries[0]["node"]
        depth += 1
    assert depth == river_struct.MAX_DEPTH and node.kind == "cut" and node.more == 2
    html = _render("{% struct value %}", value=deep)
    assert html.count('<dl class="struct-map">') == river_struct.MAX_DEPTH
    assert "2 nested values, deeper than shown here" in html


def test_wide_values_show_the_first_items_and_how_many_more():
    html = _render("{% struct value %}", value={"rows": list(range(1000)), **{f"k{i}": i for i in range(100)}})
    # The object's first MAX_ITEMS fields (the list among them), then "… N more fields".
    assert f"… {101 - river_struct.MAX_ITEMS} more fields" in html
    assert f"… {1000 - river_struct.MAX_ITEMS} more items" in html
    assert html.count('<span class="struct-number">') <= river_struct.MAX_NODES


def test_the_whole_view_has_a_node_budget():
    value = [{f"f{j}": j for j in range(30)} for _ in range(30)]  # 900 leaves, 930 nodes
    tree = struct_tree(value)
    shown = sum(1 + len(entry["node"].entries) for entry in tree.entries)
    assert shown <= river_struct.MAX_NODES
    assert tree.more > 0 or any(entry["node"].more for entry in tree.entries)
    assert "more" in _render("{% struct value %}", value=value)


def test_long_text_is_clamped_behind_show_all_and_huge_text_is_cut():
    long = "word " * 200
    html = _render("{% struct value raw=False %}", value={"note": long, "huge": "x" * 50_000})
    assert '<details class="struct-long">' in html and "Show all" in html and "Show less" in html
    assert 'class="struct-raw"' not in html  # raw=False
    assert "x" * river_struct.MAX_CHARS in html and "x" * (river_struct.MAX_CHARS + 1) not in html
    assert f"… {50_000 - river_struct.MAX_CHARS} more characters in the raw JSON" in html


def test_the_raw_json_is_cut_too():
    html = _render("{% struct value %}", value={"huge": "y" * (river_struct.RAW_MAX_CHARS + 5000)})
    assert "more characters not shown" in html
    assert len(html) < river_struct.RAW_MAX_CHARS + 2 * river_struct.MAX_CHARS


def test_json_text_inside_a_string_is_opened_up():
    tree = struct_tree({"result": json.dumps({"rows": 3, "columns": ["a"]})})
    node = tree.entries[0]["node"]
    assert node.kind == "map" and node.from_json_text
    assert [entry["label"] for entry in node.entries] == ["Rows", "Columns"]
    assert struct_tree({"text": "{not json"}).entries[0]["node"].kind == "text"


def test_empty_and_odd_values_render():
    html = _render("{% struct value %}", value={"empty": {}, "none": [], "blank": "", "big": 10**30, "pi": 3.5})
    assert "(no fields)" in html and "(empty list)" in html and "(blank)" in html
    assert str(10**30) in html and "3.5" in html
    assert "Raw JSON" in _render("{% struct value %}", value="just text")


def test_edited_arguments_show_before_and_after_per_field():
    html = _render("{% struct_diff before after 'Edited' %}",
                   before={"status": "closed", "ids": [1, 2], "note": "same", "drop": 1},
                   after={"status": "solved", "ids": [1, 2], "note": "same", "add": {"x": 1}})
    rows = re.findall(r'<tr class="struct-change-(\w+)"><th scope="row"><code>([^<]+)</code></th>(.*?)</tr>', html)
    assert [(kind, path) for kind, path, _ in rows] == [("added", "add.x"), ("removed", "drop"), ("changed", "status")]
    changed = rows[2][2]
    assert "<del>closed</del>" in changed and "<ins>solved</ins>" in changed
    assert "(not set)" in rows[0][2] and "(removed)" in rows[1][2]
    assert "Nothing changed" in _render("{% struct_diff a a %}", a={"x": 1})


def test_many_changes_are_bounded():
    before = {f"k{i}": i for i in range(500)}
    after = {f"k{i}": i + 1 for i in range(500)}
    html = _render("{% struct_diff before after %}", before=before, after=after)
    assert html.count('<tr class="struct-change-changed">') == river_struct.MAX_CHANGES
    assert f"… {500 - river_struct.MAX_CHANGES} more changes" in html


def test_an_audit_entrys_diff_renders_as_before_and_after():
    tree = struct_tree({"tool_name": "write_back", "diff": {"status": {"from": "closed", "to": "solved"}}})
    diff = tree.entries[1]["node"]
    assert diff.kind == "diff"
    assert diff.changes == [{"path": "status", "change": "changed", "old": "closed", "new": "solved"}]


# --- the pages -------------------------------------------------------------------------


@pytest.fixture
def edited_run(workspace, owner, org_admin):
    """A run whose write was approved with edited arguments: its reasoning, the call, the
    verdict and the observation, and the approval request with its edit."""
    agent = make_agent(workspace=workspace, owner=owner, name="Writer", tools=["write_back"])
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version_id=agent.current_version_id,
                                   status=Execution.Status.COMPLETED, outcome="answered", input_prompt="close them",
                                   requester=owner, requested_by=owner,
                                   trigger_payload={"source": HOSTILE, "ticket": {"id": 7}})
    steps = [
        ExecutionStep(execution=run, step_number=1, turn=1, step_type="reasoning", model_used="test/model",
                      output={"thought": "write it"}),
        ExecutionStep(execution=run, step_number=2, turn=1, step_type="tool_call", tool_name="write_back",
                      call_id="c1", input={"table": "tickets", "data": {"status": "solved", "note": HOSTILE}}),
        ExecutionStep(execution=run, step_number=3, turn=1, step_type="governance_check", tool_name="write_back",
                      call_id="c1", governance_decision="PROCEED", output={"reason": "approved by a person"}),
        ExecutionStep(execution=run, step_number=4, turn=1, step_type="observation", tool_name="write_back",
                      call_id="c1", output={"result": json.dumps({"updated": 3})}, duration_ms=12),
    ]
    ExecutionStep.objects.bulk_create(steps)
    now = timezone.now()
    ApprovalRequest.objects.create(
        workspace=workspace, execution_id=run.pk, agent_id=agent.pk, tool_name="write_back", tool_call_id="c1",
        proposed_payload={"table": "tickets", "data": {"status": "closed", "note": HOSTILE}},
        status=ApprovalRequest.Status.EDITED, resolved_by=org_admin, resolved_at=now,
        resolution_comment="Solved, not closed", expires_at=now + dt.timedelta(hours=1),
        resolution={"status": "edited_approved",
                    "modified_args": {"table": "tickets", "data": {"status": "solved", "note": HOSTILE}}})
    return run


@pytest.mark.django_db
def test_the_why_panel_shows_the_edit_the_verdict_and_the_tools_values(edited_run, owner):
    response = _client(owner).get(f"/runs/{edited_run.pk}/steps/4/why")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "Governance" in html and "PROCEED" in html and "orgadmin" in html and "Solved, not closed" in html
    # The approver's edit, per field.
    assert re.search(r'<code>data.status</code></th><td><del>closed</del></td><td><ins>solved</ins>', html)
    # The tool's arguments and result as structured views, each with its raw JSON.
    assert '<dt title="table">Table</dt>' in html
    assert "JSON text, opened up" in html and '<dt title="updated">Updated</dt>' in html
    assert html.count('<details class="struct-raw">') >= 3
    assert "Step details" in html and "Step 4 (observation) of turn 1." in html


@pytest.mark.django_db
def test_the_why_panel_is_tenant_scoped_and_bounded(edited_run, owner, outsider):
    assert _client(outsider).get(f"/runs/{edited_run.pk}/steps/4/why").status_code == 404
    assert _client(owner).get(f"/runs/{edited_run.pk}/steps/99/why").status_code == 404
    assert _client(owner).get(f"/runs/{edited_run.pk}/steps/{2**40}/why").status_code == 404
    assert "/accounts/login/" in Client().get(f"/runs/{edited_run.pk}/steps/4/why")["Location"]


@pytest.mark.django_db
def test_the_run_page_asks_the_page_for_the_panel_and_shows_the_payload_structured(edited_run, owner):
    html = _client(owner).get(f"/runs/{edited_run.pk}/").content.decode()
    assert f'data-why-url="/runs/{edited_run.pk}/steps/0/why"' in html
    assert '<dt title="ticket">Ticket</dt>' in html and "<script>alert" not in html
    assert "static/struct.css" in html or "struct.css" in html


@pytest.mark.django_db
def test_audit_entry_details_are_structured_with_the_edit_as_a_diff(org, workspace, owner):
    audit_record(organization_id=org.pk, workspace_id=workspace.pk, event_type="approval_edited", actor=owner,
                 details={"tool_name": "write_back", "comment": HOSTILE,
                          "diff": {"data": {"from": {"status": "closed"}, "to": {"status": "solved"}}}})
    html = _client(owner).get("/audit/").content.decode()
    assert '<dt title="tool_name">Tool name</dt>' in html
    assert re.search(r'<code>data.status</code></th><td><del>closed</del></td><td><ins>solved</ins>', html)
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "{'tool_name'" not in html  # no Python repr any more
    assert 'class="struct-raw"' in html
