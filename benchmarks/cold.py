"""The ``cold`` section of ``make bench``: River's processes started from nothing.

- **A cold ``celery worker`` to its first model call.** The production command
  (``celery -A riverapp worker -l info --concurrency 2``, docs/production.md, with
  nothing imported beyond River itself) is started on the bench's database and Redis
  broker; a run is queued the moment it starts. The figure is the wall time from
  starting the command to the first request reaching the model (a local
  OpenAI-compatible fake, so litellm's real client runs), and the CPU seconds the
  worker's processes (the parent and its pool children) spent until then. The worker
  does not import litellm at start: its first model call does.
- **``manage.py issue_token`` and ``manage.py check``**: wall time from starting the
  command to its exit, and its CPU seconds (``RUSAGE_CHILDREN``).

CPU seconds are the figure that decides on a shared machine; the wall time is printed
beside them with the load average."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.verdict import verdict
from benchmarks.workers import ROOT, process_children

SLUG = "river-bench-cold"
MODEL = "cold-bench"
TARGET_FIRST_CALL_SECONDS = 2.0
TARGET_COMMAND_SECONDS = 2.0
DEADLINE_SECONDS = 120.0


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the live processes ``pids`` (Linux ``/proc``)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _fixtures():
    from django.contrib.auth import get_user_model

    from agents.models import Agent, AgentVersion
    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role

    org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "River cold start benchmark"})
    workspace, _ = Workspace.objects.get_or_create(organization=org, slug=SLUG, defaults={"name": "Cold"})
    user, _ = get_user_model().objects.get_or_create(username=SLUG)
    Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ADMIN})
    agent = Agent.objects.filter(workspace=workspace, name="Cold agent").first()
    if agent is None:
        agent = Agent.objects.create(workspace=workspace, name="Cold agent", business_function="operations",
                                     domain="Benchmark", owner=user, status=Agent.Status.ACTIVE)
        agent.current_version = AgentVersion.objects.create(
            agent=agent, version=1, goal="Answer.", instructions="Answer in one sentence.",
            action_level="automated", model_config={"max_turns": 3}, tools=[],
            approval_rules={"require_approval_for": [], "approver_roles": ["admin"],
                            "auto_approve_conditions": [], "escalation_timeout_minutes": 60})
        agent.save(update_fields=["current_version"])
    return agent, user


def _worker_env(*, model_url: str) -> dict:
    """The bench's own environment (its DATABASE_URL and REDIS_URL), in production
    mode, with the quick-start model settings pointing at the fake model."""
    import base64
    import secrets

    return {
        **os.environ, "DJANGO_SETTINGS_MODULE": "riverapp.settings", "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "RIVER_AUDIT_HMAC_KEYS": f"cold:{base64.b64encode(secrets.token_bytes(32)).decode()}",
        "RIVER_LLM_MODEL": f"openai/{MODEL}", "RIVER_LLM_BASE_URL": model_url, "RIVER_LLM_API_KEY": "cold-bench-key",
    }


def _first_model_call(agent, user) -> tuple[float | None, float, Path]:
    """(seconds from starting the worker to the model's first request or None,
    the worker's CPU seconds until then, its log)."""
    from executions.models import Execution
    from executions.services import execution_start, person_run_request
    from tests.fakes.openai_server import FakeOpenAI, Scripted

    first: list[float] = []

    def reply(body: dict) -> Scripted:
        if not first:
            first.append(time.monotonic())
        return Scripted(message={"role": "assistant", "content": "Answered."})

    server = FakeOpenAI(model=MODEL).respond_with(reply)
    log = Path(tempfile.mkdtemp(prefix=f"{SLUG}-")) / "worker.log"
    celery = Path(sys.executable).parent / "celery"
    try:
        with open(log, "wb") as out:
            started = time.monotonic()
            worker = subprocess.Popen(  # noqa: S603 - this venv's celery, the documented production command
                [str(celery), "-A", "riverapp", "worker", "-l", "info", "--concurrency", "2"],
                cwd=ROOT, env=_worker_env(model_url=server.base_url), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        try:
            execution = execution_start(agent=agent, request=person_run_request(
                agent=agent, user=user, prompt="Cold bench: the first call"))
            cpu = 0.0
            while not first and worker.poll() is None and time.monotonic() - started < DEADLINE_SECONDS:
                cpu = _cpu_seconds([worker.pid, *process_children(worker.pid)])
                time.sleep(0.01)
            if not first:
                return None, cpu, log
            cpu = _cpu_seconds([worker.pid, *process_children(worker.pid)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not Execution.objects.filter(
                    pk=execution.pk, status__in=Execution.TERMINAL).exists():
                time.sleep(0.1)
            return first[0] - started, cpu, log
        finally:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            worker.wait(timeout=10)
            Execution.objects.filter(agent=agent).delete()
    finally:
        server.stop()


def _command(*args: str) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of one ``manage.py`` command, run as a user
    runs it (the bench's DATABASE_URL, DEBUG on)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 - this interpreter and River's own manage.py, fixed arguments
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**os.environ, "DEBUG": "true"},
        capture_output=True, text=True, timeout=DEADLINE_SECONDS)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def cold_bench() -> Iterator[str]:
    """Report lines (module docstring). Needs the bench's PostgreSQL and REDIS_URL (the
    broker); runs are created in this process and sent to the worker through Redis."""
    if not os.environ.get("REDIS_URL"):
        raise RuntimeError("the cold section needs REDIS_URL (the worker's broker)")
    agent, user = _fixtures()
    yield f"Cold starts ({_load()}):"
    seconds, cpu, log = _first_model_call(agent, user)
    if seconds is None:
        raise RuntimeError(f"no model call in {DEADLINE_SECONDS:g} s; {log} ends:\n"
                           + log.read_text(errors="replace")[-2000:])
    shutil.rmtree(log.parent, ignore_errors=True)  # kept only when the worker never called
    yield (f"  {verdict(seconds <= TARGET_FIRST_CALL_SECONDS)}  cold `celery -A riverapp worker` to its first model "
           f"call: {seconds:.2f} s, {cpu:.2f} CPU-s in the worker's processes "
           f"(target <= {TARGET_FIRST_CALL_SECONDS:g} s)")
    wall, cpu, out = _command("issue_token", SLUG, "--name", "cold-bench")
    if not out.strip().startswith("rvr_"):
        raise RuntimeError(f"issue_token printed no token: {out[:200]!r}")
    yield (f"  {verdict(wall <= TARGET_COMMAND_SECONDS)}  `manage.py issue_token`: {wall:.2f} s, {cpu:.2f} CPU-s "
           f"(target <= {TARGET_COMMAND_SECONDS:g} s)")
    from tenancy.models import AccessToken

    AccessToken.objects.filter(user=user, name="cold-bench").delete()
    wall, cpu, _ = _command("check")
    yield f"  `manage.py check`: {wall:.2f} s, {cpu:.2f} CPU-s"
    yield f"  ({_load()} at the end)"
