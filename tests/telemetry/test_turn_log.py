"""One JSON line per turn on ``river.turns``, with 001's fields plus workspace and trace
ids, from a real run: a read turn, a governed write paused for approval and resumed, and
a final answer with no tool."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re

import pytest
from django.conf import settings

from executions import services, tasks
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from telemetry.logs import TURN_LOGGER, logging_config
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

SEED_FIELDS = {
    "level", "service", "execution_id", "turn_number", "model_used", "model_tier", "provider", "tool_called",
    "tool_category", "tool_status", "governance_decision", "tokens_in", "tokens_out", "latency_ms", "timestamp",
}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _configured(log_format: str):
    """River's own logging config for ``log_format``, every handler writing to one buffer."""
    buffer = io.StringIO()
    logging.config.dictConfig(logging_config(log_format=log_format, level="INFO"))
    handlers = {*logging.getLogger().handlers, *logging.getLogger(TURN_LOGGER).handlers}
    for handler in handlers:
        handler.setStream(buffer)
    return buffer


@pytest.fixture
def logs_as():
    yield _configured
    logging.config.dictConfig(settings.LOGGING)


def _turn_lines(buffer: io.StringIO) -> list[dict]:
    lines = []
    for line in buffer.getvalue().splitlines():
        if line.startswith("{"):
            parsed = json.loads(line)
            if "turn_number" in parsed:
                lines.append(parsed)
    return lines


def _approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.mark.django_db
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_governed_run_writes_one_line_per_turn_with_every_field(workspace, owner, sent, logs_as, log_format):
    buffer = logs_as(log_format)
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_slow_read", "durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    approver = _approver(workspace)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="read then write"))
    llm = ScriptedLLM([
        tool_reply("durable_slow_read", {"marker": "r1"}, call_id="call_r1", input_tokens=120, output_tokens=7),
        tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1", input_tokens=150, output_tokens=9),
        text_reply("wrote it", input_tokens=170, output_tokens=4),
    ])

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)
    approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    lines = _turn_lines(buffer)
    assert [line["turn_number"] for line in lines] == [1, 2, 3]
    for line in lines:
        assert SEED_FIELDS | {"workspace_id", "trace_id", "span_id"} <= set(line)
        assert line["level"] == "INFO" and line["execution_id"] == execution.pk
        assert line["workspace_id"] == workspace.pk
        assert line["model_used"] == "scripted" and line["provider"] == "test"
        assert TIMESTAMP.match(line["timestamp"]), line["timestamp"]
        assert isinstance(line["latency_ms"], int) and line["latency_ms"] >= 0
        assert line["trace_id"] is None and line["span_id"] is None  # no span active without tracing

    read, write, answer = lines
    assert read["tool_called"] == "durable_slow_read"
    assert (read["tool_category"], read["tool_status"]) == ("execution", "success")
    assert read["governance_decision"] == "PROCEED"
    assert (read["tokens_in"], read["tokens_out"], read["model_tier"]) == (120, 7, "fast")
    assert write["tool_called"] == "durable_write" and write["governance_decision"] == "APPROVAL_REQUIRED"
    assert write["tool_category"] == "execution" and write["tool_status"] == "awaiting_approval"
    assert (write["tokens_in"], write["tokens_out"]) == (150, 9)
    assert answer["tool_called"] is None and answer["tool_category"] is None and answer["tool_status"] is None
    assert answer["governance_decision"] is None and answer["model_tier"] == "balanced"
    assert (answer["tokens_in"], answer["tokens_out"]) == (170, 4)


@pytest.mark.django_db
def test_the_turn_line_carries_the_active_span_ids(workspace, owner, sent, logs_as):
    from opentelemetry.sdk.trace import TracerProvider

    buffer = logs_as("json")
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="hello"))
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("outer") as span:
        services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("hi")]))
        context = span.get_span_context()
    (line,) = _turn_lines(buffer)
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")


def _parallel_reply(*calls):
    from rivercore.llm import LLMReply, LLMToolCall
    from rivercore.types.agents import Tier

    return LLMReply(tool_calls=[LLMToolCall(id=call_id, name=name, arguments=args) for call_id, name, args in calls],
                    model="scripted", provider="test", tier=Tier.FAST, input_tokens=200, output_tokens=12)


@pytest.mark.django_db
def test_a_turn_of_parallel_tool_calls_is_one_line_describing_every_call(workspace, owner, sent, logs_as):
    buffer = logs_as("json")
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_slow_read", "durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="read twice, then write"))
    llm = ScriptedLLM([
        _parallel_reply(("c1", "durable_slow_read", {"marker": "r1"}), ("c2", "durable_slow_read", {"marker": "r2"}),
                        ("c3", "durable_write", {"marker": "w1"})),
    ])

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"

    (line,) = _turn_lines(buffer)
    assert line["turn_number"] == 1 and (line["tokens_in"], line["tokens_out"]) == (200, 12)
    # Spec 001's single-call fields describe the first call; tool_calls describes them all.
    assert (line["tool_called"], line["tool_category"], line["tool_status"], line["governance_decision"]) == (
        "durable_slow_read", "execution", "success", "PROCEED")
    assert line["tool_calls"] == [
        {"tool": "durable_slow_read", "tool_category": "execution", "tool_status": "success",
         "governance_decision": "PROCEED"},
        {"tool": "durable_slow_read", "tool_category": "execution", "tool_status": "success",
         "governance_decision": "PROCEED"},
        {"tool": "durable_write", "tool_category": "execution", "tool_status": "awaiting_approval",
         "governance_decision": "APPROVAL_REQUIRED"},
    ]


@pytest.mark.django_db
def test_a_turn_without_a_tool_has_an_empty_tool_calls_list(workspace, owner, sent, logs_as):
    buffer = logs_as("json")
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="hello"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("hi")]))
    (line,) = _turn_lines(buffer)
    assert line["tool_called"] is None and line["tool_calls"] == []


@pytest.mark.django_db
def test_with_tracing_on_the_turn_line_names_the_runs_turn_span(workspace, owner, sent, logs_as):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from telemetry import traces

    buffer = logs_as("json")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    traces.traces_enable(provider)
    try:
        agent = make_agent(workspace=workspace, owner=owner, tools=["durable_slow_read"])
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="read"))
        # The task's own span (another trace) is active: the line still joins the run's trace.
        with provider.get_tracer("task").start_as_current_span("celery task"):
            services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([
                tool_reply("durable_slow_read", {"marker": "r1"}, call_id="c1"), text_reply("done")]))
    finally:
        traces.traces_disable()
        provider.shutdown()
    turns = {s.attributes["turn_number"]: s for s in memory.get_finished_spans() if s.name == "river_agent.turn"}
    lines = _turn_lines(buffer)
    assert [line["turn_number"] for line in lines] == [1, 2]
    for line in lines:
        span = turns[line["turn_number"]].get_span_context()
        assert (line["trace_id"], line["span_id"]) == (format(span.trace_id, "032x"), format(span.span_id, "016x"))
