"""The connections section of ``make bench``: PostgreSQL sessions of a loaded deployment.

One web process (``daphne``, production shape, as the web section starts it) and one
Celery worker (prefork, two pool processes, each hosting runs) serve a burst of runs
created over HTTP by concurrent clients; the runs call the fake model of ``tests/fakes``
(``model_seconds`` a reply, ``durable_note`` until the last turn). A sampler counts,
every 0.1 s on a connection of its own, this database's sessions opened by the two
processes (told apart by ``application_name``, which River hands to psycopg from its
``DATABASE_URL``). The figure that decides is the peak of the sum: at most
``TARGET_SESSIONS`` (docs/production.md, *Connections*).
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

from benchmarks.verdict import verdict
from benchmarks.workers import Workers

SLUG = "river-bench-conn"
WEB_APP, WORKER_APP = f"{SLUG}-web", f"{SLUG}-worker"
TOOL = "durable_note"
TARGET_SESSIONS = 12


@dataclass(frozen=True)
class ConnSize:
    runs: int = 200  # runs created over HTTP
    clients: int = 16  # concurrent HTTP clients creating them
    model_seconds: float = 1.0
    turns: int = 3


SMOKE = ConnSize(runs=6, clients=2, model_seconds=0.05, turns=2)


def _with_app_name(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


class _Sampler(threading.Thread):
    """Peak sessions of the web and worker processes, separately and together."""

    def __init__(self, dbname: str):
        super().__init__(name="conn-bench-sampler", daemon=True)
        self.dbname = dbname
        self.peak = Counter()
        self.states: Counter = Counter()  # at the peak of the sum: sessions by state
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        db = connection.settings_dict
        params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
                  "password": db["PASSWORD"], "dbname": self.dbname, "application_name": f"{SLUG}-probe",
                  "autocommit": True}
        sql = ("SELECT application_name, coalesce(state, ''), count(*) FROM pg_stat_activity "
               "WHERE datname = current_database() AND application_name = ANY(%s) GROUP BY 1, 2")
        with psycopg.connect(**{k: v for k, v in params.items() if v not in ("", None)}) as conn:
            while not self.done.wait(0.1):
                rows = conn.execute(sql, [[WEB_APP, WORKER_APP]]).fetchall()
                now = Counter()
                for app, _, count in rows:
                    now[app] += count
                total = sum(now.values())
                for app, count in now.items():
                    self.peak[app] = max(self.peak[app], count)
                if total > self.peak["total"]:
                    self.peak["total"] = total
                    self.states = Counter({state or "?": count for _, state, count in rows})


def _fixtures(turns: int):
    from django.contrib.auth import get_user_model

    from agents.models import Agent, AgentVersion
    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role
    from tenancy.services import token_issue

    org, _ = Organization.objects.get_or_create(slug=SLUG, defaults={"name": "River connections benchmark"})
    workspace, _ = Workspace.objects.get_or_create(organization=org, slug=SLUG, defaults={"name": "Connections"})
    user, _ = get_user_model().objects.get_or_create(username=SLUG)
    Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ADMIN})
    agent = Agent.objects.create(workspace=workspace, name=f"conn-{secrets.token_hex(4)}",
                                 business_function="operations", domain="Benchmark", owner=user,
                                 status=Agent.Status.ACTIVE)
    agent.current_version = AgentVersion.objects.create(
        agent=agent, version=1, goal="Take notes.", instructions="Note each step, then finish.",
        action_level="automated", model_config={"max_turns": turns + 5}, tools=[TOOL],
        approval_rules={"require_approval_for": [], "approver_roles": ["admin"],
                        "auto_approve_conditions": [], "escalation_timeout_minutes": 60})
    agent.save(update_fields=["current_version"])
    return agent, token_issue(user=user, name="connections bench")


def connections_bench(size: ConnSize = ConnSize()) -> Iterator[str]:
    """Report lines; needs PostgreSQL and REDIS_URL (the broker and channel layer)."""
    from agents.models import Agent
    from benchmarks.scale import Model
    from benchmarks.web import child_env, daphne_serve
    from executions.models import Execution

    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        yield "connections section skipped: it needs PostgreSQL and REDIS_URL"
        return
    agent, issued = _fixtures(size.turns)
    model = Model(seconds=size.model_seconds, turns=size.turns)
    model.server.model = "conn-bench"
    url = os.environ["DATABASE_URL"]
    llm = {"RIVER_LLM_MODEL": "openai/conn-bench", "RIVER_LLM_BASE_URL": model.server.base_url,
           "RIVER_LLM_API_KEY": "conn-bench-key"}
    try:
        with tempfile.TemporaryDirectory(prefix=f"{SLUG}-") as tmp:
            worker_env = child_env(DATABASE_URL=_with_app_name(url, WORKER_APP), **llm)
            workers = Workers(worker_env, Path(tmp), concurrency=2, name="conn",
                              imports=("tests.executions.durable_support",))
            with daphne_serve(Path(tmp), child_env(DATABASE_URL=_with_app_name(url, WEB_APP))) as (port, _pid):
                try:
                    workers.start()
                    workers.wait_ready()
                    yield from _loaded(port, agent, issued.plaintext, size, Execution)
                finally:
                    workers.stop_all()
    finally:
        model.server.stop()
        Execution.objects.filter(agent=agent).delete()
        issued.token.delete()
        Agent.objects.filter(pk=agent.pk).delete()


def _loaded(port: int, agent, token: str, size: ConnSize, execution_model) -> Iterator[str]:
    from benchmarks.web import Client

    sampler = _Sampler(connection.settings_dict["NAME"])
    sampler.start()
    path, tickets, lock, codes = f"/api/v1/agents/{agent.pk}/run", iter(range(size.runs)), threading.Lock(), Counter()

    def client() -> None:
        conn = Client(port, token)
        while next(tickets, None) is not None:
            status = conn.request("POST", path, {"input_prompt": "Connections bench run."})[0]
            with lock:
                codes[status] += 1
        conn.conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client, name=f"conn-bench-{n}") for n in range(size.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runs = execution_model.objects.filter(agent=agent)
    deadline = time.monotonic() + 60 + size.runs * size.turns * size.model_seconds / 5
    while runs.exclude(status__in=execution_model.TERMINAL).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    window = time.monotonic() - started
    time.sleep(0.5)  # the last post-processing, still under the sampler
    sampler.done.set()
    sampler.join()
    statuses = Counter(runs.values_list("status", flat=True))
    completed = statuses.get(execution_model.Status.COMPLETED, 0)
    peak = sampler.peak
    yield (f"connections: 1 web process (daphne) + 1 Celery worker (prefork, 2 pool processes), {size.clients} "
           f"clients creating {size.runs} runs over HTTP, model {size.model_seconds:g} s a reply, {size.turns} "
           f"turns a run; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    yield f"  creations answered: {dict(sorted(codes.items()))}; all runs ended in {window:.1f} s"
    yield (f"  {verdict(completed == size.runs, target=False)}: {completed}/{size.runs} runs completed"
           + ("" if completed == size.runs else f" (statuses {dict(statuses)}, first error: "
              f"{runs.exclude(error=None).values_list('error', flat=True).first()!r})"))
    yield (f"  peak sessions: web {peak[WEB_APP]}, worker {peak[WORKER_APP]}; together {peak['total']} "
           f"(by state at that peak: {dict(sampler.states)})")
    yield f"  {verdict(peak['total'] <= TARGET_SESSIONS)}: PostgreSQL sessions {peak['total']} " \
          f"(target <= {TARGET_SESSIONS})"
