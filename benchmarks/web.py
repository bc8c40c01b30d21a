"""The web-facing sections of ``make bench``: River served by ``daphne`` in production
shape (``DEBUG=false``, this process's keys, database and Redis, requests arriving as from
the TLS proxy), driven over real HTTP and WebSocket, with a Celery worker in production
shape (prefork, two processes hosting runs) running throughout and calling a fake
OpenAI-compatible server here. ``web_bench`` yields report lines for run creation (the
web process's CPU per creation, read from /proc, beside throughput), approval resume
(approve POST to the resumed run's next model call) and event fan-out with real runs
active (event stored to WebSocket client), each figure with its target.

Paused runs are made cheaply: one real run is driven to the gate of its ``write_back``
(``approval_storm``'s scripted model), then its rows (run, steps, events, approval
request) are copied with bulk inserts, each copy with a prompt of its own by which the
fake model tells the runs apart. Times cross processes as ``time.monotonic()``
(CLOCK_MONOTONIC, one clock for the machine), and the fan-out's as wall-clock time
(the events carry the time they were stored).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from benchmarks.verdict import verdict

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SLUG = "river-bench-web"
TARGET_RUNS_PER_SECOND, TARGET_CREATE_CPU_MS = 150, 4.0  # issue 27: 16 clients, workers running
TARGET_RESUME_P50_MS, TARGET_RESUME_GROWTH = 40, 1.2
TARGET_FANOUT_P50_MS, TARGET_FANOUT_P99_MS = 30, 250  # event stored -> client, runs active
WARMUP = 3
FANOUT_PROMPT = "Fan-out run"  # the fake model makes these runs call a tool FANOUT_TURNS times
FANOUT_TOOL = "search_catalog"  # a reasoning tool: a catalog read, no data source touched
FANOUT_MODEL_SECONDS = 1.0  # the fake model's time per reply to a fan-out run, as a provider's
RECEIPT_WAIT = 15.0  # seconds the WebSocket clients wait, after the last run ended, for events still on their way
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BATCH = 2000


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] * 1000 if ordered else float("nan")


def _check(ok: bool, text: str, *, judged: bool = False) -> str:
    """``judged``: a check of correctness, PASS or FAIL even in a smoke run."""
    return f"  {verdict(ok, target=not judged)}: {text}"


@dataclass(frozen=True)
class WebSize:
    """How much each web section does; the defaults are the full benchmark's."""

    clients: int = 16  # concurrent HTTP clients creating runs
    creations: int = 400  # runs those clients create
    single_requests: int = 100  # runs one client creates alone, first
    paused: Sequence[int] = (10, 10000)  # paused runs waiting, one resume measurement each
    approvals: int = 50  # approvals timed per K (after WARMUP)
    broker_samples: int = 200  # broker round trips
    active_runs: int = 200  # real runs making progress, a WebSocket client following each
    fanout_turns: int = 4  # tool turns of each of those runs (then a final answer)
    in_process: int = 200  # creations timed in this process (Django and DRF without a server)
    parts: Sequence[str] = ("creation", "resume", "fanout")  # which of the three to run


SMOKE = WebSize(clients=2, creations=10, single_requests=5, paused=(2, 4), approvals=2, broker_samples=10,
                active_runs=3, fanout_turns=1, in_process=10)


