"""River's Prometheus metrics (docs/observability.md, "Metrics").

Every process that records (the web process, each Celery worker process) writes its
samples to files in ``PROMETHEUS_MULTIPROC_DIR`` (riverapp.settings sets it to
``RIVER_METRICS_DIR`` before prometheus_client is first imported); ``metrics_render``
sums them with the library's MultiProcessCollector. Label values are bounded: agent ids,
tool names offered to the model (anything else is "unknown"), enum values; never text a
user or a model wrote.

No process ever empties the directory: a process that starts cannot tell a previous
life's files from those of a live process it shares the directory with (the web server
and a worker started a moment apart), and a file deleted under a live process keeps
taking its writes unseen. A process that exits is marked dead instead
(``metrics_process_dead``): its live-gauge files go, its counter and histogram files stay
and are summed with everyone else's, as prometheus_client's multiprocess mode expects.
A starting process then merges the dead processes' counter and histogram files into one
file per type (``metrics_dir_compact``), so the totals stay and the files stop growing.

Series whose label values are known up front (enum values, the tool registry's names)
are created at 0 when this module is imported (``metrics_series_zero``), so the first
event after a scrape is an increase Prometheus can see."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.mmap_dict import MmapedDict

from rivercore.contracts import Step, StepType, TriggerType
from rivercore.outcome import Outcome, outcomes_possible
from rivercore.tools import ToolCategory
from rivercore.types.agents import Tier
from rivercore.types.governance import PolicyType
from rivercore.types.runs import RunStatus

UNKNOWN = "unknown"
_MS_BUCKETS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000)
_SECONDS_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)
_TIERS = {tier.value for tier in Tier}
_STEP_STATUSES = {"completed", "failed", "blocked", "pending"}
_DECISIONS = {"PROCEED", "APPROVAL_REQUIRED", "SUGGEST_ONLY", "BLOCKED"}
_CATEGORIES = {category.value for category in ToolCategory}
_POLICY_TYPES = {policy_type.value for policy_type in PolicyType}
# Label vocabularies owned by the metric (the callers pass these literals).
WATCHDOG_ACTIONS = ("requeued", "failed_exhausted")
WEBHOOK_REFUSAL_REASONS = ("missing", "malformed", "stale_timestamp", "bad_signature", "replayed")
# Runs end in one of these; a run still under way is never counted.
RUN_END_STATUSES = tuple(status.value for status in RunStatus if status not in {
    RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_INTERACTION,
    RunStatus.AWAITING_CHILD})
SERIES_ZERO_MAX = 5_000  # per call of metrics_series_zero: a label set is small or it is not "known"
_OUTCOMES = {outcome.value for outcome in Outcome}

executions_total = Counter("river_agent_executions", "Runs ended, by final status.",
                           ["status", "action_level", "agent_id"])
turns_total = Counter("river_agent_turns", "Model turns, by outcome.", ["status", "model_tier", "agent_id"])
tool_calls_total = Counter("river_agent_tool_calls", "Tool calls observed.", ["tool_name", "category", "status"])
tool_latency_ms = Histogram("river_agent_tool_latency_ms", "Tool call latency (ms).", ["tool_name", "category"],
                            buckets=_MS_BUCKETS)
llm_latency_ms = Histogram("river_agent_llm_latency_ms", "Model call latency (ms).", ["tier", "provider"],
                           buckets=_MS_BUCKETS)
tokens_consumed_total = Counter("river_agent_tokens_consumed", "Tokens in and out.", ["tier", "agent_id", "provider"])
governance_decisions_total = Counter("river_agent_governance_decisions", "Governance verdicts.",
                                     ["decision", "agent_id", "policy_type"])
cost_estimate_usd_total = Counter("river_agent_cost_estimate_usd", "Estimated model cost (USD).",
                                  ["agent_id", "provider"])
runs_total = Counter("river_runs", "Runs ended, by final status, outcome and trigger type.",
                     ["status", "outcome", "trigger_type"])
approval_decision_seconds = Histogram("river_approval_time_to_decision_seconds",
                                      "Approval request to resolution.", ["outcome"], buckets=_SECONDS_BUCKETS)
queue_wait_seconds = Histogram("river_run_queue_wait_seconds", "Run queued to its first turn.",
                               buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900))
watchdog_recoveries_total = Counter("river_watchdog_recoveries", "Runs the watchdog re-sent or ended.", ["action"])
trigger_firings_total = Counter("river_trigger_firings", "Trigger firings, started or skipped with why.",
                                ["trigger_type", "outcome", "reason"])
webhook_verification_failures_total = Counter("river_webhook_verification_failures",
                                              "Webhook deliveries refused at signature check.", ["reason"])


def _bounded(value: Any, allowed: set[str]) -> str:
    return value if isinstance(value, str) and value in allowed else UNKNOWN


def _offered_tools(state) -> set[str]:
    names = set()
    for schema in getattr(state, "tool_schemas", None) or ():
        function = schema.get("function") if isinstance(schema.get("function"), dict) else schema
        if isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _provider(value: Any) -> str:
    # Providers are litellm's short identifiers; anything odd is folded.
    if isinstance(value, str) and 0 < len(value) <= 40 and value.replace("_", "").replace("-", "").isalnum():
        return value.lower()
    return UNKNOWN


class MetricsObserver:
    """The engine's observer (rivercore.observe): counts steps and model calls in memory
    (prometheus_client writes an mmap'd file; no network, no database)."""

    def step_added(self, state, step: Step) -> None:
        agent_id = str(state.request.agent_config.agent_id)
        status = _bounded(str(step.status), _STEP_STATUSES)
        if step.step_type == StepType.REASONING:
            tier = _bounded(step.model_tier, _TIERS)
            provider = _provider(step.provider)
            turns_total.labels(status, tier, agent_id).inc()
            if step.tokens is not None:
                total = int(getattr(step.tokens, "input", 0) or 0) + int(getattr(step.tokens, "output", 0) or 0)
                if total:
                    tokens_consumed_total.labels(tier, agent_id, provider).inc(total)
            cost = (step.output or {}).get("cost_usd") if isinstance(step.output, dict) else None
            if isinstance(cost, int | float) and cost > 0:
                cost_estimate_usd_total.labels(agent_id, provider).inc(cost)
        elif step.step_type == StepType.OBSERVATION:
            name = step.tool_name if step.tool_name in _offered_tools(state) else UNKNOWN
            category = _bounded(step.tool_category, _CATEGORIES)
            tool_calls_total.labels(name, category, status).inc()
            tool_latency_ms.labels(name, category).observe(max(step.duration_ms, 0))
        elif step.step_type == StepType.GOVERNANCE_CHECK and step.governance_decision is not None:
            policy_type = step.output.get("policy_type") if isinstance(step.output, dict) else None
            policy_type = policy_type or "none"
            governance_decisions_total.labels(
                _bounded(str(step.governance_decision), _DECISIONS), agent_id,
                policy_type if policy_type == "none" else _bounded(policy_type, _POLICY_TYPES)).inc()

    def model_called(self, state, call) -> None:
        provider = _provider(call.reply.provider if call.reply is not None else None)
        llm_latency_ms.labels(_bounded(call.tier, _TIERS), provider).observe(max(call.duration_ms, 0))


def run_ended_record(*, status: str, action_level: str, agent_id: Any, trigger_type: str, outcome: str = "",
                     queue_wait_seconds_value: float | None = None) -> None:
    executions_total.labels(status, action_level or UNKNOWN, str(agent_id)).inc()
    runs_total.labels(status, _bounded(outcome, _OUTCOMES), trigger_type or UNKNOWN).inc()
    if queue_wait_seconds_value is not None and queue_wait_seconds_value >= 0:
        queue_wait_seconds.observe(queue_wait_seconds_value)


def approval_decided_record(*, outcome: str, seconds: float) -> None:
    approval_decision_seconds.labels(outcome).observe(max(seconds, 0.0))


def watchdog_recovery_record(*, action: str, count: int = 1) -> None:
    if count:
        watchdog_recoveries_total.labels(_bounded(action, set(WATCHDOG_ACTIONS))).inc(count)


def trigger_firing_record(*, trigger_type: str, outcome: str, reason: str) -> None:
    trigger_firings_total.labels(trigger_type, outcome, reason or "none").inc()


def webhook_refusal_record(*, reason: str) -> None:
    webhook_verification_failures_total.labels(_bounded(reason, set(WEBHOOK_REFUSAL_REASONS))).inc()


# --- series known up front, at 0 ---------------------------------------------------------

def metrics_series_zero(metric: Any, *label_values: Iterable[str]) -> int:
    """Create ``metric``'s series for every combination of ``label_values`` (one iterable
    per label, in the metric's label order) at 0, unless it exists. A counter that is
    first seen at 1 hides its first event from ``increase()``; one that exists at 0 does
    not. Returns how many series were named; refuses more than ``SERIES_ZERO_MAX``."""
    pools = [tuple(dict.fromkeys(str(value) for value in values)) for values in label_values]
    count = 1
    for pool in pools:
        count *= len(pool)
    if count > SERIES_ZERO_MAX:
        raise ValueError(f"{count} series is too many to create up front (at most {SERIES_ZERO_MAX})")
    for combination in itertools.product(*pools):
        metric.labels(*combination)
    return count


def tool_series_zero(tools: Iterable[Any]) -> None:
    """Tool calls and latency at 0 for each registered tool (``name``, ``category``),
    for every step status."""
    for tool in tools:
        category = _bounded(str(tool.category), _CATEGORIES)
        metrics_series_zero(tool_calls_total, [tool.name], [category], sorted(_STEP_STATUSES))
        metrics_series_zero(tool_latency_ms, [tool.name], [category])


for _status in RUN_END_STATUSES:  # each end with the outcomes it can have, by trigger type
    metrics_series_zero(runs_total, [_status], [o.value for o in outcomes_possible(RunStatus(_status))],
                        [trigger.value for trigger in TriggerType])
metrics_series_zero(watchdog_recoveries_total, WATCHDOG_ACTIONS)
metrics_series_zero(webhook_verification_failures_total, WEBHOOK_REFUSAL_REASONS)


# --- the multiprocess directory --------------------------------------------------------

def metrics_dir() -> Path:
    return Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])


