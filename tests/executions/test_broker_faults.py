"""The broker being down when a task is sent loses no run and no post-processing.

The broker is outside the process, so its failure is what ``task.delay`` raises
when Redis refuses the connection (kombu's OperationalError). The watchdog is the
service itself, called here as the beat would call it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerDown

from agents.models import Agent
from executions import services, tasks
from executions.models import Execution, ExecutionEvent
from executions.services import finish
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve, approvals_expire_due
from rivercore.llm import LLMError, LLMErrorKind
from telemetry.faults import infra_fault_count
from tests.executions import durable_support  # noqa: F401 - registers the durable_* tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db


class Broker:
    """Records the messages the services send; ``down`` makes every send fail."""

    def __init__(self, monkeypatch):
        self.down = False
        self.sent: list[tuple[str, int]] = []
        for task in (tasks.run_segment, tasks.post_process):
            monkeypatch.setattr(task, "delay", self._sender(task.name))

    def _sender(self, name: str):
        def send(execution_id: int) -> None:
            if self.down:
                raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
            self.sent.append((name, execution_id))

        return send

    def of(self, name: str) -> list[int]:
        return [execution_id for task, execution_id in self.sent if task == f"executions.{name}"]


@pytest.fixture
def broker(monkeypatch):
    return Broker(monkeypatch)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                      action_level="act_with_approval", require_approval_for=["durable_write"])


def _age(execution_id: int, seconds: int, *fields: str) -> None:
    """Move the given timestamps ``seconds`` into the past (as if the grace passed)."""
    past = timezone.now() - timedelta(seconds=seconds)
    Execution.objects.filter(pk=execution_id).update(**dict.fromkeys(fields, past))


def test_a_start_whose_message_cannot_be_sent_is_kept_and_sent_by_the_next_watchdog_pass(
    agent, owner, broker, django_capture_on_commit_callbacks, settings
):
    settings.RIVER_WATCHDOG_GRACE_SECONDS = 60
    failures_before = infra_fault_count(component="broker")
    broker.down = True
    with django_capture_on_commit_callbacks(execute=True):
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="go"))

    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED
    assert execution.published_at is None  # marked unsent: no need to wait out the grace
    assert infra_fault_count(component="broker") == failures_before + 1
    assert services.executions_requeue_stale() == [execution.pk]  # down still: kept for the next pass
    assert broker.of("run_segment") == []

    broker.down = False
    Execution.objects.filter(pk=execution.pk).update(published_at=None)  # as the failed send left it
    assert services.executions_requeue_stale() == [execution.pk]
    assert broker.of("run_segment") == [execution.pk]
    assert services.executions_requeue_stale() == []  # sent once; the claim clears it
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("ok")])) == "success"


def test_a_sent_message_that_is_lost_is_sent_again_after_the_grace(agent, owner, broker, settings):
    settings.RIVER_WATCHDOG_GRACE_SECONDS = 60
    # sent, then Redis restarted
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))

    assert services.executions_requeue_stale() == []  # within the grace the message may still arrive
    _age(execution.pk, 61, "published_at")
    assert services.executions_requeue_stale() == [execution.pk]
    assert broker.of("run_segment") == [execution.pk]


def test_a_resume_whose_message_cannot_be_sent_is_not_lost(
    agent, owner, broker, django_capture_on_commit_callbacks
):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    approver = _approver(execution.workspace)

    broker.down = True
    with django_capture_on_commit_callbacks(execute=True):
        approval_resolve(user=approver, approval_id=approval.pk, status="approved")

    execution.refresh_from_db()
    assert execution.status == Execution.Status.QUEUED and execution.published_at is None
    broker.down = False
    assert services.executions_requeue_stale() == [execution.pk]
    assert broker.of("run_segment") == [execution.pk]


def _approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


# --- post-processing on every terminal path, with its message lost ---------------------


def _completed(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("All good.")]))
    return execution


def _failed(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    down = LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "provider down")
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([down]))
    return execution


def _crashed(agent, owner):
    class Broken:
        def complete(self, **kwargs):
            raise KeyError("bug")

    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    services.execution_run_segment(execution_id=execution.pk, llm=Broken())
    return execution


def _cancelled(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    services.execution_cancel(execution=execution, user=owner)
    return execution


def _expired(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1")])
    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    ApprovalRequest.objects.filter(execution_id=execution.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire_due() == 1
    return execution


def _watchdog_failed(agent, owner):
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="go"))
    token = services.execution_claim(execution_id=execution.pk)  # then the worker died, again and again
    assert token
    Execution.objects.filter(pk=execution.pk).update(
        attempts=3, lease_expires_at=timezone.now() - timedelta(seconds=1), infra_error="OperationalError",
    )
    assert services.executions_requeue_stale() == []  # out of attempts: failed, not re-sent
    return execution


ENDINGS = {
    "completed": (_completed, Execution.Status.COMPLETED),
    "failed": (_failed, Execution.Status.FAILED),
    "crashed": (_crashed, Execution.Status.FAILED),
    "cancelled": (_cancelled, Execution.Status.CANCELLED),
    "approval_expired": (_expired, Execution.Status.APPROVAL_EXPIRED),
    "watchdog_failed": (_watchdog_failed, Execution.Status.FAILED),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_is_post_processed_once_even_when_its_message_is_lost(
    ending, agent, owner, broker, django_capture_on_commit_callbacks, settings
):
    settings.RIVER_MAX_SEGMENT_ATTEMPTS = 3
    settings.RIVER_WATCHDOG_GRACE_SECONDS = 60
    end, status = ENDINGS[ending]
    broker.down = True
    with django_capture_on_commit_callbacks(execute=True):
        execution = end(agent, owner)
    broker.down = False

    execution.refresh_from_db()
    assert execution.status == status
    assert execution.post_processed_at is None  # its post_process message never left
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1
    assert services.executions_post_process_missed() == []  # within the grace the task may still come

    _age(execution.pk, 61, "finished_at")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.executions_post_process_missed() == [execution.pk]
        assert services.executions_post_process_missed() == []
        assert tasks.post_process(execution.pk) is False  # the late message finds it done

    execution.refresh_from_db()
    assert execution.post_processed_at is not None
    agent.refresh_from_db()
    counts_as_failure = status == Execution.Status.FAILED
    assert agent.consecutive_failures == (1 if counts_as_failure else 0)
    assert agent.health == Agent.Health.HEALTHY
    assert ExecutionEvent.objects.filter(execution=execution, event_type="run_completed").count() == 1


def test_the_watchdog_failure_names_the_bound_and_the_last_infrastructure_error(agent, owner, broker, settings):
    settings.RIVER_MAX_SEGMENT_ATTEMPTS = 3
    execution = _watchdog_failed(agent, owner)

    execution.refresh_from_db()
    assert execution.status == Execution.Status.FAILED
    assert execution.error["code"] == "INFRASTRUCTURE_ERROR"
    assert "gave up after 3 segment attempts" in execution.error["message"]
    assert "OperationalError" in execution.error["message"]
    assert execution.lease_token == "" and execution.finished_at is not None


def test_one_run_whose_post_processing_keeps_failing_does_not_hold_up_the_others(
    agent, owner, broker, settings, monkeypatch, caplog
):
    settings.RIVER_WATCHDOG_GRACE_SECONDS = 60
    first, second = _completed(agent, owner), _completed(agent, owner)  # their post_process never ran
    Execution.objects.filter(pk__in=[first.pk, second.pk]).update(
        finished_at=timezone.now() - timedelta(seconds=61))
    real_update = finish.agent_health_update

    def health_update(*, agent_id, status, execution_id, **more):
        if execution_id == first.pk:
            raise RuntimeError("bug in one run's post-processing")
        return real_update(agent_id=agent_id, status=status, execution_id=execution_id, **more)

    monkeypatch.setattr(finish, "agent_health_update", health_update)
    assert services.executions_post_process_missed() == [second.pk]

    first.refresh_from_db()
    assert first.post_processed_at is None  # rolled back whole: the next pass tries again
    assert "could not post-process execution" in caplog.text
