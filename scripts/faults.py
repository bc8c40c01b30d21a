"""Fault campaign (``make faults``): runs under fire must not be lost, doubled or stuck.

A stream of runs (writes that wait for approval, and reads) goes to real Celery
prefork workers while this script SIGKILLs workers (whole workers and pool
children), restarts Redis and terminates the PostgreSQL connections of the
campaign's database. Meanwhile it approves approval requests as they appear and
plays the beat: it calls the watchdog task every second. At the end it checks

- lost runs: started but not finished when the campaign ends;
- duplicate writes: a write's side effect seen more than once (the test write tool
  appends one line per call to a marker file before it does anything else);
- stuck runs: a run queued or running without any progress for more than twice
  the lease (runs waiting for a human are not counted);
- runs not post-processed: finished without ``post_processed_at``, or with other
  than exactly one ``run_completed`` event, or a completed run without its memory;

prints the figures and exits non-zero on any violation.

Everything stays on 127.0.0.1. Redis is a private ``redis-server`` that this script
starts and restarts on its own port (never the shared one), and connections are
terminated only for the campaign's own database. The model is a scripted
OpenAI-compatible server inside this process; the tools are the test tools of
``tests/executions/durable_support.py``, which the workers import.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.workers import Workers, WorkersNotReady  # noqa: E402 - importable once ROOT is on the path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=36, help="runs to start (half writes, half reads)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork children per worker")
    parser.add_argument("--lease", type=int, default=10, help="RIVER_LEASE_SECONDS for the campaign")
    parser.add_argument("--start-every", type=float, default=1.0, help="seconds between run starts")
    parser.add_argument("--fault-every", type=float, default=3.0, help="seconds between faults")
    parser.add_argument("--drain", type=float, default=90.0, help="seconds allowed to finish after the stream")
    parser.add_argument("--model-delay", type=float, default=0.4, help="seconds the model takes per reply")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--short", action="store_true",
                        help="a short campaign for CI: 16 runs, a fault every 2 s, 60 s to drain "
                             "(options given with it still win)")
    args = parser.parse_args()
    if args.short:
        given = {arg.split("=", 1)[0] for arg in sys.argv[1:]}
        for option, value in SHORT_CAMPAIGN.items():
            if f"--{option.replace('_', '-')}" not in given:
                setattr(args, option, value)
    return args


# ``--short``: each of the four faults lands twice, and the whole campaign takes about a minute.
SHORT_CAMPAIGN = {"runs": 16, "fault_every": 2.0, "drain": 60.0, "model_delay": 0.2}


# --- the scripted model --------------------------------------------------------------


class ModelServer:
    """OpenAI-compatible chat completions. The run's prompt says what to do
    (``write <marker>`` or ``read <marker>``); the reply depends only on how many
    assistant messages the conversation holds, so a turn asked again after a crash
    gets the same answer."""

    def __init__(self, delay: float):
        self.delay = delay
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                time.sleep(server.delay * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not security
                data = json.dumps(server.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker that asked was killed meanwhile

            def log_message(self, *args):
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, name="model", daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @staticmethod
    def reply(body: dict) -> dict:
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        prompt = next((m.get("content") or "" for m in messages if m.get("role") == "user"
                       and "campaign:" in (m.get("content") or "")), "")
        words = prompt.split("campaign:", 1)[1].split() if prompt else ["read", "unknown"]
        kind, marker = words[0], words[1]
        plan = ([("durable_write", marker)] if kind == "write"
                else [("durable_slow_read", f"{marker}-a"), ("durable_slow_read", f"{marker}-b")])
        if turn < len(plan):
            tool, argument = plan[turn]
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{marker}_{turn}", "type": "function",
                "function": {"name": tool, "arguments": json.dumps({"marker": argument})}}]}
        else:
            message = {"role": "assistant", "content": f"Done with {marker}."}
        return {
            "id": f"chatcmpl-{marker}-{turn}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "campaign"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- the private Redis ---------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} is not installed; the campaign runs a Redis of its own")
    return path


class Redis:
    def __init__(self, port: int, directory: Path):
        self.server, self.cli = _tool("redis-server"), _tool("redis-cli")
        self.port = port
        self.directory = directory
        self.restarts = 0

    def start(self) -> None:
        subprocess.run(  # noqa: S603 - fixed arguments, our own port and directory
            [self.server, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log"),
             "--pidfile", str(self.directory / "redis.pid")],
            check=True, stdout=subprocess.DEVNULL,
        )
        self._wait(up=True)

    def stop(self) -> None:
        subprocess.run([self.cli, "-h", "127.0.0.1", "-p", str(self.port), "shutdown", "nosave"],  # noqa: S603
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        self._wait(up=False)

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1

    def _ping(self) -> bool:
        result = subprocess.run([self.cli, "-h", "127.0.0.1", "-p", str(self.port), "ping"],  # noqa: S603
                                capture_output=True, text=True, check=False)
        return result.stdout.strip() == "PONG"

    def _wait(self, *, up: bool) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._ping() == up:
                return
            time.sleep(0.05)
        raise SystemExit(f"redis on port {self.port} did not {'start' if up else 'stop'} within 10 s")


# --- the campaign --------------------------------------------------------------------


def check_targets() -> tuple[str, int]:
    """Refuse anything but a private campaign database and Redis on 127.0.0.1."""
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    db, redis = urlsplit(database_url), urlsplit(redis_url)
    if db.scheme not in ("postgres", "postgresql") or db.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("DATABASE_URL must be a postgres:// URL on 127.0.0.1")
    name = db.path.lstrip("/")
    if "faults" not in name:
        raise SystemExit(f"refusing database {name!r}: the campaign terminates its connections; "
                         "use a database of its own whose name contains 'faults'")
    if redis.scheme != "redis" or redis.hostname != "127.0.0.1" or not redis.port or redis.port == 6379:
        raise SystemExit("REDIS_URL must be redis://127.0.0.1:<port>/0 on a port of the campaign's own "
                         "(it stops and restarts that Redis), not 6379")
    return name, redis.port


def database_recreate(name: str) -> None:
    """Every campaign starts from an empty database of its own, so counts are its own
    and no earlier run's schema or rows can skew them."""
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    admin = url._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> int:  # noqa: C901, PLR0915 - one script, read top to bottom
    args = parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - fault schedule, not security
    db_name, redis_port = check_targets()
    workdir = Path(tempfile.mkdtemp(prefix="river-faults-"))
    markers = workdir / "markers"
    markers.mkdir()
    model = ModelServer(args.model_delay)
    redis = Redis(redis_port, workdir)
    redis.start()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "riverapp.settings",
        "DEBUG": "true",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "RIVER_LEASE_SECONDS": str(args.lease),
        "RIVER_WATCHDOG_GRACE_SECONDS": str(max(1, args.lease // 2)),
        "RIVER_MAX_SEGMENT_ATTEMPTS": os.environ.get("RIVER_MAX_SEGMENT_ATTEMPTS", "20"),
        "RIVER_LLM_MODEL": "openai/campaign",
        "RIVER_LLM_BASE_URL": model.base_url,
        "RIVER_LLM_API_KEY": "campaign-key",
        "DURABLE_MARKER_DIR": str(markers),
        "LOG_LEVEL": "ERROR",
    }
    os.environ.update(env)
    database_recreate(db_name)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    workers = Workers(env, workdir, concurrency=args.concurrency, name="faults",
                      imports=("tests.executions.durable_support",))
    try:
        for _ in range(args.workers):
            workers.start()
        try:
            workers.wait_ready()
        except WorkersNotReady as exc:
            raise SystemExit(f"workers not ready: {exc}") from None
        return Campaign(args, rng, workers, redis, markers).run()
    finally:
        workers.stop_all()
        redis.stop()
        model.stop()
        if os.environ.get("FAULTS_KEEP") != "1":
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"logs kept in {workdir}")


