"""Workflow triggers (pipelines): a run's end hands off durably to the stages that follow
its agent and status; each stage is its own run as its trigger's identity, carrying a
reference to the upstream run; cycles are refused when configured, depth is limited
at run time, and a failed hand-off is retried without ever starting twice."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError
from django.test import override_settings
from django.utils import timezone

from executions import services as execution_services
from executions.models import Execution
from executions.services.load import request_build
from rivercore.errors import InvalidInput
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.outcome import NO_ANSWER_NOTE
from tests.factories import ScriptedLLM, make_agent, text_reply
from triggers import tasks
from triggers.models import PipelineHandoff, TriggerFiring
from triggers.pipelines import pipeline_handoff_process, pipeline_handoffs_retry, pipeline_run_ended
from triggers.services import trigger_update
from triggers.types import config_public

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def synchronous(django_capture_on_commit_callbacks):
    """No broker: a run's task message is dropped (the test drives the run itself) and
    a hand-off's task runs at once, after the commit that wrote it, as a worker would."""
    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"), \
            mock.patch.object(tasks.pipeline_handoff, "delay",
                              side_effect=lambda handoff_id: tasks.pipeline_handoff(handoff_id)):
        yield


@pytest.fixture
def agents(workspace, owner):
    return [make_agent(workspace=workspace, owner=owner, name=name) for name in ("Collect", "Analyse", "Report")]


def follow(make_trigger, downstream, upstream, name=None, **config):
    return make_trigger(name=name or f"after-{upstream.name}", agent=downstream, trigger_type="workflow",
                        prompt="Continue from run {{ payload.upstream.execution_id }}: {{ payload.upstream.summary }}",
                        config={"upstream_agent": str(upstream.pk), **config})


def drive(execution: Execution, *, reply=None, capture) -> Execution:
    """Run ``execution`` to its end with a scripted model, then post-process it (the
    run-end handlers, and the hand-off tasks after the commit)."""
    reply = reply or text_reply(f"Stage {execution.agent.name} done.")
    execution_services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([reply]))
    with capture(execute=True):
        execution_services.execution_post_process(execution_id=execution.pk)
    execution.refresh_from_db()
    return execution


def downstream_runs(agent):
    return list(Execution.objects.filter(agent=agent).order_by("id"))


def test_a_three_stage_pipeline_runs_end_to_end(agents, owner, make_trigger, django_capture_on_commit_callbacks):
    collect, analyse, report = agents
    to_analyse = follow(make_trigger, analyse, collect)
    to_report = follow(make_trigger, report, analyse)

    first = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="Collect the numbers"))
    drive(first, capture=django_capture_on_commit_callbacks)
    [second] = downstream_runs(analyse)
    assert second.status == "queued"
    drive(second, capture=django_capture_on_commit_callbacks)
    [third] = downstream_runs(report)
    drive(third, capture=django_capture_on_commit_callbacks)
    assert third.status == "completed"

    for run, trigger, upstream, depth in ((second, to_analyse, first, 1), (third, to_report, second, 2)):
        assert (run.trigger_type, run.trigger_source, run.trigger_id) == ("workflow", f"workflow:{trigger.name}",
                                                                          trigger.pk)
        assert run.requested_by_id == trigger.run_as.user_id  # its own identity, not the upstream's
        context = request_build(run).trigger_context
        assert context.trigger_payload == {
            "upstream": {"execution_id": upstream.pk, "agent_id": str(upstream.agent_id), "status": "completed",
                         "outcome": "answered", "summary": f"Stage {upstream.agent.name} done.", "artifacts": []},
            "pipeline": {"depth": depth},
        }
        assert run.input_prompt == f"Continue from run {upstream.pk}: Stage {upstream.agent.name} done."
        firing = TriggerFiring.objects.get(trigger=trigger)
        assert (firing.outcome, firing.execution_id, firing.dedupe_key) == ("started", run.pk,
                                                                             f"upstream:{upstream.pk}")
    assert PipelineHandoff.objects.filter(done_at__isnull=True).count() == 0
    assert Execution.objects.count() == 3


