"""Traces of runs: seed 001's river_agent.* spans, parented and attributed, a run's
segments (separate tasks, across an approval) under one trace, and nothing at all
while tracing is off. Spans go to the SDK's in-memory exporter, never over a network."""

from __future__ import annotations

import os
from unittest import mock

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from executions import services, tasks
from executions.models import Execution
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from rivercore import observe
from telemetry import traces
from tests.executions import engine_support
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db

PROPOSED = {"ticket_id": 7, "amount": 40.0}


@pytest.fixture
def exporter():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    traces.traces_enable(provider)
    yield memory
    traces.traces_disable()
    provider.shutdown()


@pytest.fixture(autouse=True)
def _clean_tools():
    approval_tools.reset()
    engine_support.FLAKY_FAILURES["left"] = 0
    yield
    approval_tools.reset()
    engine_support.FLAKY_FAILURES["left"] = 0


def named(spans, name):
    return [s for s in spans if s.name == name]


def run_task(execution_id, llm):
    """Run one segment as the Celery task would, in its own task invocation."""
    with mock.patch("executions.services.segment.llm_for_execution", return_value=llm):
        return tasks.run_segment.apply(args=[execution_id]).get()


def test_a_run_paused_for_approval_and_resumed_in_another_task_is_one_trace(
    exporter, workspace, owner, django_capture_on_commit_callbacks
):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=["admin", "editor"])
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund"), text_reply("Refunded 40 EUR.")])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    assert run_task(execution.pk, llm) == "awaiting_approval"
    execution.refresh_from_db()
    assert execution.status == Execution.Status.AWAITING_APPROVAL
    root_traceparent = execution.traceparent
    assert root_traceparent.startswith("00-")
    _, trace_hex, root_span_hex, _ = root_traceparent.split("-")
    first_segment = exporter.get_finished_spans()

    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    with mock.patch.object(tasks.run_segment, "delay"), django_capture_on_commit_callbacks(execute=True):
        approval_resolve(user=owner, approval_id=approval.pk, status="approved")
    assert run_task(execution.pk, llm) == "success"
    execution.refresh_from_db()
    assert execution.status == Execution.Status.COMPLETED
    assert execution.traceparent == root_traceparent  # stored once, by the first segment

    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.name.startswith("river_agent.")]
    assert {s.context.trace_id for s in ours} == {int(trace_hex, 16)}
    by_id = {s.context.span_id: s for s in ours}

    executions_ = named(ours, "river_agent.execution")
    assert len(executions_) == 2  # one per segment
    root, resumed = executions_
    assert root.context.span_id == int(root_span_hex, 16) and root.parent is None
    assert resumed.parent.span_id == root.context.span_id and resumed.parent.is_remote
    for span in executions_:
        assert span.attributes["execution_id"] == execution.pk
        assert span.attributes["agent_id"] == str(agent.pk)
        assert span.attributes["action_level"] == "act_with_approval"
    assert root.attributes["status"] == "awaiting_approval" and resumed.attributes["status"] == "success"
    assert root in first_segment

    turns = named(ours, "river_agent.turn")
    # The resumed segment continues turn 1 (the approved call is dispatched) before its
    # own model call opens turn 2.
    assert [(t.attributes["turn_number"], by_id[t.parent.span_id]) for t in turns] == [
        (1, root), (1, resumed), (2, resumed)]
    asked, continued, concluded = turns
    assert all(t.attributes["execution_id"] == execution.pk for t in turns)
    for turn in (asked, concluded):
        assert turn.attributes["model_used"] and turn.attributes["model_tier"]

    reasoning = named(ours, "river_agent.reasoning")
    assert [by_id[r.parent.span_id] for r in reasoning] == [asked, concluded]
    for span in reasoning:
        assert {"provider", "tokens_in", "tokens_out", "latency_ms"} <= set(span.attributes)
        assert span.attributes["tokens_in"] > 0 and span.attributes["tokens_out"] > 0

    checks = named(ours, "river_agent.governance_check")
    # Turn 1's check asks for approval; the approver's verdict, given by a request between
    # the two segments, hangs under the run's root.
    assert [(c.attributes["decision"], c.parent.span_id) for c in checks] == [
        ("APPROVAL_REQUIRED", asked.context.span_id), ("PROCEED", root.context.span_id)]
    assert all(c.attributes["tool_name"] == WRITE_TOOL and "policy_matched" in c.attributes for c in checks)
    verdict = checks[1]
    assert verdict.attributes["resolution"] == "approved" and verdict.attributes["resolved_by"] == str(owner.pk)
    assert verdict.attributes["approval_id"] == str(approval.pk) and verdict.attributes["turn_number"] == 1
    assert verdict.attributes["execution_id"] == execution.pk
    assert verdict.attributes["policy_matched"] == checks[0].attributes["policy_matched"]
    assert root.end_time <= verdict.start_time <= resumed.start_time

    dispatches = named(ours, "river_agent.tool_dispatch")
    assert len(dispatches) == 1
    dispatch = dispatches[0]
    assert dict(dispatch.attributes) | {"latency_ms": 0} == {
        "tool_name": WRITE_TOOL, "category": "execution", "status": "completed", "latency_ms": 0,
    }
    assert isinstance(dispatch.attributes["latency_ms"], int)
    assert by_id[dispatch.parent.span_id] is continued
    assert named(ours, "river_agent.tool_retry") == []


