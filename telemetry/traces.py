"""OpenTelemetry traces of runs: seed 001's ``river_agent.*`` spans, built from the
engine's observer port, plus the standard Django, Celery and psycopg instrumentation.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: then no SDK provider is installed,
no observer is installed and the segment hooks return at their first line, so the
per-turn path costs nothing.

One trace per run. A run is made of segments (Celery tasks, possibly hours apart across
an approval). The first traced segment's ``river_agent.execution`` span is the trace's
root (a new trace, never a child of the Celery task or request it runs in: that span is
linked instead); its W3C ``traceparent`` is stored on the execution, and every later
segment opens its own ``river_agent.execution`` span as a child of that root. Turns are children of
their segment's execution span; reasoning, governance checks and tool dispatches are
children of their turn (a delegation's call too, when its child run starts: its result
arrives as a later dispatch); a retried tool's failed attempts (``river_agent.tool_retry``)
are children of the dispatch.

Observers run on the thread driving the run (for hosted runs an event loop shared by
many runs), so spans are parented explicitly (never through the ambient context) and
exported by a batch processor on its own thread."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rivercore.contracts import StepType

logger = logging.getLogger("river.telemetry")

TRACER_NAME = "river.agent"
_OBSERVER_NAME = "traces"
_propagator = TraceContextTextMapPropagator()

_tracer: trace.Tracer | None = None  # set only while tracing is on
_provider: Any = None  # the SDK provider behind _tracer
_segments: dict[int, _Segment] = {}
_lock = threading.Lock()


@dataclass
class _Segment:
    span: Span
    context: Any
    turn: int = 0
    turn_span: Span | None = None
    turn_context: Any = None
    turn_last_ns: int = 0
    dispatches: dict[str, Any] = field(default_factory=dict)


def tracing_enabled() -> bool:
    return _tracer is not None


def traces_enable(provider: trace.TracerProvider) -> None:
    """Start tracing runs on ``provider`` (the exporting one at startup, an in-memory one
    in tests)."""
    global _tracer, _provider
    from rivercore import observe

    _provider = provider
    _tracer = provider.get_tracer(TRACER_NAME)
    observe.observer_install(_OBSERVER_NAME, _RunObserver())


def traces_disable() -> None:
    global _tracer, _provider
    from rivercore import observe

    observe.observer_remove(_OBSERVER_NAME)
    _tracer = _provider = None
    with _lock:
        _segments.clear()


def traces_setup(*, endpoint: str | None, service_name: str) -> bool:
    """At startup: with an OTLP endpoint, install the SDK provider exporting over
    OTLP/HTTP (the exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables) and
    the standard instrumentation. Without one, nothing at all. Returns whether tracing
    is on."""
    if not endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(BatchSpanProcessor(ProcessLocalExporter(OTLPSpanExporter)))
    trace.set_tracer_provider(provider)
    traces_enable(provider)
    _instrument()
    return True


class ProcessLocalExporter:
    """A span exporter made afresh in each process that exports.

    The provider is installed when Django starts, which in a Celery prefork worker is the
    main process, before it forks its children. The SDK's batch processor restarts its
    export thread in a forked child by itself, but the exporter (an HTTP session and its
    pooled connections) would be the parent's, shared across processes. This wrapper
    builds the real exporter from ``factory`` in the process that first exports, and
    again after a fork."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self._exporter: Any = None
        self._pid = 0
        self._lock = threading.Lock()

    def current(self) -> Any:
        pid = os.getpid()
        if self._pid != pid:
            with self._lock:
                if self._pid != pid:
                    self._exporter, self._pid = self._factory(), pid
        return self._exporter

    def export(self, spans: Any) -> Any:
        return self.current().export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._pid != os.getpid():
            return True  # nothing exported from this process
        return self._exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        if self._pid == os.getpid():
            self._exporter.shutdown()


def traces_process_init() -> None:
    """In a freshly forked worker process (Celery's ``worker_process_init``): the parent's
    open segments are not this process's. (Its exporter is its own already: see
    ``ProcessLocalExporter``; the SDK restarts the batch processor's thread.)"""
    with _lock:
        _segments.clear()


def traces_process_flush(timeout_millis: int = 5_000) -> bool:
    """Before a worker process exits (Celery's ``worker_process_shutdown``): send the
    spans still queued. A prefork child leaves with ``os._exit``, which skips the
    provider's own flush at exit, so without this its last spans would be lost."""
    provider = _provider
    if provider is None or not hasattr(provider, "force_flush"):
        return True
    return provider.force_flush(timeout_millis)


def _instrument() -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    # Under Daphne (ASGI) the Django middleware makes request spans only when the ASGI
    # instrumentation package is importable (it reads the ASGI scope through it).
    DjangoInstrumentor().instrument()
    PsycopgInstrumentor().instrument(enable_commenter=False)
    CeleryInstrumentor().instrument()


