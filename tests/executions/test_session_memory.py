"""Memory through sessions (docs/memory.md, docs/sessions.md): what one session's run
learned, with the user's consent, is found by the next session's run of that user
(``search_memory``), and never by a session in another workspace."""

from __future__ import annotations

import pytest

from agents.services import memory_consent_set
from executions import services, tasks
from executions.models import Execution, ExecutionStep
from executions.services import sessions
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "How many open tickets does the Oslo office have?"
ANSWER = "The Oslo office has 17 open tickets, 4 of them urgent."


@pytest.fixture(autouse=True)
def quiet_queue(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _ask(session, user, content: str, replies: list) -> Execution:
    _message, run = sessions.session_message_send(session=session, user=user, content=content)
    assert services.execution_run_segment(execution_id=run.pk, llm=ScriptedLLM(replies)) == "success"
    assert services.execution_post_process(execution_id=run.pk) is True
    return run


def _memory_search(run: Execution) -> dict:
    step = ExecutionStep.objects.get(execution=run, step_type="observation", tool_name="search_memory")
    assert step.status == "completed", step.error
    return step.output["result"]


def test_memory_of_one_session_is_found_by_the_next_and_never_by_another_workspace(
        workspace, owner, other_workspace, outsider):
    agent = make_agent(workspace=workspace, owner=owner, tools=["search_memory"], action_level="read_only")
    theirs = make_agent(workspace=other_workspace, owner=outsider, tools=["search_memory"], action_level="read_only")
    memory_consent_set(workspace=workspace, user=owner, personal=True)
    memory_consent_set(workspace=other_workspace, user=outsider, personal=True)

    first = sessions.session_create(workspace=workspace, agent=agent, user=owner)
    _ask(first, owner, QUESTION, [text_reply(ANSWER)])

    second = sessions.session_create(workspace=workspace, agent=agent, user=owner)
    run = _ask(second, owner, "Remind me about Oslo", [tool_reply("search_memory", {"query": "open tickets Oslo"}),
                                                      text_reply("17 open.")])
    found = _memory_search(run)
    assert found["total_results"] == 1 and ANSWER in found["matches"][0]["content"]
    assert found["matches"][0]["personal"] is True

    elsewhere = sessions.session_create(workspace=other_workspace, agent=theirs, user=outsider)
    run = _ask(elsewhere, outsider, "Oslo?", [tool_reply("search_memory", {"query": "open tickets Oslo"}),
                                             text_reply("Nothing known.")])
    assert _memory_search(run)["total_results"] == 0