def test_a_retried_tool_has_a_retry_span_per_failed_attempt_under_its_dispatch(exporter, workspace, owner):
    engine_support.FLAKY_FAILURES["left"] = 2
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_flaky"])
    llm = ScriptedLLM([tool_reply("test_flaky", {"text": "x"}), text_reply("done")])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Try it"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    spans = exporter.get_finished_spans()
    dispatch, = named(spans, "river_agent.tool_dispatch")
    assert dispatch.attributes["tool_name"] == "test_flaky" and dispatch.attributes["status"] == "completed"
    retries = named(spans, "river_agent.tool_retry")
    assert [(r.attributes["tool_name"], r.attributes["attempt"], r.attributes["error_code"]) for r in retries] == [
        ("test_flaky", 1, "TRANSIENT"), ("test_flaky", 2, "TRANSIENT"),
    ]
    assert all(r.parent.span_id == dispatch.context.span_id for r in retries)
    assert all(dispatch.start_time <= r.start_time <= r.end_time <= dispatch.end_time for r in retries)


def test_tracing_is_off_by_default_no_provider_no_observer_no_spans(workspace, owner):
    assert not traces.tracing_enabled()
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # the API's no-op proxy
    assert "traces" not in observe._observers
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Hello"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("hi")])) == "success"
    execution.refresh_from_db()
    assert execution.traceparent == ""
    assert traces._segments == {}


def test_setup_without_an_endpoint_installs_nothing():
    assert traces.traces_setup(endpoint="", service_name="river") is False
    assert not traces.tracing_enabled()
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)


SETUP_PROBE = """
import json, django
django.setup()
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from telemetry import traces
provider = trace.get_tracer_provider()
processor = provider._active_span_processor._span_processors[0]
print(json.dumps({
    "sdk": isinstance(provider, TracerProvider),
    "service": provider.resource.attributes.get("service.name"),
    "endpoint": processor._batch_processor._exporter.current()._endpoint,
    "enabled": traces.tracing_enabled(),
    "django": DjangoInstrumentor().is_instrumented_by_opentelemetry,
    "celery": CeleryInstrumentor().is_instrumented_by_opentelemetry,
    "psycopg": PsycopgInstrumentor().is_instrumented_by_opentelemetry,
}))
provider.shutdown()
"""