def test_a_failed_upstream_does_not_start_a_completed_only_stage(agents, owner, make_trigger,
                                                                 django_capture_on_commit_callbacks):
    collect, analyse, report = agents
    on_success = follow(make_trigger, analyse, collect)
    on_failure = follow(make_trigger, report, collect, name="alert-on-failure", on_statuses=["failed"])

    first = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="Collect"))
    drive(first, reply=LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "down"), capture=django_capture_on_commit_callbacks)
    assert first.status == "failed"

    assert downstream_runs(analyse) == []
    skipped = TriggerFiring.objects.get(trigger=on_success)
    assert (skipped.outcome, skipped.reason) == ("skipped", "filtered") and "ended failed" in skipped.detail
    [alert] = downstream_runs(report)
    assert alert.trigger_id == on_failure.pk and alert.trigger_payload["upstream"]["status"] == "failed"


def test_a_stage_that_follows_answered_runs_is_not_handed_a_no_answer_run(agents, owner, make_trigger,
                                                                          django_capture_on_commit_callbacks):
    collect, analyse, report = agents
    on_answered = follow(make_trigger, analyse, collect, on_outcomes=["answered"])
    on_anything = follow(make_trigger, report, collect, name="any-completed")  # statuses only, as before

    first = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="Collect"))
    drive(first, reply=text_reply(f"{NO_ANSWER_NOTE} Rephrase the question."),
          capture=django_capture_on_commit_callbacks)
    assert (first.status, first.outcome) == ("completed", "no_answer")

    assert downstream_runs(analyse) == []
    skipped = TriggerFiring.objects.get(trigger=on_answered)
    assert (skipped.outcome, skipped.reason) == ("skipped", "filtered") and "outcome no_answer" in skipped.detail
    [stage] = downstream_runs(report)
    assert stage.trigger_id == on_anything.pk and stage.trigger_payload["upstream"]["outcome"] == "no_answer"


@pytest.mark.parametrize("on_outcomes", [["success"], [], "answered", [None], ["answered"] * 300])
def test_an_unknown_or_empty_outcome_list_is_a_400_naming_the_field(agents, api_client_for, owner, workspace,
                                                                     on_outcomes):
    collect, analyse, _ = agents
    response = api_client_for(owner).post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(analyse.pk), "name": "picky", "type": "workflow",
        "config": {"upstream_agent": str(collect.pk), "on_outcomes": on_outcomes}}, format="json")
    assert response.status_code == 400
    assert any(key.startswith("config.on_outcomes") for key in response.json()["error"]["details"])


def test_a_disabled_stage_is_not_handed_off(agents, owner, make_trigger, django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    trigger = follow(make_trigger, analyse, collect)
    trigger_update(actor=owner, trigger=trigger, enabled=False)
    drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="x")),
          capture=django_capture_on_commit_callbacks)
    assert downstream_runs(analyse) == [] and not PipelineHandoff.objects.exists()


def test_post_processing_twice_and_the_handler_twice_start_one_stage(agents, owner, make_trigger,
                                                                     django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    follow(make_trigger, analyse, collect)
    first = drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="x")),
                  capture=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert execution_services.execution_post_process(execution_id=first.pk) is False

    from executions.runend import RunEnded
    from rivercore.types.runs import RunStatus

    again = RunEnded(execution_id=first.pk, workspace_id=first.workspace_id, agent_id=first.agent_id,
                     status=RunStatus.COMPLETED, summary="again", trigger_type="manual", trigger_id=None,
                     parent_execution_id=None, requested_by_id=owner.pk)
    with django_capture_on_commit_callbacks(execute=True):
        pipeline_run_ended(again)
    handoff = PipelineHandoff.objects.get()
    assert pipeline_handoff_process(handoff_id=handoff.pk) is None  # already done
    assert len(downstream_runs(analyse)) == 1


