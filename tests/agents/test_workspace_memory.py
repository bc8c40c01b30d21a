"""Workspace memory: written at the end of a completed run as the workspace's mode and
the requester's consent allow, found by a later run's ``search_memory``, never across
workspaces or users; visible and deletable over the API."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from agents.models import WorkspaceMemory
from agents.selectors import agent_memories_for_user, memory_keywords, memory_search
from agents.services import memory_consent_set
from executions import tasks
from executions.models import ExecutionStep
from executions.services import execution_post_process, execution_run_segment, execution_start, person_run_request
from governance.models import AuditLogEntry, WorkspaceSettings
from governance.services import workspace_memory_mode_set
from tenancy.models import Membership
from tenancy.permissions import Role
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How many open tickets does the Oslo office have?"
ANSWER = "The Oslo office has 17 open tickets, 4 of them urgent."


@pytest.fixture(autouse=True)
def quiet_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=["search_memory"], action_level="read_only")


@pytest.fixture
def other_agent(other_workspace, outsider):
    return make_agent(workspace=other_workspace, owner=outsider, tools=["search_memory"], action_level="read_only")


@pytest.fixture
def colleague(workspace):
    user = get_user_model().objects.create_user(username="colleague", password="pw-colleague")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ANALYST)
    return user


def _answered(agent, user, question=QUESTION, answer=ANSWER) -> int:
    """A completed run, post-processed (which writes its memory)."""
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=user, prompt=question))
    assert execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply(answer)])) == "success"
    assert execution_post_process(execution_id=execution.pk)
    return execution.pk


def _searched(agent, user, query: str) -> dict:
    """A run that calls search_memory once; its observation's result."""
    execution = execution_start(agent=agent, request=person_run_request(
        agent=agent, user=user, prompt="And what about urgent ones?"))
    llm = ScriptedLLM([tool_reply("search_memory", {"query": query}), text_reply("done")])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    step = ExecutionStep.objects.get(execution_id=execution.pk, step_type="observation", tool_name="search_memory")
    assert step.status == "completed", step.error
    return step.output["result"]


def _shared(workspace, actor):
    workspace_memory_mode_set(workspace=workspace, mode=WorkspaceSettings.MemoryMode.SHARED, actor=actor)


def test_a_shared_memory_is_found_by_the_next_run_and_never_by_another_workspace(
        workspace, owner, agent, other_workspace, outsider, other_agent, colleague):
    _shared(workspace, owner)
    _shared(other_workspace, outsider)
    first = _answered(agent, owner)

    found = _searched(agent, colleague, "open tickets Oslo")
    assert found["total_results"] == 1
    hit = found["matches"][0]
    assert hit["source_execution_id"] == first and hit["personal"] is False and hit["score"] == 1.0
    assert f"Question: {QUESTION}" in hit["content"] and f"Answer: {ANSWER}" in hit["content"]
    assert hit["agent_id"] == str(agent.pk)

    assert _searched(other_agent, outsider, "open tickets Oslo") == {"matches": [], "total_results": 0}


def test_a_personal_memory_is_found_only_by_its_users_runs(workspace, owner, agent, colleague):
    memory_consent_set(workspace=workspace, user=owner, personal=True)
    first = _answered(agent, owner)

    memory = WorkspaceMemory.objects.get(source_execution_id=first)
    assert memory.user_id == owner.pk and memory.personal
    assert [m["source_execution_id"] for m in _searched(agent, owner, "Oslo tickets")["matches"]] == [first]
    assert _searched(agent, colleague, "Oslo tickets")["total_results"] == 0


def test_without_consent_or_with_memory_off_nothing_is_written(workspace, owner, agent):
    # The default mode is personal, and a user has not consented until they say so.
    assert WorkspaceSettings.objects.filter(workspace=workspace).count() == 0
    _answered(agent, owner)
    assert WorkspaceMemory.objects.count() == 0

    memory_consent_set(workspace=workspace, user=owner, personal=True)
    workspace_memory_mode_set(workspace=workspace, mode=WorkspaceSettings.MemoryMode.OFF, actor=owner)
    _answered(agent, owner)
    assert WorkspaceMemory.objects.count() == 0

    memory_consent_set(workspace=workspace, user=owner, personal=False)
    workspace_memory_mode_set(workspace=workspace, mode=WorkspaceSettings.MemoryMode.PERSONAL, actor=owner)
    _answered(agent, owner)
    assert WorkspaceMemory.objects.count() == 0


def test_a_workspace_keeps_its_newest_memories_up_to_the_cap(workspace, other_workspace, owner, outsider, agent,
                                                               other_agent, settings):
    settings.RIVER_MEMORY_MAX_PER_WORKSPACE = 3
    _shared(workspace, owner)
    _shared(other_workspace, outsider)
    theirs = _answered(other_agent, outsider, "Their question?", "Their answer.")
    runs = [_answered(agent, owner, f"Question number {i}?", f"Answer number {i}.") for i in range(5)]
    kept = list(WorkspaceMemory.objects.filter(workspace=workspace).values_list("source_execution_id", flat=True))
    assert kept == runs[:1:-1]  # the three newest, newest first; the two oldest are forgotten
    assert WorkspaceMemory.objects.filter(workspace=other_workspace, source_execution_id=theirs).exists()
    # The next run's search finds only what is kept.
    assert [m["source_execution_id"] for m in _searched(agent, owner, "question number")["matches"]] == runs[:1:-1]