def web_bench(size: WebSize = WebSize()) -> Iterator[str]:
    """Report lines for the three sections. Needs REDIS_URL (the server's broker and
    channel layer). One Celery worker in production shape (prefork, 2 processes, each
    hosting runs) runs throughout, so every section is measured with workers running.
    Deletes its runs, agents, data source and tokens at the end."""
    from django.test.utils import override_settings

    if not settings.REDIS_URL:
        yield "web sections skipped: they need REDIS_URL (the server's broker and channel layer)"
        return
    fx = _fixtures()
    try:
        with override_settings(DEBUG=False), tempfile.TemporaryDirectory(prefix="river-bench-web-") as tmp, \
                _ModelServer(fanout_turns=size.fanout_turns) as model, daphne_serve(Path(tmp)) as (port, daphne_pid), \
                _worker(Path(tmp), model) as workers:
            yield (f"web: daphne on 127.0.0.1:{port}, DEBUG=false, database {connection.settings_dict['NAME']}, "
                   f"Redis {settings.REDIS_URL}; a Celery worker (prefork, 2 processes hosting runs); load average "
                   f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
            if "creation" in size.parts:
                yield from _creation(port, daphne_pid, fx, size)
            if "resume" in size.parts:
                yield from _resume(port, fx, model, size, cpu_of={"daphne": [daphne_pid], "worker": workers})
            if "fanout" in size.parts:
                yield from _fanout(port, fx, size, daphne_pid=daphne_pid, worker_pids=workers)
            yield f"web: load average {os.getloadavg()[0]:.1f} at the end"
    finally:
        _cleanup(fx)


# --- fixtures and processes ---------------------------------------------------------------


@dataclass
class _Fixtures:
    workspace: object
    requester: object  # starts the runs; may not approve them
    runner: object  # automated: runs created over HTTP, and the fan-out's runs
    gated: object  # act_with_approval: its write_back pauses for an approver
    source: object
    sqlite_path: Path
    tokens: dict[str, str]  # "requester" / "approver" -> plaintext, shown once
    token_ids: list[int]


def _fixtures() -> _Fixtures:
    from django.contrib.auth import get_user_model

    from datasources.models import DataSource
    from datasources.services import data_source_create, data_source_discover
    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role
    from tenancy.services import token_issue

    org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "River web benchmark"})
    workspace, _ = Workspace.objects.get_or_create(organization=org, slug=SLUG, defaults={"name": "Web benchmark"})
    users = {}
    for name, role in (("requester", Role.EDITOR), ("approver", Role.ADMIN)):
        users[name], _ = get_user_model().objects.get_or_create(username=f"{SLUG}-{name}")
        Membership.objects.get_or_create(workspace=workspace, user=users[name], defaults={"role": role})
    tag = uuid.uuid4().hex[:8]
    path = settings.RIVER_SQLITE_DATA_DIR / str(workspace.pk) / f"web-{tag}.sqlite3"  # the workspace's folder
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);"
                         "INSERT INTO customers VALUES (1, 'Ada'); CREATE TABLE charges (id INTEGER PRIMARY KEY, "
                         "customer_id INTEGER REFERENCES customers(id), amount NUMERIC NOT NULL, status TEXT);")
    source = data_source_create(workspace=workspace, name=f"web-{tag}", type="sqlite", credentials={},
                                connection_config={"path": path.name}, access_level=DataSource.AccessLevel.READ_WRITE)
    data_source_discover(data_source=source)
    issued = {name: token_issue(user=user, name="web bench") for name, user in users.items()}
    return _Fixtures(
        workspace=workspace, requester=users["requester"], source=source, sqlite_path=path,
        runner=_agent(workspace, users["requester"], f"web-{tag}", "automated", [FANOUT_TOOL]),
        gated=_agent(workspace, users["requester"], f"web-gated-{tag}", "act_with_approval", ["write_back"], source),
        tokens={name: t.plaintext for name, t in issued.items()}, token_ids=[t.token.pk for t in issued.values()])


def _agent(workspace, owner, name: str, level: str, tools: list[str], source=None):
    from agents.models import Agent, AgentVersion

    agent = Agent.objects.create(workspace=workspace, name=name, business_function="operations", domain="Benchmark",
                                 owner=owner, status=Agent.Status.ACTIVE)
    version = AgentVersion.objects.create(
        agent=agent, version=1, goal="Refund.", instructions="Refund, with approval.", action_level=level,
        model_config={}, tools=tools,
        approval_rules={"require_approval_for": tools if source else [], "approver_roles": ["admin"],
                        "auto_approve_conditions": [], "escalation_timeout_minutes": 60})
    if source is not None:
        version.data_sources.set([source])
    agent.current_version = version
    agent.save(update_fields=["current_version"])
    return agent


def _cleanup(fx: _Fixtures) -> None:
    from datasources.services import data_source_delete
    from executions.models import Execution
    from governance.models import ApprovalRequest
    from tenancy.models import AccessToken

    for agent in (fx.runner, fx.gated):
        Execution.objects.filter(agent=agent).delete()
        ApprovalRequest.objects.filter(agent_id=agent.pk).delete()
        agent.delete()
    data_source_delete(data_source=fx.source)
    fx.sqlite_path.unlink(missing_ok=True)
    AccessToken.objects.filter(pk__in=fx.token_ids).delete()


def child_env(**extra: str) -> dict[str, str]:
    """Production settings with this process's keys (the encryption key decrypts the data
    source's credentials, the audit keys sign the same chains), database and Redis."""
    audit = ",".join(f"{kid}:{base64.b64encode(key).decode()}" for kid, key in settings.RIVER_AUDIT_HMAC_KEYS.items())
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "riverapp.settings", "PYTHONPATH": str(ROOT), "DEBUG": "false",
            "SECRET_KEY": settings.SECRET_KEY, "RIVER_ENCRYPTION_KEY": settings.RIVER_ENCRYPTION_KEY,
            "RIVER_AUDIT_HMAC_KEYS": audit, "ALLOWED_HOSTS": "127.0.0.1", "RIVER_BEHIND_TLS_PROXY": "true",
            "DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": settings.REDIS_URL, "LOG_LEVEL": "WARNING",
            "RIVER_SQLITE_DATA_DIR": str(settings.RIVER_SQLITE_DATA_DIR), **extra}


