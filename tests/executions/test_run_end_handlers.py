"""The run-end extension point (``executions.runend``): the apps above executions learn
of every run's end once, inside post-processing's transaction, and a failing handler
never blocks the others or the run's own post-processing."""

from __future__ import annotations

import pytest

from agents.models import AgentMemory
from executions import runend, services
from executions.models import Execution
from rivercore.types.runs import RunStatus
from tests.factories import ScriptedLLM, make_agent, text_reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def handlers(monkeypatch):
    """A private registry for the test, so the apps' own handlers are left as they are."""
    registry: dict = {}
    monkeypatch.setattr(runend, "_handlers", registry)
    return registry


def finished_run(workspace, owner) -> Execution:
    agent = make_agent(workspace=workspace, owner=owner, name="Ender")
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Say done"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("Done and dusted.")]))
    execution.refresh_from_db()
    return execution


def test_every_handler_learns_of_a_run_end_once(workspace, owner, handlers):
    seen: list[runend.RunEnded] = []
    runend.run_end_handler_register("first", seen.append)
    runend.run_end_handler_register("second", seen.append)
    execution = finished_run(workspace, owner)

    assert services.execution_post_process(execution_id=execution.pk) is True
    assert services.execution_post_process(execution_id=execution.pk) is False

    assert len(seen) == 2
    ended = seen[0]
    assert ended.execution_id == execution.pk and ended.status is RunStatus.COMPLETED
    assert ended.workspace_id == execution.workspace_id and ended.agent_id == execution.agent_id
    assert ended.summary == "Done and dusted." and ended.requested_by_id == owner.pk
    assert ended.trigger_type == "manual" and ended.parent_execution_id is None


def test_registering_a_name_again_replaces_the_handler(workspace, owner, handlers):
    calls: list[str] = []
    runend.run_end_handler_register("pipelines", lambda ended: calls.append("old"))
    runend.run_end_handler_register("pipelines", lambda ended: calls.append("new"))

    services.execution_post_process(execution_id=finished_run(workspace, owner).pk)

    assert calls == ["new"]


def test_a_failing_handler_is_logged_and_rolls_back_only_itself(workspace, owner, handlers, caplog):
    def broken(ended):
        AgentMemory.objects.filter(execution_id=ended.execution_id).delete()  # undone with its savepoint
        raise RuntimeError("boom")

    seen: list[int] = []
    runend.run_end_handler_register("broken", broken)
    runend.run_end_handler_register("fine", lambda ended: seen.append(ended.execution_id))
    execution = finished_run(workspace, owner)

    assert services.execution_post_process(execution_id=execution.pk) is True

    assert seen == [execution.pk]
    assert AgentMemory.objects.filter(execution_id=execution.pk).count() == 1
    execution.refresh_from_db()
    assert execution.post_processed_at is not None
    assert "run-end handler broken failed" in caplog.text


def test_a_handler_that_does_not_apply_is_not_called_and_costs_no_savepoint(workspace, owner, handlers):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    calls: list[str] = []
    runend.run_end_handler_register("children", lambda ended: calls.append("children"),
                                    applies=lambda ended: ended.parent_execution_id is not None)
    runend.run_end_handler_register("all", lambda ended: calls.append("all"))
    execution = finished_run(workspace, owner)

    with CaptureQueriesContext(connection) as queries:
        services.execution_post_process(execution_id=execution.pk)

    assert calls == ["all"]  # the top-level run has no parent
    savepoints = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]
    with CaptureQueriesContext(connection) as queries_one:
        runend.run_end_handlers_call(runend.RunEnded(
            execution_id=execution.pk, workspace_id=workspace.pk, agent_id=execution.agent_id,
            status=RunStatus.COMPLETED, summary="", trigger_type="manual", trigger_id=None,
            parent_execution_id=None, requested_by_id=owner.pk))
    assert calls == ["all", "all"]
    assert sum(q["sql"].startswith("SAVEPOINT") for q in queries_one.captured_queries) == 1  # "all"'s only
    assert savepoints  # post-processing's own best-effort steps keep theirs


def test_an_observing_handler_runs_after_the_commit_and_not_at_all_on_a_rollback(
        workspace, owner, handlers, django_capture_on_commit_callbacks):
    from django.db import transaction

    seen: list[int] = []
    runend.run_end_handler_register("metrics", lambda ended: seen.append(ended.execution_id), after_commit=True)
    execution = finished_run(workspace, owner)
    ended = runend.RunEnded(
        execution_id=execution.pk, workspace_id=workspace.pk, agent_id=execution.agent_id,
        status=RunStatus.COMPLETED, summary="", trigger_type="manual", trigger_id=None,
        parent_execution_id=None, requested_by_id=owner.pk)

    class RolledBack(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RolledBack), transaction.atomic():
            runend.run_end_handlers_call(ended)
            raise RolledBack
    assert callbacks == [] and seen == []

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with transaction.atomic():
            runend.run_end_handlers_call(ended)
        assert seen == []  # not inside the transaction
    assert len(callbacks) == 1 and seen == [execution.pk]