def test_an_otlp_endpoint_installs_the_exporting_provider_and_the_standard_instrumentation():
    """In a process of its own (a tracer provider is global and set once). The endpoint
    is a closed local port and nothing is traced, so nothing is sent anywhere."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(DJANGO_SETTINGS_MODULE="riverapp.settings", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
               OTEL_SERVICE_NAME="river-probe")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", SETUP_PROBE], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe == {"sdk": True, "service": "river-probe", "endpoint": "http://127.0.0.1:9/v1/traces",
                     "enabled": True, "django": True, "celery": True, "psycopg": True}


def _paused_write(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[WRITE_TOOL], action_level="act_with_approval",
                       require_approval_for=[WRITE_TOOL], approver_roles=["admin", "editor"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt="Refund ticket 7"))
    llm = ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    execution.refresh_from_db()
    return execution, ApprovalRequest.objects.get(execution_id=execution.pk)


@pytest.mark.parametrize("ending", ["rejected", "expired", "cancelled"])
def test_a_rejection_an_expiry_or_a_cancel_is_a_blocking_verdict_span_under_the_root(
    exporter, workspace, owner, django_capture_on_commit_callbacks, ending
):
    import datetime as dt

    from django.utils import timezone

    from governance.resolution import approvals_expire_due

    execution, approval = _paused_write(workspace, owner)
    with mock.patch.object(tasks.run_segment, "delay"), django_capture_on_commit_callbacks(execute=True):
        if ending == "rejected":
            approval_resolve(user=owner, approval_id=approval.pk, status="rejected", comment="no")
        elif ending == "expired":
            ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
            assert approvals_expire_due() == 1
        else:
            services.execution_cancel(execution=execution, user=owner)

    root_span_id = int(execution.traceparent.split("-")[2], 16)
    verdicts = [s for s in named(exporter.get_finished_spans(), "river_agent.governance_check")
                if "resolution" in s.attributes]
    assert len(verdicts) == 1
    verdict = verdicts[0]
    assert verdict.parent.span_id == root_span_id
    assert verdict.context.trace_id == int(execution.traceparent.split("-")[1], 16)
    assert dict(verdict.attributes) | {"policy_matched": ""} == {
        "execution_id": execution.pk, "turn_number": 1, "tool_name": WRITE_TOOL, "decision": "BLOCKED",
        "policy_matched": "", "resolution": ending, "approval_id": str(approval.pk),
        "resolved_by": str(owner.pk) if ending == "rejected" else "",
    }


def test_a_verdict_rolled_back_leaves_no_span(exporter, workspace, owner, django_capture_on_commit_callbacks):
    from django.db import transaction

    execution, approval = _paused_write(workspace, owner)
    with django_capture_on_commit_callbacks(execute=True), mock.patch.object(tasks.run_segment, "delay"):
        try:
            with transaction.atomic():
                approval_resolve(user=owner, approval_id=approval.pk, status="approved")
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert [s for s in exporter.get_finished_spans() if "resolution" in s.attributes] == []


@pytest.mark.django_db(transaction=True)
def test_a_delegated_runs_trace_hangs_under_the_parent_turn_that_started_it(exporter, workspace, owner):
    coordinator = make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"])
    make_agent(workspace=workspace, owner=owner, name="Researcher", tools=[])
    parent = services.execution_start(agent=coordinator, request=services.person_run_request(
        agent=coordinator, user=owner, prompt="Prepare the report"))
    delegate = tool_reply("delegate_to_agent", {"agent": "Researcher", "task": "Find churn"}, "d1")
    assert services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([delegate])) == "awaiting_child"
    child = Execution.objects.get(parent_execution_id=parent.pk)
    assert services.execution_run_segment(execution_id=child.pk, llm=ScriptedLLM([text_reply("2.1 %")])) == "success"
    assert services.execution_post_process(execution_id=child.pk) is True
    assert services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([text_reply("Done")])) == "success"

    parent.refresh_from_db()
    child.refresh_from_db()
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("river_agent.")]
    trace_id = int(parent.traceparent.split("-")[1], 16)
    assert {s.context.trace_id for s in spans} == {trace_id}  # parent and child: one trace
    by_execution = {}
    for span in named(spans, "river_agent.execution"):
        by_execution.setdefault(span.attributes["execution_id"], []).append(span)
    parent_turn = next(s for s in named(spans, "river_agent.turn")
                       if s.attributes["execution_id"] == parent.pk and s.attributes["turn_number"] == 1
                       and s.parent.span_id == by_execution[parent.pk][0].context.span_id)
    (child_root,) = by_execution[child.pk]
    assert child_root.parent.span_id == parent_turn.context.span_id
    # The child stores its own root: its later segments hang under it, not under the parent.
    assert child.traceparent.split("-")[2] == format(child_root.context.span_id, "016x")
    assert child.traceparent != parent.traceparent


class _FileExporter:
    """Writes '<pid of the exporter's process> <pid exporting> <span name>' lines to a file."""

    def __init__(self, path):
        self.path, self.made_in = path, os.getpid()

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        with open(self.path, "a") as out:
            for span in spans:
                out.write(f"{self.made_in} {os.getpid()} {span.name}\n")
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis=30_000):
        return True

    def shutdown(self):
        return None


def test_a_forked_worker_process_exports_its_spans_with_its_own_exporter_before_it_exits(tmp_path):
    """What Celery's prefork pool does: the provider is installed in the main process, a
    child is forked, runs the worker_process_init handlers, traces, runs the
    worker_process_shutdown handlers and leaves with os._exit (no atexit flush)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from riverapp import celery as river_celery

    out = tmp_path / "spans.txt"
    made: list[int] = []

    def factory():
        made.append(os.getpid())
        return _FileExporter(out)

    provider = TracerProvider()
    # A long delay: only an explicit flush sends anything within the test.
    provider.add_span_processor(BatchSpanProcessor(traces.ProcessLocalExporter(factory), schedule_delay_millis=60_000))
    traces.traces_enable(provider)
    try:
        traces._tracer.start_span("in-main").end()
        provider.force_flush()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child process
            code = 1
            try:
                river_celery._traces_in_this_process()
                traces._tracer.start_span("in-child").end()
                river_celery._traces_flushed()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        traces.traces_disable()
        provider.shutdown()

    lines = [line.split() for line in out.read_text().splitlines()]
    main = os.getpid()
    assert [main, main, "in-main"] == [int(lines[0][0]), int(lines[0][1]), lines[0][2]]
    (made_in, exported_by, name), = [line for line in lines if line[2] == "in-child"]
    assert int(exported_by) == child and int(made_in) == child  # the child's own exporter, made there
    assert made == [main]  # the parent made one exporter (the child's factory call is in its own memory)