def test_a_failed_hand_off_is_retried_and_starts_the_stage_once(agents, owner, make_trigger,
                                                                 django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    trigger = follow(make_trigger, analyse, collect)
    with mock.patch("triggers.services.execution_start", side_effect=OperationalError("database went away")):
        drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
            agent=collect, user=owner, prompt="x")),
              capture=django_capture_on_commit_callbacks)
    handoff = PipelineHandoff.objects.get()
    assert handoff.done_at is None and handoff.attempts == 1 and "database went away" in handoff.last_error
    assert downstream_runs(analyse) == [] and not TriggerFiring.objects.filter(trigger=trigger).exists()

    assert pipeline_handoffs_retry() == 0  # not due yet
    assert pipeline_handoffs_retry(now=timezone.now() + timedelta(minutes=5)) == 1
    handoff.refresh_from_db()
    assert handoff.done_at is not None and handoff.firing.outcome == "started"
    assert pipeline_handoffs_retry(now=timezone.now() + timedelta(hours=2)) == 0
    assert len(downstream_runs(analyse)) == 1


def test_a_hand_off_whose_task_message_was_lost_is_picked_up_by_the_retry_pass(
        agents, owner, make_trigger, django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    follow(make_trigger, analyse, collect)
    with mock.patch.object(tasks.pipeline_handoff, "delay", side_effect=ConnectionError("broker down")):
        drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
            agent=collect, user=owner, prompt="x")),
              capture=django_capture_on_commit_callbacks)
    assert downstream_runs(analyse) == [] and PipelineHandoff.objects.get().done_at is None

    assert pipeline_handoffs_retry(now=timezone.now() + timedelta(minutes=1)) == 1
    assert len(downstream_runs(analyse)) == 1


def test_a_hand_off_that_keeps_failing_is_recorded_as_an_error_in_the_end(agents, owner, make_trigger,
                                                                         django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    trigger = follow(make_trigger, analyse, collect)
    drive_start = execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="x"))
    with mock.patch("triggers.services.execution_start", side_effect=OperationalError("still down")):
        drive(drive_start, capture=django_capture_on_commit_callbacks)
        PipelineHandoff.objects.update(attempts=10)
        pipeline_handoffs_retry(now=timezone.now() + timedelta(hours=3))
    firing = TriggerFiring.objects.get(trigger=trigger)
    assert (firing.outcome, firing.reason) == ("skipped", "error") and "gave up after 10 attempts" in firing.detail
    assert PipelineHandoff.objects.get().done_at is not None


@override_settings(RIVER_MAX_PIPELINE_DEPTH=1)
def test_a_stage_beyond_the_depth_limit_is_skipped(agents, owner, make_trigger, django_capture_on_commit_callbacks):
    collect, analyse, report = agents
    follow(make_trigger, analyse, collect)
    beyond = follow(make_trigger, report, analyse)
    drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="x")),
          capture=django_capture_on_commit_callbacks)
    [second] = downstream_runs(analyse)
    drive(second, capture=django_capture_on_commit_callbacks)

    assert downstream_runs(report) == []
    firing = TriggerFiring.objects.get(trigger=beyond)
    assert (firing.outcome, firing.reason) == ("skipped", "depth") and "depth 2" in firing.detail


# ------------------------------------------------------------------ cycles


def test_a_stage_cannot_follow_itself(agents, make_trigger):
    with pytest.raises(InvalidInput) as refused:
        follow(make_trigger, agents[0], agents[0])
    assert "config.upstream_agent" in refused.value.details


