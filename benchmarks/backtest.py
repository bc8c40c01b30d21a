"""The backtest section of ``make bench``: a policy backtest over 10,000 recorded runs
(issue 30: under 60 s on this machine, with the web process answering meanwhile).

The runs are bulk-inserted into the benchmark's workspace, each as a run records itself:
a reasoning step with its tokens, then three tool calls (a read, a write to ``invoices``,
a write to ``customers``) spread over the last ten days; a few dozen decided approval
requests give the median time to a decision. The workspace has one active policy
(approval for writes to customers); the backtest tries a new one that blocks writes to
invoices. It is run as a worker runs it (``executions.backtest.backtest_run``: the
claim, the batches, the progress writes, the result), timed in wall and in this
process's CPU, while a thread asks a separate Daphne process serving River for
``/health`` every 50 ms: every probe must be answered (200), and its p99 is reported
against a target. The seeded rows are deleted at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from django.db import connection
from django.utils import timezone

from benchmarks.verdict import verdict
from benchmarks.web import Client, daphne_serve
from executions.backtest import backtest_run
from executions.models import Execution, ExecutionStep
from governance.backtest_models import PolicyBacktest
from governance.backtests import policy_backtest_create
from governance.models import ApprovalRequest, Policy

RUNS = 10_000
SMOKE_RUNS = 200
TARGET_SECONDS = 60.0
TARGET_HEALTH_P99_MS = 250.0
SOURCE = "bench-backtest"
BATCH = 2000
POLICY = "bench: approve customer writes"
CALLS = [("execute_query", {"sql": "select count(*) from invoices"}),
         ("write_back", {"table_name": "invoices", "data": {"amount": 12}}),
         ("write_back", {"table_name": "customers", "data": {"name": "x"}})]


def _seed(*, agent, user, runs: int) -> None:
    now = timezone.now()
    span = dt.timedelta(days=10).total_seconds()
    for start in range(0, runs, BATCH):
        count = min(BATCH, runs - start)
        made = Execution.objects.bulk_create([
            Execution(workspace_id=agent.workspace_id, agent=agent, agent_version_id=agent.current_version_id,
                      trigger_source=SOURCE, status="completed", input_prompt="bench backtest",
                      queued_at=now - dt.timedelta(seconds=span * (start + n) / runs),
                      requested_by=user, requester=user)
            for n in range(count)])
        steps = []
        for run in made:
            steps.append(ExecutionStep(execution=run, step_number=1, step_type="reasoning",
                                       tokens={"input": 900, "output": 80}, created_at=run.queued_at))
            steps += [ExecutionStep(execution=run, step_number=2 + n, step_type="tool_call", tool_name=tool,
                                    tool_category="execution", input=arguments,
                                    created_at=run.queued_at + dt.timedelta(seconds=n + 1))
                      for n, (tool, arguments) in enumerate(CALLS)]
        ExecutionStep.objects.bulk_create(steps, batch_size=5000)
        if start == 0:
            ApprovalRequest.objects.bulk_create([
                ApprovalRequest(workspace_id=agent.workspace_id, execution_id=made[n].pk, agent_id=agent.pk,
                                tool_name="write_back", proposed_payload=CALLS[2][1], status="approved",
                                resolved_by=user, created_at=now - dt.timedelta(hours=n + 1, minutes=3 + n % 7),
                                resolved_at=now - dt.timedelta(hours=n + 1), expires_at=now)
                for n in range(min(40, count))])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE executions_execution")
        cursor.execute("ANALYZE executions_executionstep")


def _cleanup(*, agent) -> None:
    ids = list(Execution.objects.filter(agent=agent, trigger_source=SOURCE).values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        ApprovalRequest.objects.filter(execution_id__in=chunk).delete()
        Execution.objects.filter(pk__in=chunk).delete()
    Policy.objects.filter(workspace=agent.workspace, name=POLICY).delete()
    PolicyBacktest.objects.filter(workspace=agent.workspace).delete()


class _Prober(threading.Thread):
    """GET /health every 50 ms until stopped: (status, milliseconds) of each."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.results, self.stopping = port, [], threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            client = Client(self.port, "")
            try:
                status, _, seconds = client.request("GET", "/health")
            except OSError:
                status, seconds = 0, 0.0
            finally:
                client.conn.close()
            self.results.append((status, seconds * 1000))
            self.stopping.wait(0.05)