class Campaign:
    def __init__(self, args, rng, workers: Workers, redis: Redis, markers: Path):
        from django.contrib.auth import get_user_model

        from agents.models import Agent, AgentVersion
        from tenancy.models import Membership, Organization, Workspace
        from tenancy.permissions import Role
        from tests.executions import durable_support  # noqa: F401 - the workers' tools, registered here too

        self.args, self.rng, self.workers, self.redis, self.markers = args, rng, workers, redis, markers
        tag = secrets.token_hex(4)
        org = Organization.objects.create(name=f"Faults {tag}", slug=f"faults-{tag}")
        self.workspace = Workspace.objects.create(organization=org, name="Campaign", slug=f"campaign-{tag}")
        users = get_user_model().objects
        self.requester = users.create_user(username=f"requester-{tag}", password=secrets.token_urlsafe(16))
        self.approver = users.create_user(username=f"approver-{tag}", password=secrets.token_urlsafe(16))
        Membership.objects.create(workspace=self.workspace, user=self.requester, role=Role.EDITOR)
        Membership.objects.create(workspace=self.workspace, user=self.approver, role=Role.ADMIN)
        self.agents = {}
        for kind, tools, level in (("write", ["durable_write"], "act_with_approval"),
                                   ("read", ["durable_slow_read"], "automated")):
            agent = Agent.objects.create(workspace=self.workspace, name=f"{kind} agent", owner=self.requester,
                                         business_function="operations", domain="Campaign",
                                         status=Agent.Status.ACTIVE)
            version = AgentVersion.objects.create(
                agent=agent, version=1, goal="Do what the prompt says.", instructions="One step at a time.",
                action_level=level, tools=tools,
                approval_rules={"require_approval_for": ["durable_write"], "approver_roles": ["admin"],
                                "auto_approve_conditions": [], "escalation_timeout_minutes": 1440},
            )
            agent.current_version = version
            agent.save(update_fields=["current_version"])
            self.agents[kind] = agent
        self.runs: dict[int, str] = {}  # execution id -> marker
        self.kinds: dict[int, str] = {}
        self.progress: dict[int, tuple] = {}
        self.since: dict[int, float] = {}
        self.stall: dict[int, float] = {}
        self.stalled_in: dict[int, str] = {}
        self.faults = Counter()
        self.driver_errors = Counter()
        self.approved = 0

    # --- the loop ----------------------------------------------------------------

    def run(self) -> int:
        from telemetry.faults import infra_faults_snapshot

        started = time.monotonic()
        next_start = next_fault = started + 1.0
        next_tick = started
        faults = ["kill_worker", "restart_redis", "kill_child", "drop_database_connections"]
        injected = 0
        while len(self.runs) < self.args.runs:
            now = time.monotonic()
            if now >= next_start:
                self.guarded("start", self.start_one)
                next_start = now + self.args.start_every
            if now >= next_fault:
                fault = faults[injected % len(faults)]
                injected += 1
                self.guarded(fault, getattr(self, fault))
                next_fault = now + self.args.fault_every * self.rng.uniform(0.7, 1.3)
            if now >= next_tick:
                self.tick()
                next_tick = now + 1.0
            time.sleep(0.05)
        stream_seconds = time.monotonic() - started
        drain_deadline = time.monotonic() + self.args.drain
        while time.monotonic() < drain_deadline and not self.all_done():
            self.tick()
            time.sleep(0.5)
        total_seconds = time.monotonic() - started
        return self.report(stream_seconds, total_seconds, infra_faults_snapshot())

    def guarded(self, what: str, action) -> None:
        """The driver is a client like any other: a call that meets a fault is retried
        at its next turn (a start that failed never created its run)."""
        from django.db import connection

        try:
            action()
        except Exception as exc:  # noqa: BLE001 - counted and reported
            self.driver_errors[f"{what}: {exc.__class__.__module__}.{exc.__class__.__name__}"] += 1
            connection.close()

    def tick(self) -> None:
        from executions import tasks

        self.guarded("watchdog", tasks.watchdog)
        self.guarded("approve", self.approve_pending)
        self.guarded("observe", self.observe)

    def start_one(self) -> None:
        from executions.services import execution_start, person_run_request

        kind = "write" if len(self.runs) % 2 == 0 else "read"
        marker = f"{kind[0]}{len(self.runs) + 1:03d}"
        execution = execution_start(agent=self.agents[kind], request=person_run_request(
            agent=self.agents[kind], user=self.requester, prompt=f"campaign: {kind} {marker}"))
        self.runs[execution.pk] = marker
        self.kinds[execution.pk] = kind
        self.since[execution.pk] = time.monotonic()

    def approve_pending(self) -> None:
        from governance.models import ApprovalRequest
        from governance.resolution import approval_resolve

        pending = ApprovalRequest.objects.filter(workspace=self.workspace, status=ApprovalRequest.Status.PENDING)
        for approval_id in list(pending.values_list("pk", flat=True)):
            approval_resolve(user=self.approver, approval_id=approval_id, status="approved")
            self.approved += 1

    def observe(self) -> None:
        """Progress of every run that is neither finished nor waiting for a human."""
        from django.db.models import Count

        from executions.models import Execution

        now = time.monotonic()
        rows = (Execution.objects.filter(pk__in=list(self.runs))
                .annotate(steps_count=Count("steps"))
                .values_list("pk", "status", "attempts", "lease_token", "steps_count"))
        for pk, status, attempts, token, steps in rows:
            waiting = status in Execution.PAUSED or status in Execution.TERMINAL
            key = (status, attempts, token, steps)
            if waiting or self.progress.get(pk) != key:
                self.progress[pk] = key
                self.since[pk] = now
            if now - self.since[pk] >= self.stall.get(pk, 0.0):
                self.stall[pk] = now - self.since[pk]
                self.stalled_in[pk] = status

    def all_done(self) -> bool:
        from executions.models import Execution

        try:
            open_runs = Execution.objects.filter(pk__in=list(self.runs)).exclude(
                status__in=Execution.TERMINAL, post_processed_at__isnull=False)
            return len(self.runs) == self.args.runs and not open_runs.exists()
        except Exception:  # noqa: BLE001 - a dropped connection: ask again
            from django.db import connection

            connection.close()
            return False

    # --- faults ------------------------------------------------------------------

    def kill_worker(self) -> None:
        if self.workers.kill_worker(self.rng):
            self.faults["worker SIGKILL"] += 1
        else:
            self.faults["worker SIGKILL skipped (replacement still booting)"] += 1

    def kill_child(self) -> None:
        if self.workers.kill_child(self.rng):
            self.faults["pool child SIGKILL"] += 1

    def restart_redis(self) -> None:
        self.redis.restart()
        self.faults["redis restart"] += 1

    def drop_database_connections(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            dropped = cursor.fetchone()[0]
        self.faults["postgres connections dropped"] += 1
        self.faults["postgres backends terminated"] += dropped

    # --- the verdict -------------------------------------------------------------

    def report(self, stream_seconds: float, total_seconds: float, driver_faults: dict) -> int:
        from django.db import connection

        from agents.models import AgentMemory
        from executions.models import Execution, ExecutionEvent
        from tests.executions.durable_support import marker_lines

        connection.close()
        rows = {row.pk: row for row in Execution.objects.filter(pk__in=list(self.runs))}
        completed_events = Counter(ExecutionEvent.objects.filter(
            execution_id__in=list(self.runs), event_type="run_completed").values_list("execution_id", flat=True))
        memories = set(AgentMemory.objects.filter(execution_id__in=list(self.runs)).values_list("execution_id",
                                                                                              flat=True))
        lost = [pk for pk in self.runs if pk not in rows or not rows[pk].is_terminal]
        writes = Counter(line.split()[1] for line in marker_lines(self.markers, "durable_write"))
        duplicates = {marker: n for marker, n in writes.items() if n > 1}
        limit = 2 * self.args.lease
        stuck = {pk: (round(s, 1), self.stalled_in[pk]) for pk, s in self.stall.items() if s > limit}
        not_post_processed = [
            pk for pk, row in rows.items() if row.is_terminal and (
                row.post_processed_at is None or completed_events[pk] != 1
                or (row.status == Execution.Status.COMPLETED and pk not in memories))
        ]
        statuses = Counter(row.status for row in rows.values())
        durations = [(row.finished_at - row.queued_at).total_seconds() for row in rows.values()
                     if row.finished_at and self.kinds[row.pk] == "read"]
        outcome_unknown = sum(1 for row in rows.values() if row.steps.filter(
            step_type="observation", output__error__code="OUTCOME_UNKNOWN").exists())
        figures = {
            "runs": len(self.runs), "write_runs": sum(1 for k in self.kinds.values() if k == "write"),
            "approvals_resolved": self.approved, "statuses": dict(statuses),
            "faults": dict(self.faults), "lost_runs": len(lost), "duplicate_writes": len(duplicates),
            "stuck_runs": len(stuck), "stuck_limit_seconds": limit,
            "max_stall_seconds": round(max(self.stall.values(), default=0.0), 1),
            "not_post_processed": len(not_post_processed),
            "write_side_effects": sum(writes.values()), "writes_with_outcome_unknown": outcome_unknown,
            "read_run_seconds_p50": round(statistics.median(durations), 1) if durations else None,
            "read_run_seconds_max": round(max(durations), 1) if durations else None,
            "stream_seconds": round(stream_seconds, 1), "total_seconds": round(total_seconds, 1),
            "driver_retries": dict(self.driver_errors), "driver_best_effort_failures": driver_faults,
        }
        print(json.dumps(figures, indent=2))
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(figures, indent=2))
        violations = []
        if lost:
            violations.append(f"lost runs: {lost}")
        if duplicates:
            violations.append(f"duplicate writes: {duplicates}")
        if stuck:
            violations.append(f"runs stuck over {limit} s: {stuck}")
        if not_post_processed:
            violations.append(f"runs not post-processed exactly once: {not_post_processed}")
        for violation in violations:
            print("VIOLATION", violation, file=sys.stderr)
        print("fault campaign:", "FAILED" if violations else "passed")
        return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