def traces_asgi_wrap(application: Any) -> Any:
    """The ASGI application, wrapped in OpenTelemetry's ASGI middleware when tracing is on
    (a server span per HTTP request and WebSocket connection, Django's request span its
    child; requests refused before Django, e.g. a body over the limit, get one too). The
    per-message ``receive``/``send`` spans are left out: a browser's socket would make
    one per event. Unchanged when tracing is off."""
    if _tracer is None:
        return application
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    return OpenTelemetryMiddleware(application, exclude_spans=["receive", "send"], tracer_provider=_provider)


# -- segments ---------------------------------------------------------------------------

def _remote(traceparent: str) -> Any:
    """The context of a stored W3C traceparent, or None when it is empty or does not parse."""
    if not traceparent:
        return None
    context = _propagator.extract({"traceparent": traceparent})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def _traceparent_of(context: Any) -> str | None:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    return carrier.get("traceparent")


def _ambient_links() -> list[trace.Link] | None:
    """The span this code runs in (a Celery task's, a request's) when Celery or Django is
    instrumented: it sits in another trace, so it is linked, and either leads to the other."""
    ambient = trace.get_current_span().get_span_context()
    return [trace.Link(ambient)] if ambient.is_valid else None


def segment_trace_begin(*, execution_id: int, agent_id: Any, action_level: str, traceparent: str,
                        parent_traceparent: str = "") -> str | None:
    """Open this segment's ``river_agent.execution`` span. ``traceparent`` is the run's
    root as stored on the execution ('' for its first traced segment). For a delegated
    run, ``parent_traceparent`` is the span of the parent run that started it: the
    child's root is opened under it, so parent and child share one trace. Returns the
    traceparent the caller must store when the run had no root (this span is the
    root), else None. Nothing when tracing is off."""
    tracer = _tracer
    if tracer is None:
        return None
    root = _remote(traceparent)  # a stored value that does not parse starts a new root
    parent = root if root is not None else _remote(parent_traceparent)
    if parent is None:
        # A new trace: an empty context, not the ambient one (the Celery task's span,
        # which the run outlives and which is linked below).
        parent = Context()
    attributes = {"execution_id": execution_id, "agent_id": str(agent_id), "action_level": str(action_level)}
    span = tracer.start_span("river_agent.execution", context=parent, kind=SpanKind.INTERNAL, attributes=attributes,
                             links=_ambient_links())
    context = trace.set_span_in_context(span)
    with _lock:
        _segments[execution_id] = _Segment(span=span, context=context)
    return None if root is not None else _traceparent_of(context)


def run_span_context(*, execution_id: int) -> Any:
    """The span context of a run's open turn on this process (else its segment's
    execution span); None when tracing is off or no segment of the run is open here."""
    seg = _segments.get(execution_id) if _tracer is not None else None
    if seg is None:
        return None
    return (seg.turn_span or seg.span).get_span_context()


def run_span_traceparent(*, execution_id: int) -> str:
    """The W3C traceparent of the span a run's segment is in on this process right now
    (its open turn, else the segment's execution span); '' when tracing is off or the
    run has no open segment here. A delegation carries it into the child run."""
    if _tracer is None:
        return ""
    seg = _segments.get(execution_id)
    if seg is None:
        return ""
    return _traceparent_of(seg.turn_context if seg.turn_span is not None else seg.context) or ""


def governance_verdict_span(*, traceparent: str, execution_id: int, turn: int, tool_name: str, decision: str,
                            policy_matched: str, resolution: str, approval_id: str, resolved_by: Any) -> None:
    """A person's verdict on a paused call (approved, rejected, edited) or its closing
    without one (expired, cancelled): a ``river_agent.governance_check`` span in the
    run's trace, a child of its root (the verdict is given between two segments, by a
    request or the expiry sweep, not by the engine). Nothing when tracing is off or the
    run has no stored root."""
    tracer = _tracer
    root = _remote(traceparent) if tracer is not None else None
    if root is None:
        return
    now = time.time_ns()
    tracer.start_span("river_agent.governance_check", context=root, start_time=now, links=_ambient_links(),
                      attributes={
                          "execution_id": execution_id, "turn_number": turn, "tool_name": tool_name or "",
                          "decision": decision, "policy_matched": policy_matched or "", "resolution": resolution,
                          "approval_id": approval_id or "",
                          "resolved_by": "" if resolved_by is None else str(resolved_by),
                      }).end(end_time=now)


def segment_trace_end(*, execution_id: int, status: str | None, error: BaseException | None = None) -> None:
    """Close the segment's open turn and execution spans (``status``: how the segment
    ended, e.g. ``awaiting_approval``; None when it was interrupted)."""
    if _tracer is None:
        return
    with _lock:
        seg = _segments.pop(execution_id, None)
    if seg is None:
        return
    _turn_end(seg)
    seg.span.set_attribute("status", status or "interrupted")
    if error is not None:
        seg.span.set_status(Status(StatusCode.ERROR, error.__class__.__name__))
    seg.span.end()


def _turn_end(seg: _Segment) -> None:
    if seg.turn_span is not None:
        seg.turn_span.end(end_time=seg.turn_last_ns or time.time_ns())
        seg.turn_span = None
        seg.turn_context = None
        seg.dispatches.clear()