def backtest_bench(*, agent, user, runs: int = RUNS) -> Iterator[str]:
    _cleanup(agent=agent)
    started = time.monotonic()
    _seed(agent=agent, user=user, runs=runs)
    yield f"seeded {runs} recorded runs ({runs * len(CALLS)} tool calls) in {time.monotonic() - started:.1f} s"
    Policy.objects.create(organization=agent.workspace.organization, workspace=agent.workspace, scope="workspace",
                          name=POLICY, policy_type="content", enforcement="require_approval",
                          conditions={"expression": "args.table_name == 'customers'"})
    try:
        with tempfile.TemporaryDirectory(prefix="river-bench-backtest-") as tmp, daphne_serve(Path(tmp)) as (port, _):
            backtest = policy_backtest_create(actor=user, days=14, workspace_id=agent.workspace_id, policy={
                "name": "bench: no invoice writes", "conditions": {"expression": "args.table_name == 'invoices'"},
                "enforcement": "block"})
            prober = _Prober(port)
            prober.start()
            time.sleep(2.0)  # probes before the backtest: the machine's own latency, for comparison
            baseline = sorted(ms for _, ms in prober.results)
            prober.results = []
            cpu, wall = time.process_time(), time.monotonic()
            backtest_run(backtest_id=backtest.pk)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            prober.stopping.set()
            prober.join(timeout=5)
        backtest.refresh_from_db()
        result = backtest.result
        if backtest.status != PolicyBacktest.Status.DONE:
            raise RuntimeError(f"the backtest ended {backtest.status}: {backtest.error}")
        # The workspace may hold other sections' runs of the window (the smoke runs every
        # section in one database); only the seeded runs write to invoices.
        ok = result["runs_considered"] >= runs and result["would_block"] == runs and result["runs_blocked"] == runs
        yield (f"{verdict(ok, target=False)}  result: {result['runs_considered']} runs, {result['calls_considered']} "
               f"calls, would block {result['would_block']} in {result['runs_blocked']} runs, approvals added "
               f"{result['approvals_added']} (every seeded run's invoices write is blocked: expected {runs} in "
               f"{runs} runs, of at least {runs} runs considered)")
        yield (f"{verdict(wall < TARGET_SECONDS)}  backtest of {runs} runs: {wall:.2f} s wall (target < "
               f"{TARGET_SECONDS:.0f} s), {cpu * 1000 / runs:.2f} CPU-ms per run in the worker process "
               f"({cpu:.2f} s CPU)")
        statuses = [status for status, _ in prober.results]
        times = sorted(ms for _, ms in prober.results)
        answered = bool(statuses) and all(status == 200 for status in statuses)
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))] if times else float("inf")
        yield (f"{verdict(answered, target=False)}  /health during the backtest: {statuses.count(200)} of "
               f"{len(statuses)} probes answered 200")
        yield (f"{verdict(p99 < TARGET_HEALTH_P99_MS)}  /health latency meanwhile: p50 "
               f"{statistics.median(times) if times else 0:.1f} ms, p99 {p99:.1f} ms, max "
               f"{max(times) if times else 0:.1f} ms (target p99 < {TARGET_HEALTH_P99_MS:.0f} ms)")
        if baseline:
            yield (f"      /health before the backtest (same process, idle backtest): p50 "
                   f"{statistics.median(baseline):.1f} ms, max {baseline[-1]:.1f} ms over {len(baseline)} probes")
        yield f"load average (1, 5, 15 min): {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
        if not (ok and answered):
            raise RuntimeError("the backtest's counts or the web process's answers were wrong (see above)")
    finally:
        _cleanup(agent=agent)
