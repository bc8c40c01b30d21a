"""``queued_at`` is when the run was first queued: a resume (an answer, a decision) never
moves it, so a run that waited overnight stays in the day it was asked."""

from __future__ import annotations

from datetime import timedelta

import pytest

from executions import services
from executions.models import Execution
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db

QUESTION = {"interaction_type": "clarification_request", "message": "Which one?"}


def test_queued_at_and_started_at_do_not_move_when_a_run_resumes(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["ask_user"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="ask me"))
    yesterday = execution.queued_at - timedelta(days=1)
    Execution.objects.filter(pk=execution.pk).update(queued_at=yesterday)
    llm = ScriptedLLM([tool_reply("ask_user", QUESTION, "q1"), text_reply("done")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_interaction"
    first_start = Execution.objects.get(pk=execution.pk).started_at

    services.execution_respond(execution=execution, user=owner, user_response="that one")
    resumed = Execution.objects.get(pk=execution.pk)
    assert resumed.status == Execution.Status.QUEUED
    assert resumed.queued_at == yesterday
    assert resumed.published_at > yesterday  # the watchdog's lost-message clock did restart

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    ended = Execution.objects.get(pk=execution.pk)
    assert (ended.queued_at, ended.started_at) == (yesterday, first_start)