def test_a_two_agent_loop_is_refused_naming_the_cycle(agents, make_trigger):
    collect, analyse, _ = agents
    follow(make_trigger, analyse, collect)
    with pytest.raises(InvalidInput) as refused:
        follow(make_trigger, collect, analyse)
    [message] = refused.value.details["config.upstream_agent"]
    assert f"Collect ({collect.pk}) -> Analyse ({analyse.pk}) -> Collect ({collect.pk})" in message
    assert TriggerFiring.objects.count() == 0 and len(collect.triggers.all()) == 0


def test_a_longer_loop_is_refused_on_create_and_on_update(agents, owner, make_trigger):
    collect, analyse, report = agents
    follow(make_trigger, analyse, collect)
    follow(make_trigger, report, analyse)
    with pytest.raises(InvalidInput) as refused:
        follow(make_trigger, collect, report)
    assert "Collect" in refused.value.details["config.upstream_agent"][0]

    other = make_agent(workspace=collect.workspace, owner=owner, name="Other")
    harmless = follow(make_trigger, collect, other)
    with pytest.raises(InvalidInput):
        trigger_update(actor=owner, trigger=harmless, config={"upstream_agent": str(report.pk)})
    harmless.refresh_from_db()
    assert config_public(harmless.config)["upstream_agent"] == str(other.pk)


def test_a_disabled_stage_still_counts_for_cycles(agents, owner, make_trigger):
    collect, analyse, _ = agents
    trigger = follow(make_trigger, analyse, collect)
    trigger_update(actor=owner, trigger=trigger, enabled=False)
    with pytest.raises(InvalidInput):
        follow(make_trigger, collect, analyse)


def test_the_api_refuses_a_cycle_with_a_400_naming_the_upstream_agent(agents, make_trigger, api_client_for, owner,
                                                                     workspace):
    collect, analyse, _ = agents
    follow(make_trigger, analyse, collect)
    response = api_client_for(owner).post("/api/v1/triggers/", {
        "workspace": workspace.pk, "agent": str(collect.pk), "name": "loop", "type": "workflow",
        "config": {"upstream_agent": str(analyse.pk)}}, format="json")
    assert response.status_code == 400
    assert "cycle" in response.json()["error"]["details"]["config.upstream_agent"][0]


def test_firings_of_a_workflow_trigger_are_listed(agents, owner, make_trigger, api_client_for, outsider,
                                                 django_capture_on_commit_callbacks):
    collect, analyse, _ = agents
    trigger = follow(make_trigger, analyse, collect)
    drive(execution_services.execution_start(agent=collect, request=execution_services.person_run_request(
        agent=collect, user=owner, prompt="x")),
          capture=django_capture_on_commit_callbacks)
    url = f"/api/v1/triggers/{trigger.pk}/firings/"
    body = api_client_for(owner).get(url).json()
    rows = body["results"] if isinstance(body, dict) else body
    assert [(r["outcome"], r["source"]) for r in rows] == [("started", f"workflow:{trigger.name}")]
    started = Execution.objects.get(pk=rows[0]["execution"])
    assert (rows[0]["run_status"], rows[0]["run_outcome"]) == (started.status, started.outcome)
    assert api_client_for(outsider).get(url).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_two_saves_closing_a_loop_at_once_let_one_through(agents, owner, workspace, api_client_for):
    """Outside a test transaction, as in production: A follows B and B follows A, sent
    at the same moment; the workspace lock lets one in and refuses the other."""
    import threading

    from django.db import connection

    collect, analyse, _ = agents
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def create(agent, upstream, name):
        try:
            client = api_client_for(owner)
            barrier.wait()
            statuses.append(client.post("/api/v1/triggers/", {
                "workspace": workspace.pk, "agent": str(agent.pk), "name": name, "type": "workflow",
                "config": {"upstream_agent": str(upstream.pk)}}, format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(analyse, collect, "a-after-c")),
               threading.Thread(target=create, args=(collect, analyse, "c-after-a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201, 400]
    assert TriggerFiring.objects.count() == 0
    from triggers.models import Trigger

    assert Trigger.objects.filter(type="workflow").count() == 1
