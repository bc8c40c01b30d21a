"""Where spans hang: a run's first execution span starts its own trace and links the task
that ran it; a delegation's call has a span of its own; under ASGI (Daphne) every HTTP
request has a server span with Django's request span inside it. In-memory exporters only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from executions import services
from executions.models import Execution
from telemetry import traces
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.memory = memory
    traces.traces_enable(provider)
    yield provider
    traces.traces_disable()
    provider.shutdown()


def named(spans, name):
    return [s for s in spans if s.name == name]


@pytest.mark.django_db
def test_a_runs_first_execution_span_is_a_root_linked_to_the_task_span_it_ran_in(provider, workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Echo it"))
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "hi"}), text_reply("Done.")])
    with provider.get_tracer("celery").start_as_current_span("run/executions.run_segment") as task_span:
        assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    (root,) = named(provider.memory.get_finished_spans(), "river_agent.execution")
    task = task_span.get_span_context()
    assert root.parent is None
    assert root.context.trace_id != task.trace_id  # a trace of its own, not the task's
    assert [link.context.span_id for link in root.links] == [task.span_id]
    assert root.links[0].context.trace_id == task.trace_id
    execution.refresh_from_db()
    assert execution.traceparent.split("-")[1:3] == [format(root.context.trace_id, "032x"),
                                                      format(root.context.span_id, "016x")]


@pytest.mark.django_db
def test_a_run_started_outside_any_span_is_a_root_without_links(provider, workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=[])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Say hi"))
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("Hi")])) == "success"
    (root,) = named(provider.memory.get_finished_spans(), "river_agent.execution")
    assert root.parent is None and list(root.links) == []


@pytest.mark.django_db(transaction=True)  # the delegation tool's thread reads the parent run's row
def test_a_delegation_call_has_its_own_tool_span_in_the_turn_that_made_it(provider, workspace, owner):
    coordinator = make_agent(workspace=workspace, owner=owner, name="Coordinator", tools=["delegate_to_agent"])
    make_agent(workspace=workspace, owner=owner, name="Researcher", tools=[])
    parent = services.execution_start(agent=coordinator, request=services.person_run_request(
        agent=coordinator, user=owner, prompt="Prepare the report"))
    delegate = tool_reply("delegate_to_agent", {"agent": "Researcher", "task": "Find churn"}, "d1")
    assert services.execution_run_segment(execution_id=parent.pk, llm=ScriptedLLM([delegate])) == "awaiting_child"
    child = Execution.objects.get(parent_execution_id=parent.pk)

    spans = provider.memory.get_finished_spans()
    (call,) = [s for s in named(spans, "river_agent.tool_dispatch") if s.attributes["tool_name"] == "delegate_to_agent"]
    (turn,) = named(spans, "river_agent.turn")
    assert call.parent.span_id == turn.context.span_id
    assert dict(call.attributes) | {"latency_ms": 0} == {
        "tool_name": "delegate_to_agent", "category": "execution", "status": "pending", "latency_ms": 0,
        "child_execution_id": child.pk,
    }
    assert turn.start_time <= call.start_time <= call.end_time <= turn.end_time


ASGI_PROBE = """
import json

import django

django.setup()
from asgiref.testing import ApplicationCommunicator
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from telemetry import traces

memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(provider)
traces.traces_enable(provider)
traces._instrument()  # what traces_setup does with an endpoint, before the ASGI app is built

from riverapp.asgi import application  # noqa: E402


async def get(path):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(10)
    await communicator.receive_output(10)
    return start["status"]


import asyncio  # noqa: E402

status = asyncio.run(get("/health"))
spans = [{"name": s.name, "kind": s.kind.name, "trace": s.context.trace_id, "id": s.context.span_id,
          "parent": s.parent.span_id if s.parent else None,
          "route": s.attributes.get("http.route"), "status_code": s.attributes.get("http.status_code")}
         for s in memory.get_finished_spans()]
print(json.dumps({"status": status, "spans": spans}))
"""


@pytest.mark.slow  # a process of its own: instrumentation and the tracer provider are global
def test_an_asgi_request_has_a_server_span_with_djangos_request_span_inside():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "riverapp.settings"
    done = subprocess.run([sys.executable, "-c", ASGI_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["status"] == 200
    by_kind = {}
    for span in probe["spans"]:
        by_kind.setdefault(span["kind"], []).append(span)
    (server,) = by_kind["SERVER"]  # the ASGI middleware's span: the request's root
    assert server["parent"] is None and server["status_code"] == 200
    (django_span,) = [s for s in by_kind.get("INTERNAL", []) if s["route"] == "health"]
    assert django_span["parent"] == server["id"] and django_span["trace"] == server["trace"]
    assert django_span["name"] == "GET health"