@contextmanager
def _process(args: list[str], *, env: dict, log: Path, ready: Callable[[], bool]) -> Iterator[int]:
    """A child process, stopped (SIGTERM, then SIGKILL) however the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        deadline = time.monotonic() + 120
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start; its log ends:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def daphne_serve(tmp: Path, env: dict | None = None) -> Iterator[tuple[int, int]]:
    """Daphne serving River on a free port (with ``env``, else the benchmark's child
    environment): (its port, its process id)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def healthy() -> bool:
        probe = Client(port, "")
        try:
            return probe.request("GET", "/health")[0] == 200
        except OSError:
            return False
        finally:
            probe.conn.close()

    with _process([str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "riverapp.asgi:application"],
                  env=env if env is not None else child_env(), log=tmp / "daphne.log", ready=healthy) as pid:
        yield port, pid


@contextmanager
def _worker(tmp: Path, model: _ModelServer) -> Iterator[Callable[[], list[int]]]:
    """A Celery worker as docs/production.md starts one (prefork, 2 processes, each hosting
    runs), calling the fake model. Yields a function giving its process ids (the main
    process and its children)."""
    from benchmarks.workers import Workers, process_children

    env = child_env(RIVER_LLM_MODEL="openai/bench-web", RIVER_LLM_BASE_URL=model.base_url,
                     RIVER_LLM_API_KEY="bench-web", RIVER_BROKER_URL=settings.CELERY_BROKER_URL)
    workers = Workers(env, tmp, concurrency=2, name=SLUG)
    workers.start()
    try:
        workers.wait_ready()
        yield lambda: [pid for proc in workers.alive() for pid in (proc.pid, *process_children(proc.pid))]
    finally:
        workers.stop_all()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _cpu_of(pids: Sequence[int]) -> float:
    """``_cpu_seconds`` summed over processes; one that is gone counts nothing."""
    total = 0.0
    for pid in pids:
        try:
            total += _cpu_seconds(pid)
        except OSError:
            pass
    return total