def _pid_of(file: Path) -> int | None:
    # prometheus_client names its files <type>[_<mode>]_<pid>.db.
    tail = file.stem.rpartition("_")[2]
    return int(tail) if tail.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def metrics_dir_prepare() -> list[int]:
    """At a process's start (``runriver``, a Celery worker's main process): create the
    directory, mark dead every process that left files and no longer runs on this host
    (a crash skips ``metrics_process_dead``), and merge the dead processes' counter and
    histogram files into the directory's aggregate files (``metrics_dir_compact``). Never
    touches a file a live process writes; every total stays. Returns the pids marked dead."""
    directory = metrics_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with _directory_lock(directory, exclusive=True):
        dead = _dead_pids(directory)
        for pid in dead:
            multiprocess.mark_process_dead(pid, str(directory))
        _compact(directory)
    return dead


def metrics_dir_compact() -> int:
    """Merge the counter and histogram files of processes that no longer run into one
    file per type; returns how many files went. ``metrics_dir_prepare`` calls it at start."""
    directory = metrics_dir()
    with _directory_lock(directory, exclusive=True):
        return _compact(directory)


# The aggregate of dead processes' samples, one per type: ``counter_merged.db`` reads to
# MultiProcessCollector as any counter file (its type is the name's first word; it has
# no pid, so nothing ever marks it dead). Histograms are merged the same way: their
# files hold each bucket's own count, not the cumulative one, so sums add up.
_MERGED_TYPES = ("counter", "histogram")
_MERGED = "{kind}_merged.db"
# Held exclusive by a compaction, shared by a scrape (``metrics_render``): a scrape never
# sees a dead process's samples twice (in its file and in the aggregate) or not at all.
_LOCK = "compaction.lock"
# Written before the aggregate replaces the old one: the files it merged and the new
# aggregate's digest, so a compaction that died between the swap and the deletions is
# finished by the next one, never counted twice.
_PENDING = "{kind}_merged.pending"


