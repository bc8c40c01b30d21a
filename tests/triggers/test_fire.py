"""trigger_fire: the one normalization step. Every firing is a row; a run starts only
for an enabled trigger of an active agent with a new dedupe key, acting as the
trigger's service identity, with the request every other start produces."""

import threading
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.db import connection

from agents.models import Agent
from executions.models import Execution
from executions.services.load import request_build
from tests.factories import make_agent
from triggers.models import TriggerFiring
from triggers.services import PAYLOAD_MAX_BYTES, trigger_fire

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 25, 7, 0, tzinfo=UTC)


def test_a_firing_starts_a_run_as_the_trigger_identity_with_the_normalized_request(make_trigger, zendesk):
    trigger = make_trigger(name="Tickets", trigger_type="event", prompt="Triage ticket {{ payload.id }}",
                           config={"endpoint": "zendesk", "event_type": "ticket.created"})
    firing = trigger_fire(trigger=trigger, payload={"id": 42, "priority": "high"}, source="webhook:zendesk",
                          dedupe_key="evt_1", triggered_at=AT)
    assert firing.outcome == "started" and firing.reason == ""
    execution = Execution.objects.get(pk=firing.execution_id)
    assert (execution.trigger_type, execution.trigger_source, execution.trigger_id) == ("event", "webhook:zendesk",
                                                                                         trigger.pk)
    assert execution.requested_by_id == trigger.run_as.user_id
    assert execution.input_prompt == "Triage ticket 42"
    request = request_build(execution)
    context = request.trigger_context
    assert context.trigger_type == "event" and context.trigger_source == "webhook:zendesk"
    assert context.trigger_payload == {"id": 42, "priority": "high"}
    assert context.triggered_by == str(trigger.run_as.user_id)
    assert context.triggered_at == AT
    assert request.user_context.user_id == trigger.run_as.user_id
    assert request.user_context.roles == ["analyst"]  # the identity's role, read live
    assert firing.payload_bytes == len('{"id":42,"priority":"high"}')


def test_a_person_firing_a_manual_trigger_is_triggered_by(make_trigger, member):
    trigger = make_trigger()
    firing = trigger_fire(trigger=trigger, payload=None, source="ui", user=member)
    execution = Execution.objects.get(pk=firing.execution_id)
    assert execution.requested_by == member
    assert request_build(execution).trigger_context.triggered_by == str(member.pk)


def test_a_disabled_trigger_starts_nothing(make_trigger):
    trigger = make_trigger(enabled=False)
    firing = trigger_fire(trigger=trigger, payload={}, source="api:T")
    assert (firing.outcome, firing.reason, firing.execution_id) == ("skipped", "disabled", None)
    assert not Execution.objects.exists()


@pytest.mark.parametrize("status", [Agent.Status.PAUSED, Agent.Status.DRAFT, Agent.Status.ARCHIVED])
def test_an_inactive_agent_is_refused_and_logged_with_no_run(make_trigger, active_agent, status, caplog):
    trigger = make_trigger()
    Agent.objects.filter(pk=active_agent.pk).update(status=status)
    firing = trigger_fire(trigger=trigger, payload={"a": 1}, source="cron:T", dedupe_key="slot-1")
    assert (firing.outcome, firing.reason) == ("skipped", "agent_inactive")
    assert status in firing.detail
    assert not Execution.objects.exists()
    assert any("refused" in record.getMessage() for record in caplog.records)


def test_a_dedupe_key_starts_one_run_and_the_repeat_is_logged_as_duplicate(make_trigger):
    trigger = make_trigger()
    first = trigger_fire(trigger=trigger, payload={"n": 1}, source="cron:T", dedupe_key="2026-11-25T07:00")
    again = trigger_fire(trigger=trigger, payload={"n": 1}, source="cron:T", dedupe_key="2026-11-25T07:00")
    assert first.outcome == "started"
    assert (again.outcome, again.reason, again.dedupe_key) == ("skipped", "duplicate", None)
    assert Execution.objects.count() == 1
    other_trigger = make_trigger(name="Other")
    assert trigger_fire(trigger=other_trigger, payload={}, source="cron:Other",
                        dedupe_key="2026-11-25T07:00").outcome == "started"


def test_an_oversized_payload_is_skipped(make_trigger):
    trigger = make_trigger()
    firing = trigger_fire(trigger=trigger, payload={"x": "y" * PAYLOAD_MAX_BYTES}, source="api:T")
    assert (firing.outcome, firing.reason) == ("skipped", "error")
    assert not Execution.objects.exists()


def test_a_refused_start_leaves_a_skipped_firing_and_no_run(make_trigger):
    trigger = make_trigger()
    firing = trigger_fire(trigger=trigger, payload={}, source="x" * 150)  # longer than a run's trigger_source
    assert (firing.outcome, firing.reason, firing.execution_id) == ("skipped", "error", None)
    assert not Execution.objects.exists()
    assert TriggerFiring.objects.count() == 1


def test_run_and_firing_are_written_together_or_not_at_all(make_trigger):
    trigger = make_trigger()
    with mock.patch("triggers.services.execution_start", side_effect=RuntimeError("database went away")), \
            pytest.raises(RuntimeError):
        trigger_fire(trigger=trigger, payload={}, source="api:T", dedupe_key="once")
    assert not TriggerFiring.objects.exists() and not Execution.objects.exists()
    assert trigger_fire(trigger=trigger, payload={}, source="api:T", dedupe_key="once").outcome == "started"


def test_an_agent_without_a_deployed_version_is_inactive(owner, workspace, make_trigger):
    agent = make_agent(workspace=workspace, owner=owner, name="Bare")
    Agent.objects.filter(pk=agent.pk).update(current_version=None)
    firing = trigger_fire(trigger=make_trigger(agent=agent), payload={}, source="api:T")
    assert firing.reason == "agent_inactive"


@pytest.mark.django_db(transaction=True)
def test_two_schedulers_racing_on_one_slot_start_one_run(make_trigger):
    trigger = make_trigger()
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def fire():
        try:
            barrier.wait()
            outcomes.append(trigger_fire(trigger=trigger, payload={}, source="cron:T",
                                         dedupe_key="2026-11-25T07:00").reason or "started")
        finally:
            connection.close()

    with mock.patch("executions.tasks.run_segment.delay"), mock.patch("executions.tasks.post_process.delay"):
        threads = [threading.Thread(target=fire) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(outcomes) == ["duplicate", "duplicate", "duplicate", "started"]
    assert Execution.objects.filter(trigger_id=trigger.pk).count() == 1