class Client:
    """One keep-alive HTTP/1.1 connection, arriving as from River's TLS proxy."""

    def __init__(self, port: int, token: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "X-Forwarded-Proto": "https"}

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, float]:
        sent = time.monotonic()
        self.conn.request(method, path, None if body is None else json.dumps(body), self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, data, time.monotonic() - sent


class _ModelServer:
    """Chat completions, noting when each run (told apart by its prompt) called. Runs of
    the fan-out (``FANOUT_PROMPT``) call ``FANOUT_TOOL`` ``fanout_turns`` times (each with its own query),
    each reply after ``FANOUT_MODEL_SECONDS``, then answer; every other run answers at
    once. A request for a stream (River streams a watched run's replies) is answered
    with the same reply as server-sent events."""

    def __init__(self, *, fanout_turns: int = 0) -> None:
        self.calls: dict[str, float] = {}
        self.noted = threading.Condition()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a provider's API
            disable_nagle_algorithm = True  # headers and body leave in two writes

            def do_POST(self):  # noqa: N802 - http.server naming
                arrived = time.monotonic()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                messages = body.get("messages", [])
                prompt = str(next((m.get("content") for m in messages if m.get("role") == "user"), ""))
                with model.noted:
                    model.calls[prompt] = arrived
                    model.noted.notify_all()
                message: dict = {"role": "assistant", "content": "Done."}
                if prompt.startswith(FANOUT_PROMPT):
                    time.sleep(FANOUT_MODEL_SECONDS)
                    turn = sum(m.get("role") == "tool" for m in messages)
                    if turn < fanout_turns:  # a different question each turn: the loop guard stops identical calls
                        message = {"role": "assistant", "content": None, "tool_calls": [{
                            "id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                            "function": {"name": FANOUT_TOOL,
                                         "arguments": json.dumps({"query": f"fan-out turn {turn}"})}}]}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                usage = {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
                if body.get("stream"):
                    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                             "model": "bench"}
                    delta = dict(message)
                    for n, call in enumerate(delta.get("tool_calls") or []):
                        call["index"] = n
                    pieces = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                              {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                               "usage": usage}]
                    data = "".join(f"data: {json.dumps(p)}\n\n" for p in pieces).encode() + b"data: [DONE]\n\n"
                    kind = "text/event-stream"
                else:
                    data = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                                       "model": "bench", "usage": usage, "choices": [
                                           {"index": 0, "finish_reason": finish, "message": message}]}).encode()
                    kind = "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> _ModelServer:
        threading.Thread(target=self.httpd.serve_forever, name="bench-web-model", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def called_at(self, prompt: str, timeout: float = 30.0) -> float:
        with self.noted:
            if not self.noted.wait_for(lambda: prompt in self.calls, timeout):
                raise RuntimeError(f"no model call for {prompt!r} within {timeout:g} s")
            return self.calls.pop(prompt)


# --- 1. run creation ----------------------------------------------------------------------


def _creation(port: int, daphne_pid: int, fx: _Fixtures, size: WebSize) -> Iterator[str]:
    """Runs created over HTTP while the worker runs them. The figure that decides is the
    web process's CPU per creation (Daphne's user + system time over the concurrent phase,
    from /proc), beside throughput; Daphne's own share is that minus the same request's
    CPU in Django and DRF alone, timed in this process without a server."""

    path, body = f"/api/v1/agents/{fx.runner.pk}/run", {"input_prompt": "Web bench run."}
    alone = Client(port, fx.tokens["requester"])
    single = [alone.request("POST", path, body)[2] for _ in range(5 + size.single_requests)][5:]  # 5 warm-up
    health_count = max(50, size.single_requests * 10)
    cpu_before = _cpu_seconds(daphne_pid)
    for _ in range(health_count):
        alone.request("GET", "/health")
    health_cpu_ms = (_cpu_seconds(daphne_pid) - cpu_before) / health_count * 1000
    alone.conn.close()
    clients = size.clients
    tickets, lock, latencies, codes = iter(range(size.creations)), threading.Lock(), [], Counter()
    start = threading.Barrier(clients + 1)

    def client() -> None:
        conn = Client(port, fx.tokens["requester"])
        start.wait()
        while next(tickets, None) is not None:  # one C call: atomic under the GIL
            status, _, took = conn.request("POST", path, body)
            with lock:
                latencies.append(took)
                codes[status] += 1
        conn.conn.close()

    threads = [threading.Thread(target=client, name=f"bench-web-{n}") for n in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began, cpu_before = time.monotonic(), _cpu_seconds(daphne_pid)
    for thread in threads:
        thread.join()
    elapsed, cpu = time.monotonic() - began, _cpu_seconds(daphne_pid) - cpu_before
    rate, p50 = codes[202] / elapsed, _ms(latencies, 50)
    cpu_ms = cpu / max(1, sum(codes.values())) * 1000
    django_ms = _creation_in_process(path, body, fx, size.in_process)
    yield (f"run creation: POST /api/v1/agents/{{id}}/run, bearer token, the worker running the runs (load average "
           f"{os.getloadavg()[0]:.1f})")
    yield f"  1 client: {len(single)} requests, latency p50 {_ms(single, 50):.1f} ms, p99 {_ms(single, 99):.1f} ms"
    yield (f"  {clients} clients: {codes[202]} runs, {rate:.0f} runs/s; latency p50 {p50:.1f} ms, p99 "
           f"{_ms(latencies, 99):.1f} ms; status codes {dict(sorted(codes.items()))}")
    yield (f"  web process CPU: {cpu_ms:.2f} ms per creation ({cpu:.2f} s over {elapsed:.2f} s, "
           f"{cpu / elapsed * 100:.0f}% of a core); Django + DRF alone {django_ms:.2f} ms per creation (in process, "
           f"no server), so Daphne's own share {cpu_ms - django_ms:.2f} ms; GET /health {health_cpu_ms:.2f} ms")
    yield _check(codes[202] == size.creations, f"{codes[202]} of {size.creations} creations answered 202",
                 judged=True)
    yield _check(cpu_ms <= TARGET_CREATE_CPU_MS, f"{cpu_ms:.2f} ms of web CPU per creation "
                 f"(target <= {TARGET_CREATE_CPU_MS:g} ms)")
    yield _check(rate >= TARGET_RUNS_PER_SECOND, f"{rate:.0f} runs/s with {clients} clients "
                 f"(target >= {TARGET_RUNS_PER_SECOND})")
    _runs_delete_settled(fx.runner)


def _runs_delete_settled(agent, timeout: float = 300.0) -> None:
    """Delete the agent's runs once the worker has finished and post-processed them (a
    delete racing the worker's writes can deadlock with them)."""
    from django.db.models import Q

    from executions.models import Execution

    runs = Execution.objects.filter(agent=agent)
    deadline = time.monotonic() + timeout
    while runs.filter(~Q(status__in=Execution.TERMINAL) | Q(post_processed_at__isnull=True)).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not finish the runs of {agent.name} within {timeout:g} s")
        time.sleep(0.2)
    runs.delete()


def _creation_in_process(path: str, body: dict, fx: _Fixtures, count: int) -> float:
    """CPU milliseconds of one creation in Django and DRF (this thread's CPU time, through
    Django's test client: the same middleware, view, statements and task message)."""
    from django.test import Client
    from django.test.utils import override_settings

    with override_settings(ALLOWED_HOSTS=["testserver"]):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {fx.tokens['requester']}", HTTP_X_FORWARDED_PROTO="https")
        for _ in range(5):  # warm-up
            client.post(path, body, content_type="application/json")
        began = time.thread_time()
        for _ in range(count):
            client.post(path, body, content_type="application/json")
        return (time.thread_time() - began) / count * 1000


# --- 2. approval resume -------------------------------------------------------------------


def _resume(port: int, fx: _Fixtures, model: _ModelServer, size: WebSize,
            cpu_of: dict[str, Sequence[int] | Callable[[], list[int]]]) -> Iterator[str]:
    """``cpu_of``: the processes whose CPU time is divided by the timed resumes, by name
    (process ids, or a function giving them when they are read)."""
    from benchmarks.approval_storm import resumes_recorded, storm_prepare
    from executions.models import Execution

    paused = sorted(size.paused)
    broker = _broker_round_trip(size.broker_samples)
    rtt = _ms(broker, 50)
    with resumes_recorded():  # the template's first segment runs here; nothing is queued
        template = storm_prepare(agent=fx.gated, starter=fx.requester, data_source_id=fx.source.pk, count=1,
                                 threads=1)[0]
    yield (f"approval resume: POST /api/v1/approvals/{{id}}/resolve -> the worker's run host makes the run's "
           f"next model call; {size.approvals} approvals per K after {WARMUP} warm-up (load average "
           f"{os.getloadavg()[0]:.1f})")
    yield f"  broker round trip (kombu publish + consume, same Redis): p50 {rtt:.2f} ms, p99 {_ms(broker, 99):.2f} ms"
    p50s = {}
    approver = Client(port, fx.tokens["approver"])  # the warm-up waits out section 1's stale messages
    for k in paused:
        waiting = Execution.objects.filter(agent=fx.gated, status=Execution.Status.AWAITING_APPROVAL).count()
        _copy_paused(template, [f"Refund, waiting {n}" for n in range(waiting, k - 1)])  # + the one approved: K
        samples = [_approve_one(approver, template, model) for _ in range(WARMUP)]
        pids = {name: list(p() if callable(p) else p) for name, p in cpu_of.items()}
        before = {name: _cpu_of(p) for name, p in pids.items()}
        samples = [_approve_one(approver, template, model) for _ in range(size.approvals)]
        cpu = {name: (_cpu_of(p) - before[name]) / size.approvals * 1000 for name, p in pids.items()}
        answered, called, tool = (list(column) for column in zip(*samples, strict=True))
        p50s[k] = _ms(called, 50)
        yield (f"  K={k} paused: POST -> 200 (message on the broker) p50 {_ms(answered, 50):.1f} ms, p99 "
               f"{_ms(answered, 99):.1f} ms; POST -> model call p50 {p50s[k]:.1f} ms, p99 {_ms(called, 99):.1f} ms "
               f"(of which the approved write_back itself p50 {_ms(tool, 50):.0f} ms); CPU per resume "
               + ", ".join(f"{name} {ms:.1f} ms" for name, ms in cpu.items())
               + f" (the worker's to the run's end); load average {os.getloadavg()[0]:.1f}")
        yield _check(p50s[k] <= TARGET_RESUME_P50_MS, f"K={k} resume p50 {p50s[k]:.1f} ms "
                     f"(target <= {TARGET_RESUME_P50_MS} ms)")
    approver.conn.close()
    if len(p50s) > 1:
        low, high = min(p50s), max(p50s)
        ratio = p50s[high] / p50s[low]
        yield _check(ratio <= TARGET_RESUME_GROWTH, f"resume p50 K={high} / K={low} = {ratio:.2f} "
                     f"(target <= {TARGET_RESUME_GROWTH})")


def _broker_round_trip(count: int) -> list[float]:
    from riverapp.celery import app

    samples = []
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue(f"{SLUG}-rtt-{uuid.uuid4().hex[:8]}")
        try:
            for n in range(20 + count):  # 20 warm-up
                sent = time.monotonic()
                queue.put({"n": n})
                queue.get(timeout=5).ack()
                samples.append(time.monotonic() - sent)
        finally:
            queue.queue.delete()
            queue.close()
    return samples[20:]


def _copy_paused(template, prompts: list[str]) -> list[tuple[int, str]]:
    """Copies of the template's paused run, one per prompt: (execution id, approval id)."""
    from executions.models import Execution, ExecutionEvent, ExecutionStep
    from governance.models import ApprovalRequest

    def copy(row, **changes):
        fields = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields if not f.primary_key}
        return type(row)(**{**fields, **changes})

    run = Execution.objects.get(pk=template.execution_id)
    steps, events = ExecutionStep.objects.filter(execution=run), ExecutionEvent.objects.filter(execution=run)
    approval = ApprovalRequest.objects.get(pk=template.approval_id)
    with transaction.atomic():
        runs = Execution.objects.bulk_create([copy(run, input_prompt=p) for p in prompts], batch_size=BATCH)
        for model, rows in ((ExecutionStep, list(steps)), (ExecutionEvent, list(events))):
            model.objects.bulk_create([copy(row, execution_id=r.pk) for r in runs for row in rows], batch_size=BATCH)
        approvals = ApprovalRequest.objects.bulk_create([copy(approval, execution_id=r.pk) for r in runs],
                                                        batch_size=BATCH)
    return [(r.pk, str(a.pk)) for r, a in zip(runs, approvals, strict=True)]


def _approve_one(approver: Client, template, model: _ModelServer) -> tuple[float, float, float]:
    """(POST -> 200, POST -> the worker's model call, the write_back's own time) in seconds.
    Returns once the run is finished and post-processed, so the worker is idle again."""
    from executions.models import Execution, ExecutionStep

    prompt = f"Refund {uuid.uuid4().hex[:12]}"
    execution_id, approval_id = _copy_paused(template, [prompt])[0]
    sent = time.monotonic()
    status, data, answered = approver.request("POST", f"/api/v1/approvals/{approval_id}/resolve",
                                              {"status": "approved"})
    if status != 200:
        raise RuntimeError(f"resolve answered {status}: {data[:300]!r}")
    called = model.called_at(prompt) - sent
    done = Execution.objects.filter(pk=execution_id, status__in=Execution.TERMINAL, post_processed_at__isnull=False)
    deadline = time.monotonic() + 30
    while not done.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {execution_id} not finished 30 s after its approval")
        time.sleep(0.01)
    tool_ms = ExecutionStep.objects.filter(execution_id=execution_id, step_type="observation",
                                           tool_name="write_back").values_list("duration_ms", flat=True).first()
    return answered, called, (tool_ms or 0) / 1000


# --- 3. event fan-out ---------------------------------------------------------------------


def _fanout(port: int, fx: _Fixtures, size: WebSize, *, daphne_pid: int,
            worker_pids: Callable[[], list[int]]) -> Iterator[str]:
    """Real runs on the worker (a tool call each turn, the fake model taking
    ``FANOUT_MODEL_SECONDS`` a reply), a WebSocket client following each from before it
    is claimed. Latency is the event's stored time (``created_at``, set just before the
    statement that stores it) to its receipt, on the machine's wall clock; every stored
    event must arrive. The worker's processes' CPU and Daphne's over the runs (from the
    first run sent to the last event received) are reported per stored event."""
    from unittest import mock

    from executions.models import Execution, ExecutionEvent
    from executions.services import execution_start, person_run_request
    from executions.tasks import run_segment

    count = size.active_runs
    yield (f"event fan-out with runs active: {count} runs of {size.fanout_turns} tool turns on the worker "
           f"(model {FANOUT_MODEL_SECONDS:g} s a reply), a WebSocket client per run (/ws/executions/{{id}}/, "
           f"bearer); event stored -> received (load average {os.getloadavg()[0]:.1f})")
    with mock.patch("executions.services.start.segment_queue_on_commit"):  # sent once the clients listen
        runs = [execution_start(agent=fx.runner, request=person_run_request(
            agent=fx.runner, user=fx.requester, prompt=f"{FANOUT_PROMPT} {n}", source="api")) for n in range(count)]
    ids = [run.pk for run in runs]

    def start_runs() -> None:
        for run_id in ids:
            run_segment.delay(run_id)

    def runs_ended(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while Execution.objects.filter(pk__in=ids).exclude(status__in=Execution.TERMINAL).exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    pids = worker_pids()
    cpu: dict[str, float] = {}

    def measured_start() -> None:
        cpu["worker"], cpu["web"] = -sum(map(_cpu_seconds, pids)), -_cpu_seconds(daphne_pid)
        start_runs()

    def measured_end() -> None:
        cpu["worker"] += sum(map(_cpu_seconds, pids))
        cpu["web"] += _cpu_seconds(daphne_pid)

    began = time.monotonic()
    receipts = _fan_once(port, fx.tokens["requester"], ids, start_runs=measured_start,
                                runs_ended=lambda: runs_ended(60 + count * (size.fanout_turns + 1) * 0.5),
                                stored_count=ExecutionEvent.objects.filter(execution_id__in=ids).count,
                                received_all=measured_end)
    took = time.monotonic() - began
    received, ended = receipts.received, receipts.ended
    stored = {(e, seq): kind for e, seq, kind in ExecutionEvent.objects.filter(execution_id__in=ids)
              .values_list("execution_id", "seq", "event_type")}
    latencies = [lag for key, (_, lag) in received.items() if key in stored]
    started = [lag for (_, _), (kind, lag) in received.items() if kind == "run_started"]
    missing = Counter(stored[key] for key in set(stored) - set(received))
    lost = sum(missing.values())
    p50, p99 = _ms(latencies, 50), _ms(latencies, 99)
    yield (f"  {count} runs {'ended' if ended else 'NOT all ended'} in {took:.1f} s; {len(stored)} events stored, "
           f"{len(latencies)} received: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {_ms(latencies, 100):.0f} ms; "
           f"run_started p50 {_ms(started, 50):.1f} ms, max {_ms(started, 100):.0f} ms")
    if stored:
        per_event = 1000 / len(stored)
        yield (f"  CPU per stored event, the runs' whole work included: worker {cpu['worker'] * per_event:.2f} ms "
               f"({len(pids)} processes, {cpu['worker']:.1f} CPU-s), web (Daphne) "
               f"{cpu['web'] * per_event:.2f} ms ({cpu['web']:.1f} CPU-s); load average "
               f"{os.getloadavg()[0]:.1f}")
    outcomes = Counter(Execution.objects.filter(pk__in=ids).values_list("status", flat=True))
    answered = outcomes.get(Execution.Status.COMPLETED, 0)
    yield _check(ended, f"every run ended ({count})", judged=True)
    yield _check(answered == count, f"{answered} of {count} runs answered after their {size.fanout_turns} tool turns"
                 + ("" if answered == count else f": {dict(outcomes)}"), judged=True)
    if receipts.closed_early:
        codes = Counter(code for _, code, _ in receipts.closed_early)
        yield (f"  {len(receipts.closed_early)} of {count} sockets closed by the server while their runs went on "
               f"(close codes {dict(codes)}; runs {sorted(r for r, _, _ in receipts.closed_early)[:10]})")
    yield _check(not lost, f"{lost} of {len(stored)} stored events not received (target: none)"
                 + (f": {dict(missing)}" if lost else ""), judged=True)
    yield _check(p50 <= TARGET_FANOUT_P50_MS, f"p50 {p50:.1f} ms with {count} runs active "
                 f"(target <= {TARGET_FANOUT_P50_MS} ms)")
    yield _check(p99 <= TARGET_FANOUT_P99_MS, f"p99 {p99:.1f} ms with {count} runs active "
                 f"(target <= {TARGET_FANOUT_P99_MS} ms)")
    _runs_delete_settled(fx.runner)


def _fan_once(port: int, token: str, run_ids: list[int], *, start_runs: Callable[[], None],
              runs_ended: Callable[[], bool], stored_count: Callable[[], int],
              received_all: Callable[[], None] = lambda: None,
              ) -> FanReceipts:
    """Opens the clients, starts the runs, waits for them to end; returns each event
    received, {(run id, seq): (type, seconds from stored to received)}, and whether the
    runs ended. ``received_all`` is called once the clients hold every stored event (or
    gave up waiting), before they close."""
    spawn = multiprocessing.get_context("spawn")  # never fork a process with threads and connections
    ours, theirs = spawn.Pipe()
    child = spawn.Process(target=_ws_clients, args=(f"ws://127.0.0.1:{port}", token, run_ids, theirs),
                          name="bench-web-sockets", daemon=True)
    child.start()
    theirs.close()  # the child holds its own end: its exit is then an EOF here, not a silence
    try:
        kind, detail = ours.recv() if ours.poll(180) else ("error", "no answer within 180 s")
        if kind != "ready":
            raise RuntimeError(f"WebSocket clients did not connect: {detail}")
        time.sleep(1.0)  # the handshakes' work in the server settles
        start_runs()
        ended = runs_ended()
        ours.send(stored_count())  # the clients stop once they hold that many events, or after RECEIPT_WAIT
        if not ours.poll(RECEIPT_WAIT + 60):
            raise RuntimeError("the WebSocket clients sent no receipts in time")
        try:
            if ours.recv() != "received":  # every event is in (or the wait is over); the sockets are still open
                raise RuntimeError("the WebSocket clients did not say they were done")
            received_all()
            ours.send("close")
            received, closed_early = ours.recv()
        except EOFError:
            child.join(timeout=15)
            raise RuntimeError(f"the WebSocket clients exited ({child.exitcode}) without their receipts; "
                               "their traceback is on stderr") from None
    finally:
        child.join(timeout=15)
        if child.is_alive():
            child.kill()
    return FanReceipts({(run_id, seq): (kind, at - stored_at) for run_id, seq, kind, stored_at, at in received},
                       ended, closed_early)


@dataclass
class FanReceipts:
    received: dict[tuple[int, int], tuple[str, float]]  # (run id, seq) -> (type, seconds stored -> received)
    ended: bool  # every run ended in time
    closed_early: list[tuple[int, int | None, str | None]]  # (run id, close code, reason) closed by the server


def _ws_clients(base: str, token: str, run_ids: list[int], pipe) -> None:
    """Child process: one socket per run; sends ("ready", ""), then, once told how many
    events to expect, the receipts
    as (run id, seq, type, stored at, received at), both on the wall clock."""
    asyncio.run(_ws_follow(base, token, run_ids, pipe))


async def _ws_follow(base: str, token: str, run_ids: list[int], pipe) -> None:
    import datetime as dt

    from websockets.asyncio.client import connect

    received: list[tuple[int, int, str, float, float]] = []
    closed_early: list[tuple[int, int | None, str | None]] = []
    closing = False
    opening = asyncio.Semaphore(20)

    async def open_one(run_id: int):
        async with opening:
            return await connect(f"{base}/ws/executions/{run_id}/", subprotocols=["bearer", token], open_timeout=60)

    async def follow(sock, run_id: int) -> None:
        try:
            await read(sock, run_id)
        finally:
            if not closing:  # the server (or the network) closed it while the runs went on
                closed_early.append((run_id, sock.close_code, sock.close_reason))

    async def read(sock, run_id: int) -> None:
        async for text in sock:
            at = time.time()
            # Only the stored (numbered) events are measured; partial pieces and status blocks are skipped.
            event = json.loads(text)
            if isinstance(seq := event.get("seq"), int) and event.get("created_at"):
                stored_at = dt.datetime.fromisoformat(event["created_at"].replace("Z", "+00:00")).timestamp()
                received.append((run_id, seq, str(event.get("type")), stored_at, at))

    try:
        sockets = await asyncio.gather(*(open_one(r) for r in run_ids))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        pipe.send(("error", repr(exc)))
        return
    readers = [asyncio.create_task(follow(s, r)) for s, r in zip(sockets, run_ids, strict=True)]
    pipe.send(("ready", ""))
    expected = await asyncio.to_thread(pipe.recv)  # every run has ended: the events they stored
    deadline = time.monotonic() + RECEIPT_WAIT
    while time.monotonic() < deadline and len({(r[0], r[1]) for r in received}) < expected:
        await asyncio.sleep(0.05)
    pipe.send("received")
    await asyncio.to_thread(pipe.recv)  # the parent has read the servers' CPU
    closing = True
    for sock in sockets:
        await sock.close()
    await asyncio.gather(*readers, return_exceptions=True)
    pipe.send((received, closed_early))


# --- standalone: python -m benchmarks.web ---------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="River's web benchmark: run creation, approval resume, fan-out.")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients creating runs")
    parser.add_argument("--creations", type=int, default=400, help="runs the concurrent clients create")
    parser.add_argument("--paused", type=int, nargs="+", default=[10, 10000], help="paused runs waiting (each K)")
    parser.add_argument("--active-runs", type=int, default=200, help="runs active in the fan-out, a client each")
    parser.add_argument("--parts", nargs="+", choices=WebSize.parts, default=WebSize.parts,
                        help="which parts to run (all three by default)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
    import django

    django.setup()
    import psycopg
    from django.core.management import call_command

    db = connection.settings_dict
    admin_url = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
                 "password": db["PASSWORD"] or None, "dbname": "postgres"}
    with psycopg.connect(**admin_url, autocommit=True) as admin:  # create the database if missing, as bench does
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
            admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(db["NAME"])))
    call_command("migrate", verbosity=0, interactive=False)
    for line in web_bench(WebSize(clients=args.clients, creations=args.creations, paused=args.paused,
                                  active_runs=args.active_runs, parts=args.parts)):
        print(line, flush=True)


if __name__ == "__main__":
    main()
