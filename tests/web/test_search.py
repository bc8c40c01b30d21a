"""The search box's page (/search/?q=): each kind found by its words, in the current
workspace only; a query too long is a 400 naming ``q``; and the runs' search reads the
GIN index on PostgreSQL."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client

from executions.models import Execution, Session
from governance.audit import audit_record
from tests.factories import make_agent
from triggers.services import trigger_create
from web.context import SESSION_KEY

pytestmark = pytest.mark.django_db


def _page(user, workspace) -> Client:
    client = Client()
    client.force_login(user)
    session = client.session
    session[SESSION_KEY] = workspace.pk
    session.save()
    return client


def _run(agent, **fields) -> Execution:
    return Execution.objects.create(workspace=agent.workspace, agent=agent, agent_version=agent.versions.get(),
                                    **fields)


def _run_ids(response) -> set[int]:
    return {int(n) for n in re.findall(r'data-run-id="(\d+)"', response.content.decode())}


@pytest.fixture
def found(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Refund Helper")
    return {
        "agent": agent,
        "by_answer": _run(agent, input_prompt="How many tickets?", status=Execution.Status.COMPLETED,
                          result={"summary": "There were 42 marmalade tickets yesterday."}),
        "by_prompt": _run(agent, input_prompt="Summarise the quokka incidents", requester=owner),
        "other": _run(agent, input_prompt="Nothing in common"),
    }


def test_a_run_is_found_by_a_word_of_its_answer(found, owner, workspace):
    response = _page(owner, workspace).get("/search/", {"q": "marmalade"})
    assert response.status_code == 200
    assert _run_ids(response) == {found["by_answer"].pk}
    assert f'href="/runs/{found["by_answer"].pk}/"' in response.content.decode()


def test_a_word_prefix_and_every_word_must_match(found, owner, workspace):
    client = _page(owner, workspace)
    assert _run_ids(client.get("/search/", {"q": "quok"})) == {found["by_prompt"].pk}
    assert _run_ids(client.get("/search/", {"q": "quokka marmalade"})) == set()


def test_a_run_is_found_by_its_id_agent_and_requester(found, owner, workspace):
    client = _page(owner, workspace)
    assert found["other"].pk in _run_ids(client.get("/search/", {"q": f"#{found['other'].pk}"}))
    assert _run_ids(client.get("/search/", {"q": "refund helper"})) == {
        found["by_answer"].pk, found["by_prompt"].pk, found["other"].pk}
    assert _run_ids(client.get("/search/", {"q": owner.username})) == {found["by_prompt"].pk}


def test_agents_conversations_triggers_and_audit_entries_are_found(found, owner, workspace):
    agent = found["agent"]
    chat = Session.objects.create(workspace=workspace, agent=agent, created_by=owner, title="Wombat budget chat")
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Nightly wombat report",
                             trigger_type="api")
    audit_record(event_type="agent_lifecycle_changed", organization_id=workspace.organization_id,
                 workspace_id=workspace.pk, actor=owner, agent_id=agent.pk, details={"note": "wombat paused"})
    client = _page(owner, workspace)
    page = client.get("/search/", {"q": "wombat"}).content.decode()
    assert f'href="/sessions/{chat.pk}/"' in page
    assert f'href="/triggers/{trigger.pk}/"' in page
    assert "Agent activated, paused or archived" in page
    page = client.get("/search/", {"q": "refund"}).content.decode()
    assert f'href="/agents/{agent.pk}/"' in page


def test_another_workspaces_rows_are_never_found(found, workspace, other_workspace, owner, outsider):
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Marmalade Agent")
    their_run = _run(theirs, input_prompt="marmalade", result={"summary": "marmalade"})
    Session.objects.create(workspace=other_workspace, agent=theirs, created_by=outsider, title="marmalade chat")
    trigger_create(actor=outsider, workspace=other_workspace, agent=theirs, name="marmalade trigger",
                   trigger_type="api")
    mine = _page(owner, workspace).get("/search/", {"q": "marmalade"})
    assert _run_ids(mine) == {found["by_answer"].pk}
    body = mine.content.decode()
    assert str(theirs.pk) not in body and "marmalade chat" not in body and "marmalade trigger" not in body
    # The outsider's own search sees their run, never ours (also not by id).
    theirs_page = _page(outsider, other_workspace)
    assert _run_ids(theirs_page.get("/search/", {"q": "marmalade"})) == {their_run.pk}
    assert _run_ids(theirs_page.get("/search/", {"q": str(found["by_answer"].pk)})) == set()


def test_a_conversation_is_found_only_by_its_owner(found, workspace, owner, member):
    Session.objects.create(workspace=workspace, agent=found["agent"], created_by=owner, title="Private platypus")
    assert "Private platypus" not in _page(member, workspace).get("/search/", {"q": "platypus"}).content.decode()


def test_a_query_too_long_is_a_400_naming_q(owner, workspace):
    response = _page(owner, workspace).get("/search/", {"q": "x" * 201})
    assert response.status_code == 400
    assert 'aria-invalid="true"' in response.content.decode() and "q:" in response.content.decode()


def test_punctuation_alone_finds_nothing_and_is_no_error(found, owner, workspace):
    response = _page(owner, workspace).get("/search/", {"q": "'&|!:*()"})
    assert response.status_code == 200
    assert _run_ids(response) == set()


def test_the_frame_has_the_search_box(owner, workspace):
    page = _page(owner, workspace).get("/runs/").content.decode()
    assert 'role="search"' in page and 'data-search-box' in page and 'action="/search/"' in page


@pytest.mark.postgres(reason="the GIN index exists on PostgreSQL only")
def test_the_runs_search_reads_the_gin_index(found, owner, workspace):
    from common.search import query_words, text_match
    from executions.models import SEARCHED_FIELDS, SEARCHED_LOOKUPS

    rows = Execution.objects.filter(text_match(SEARCHED_FIELDS, SEARCHED_LOOKUPS, query_words("marmalade"),
                                               stored="search_vector"))
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = rows.explain()
    assert "execution_search_vector_idx" in plan and "to_tsvector" not in plan