def _turn_open(seg: _Segment, execution_id: int, turn: int, start_ns: int) -> None:
    if seg.turn_span is not None and seg.turn == turn:
        return
    _turn_end(seg)
    seg.turn = turn
    seg.turn_span = _tracer.start_span(
        "river_agent.turn", context=seg.context, start_time=start_ns,
        attributes={"execution_id": execution_id, "turn_number": turn},
    )
    seg.turn_context = trace.set_span_in_context(seg.turn_span)
    seg.turn_last_ns = start_ns


# -- the observer -----------------------------------------------------------------------

class _RunObserver:
    """Turns the engine's steps and model calls into spans. Quick and non-blocking: it
    only creates spans; the batch processor exports them on its own thread."""

    def model_called(self, state, call) -> None:
        tracer = _tracer
        seg = _segments.get(state.request.execution_id)
        if tracer is None or seg is None:
            return
        start_ns = int(call.started_at * 1e9)
        end_ns = start_ns + call.duration_ms * 1_000_000
        _turn_open(seg, state.request.execution_id, call.turn, start_ns)
        reply = call.reply
        seg.turn_span.set_attribute("model_tier", str(call.tier))
        attributes: dict[str, Any] = {"latency_ms": call.duration_ms}
        if reply is not None:
            seg.turn_span.set_attribute("model_used", reply.model)
            attributes.update(provider=reply.provider, tokens_in=reply.input_tokens, tokens_out=reply.output_tokens)
        span = tracer.start_span("river_agent.reasoning", context=seg.turn_context, start_time=start_ns,
                                 attributes=attributes)
        if call.error is not None:
            span.set_attribute("error_code", str(call.error.kind))
            span.set_status(Status(StatusCode.ERROR, str(call.error.kind)))
        span.end(end_time=end_ns)
        seg.turn_last_ns = max(seg.turn_last_ns, end_ns)

    def step_added(self, state, step) -> None:
        tracer = _tracer
        seg = _segments.get(state.request.execution_id)
        if tracer is None or seg is None:
            return
        kind = step.step_type
        if kind == StepType.TOOL_CALL:
            if not _awaits_result(step):
                return
        elif kind not in (StepType.GOVERNANCE_CHECK, StepType.OBSERVATION):
            return
        now = time.time_ns()
        if seg.turn_span is None or seg.turn != step.turn:
            # A step before any model call of this segment's turn (e.g. the approved
            # call dispatched as a resumed segment begins): its turn opens here.
            _turn_open(seg, state.request.execution_id, step.turn, now - step.duration_ms * 1_000_000)
        if kind == StepType.GOVERNANCE_CHECK:
            policy = step.output if isinstance(step.output, dict) else {}
            tracer.start_span("river_agent.governance_check", context=seg.turn_context, start_time=now, attributes={
                "tool_name": step.tool_name or "",
                "decision": str(step.governance_decision or ""),
                "policy_matched": str(policy.get("policy_matched") or ""),
            }).end(end_time=now)
        elif kind == StepType.TOOL_CALL:
            # A call whose work goes on elsewhere (delegate_to_agent: the child run): its
            # own span, covering the handler that started the work.
            span = tracer.start_span("river_agent.tool_dispatch", context=seg.turn_context,
                                     start_time=now - step.duration_ms * 1_000_000, attributes={
                                         "tool_name": step.tool_name or "",
                                         "category": step.tool_category or "",
                                         "status": str(step.status),
                                         "latency_ms": step.duration_ms,
                                         **_awaited_reference(step),
                                     })
            span.end(end_time=now)
        elif isinstance(step.output, dict) and step.output.get("_dispatched"):  # not a note or a refusal
            start_ns = now - step.duration_ms * 1_000_000
            span = tracer.start_span("river_agent.tool_dispatch", context=seg.turn_context, start_time=start_ns,
                                     attributes={
                                         "tool_name": step.tool_name or "",
                                         "category": step.tool_category or "",
                                         "status": str(step.status),
                                         "latency_ms": step.duration_ms,
                                     })
            dispatch_context = trace.set_span_in_context(span)
            for retry in step.output.get("retries") or ():
                at_ns = start_ns + int(retry.get("started_ms", 0)) * 1_000_000
                ended_ns = start_ns + int(retry.get("failed_ms", 0)) * 1_000_000
                tracer.start_span("river_agent.tool_retry", context=dispatch_context, start_time=at_ns, attributes={
                    "tool_name": step.tool_name or "",
                    "attempt": int(retry.get("attempt", 0)),
                    "error_code": str(retry.get("error_code", "")),
                }).end(end_time=ended_ns)
            if step.error:
                span.set_status(Status(StatusCode.ERROR, str(step.status)))
            span.end(end_time=now)
        seg.turn_last_ns = max(seg.turn_last_ns, now)


def _awaits_result(step) -> bool:
    return isinstance(step.output, dict) and isinstance(step.output.get("awaiting"), dict)


def _awaited_reference(step) -> dict[str, Any]:
    """The awaited work's id as span attributes (``child_execution_id`` of a delegation)."""
    child = step.output["awaiting"].get("child_execution_id")
    return {"child_execution_id": child} if isinstance(child, int) else {}
