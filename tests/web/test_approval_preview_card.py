"""The effect preview on the approval card (issue 29 §1): the before/after table, the
stale-preview message, the edit re-preview endpoint, the ceiling field; hostile input
gets a 4xx inside the card, never a 500."""

from __future__ import annotations

import json
import re
import sqlite3
from unittest import mock

import pytest
from django.test import Client

from datasources.services import data_source_discover
from executions import services, tasks
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import sqlite_count
from tests.factories import ScriptedLLM, make_agent, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)
HTMX = {"HTTP_HX_REQUEST": "true"}
CLOSE = {"table_name": "tickets", "operation": "update", "data": {"status": "closed"},
         "conditions": {"status": "open", "priority": "high"}}


@pytest.fixture
def paused(workspace, owner, sqlite_source):
    data_source_discover(data_source=sqlite_source)
    agent = make_agent(workspace=workspace, owner=owner, tools=["write_back"], action_level="act_with_approval",
                       require_approval_for=["write_back"], approver_roles=["admin", "editor"],
                       data_sources=[sqlite_source])
    with mock.patch.object(tasks.run_segment, "delay"), mock.patch.object(tasks.post_process, "delay"), \
            mock.patch.object(governance_tasks.notify_approval, "delay"):
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="Close them"))
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([tool_reply(
            "write_back", {"data_source_id": sqlite_source.pk, **CLOSE})]))
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approval.source = sqlite_source
    return approval


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_card_shows_the_effect_table_count_and_fingerprint(paused, editor):
    html = browser(editor).get(f"/approvals/{paused.pk}/").content.decode()

    assert "3 rows will change in tickets: status open → closed." in html
    rows = re.findall(r'<tr><th scope="row">(id \d+)</th><td><del>open</del> → <ins>closed</ins></td></tr>', html)
    assert rows == ["id 1", "id 2", "id 3"]
    assert "3 rows in all" in html
    assert f'title="{paused.preview["fingerprint"]}">{paused.preview["fingerprint"][:12]}</code>' in html
    assert f'name="preview_fingerprint" value="{paused.preview["fingerprint"]}"' in html
    assert 'name="max_rows"' in html


def test_a_stale_preview_is_refused_inside_the_card_with_what_changed(paused, editor, sqlite_file):
    conn = sqlite3.connect(sqlite_file)
    conn.execute("UPDATE tickets SET status = 'pending' WHERE id = 1")
    conn.commit()
    conn.close()

    response = browser(editor).post(f"/approvals/{paused.pk}/resolve",
                                    {"decision": "approved", "preview_fingerprint": paused.preview["fingerprint"]},
                                    **HTMX)

    assert response.status_code == 409
    html = response.content.decode()
    assert html.count("The data changed since the preview: 1 row no longer matches.") == 1  # once, the note
    assert html.count('role="alert"') == 2  # the error box and the note, not the same words twice
    assert "Nothing was decided: the effect changed." in html
    assert "2 rows will change in tickets" in html
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'closed'") == 1


def test_the_edit_preview_endpoint_answers_the_fragment(paused, editor, sqlite_file):
    edited = {"data_source_id": paused.source.pk, **CLOSE, "conditions": {"id": [2]}}
    response = browser(editor).post(f"/approvals/{paused.pk}/preview", {"modified_args": json.dumps(edited)}, **HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert "data-effect-preview" in html and "Effect of these arguments" in html
    assert "1 row will change in tickets: status open → closed." in html
    paused.refresh_from_db()
    assert f'name="preview_fingerprint" value="{paused.preview_edit["fingerprint"]}"' in html
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'closed'") == 1


@pytest.mark.parametrize("text", ["not json", "[1, 2]", json.dumps({"table_name": "tickets; DROP TABLE tickets"}),
                                  ""])
def test_hostile_edits_get_a_4xx_fragment(paused, editor, sqlite_file, text):
    response = browser(editor).post(f"/approvals/{paused.pk}/preview", {"modified_args": text}, **HTMX)
    assert response.status_code == 400
    assert 'class="approval-error" role="alert"' in response.content.decode()
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets") == 6


def test_a_bad_ceiling_is_a_form_error(paused, editor):
    response = browser(editor).post(f"/approvals/{paused.pk}/resolve", {"decision": "approved", "max_rows": "-3"},
                                    **HTMX)
    assert response.status_code == 400
    assert "max_rows" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=paused.pk).status == ApprovalRequest.Status.PENDING


def test_the_requester_and_outsiders_cannot_preview(paused, owner, outsider):
    body = {"modified_args": json.dumps({"data_source_id": paused.source.pk, **CLOSE})}
    assert browser(owner).post(f"/approvals/{paused.pk}/preview", body, **HTMX).status_code == 403
    assert browser(outsider).post(f"/approvals/{paused.pk}/preview", body, **HTMX).status_code == 404