def test_failed_runs_and_a_second_post_processing_write_nothing_more(workspace, owner, agent):
    _shared(workspace, owner)
    failed = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt=QUESTION))
    llm = ScriptedLLM([tool_reply("not_a_tool", {}, call_id=f"c{i}") for i in range(3)] + [text_reply("")] * 5)
    assert execution_run_segment(execution_id=failed.pk, llm=llm) != "success"
    execution_post_process(execution_id=failed.pk)
    assert WorkspaceMemory.objects.count() == 0

    done = _answered(agent, owner)
    assert execution_post_process(execution_id=done) is False  # claimed once
    assert WorkspaceMemory.objects.filter(source_execution_id=done).count() == 1


def test_query_facts_are_remembered_with_the_answer(workspace, owner):
    from tests.executions import engine_support  # noqa: F401 - registers the test tools

    _shared(workspace, owner)
    agent = make_agent(workspace=workspace, owner=owner, tools=["search_memory"])
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt=QUESTION))
    assert execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply(ANSWER)])) == "success"
    # A completed execute_query observation, as a data run leaves one.
    ExecutionStep.objects.create(execution=execution, step_number=99, turn=1, step_type="observation",
                                 tool_name="execute_query", status="completed",
                                 input={"sql": "SELECT count(*) FROM tickets WHERE office = 'Oslo'"},
                                 output={"result": {"total_rows": 1}})
    execution_post_process(execution_id=execution.pk)
    content = WorkspaceMemory.objects.get(source_execution_id=execution.pk).content
    assert "Fact: query SELECT count(*) FROM tickets WHERE office = 'Oslo' returned 1 row(s)" in content


def test_search_ranks_by_words_held_then_recency_and_is_bounded(workspace, owner, agent):
    def remember(text):
        return WorkspaceMemory.objects.create(workspace=workspace, agent=agent, content=text,
                                              keywords=" " + " ".join(memory_keywords(text)) + " ")

    older_full = remember("Oslo has 17 open tickets")
    remember("Bergen has 3 open tickets")
    newer_full = remember("Oslo open tickets: 18 today")
    hits = memory_search(workspace_id=workspace.pk, user_id=owner.pk, query="open tickets in Oslo", top_k=5)
    assert [h.memory.pk for h in hits][:2] == [newer_full.pk, older_full.pk]
    assert hits[0].score == 1.0 and hits[-1].score < 1.0
    assert memory_search(workspace_id=workspace.pk, user_id=owner.pk, query="the of and", top_k=5) == []
    assert memory_keywords("Tickets, TICKETS and the ticket's class in Tromsø") == ["ticket", "class", "tromsø"]


# --- the API --------------------------------------------------------------------------------


@pytest.fixture
def memories(workspace, owner, colleague, agent, other_workspace):
    shared = WorkspaceMemory.objects.create(workspace=workspace, agent=agent, content="shared fact",
                                            keywords=" shared fact ")
    mine = WorkspaceMemory.objects.create(workspace=workspace, user=owner, content="my fact", keywords=" fact ")
    theirs = WorkspaceMemory.objects.create(workspace=workspace, user=colleague, content="their fact",
                                            keywords=" fact ")
    elsewhere = WorkspaceMemory.objects.create(workspace=other_workspace, content="far fact", keywords=" fact ")
    return {"shared": shared, "mine": mine, "theirs": theirs, "elsewhere": elsewhere}


def test_list_shows_shared_and_own_personal_memories_only(api_client_for, owner, agent, memories):
    client = api_client_for(owner)
    listed = client.get("/api/v1/memory/")
    assert listed.status_code == 200
    assert {m["id"] for m in listed.json()["results"]} == {memories["shared"].pk, memories["mine"].pk}
    by_agent = client.get(f"/api/v1/memory/?agent={agent.pk}").json()["results"]
    assert [m["id"] for m in by_agent] == [memories["shared"].pk]
    assert by_agent[0]["agent"] == str(agent.pk) and by_agent[0]["personal"] is False
    assert [m["id"] for m in client.get("/api/v1/memory/?q=shared").json()["results"]] == [memories["shared"].pk]
    assert [m.pk for m in agent_memories_for_user(user=owner, agent=agent)] == [memories["shared"].pk]


def test_bad_filters_are_400_naming_the_field(api_client_for, owner, memories):
    client = api_client_for(owner)
    refused = client.get("/api/v1/memory/?workspace=abc")
    assert refused.status_code == 400 and "workspace" in refused.json()["error"]["details"]
    assert client.get("/api/v1/memory/?q=" + "x" * 500).status_code == 400
    assert client.get("/api/v1/memory/99999999999999999999999/").status_code == 404


