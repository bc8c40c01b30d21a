"""The approval storm: many paused runs, each resolved by several concurrent requests.

Shared by ``python -m benchmarks --approvals`` and tests/executions/test_approval_storm.py.
Every piece is River's own code path:

1. ``storm_prepare`` starts real runs of an agent whose ``write_back`` needs approval
   and runs their first segment with a scripted in-process model, so each one pauses
   at the gate with an open approval request (``execution_start`` and
   ``execution_run_segment``, nothing written by hand);
2. ``storm_resolve`` sends ``POST /api/v1/approvals/{id}/resolve`` over real HTTP, from
   ``racers`` threads that each walk the whole list, so every approval is raced by
   ``racers`` requests that disagree (approve, reject, edit-and-approve);
3. ``storm_resume`` runs the queued resume segments on a few threads (and each one a
   second time, as a duplicate delivery would), so every approved write reaches the
   target table through ``write_back``.

The caller queues nothing to Celery: ``resumes_recorded`` records each resume the
resolutions queue instead.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from unittest import mock

import httpx
from django.db import connection

from benchmarks.verdict import verdict
from executions import services, tasks
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest
from rivercore.contracts import ResponseStatus
from rivercore.llm import LLMReply, LLMToolCall
from rivercore.types.agents import Tier
from rivercore.types.governance import ResolutionStatus

DECISIONS = (
    {"status": ResolutionStatus.APPROVED.value},
    {"status": ResolutionStatus.REJECTED.value, "resolution_comment": "not this one"},
    {"status": ResolutionStatus.EDITED_APPROVED.value, "modified_args": None},  # filled per approval
)
TABLE = "charges"
PROPOSED_AMOUNT = 5
EDITED_AMOUNT = 7


def marker(index: int) -> str:
    """The value of ``status`` the run for approval ``index`` writes."""
    return f"storm-refund-{index}"


def write_args(*, data_source_id: int, index: int, amount: int = PROPOSED_AMOUNT) -> dict:
    return {"data_source_id": data_source_id, "table_name": TABLE, "operation": "insert",
            "data": {"customer_id": 1, "amount": amount, "status": marker(index)}}


class ScriptedModel:
    """An in-process model: the given tool call first, then a short final answer."""

    def __init__(self, call: dict | None = None):
        self.call = call

    def complete(self, *, messages, tools, tier, timeout_seconds) -> LLMReply:
        if self.call is not None:
            call, self.call = self.call, None
            return LLMReply(tool_calls=[LLMToolCall(id="call_storm", name="write_back", arguments=call)],
                            model="storm-script", provider="storm", tier=Tier.FAST, input_tokens=40,
                            output_tokens=10, cost_usd=0.0)
        return LLMReply(content="Done.", model="storm-script", provider="storm", tier=Tier.FAST, input_tokens=40,
                        output_tokens=4, cost_usd=0.0)


@dataclass(frozen=True)
class Paused:
    index: int
    execution_id: int
    approval_id: str


@dataclass
class StormResult:
    codes: Counter = field(default_factory=Counter)
    winners: dict[str, list[dict]] = field(default_factory=dict)  # approval id -> 200 bodies
    other: list[tuple[str, int, str]] = field(default_factory=list)  # anything not 200/409
    latencies: list[float] = field(default_factory=list)  # seconds, per request
    requests: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


@contextmanager
def resumes_recorded() -> Iterator[list[int]]:
    """Resumes (and approval notifications, post-processing) are recorded, not sent
    to a broker: the storm drives the segments itself."""
    queued: list[int] = []
    lock = threading.Lock()

    def record(execution_id, *args, **kwargs):
        with lock:
            queued.append(execution_id)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(tasks.run_segment, "delay", record))
        for task in (tasks.post_process, governance_tasks.notify_approval):
            stack.enter_context(mock.patch.object(task, "delay", lambda *a, **k: None))
        yield queued


def storm_prepare(*, agent, starter, data_source_id: int, count: int, threads: int = 4) -> list[Paused]:
    """``count`` real runs paused at the gate of their ``write_back`` (caller records
    the queued tasks, see ``resumes_recorded``)."""

    def one(index: int) -> Paused:
        try:
            execution = services.execution_start(agent=agent, request=services.person_run_request(
                agent=agent, user=starter, prompt=f"Refund #{index}"))
            services.execution_run_segment(
                execution_id=execution.pk,
                llm=ScriptedModel(write_args(data_source_id=data_source_id, index=index)),
            )
            approval = ApprovalRequest.objects.get(execution_id=execution.pk)
            return Paused(index=index, execution_id=execution.pk, approval_id=str(approval.pk))
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(count)))


def decision_for(paused: Paused, racer: int, *, data_source_id: int) -> dict:
    body = dict(DECISIONS[(paused.index + racer) % len(DECISIONS)])
    if body["status"] == ResolutionStatus.EDITED_APPROVED:
        body["modified_args"] = write_args(data_source_id=data_source_id, index=paused.index, amount=EDITED_AMOUNT)
    return body


def storm_resolve(*, base_url: str, tokens: list[str], paused: list[Paused], data_source_id: int,
                  timeout_seconds: float = 60.0) -> StormResult:
    """One thread per token; each resolves every approval in the same order, so the
    racers collide on each one. Returns what came back."""
    result = StormResult()
    lock = threading.Lock()
    start = threading.Barrier(len(tokens))

    def racer(number: int, token: str) -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                          timeout=timeout_seconds) as client:
            bodies = [decision_for(item, number, data_source_id=data_source_id) for item in paused]
            for item, body in zip(paused, bodies, strict=True):
                if body["status"] == ResolutionStatus.EDITED_APPROVED:
                    # Edited arguments are previewed before they are approved, as an
                    # approver does on the card (docs/approvals.md "Effect preview"): before
                    # the race, and not counted as a resolution.
                    shown = client.post(f"/api/v1/approvals/{item.approval_id}/preview",
                                        json={"modified_args": body["modified_args"]})
                    if shown.status_code == 200 and shown.json().get("preview_edit"):
                        body["preview_fingerprint"] = shown.json()["preview_edit"]["fingerprint"]
            start.wait(timeout=timeout_seconds)
            for item, body in zip(paused, bodies, strict=True):
                sent = time.perf_counter()
                response = client.post(f"/api/v1/approvals/{item.approval_id}/resolve", json=body)
                took = time.perf_counter() - sent
                with lock:
                    result.latencies.append(took)
                    result.codes[response.status_code] += 1
                    if response.status_code == 200:
                        result.winners.setdefault(item.approval_id, []).append(response.json())
                    elif response.status_code != 409:
                        result.other.append((item.approval_id, response.status_code, response.text[:300]))

    started = time.perf_counter()
    threads = [threading.Thread(target=racer, args=(n, t), name=f"storm-{n}") for n, t in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_seconds * max(1, len(paused)))
    result.seconds = time.perf_counter() - started
    result.requests = sum(result.codes.values())
    return result


def storm_resume(*, execution_ids: list[int], threads: int = 4) -> dict[int, list]:
    """Run each queued resume, then deliver it a second time. Returns, per run, what
    the two segment calls returned (the second must find nothing to do)."""

    def one(execution_id: int) -> tuple[int, list]:
        try:
            first = services.execution_run_segment(execution_id=execution_id, llm=ScriptedModel())
            again = services.execution_run_segment(execution_id=execution_id, llm=ScriptedModel())
            return execution_id, [first, again]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(pool.map(one, execution_ids))


# --- the benchmark (python -m benchmarks --approvals N) ------------------------------------------


@contextmanager
def http_server() -> Iterator[str]:
    """River's WSGI application on a free local port, one thread per request (each
    with its own database connection, closed after the request). Yields the base URL."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args):
            return None

    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, name="storm-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def storm_bench(*, workspace, starter, approvers: list, count: int, data_dir) -> list[str]:
    """Run the storm once against a fresh SQLite table and report it. Cleans up its
    runs, data source and file; the audit entries stay (the trail is append-only)."""
    import sqlite3
    import uuid

    from agents.models import Agent, AgentVersion
    from datasources.models import DataSource
    from datasources.services import data_source_create, data_source_delete, data_source_discover
    from executions.models import Execution
    from tenancy.services import token_issue

    name = f"storm-{uuid.uuid4().hex[:8]}"
    folder = data_dir / str(workspace.pk)  # each workspace's SQLite files live in its own folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);"
            "INSERT INTO customers VALUES (1, 'Ada');"
            "CREATE TABLE charges (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), "
            "amount NUMERIC NOT NULL, status TEXT);"
        )
    source = data_source_create(workspace=workspace, name=name, type="sqlite", connection_config={"path": path.name},
                                credentials={}, access_level=DataSource.AccessLevel.READ_WRITE)
    agent = Agent.objects.create(workspace=workspace, name=name, business_function="operations", domain="Benchmark",
                                 owner=starter, status=Agent.Status.ACTIVE)
    try:
        data_source_discover(data_source=source)
        version = AgentVersion.objects.create(
            agent=agent, version=1, goal="Refund.", instructions="Refund, with approval.",
            action_level="act_with_approval", model_config={}, tools=["write_back"],
            approval_rules={"require_approval_for": ["write_back"], "approver_roles": ["admin", "editor"],
                            "auto_approve_conditions": [], "escalation_timeout_minutes": 60},
        )
        version.data_sources.set([source])
        agent.current_version = version
        agent.save(update_fields=["current_version"])
        tokens = [token_issue(user=user).plaintext for user in approvers]
        with resumes_recorded() as queued:
            started = time.perf_counter()
            paused = storm_prepare(agent=agent, starter=starter, data_source_id=source.pk, count=count)
            prepared = time.perf_counter() - started
            queued.clear()
            with http_server() as base_url:
                result = storm_resolve(base_url=base_url, tokens=tokens, paused=paused, data_source_id=source.pk)
            started = time.perf_counter()
            resumed = storm_resume(execution_ids=sorted(set(queued)))
            resume_seconds = time.perf_counter() - started
        decided = {str(pk): status for pk, status in
                   ApprovalRequest.objects.filter(agent_id=agent.pk).values_list("pk", "status")}
        with sqlite3.connect(path) as db:
            written = Counter(status for (status,) in db.execute("SELECT status FROM charges"))
        wrong = 0
        for item in paused:
            want = 0 if decided[item.approval_id] == ApprovalRequest.Status.REJECTED else 1
            wrong += written.get(marker(item.index), 0) != want
        once = sum(1 for first, again in resumed.values() if first == ResponseStatus.SUCCESS and again is None)
        queued_once = Counter(queued) == Counter(p.execution_id for p in paused)
    finally:
        Execution.objects.filter(agent=agent).delete()
        ApprovalRequest.objects.filter(agent_id=agent.pk).delete()
        agent.delete()
        data_source_delete(data_source=source)
        path.unlink(missing_ok=True)
    ok = (not result.other and result.codes[200] == count and set(result.codes) <= {200, 409} and wrong == 0
          and once == count and queued_once)
    ms = [x * 1000 for x in result.latencies]
    return [
        f"approval storm: {count} paused runs (prepared in {prepared:.1f} s), each resolved by {len(tokens)} "
        f"concurrent HTTP requests",
        f"  resolve requests: {result.requests} in {result.seconds:.1f} s = {result.per_second:.0f} requests/s; "
        f"latency p50 {_percentile(ms, 50):.1f} ms, p99 {_percentile(ms, 99):.1f} ms",
        f"  status codes: {dict(sorted(result.codes.items()))} (anything but 200/409: {len(result.other)})",
        f"  decisions: {dict(Counter(decided.values()))}; resumes queued once each: {queued_once}",
        f"  resumed {once}/{count} runs once in {resume_seconds:.1f} s (a second delivery did nothing); "
        f"rows written wrong: {wrong}",
        f"  {verdict(ok, target=False)}: only 200/409, one decision and one resume per run, each approved "
        "write written exactly once",
    ]
