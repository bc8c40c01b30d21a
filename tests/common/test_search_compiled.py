"""The search box's reads compiled once per process (common.search.CompiledSearch): one
compiled query serves every user, workspace and query after the first, and each call
still sees only its own workspace's rows; a signed-out user finds nothing; hostile text
(tsquery syntax, unicode, NUL, a 5,000-character word) is no error."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from agents.selectors import agents_for_user, agents_search
from common.search import CompiledSearch, ranked, text_match
from executions.models import Execution
from executions.selectors import executions_search
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def _run(agent, prompt: str) -> int:
    return Execution.objects.create(workspace=agent.workspace, agent=agent, agent_version=agent.versions.get(),
                                    input_prompt=prompt).pk


@pytest.fixture
def two_workspaces(workspace, other_workspace, owner, outsider):
    mine = make_agent(workspace=workspace, owner=owner, name="Pelican desk")
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Pelican desk")
    return {"mine": _run(mine, "pelican sightings today"), "theirs": _run(theirs, "pelican sightings today")}


def _found(user, workspace, text: str) -> set[int]:
    return {run.pk for run in executions_search(user=user, workspace=workspace, text=text, limit=10)}


def test_each_user_finds_only_their_workspaces_runs_with_the_same_compiled_query(
        two_workspaces, owner, outsider, workspace, other_workspace):
    assert _found(owner, workspace, "sightings") == {two_workspaces["mine"]}
    assert _found(outsider, other_workspace, "sight") == {two_workspaces["theirs"]}
    # A user asking for a workspace that is not theirs gets nothing, compiled or not.
    assert _found(outsider, workspace, "sightings") == set()
    assert _found(owner, other_workspace, "sightings") == set()


def test_a_signed_out_user_finds_nothing(two_workspaces, workspace):
    assert _found(AnonymousUser(), workspace, "sightings") == set()
    assert agents_search(user=AnonymousUser(), workspace=workspace, text="pelican", limit=10) == []


@pytest.mark.postgres(reason="the compiled query is PostgreSQL's; SQLite builds each LIKE query afresh")
def test_the_query_is_built_once_and_run_with_each_callers_values(
        two_workspaces, owner, outsider, workspace, other_workspace):
    built = []

    def build(*, user, workspace_id, words, limit):
        built.append(words)
        rows = agents_for_user(user=user, workspace_id=workspace_id).filter(text_match(("name",), ("name",), words))
        return ranked(rows, ("name",), words, tiebreak="name")[:limit]

    search = CompiledSearch(build)
    mine = search.rows(user=owner, workspace_id=workspace.pk, words=["pelican"], limit=5)
    theirs = search.rows(user=outsider, workspace_id=other_workspace.pk, words=["desk", "pel"], limit=5)
    refused = search.rows(user=outsider, workspace_id=workspace.pk, words=["pelican"], limit=5)
    assert len(built) == 1
    assert [a.workspace_id for a in mine] == [workspace.pk] and [a.workspace_id for a in theirs] == [other_workspace.pk]
    assert refused == []


@pytest.mark.parametrize("text", ["'&|!:*()", "<-> !x", "café naïve 日本語", "\x00 pelican", "x" * 5000, "#-1",
                                  "99999999999999999999999", "١٢٣"])
def test_hostile_text_is_no_error(two_workspaces, owner, workspace, text):
    found = _found(owner, workspace, text)
    assert found <= {two_workspaces["mine"]}