def test_outsiders_and_other_users_get_404(api_client_for, outsider, colleague, memories, agent):
    for memory in ("shared", "mine", "theirs"):
        assert api_client_for(outsider).get(f"/api/v1/memory/{memories[memory].pk}/").status_code == 404
        assert api_client_for(outsider).delete(f"/api/v1/memory/{memories[memory].pk}/").status_code == 404
    assert api_client_for(outsider).get(f"/api/v1/memory/?agent={agent.pk}").status_code == 404
    assert api_client_for(colleague).get(f"/api/v1/memory/{memories['mine'].pk}/").status_code == 404
    assert api_client_for(colleague).delete(f"/api/v1/memory/{memories['mine'].pk}/").status_code == 404
    assert WorkspaceMemory.objects.count() == 4


def test_delete_own_personal_memory_and_shared_ones_with_agent_create(api_client_for, owner, colleague, memories):
    assert api_client_for(colleague).delete(f"/api/v1/memory/{memories['theirs'].pk}/").status_code == 204
    # An analyst may not forget what the workspace shares; an admin may.
    assert api_client_for(colleague).delete(f"/api/v1/memory/{memories['shared'].pk}/").status_code == 403
    assert api_client_for(owner).delete(f"/api/v1/memory/{memories['shared'].pk}/").status_code == 204
    assert set(WorkspaceMemory.objects.values_list("pk", flat=True)) == {memories["mine"].pk,
                                                                         memories["elsewhere"].pk}
    audited = AuditLogEntry.objects.filter(event_type="memory_deleted").order_by("id")
    assert [e.details["memory_id"] for e in audited] == [memories["theirs"].pk, memories["shared"].pk]
    assert all("content" not in e.details for e in audited)


def test_settings_consent_is_the_callers_and_the_mode_needs_an_admin(api_client_for, workspace, owner, colleague,
                                                                     other_workspace):
    colleague_client = api_client_for(colleague)
    assert colleague_client.get(f"/api/v1/memory/settings/?workspace={workspace.pk}").json() == {
        "workspace": workspace.pk, "mode": "personal", "personal_consent": False}
    consented = colleague_client.patch("/api/v1/memory/settings/", {"workspace": workspace.pk,
                                                                   "personal_consent": True}, format="json")
    assert consented.status_code == 200 and consented.json()["personal_consent"] is True
    refused = colleague_client.patch("/api/v1/memory/settings/", {"workspace": workspace.pk, "mode": "shared",
                                                                 "personal_consent": False}, format="json")
    assert refused.status_code == 403
    # Nothing of the refused request was written.
    assert colleague_client.get(f"/api/v1/memory/settings/?workspace={workspace.pk}").json()["personal_consent"]
    owner_client = api_client_for(owner)
    assert owner_client.get(f"/api/v1/memory/settings/?workspace={workspace.pk}").json()["personal_consent"] is False
    changed = owner_client.patch("/api/v1/memory/settings/", {"workspace": workspace.pk, "mode": "shared"},
                                 format="json")
    assert changed.status_code == 200 and changed.json()["mode"] == "shared"
    assert AuditLogEntry.objects.filter(event_type="memory_mode_changed").count() == 1
    bad = owner_client.patch("/api/v1/memory/settings/", {"workspace": workspace.pk, "mode": "everyone"},
                             format="json")
    assert bad.status_code == 400 and "mode" in bad.json()["error"]["details"]
    unknown = owner_client.patch("/api/v1/memory/settings/", {"workspace": workspace.pk, "colour": "red"},
                                 format="json")
    assert unknown.status_code == 400 and "colour" in unknown.json()["error"]["details"]
    assert owner_client.get(f"/api/v1/memory/settings/?workspace={other_workspace.pk}").status_code == 404
    assert owner_client.get("/api/v1/memory/settings/").status_code == 400


def test_a_run_the_workspace_keeps_no_memory_of_is_not_read_for_one(workspace, owner, agent):
    """Whether the workspace keeps a memory of the run is asked first: with memory off, or
    personal without the user's consent, the run's question and query facts are not read."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from executions.runend import RunEnded
    from executions.services.memory import workspace_memory_on_run_end
    from rivercore.outcome import Outcome
    from rivercore.types.runs import RunStatus

    def ended(execution_id: int) -> RunEnded:
        return RunEnded(execution_id=execution_id, workspace_id=workspace.pk, agent_id=agent.pk,
                        status=RunStatus.COMPLETED, summary=ANSWER, trigger_type="manual", trigger_id=None,
                        parent_execution_id=None, requested_by_id=owner.pk, outcome=Outcome.ANSWERED)

    run = _answered(agent, owner)  # personal, no consent: nothing kept
    with CaptureQueriesContext(connection) as queries:
        workspace_memory_on_run_end(ended(run))
    read = " ".join(q["sql"] for q in queries.captured_queries)
    assert "executions_execution" not in read and "executions_executionstep" not in read
    assert WorkspaceMemory.objects.count() == 0

    _shared(workspace, owner)
    with CaptureQueriesContext(connection) as queries:
        workspace_memory_on_run_end(ended(run))
    read = " ".join(q["sql"] for q in queries.captured_queries)
    assert "executions_execution" in read and "executions_executionstep" in read
    assert WorkspaceMemory.objects.get().source_execution_id == run