@contextlib.contextmanager
def _directory_lock(directory: Path, *, exclusive: bool):
    with open(directory / _LOCK, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _dead_pids(directory: Path) -> list[int]:
    return sorted({pid for file in directory.glob("*.db")
                   if (pid := _pid_of(file)) is not None and pid != os.getpid() and not _alive(pid)})


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _samples_of(path: Path) -> list[tuple[str, float]]:
    if path.stat().st_size == 0:  # created, never sized: its process died before writing
        return []
    return [(key, value) for key, value, _timestamp, _position in MmapedDict.read_all_values_from_file(str(path))]


def _compact(directory: Path) -> int:
    """Caller holds the directory's lock exclusively."""
    merged_away = 0
    for kind in _MERGED_TYPES:
        merged, pending = directory / _MERGED.format(kind=kind), directory / _PENDING.format(kind=kind)
        if pending.exists():  # a compaction died part-way: finish it, or forget it if its swap never happened
            record = json.loads(pending.read_text())
            if merged.exists() and _digest(merged) == record["digest"]:
                for name in record["sources"]:
                    (directory / name).unlink(missing_ok=True)
            pending.unlink()
        for stale in directory.glob(f".{kind}_merged.*.tmp"):
            stale.unlink()
        # A pid is checked again here, under the lock, just before its file is read and
        # removed: a file whose pid a live process has reused is that process's file now.
        sources = sorted(path for path in directory.glob(f"{kind}_*.db")
                         if (pid := _pid_of(path)) is not None and pid != os.getpid() and not _alive(pid))
        if not sources:
            continue
        totals: dict[str, float] = {}
        for path in ([merged] if merged.exists() else []) + sources:
            for key, value in _samples_of(path):
                totals[key] = totals.get(key, 0.0) + value
        fresh = directory / f".{kind}_merged.{os.getpid()}.tmp"  # not *.db: no scrape reads it
        aggregate = MmapedDict(str(fresh))
        try:
            for key, value in totals.items():
                aggregate.write_value(key, value, 0.0)
        finally:
            aggregate.close()
        staged = pending.with_suffix(".pending-tmp")
        staged.write_text(json.dumps({"digest": _digest(fresh), "sources": [path.name for path in sources]}))
        os.replace(staged, pending)
        os.replace(fresh, merged)
        for path in sources:
            path.unlink()
        pending.unlink()
        merged_away += len(sources)
    return merged_away


def metrics_process_dead(pid: int | None = None) -> None:
    """A process that exits (a Celery worker process at ``worker_process_shutdown``, any
    other at interpreter exit): its live-gauge files go; its counters and histograms
    are kept, so totals never go down while the deployment runs."""
    multiprocess.mark_process_dead(pid or os.getpid(), str(metrics_dir()))


def _exiting() -> None:
    try:
        metrics_process_dead()
    except Exception:  # noqa: BLE001 - an exit never fails on bookkeeping
        logging.getLogger("river.telemetry").debug("metrics: could not mark this process dead", exc_info=True)


atexit.register(_exiting)  # the web process and the CLI; a prefork child leaves by os._exit (Celery's signal)


def metrics_render(*extra_collectors) -> bytes:
    """The text exposition of every process's samples, plus ``extra_collectors`` (gauges
    computed at scrape time)."""
    registry = CollectorRegistry()
    registry.register(_ProcessFiles(metrics_dir()))
    for collector in extra_collectors:
        registry.register(collector)
    return generate_latest(registry)


class _ProcessFiles:
    """Every process's files summed (MultiProcessCollector), read under the directory's
    shared lock so that no compaction swaps files in the middle of the read."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self):
        with _directory_lock(self.directory, exclusive=False):
            # A file a process has just created is empty until prometheus_client sizes it
            # a moment later; it holds no samples yet (the library's reader fails on it).
            files = [str(path) for path in self.directory.glob("*.db") if _has_size(path)]
            return list(multiprocess.MultiProcessCollector.merge(files, accumulate=True))


def _has_size(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:  # a live gauge file removed as its process was marked dead
        return False


class GaugeAtScrape:
    """A gauge whose value is read when /metrics is scraped (e.g. approvals pending)."""

    def __init__(self, name: str, documentation: str, read) -> None:
        self.name, self.documentation, self.read = name, documentation, read

    def collect(self):
        family = GaugeMetricFamily(self.name, self.documentation)
        family.add_metric([], float(self.read()))
        yield family
