"""Metric samples and threshold triggers.

``metrics_ingest`` validates and stores a batch (``POST /api/v1/metrics/``), then
evaluates the workspace's enabled threshold triggers on the series the batch touched
(after the samples are committed, so a failing evaluation never loses a sample).

Window rule (``cpu_percent > 90 for 5m``): the window is the last ``5m`` before the
evaluation (server time). Its samples are the latest sample at or before the window's
start (the value in effect when it opened; without one the series does not cover the
window and nothing holds) and every sample after it up to now, of which there must be at
least one (a series that stopped reporting is stale, not breaching). Plain: every one of them
satisfies the comparison. ``avg``/``min``/``max``: the aggregate of them does. A series
is a metric name with one exact label set; each series is judged on its own and the
first that holds fires the trigger (its labels are in the payload).

Cooldown: after a firing (started, or skipped because the agent was inactive) the
trigger stays quiet for ``cooldown_seconds``; the first evaluation that holds during the
quiet period records one ``cooldown`` skip, later ones record nothing (no flood). The
trigger row is locked while it is judged, so two ingests at once fire once.

Budget: judging one series costs a few queries, and a batch may name up to MAX_SAMPLES
series for each of the workspace's threshold triggers. One ingest judges at most
MAX_JUDGEMENTS (trigger, series) pairs; the rest are not judged (nothing fires for
them, a warning is logged) and the next batch judges again.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from rivercore.contracts import TriggerType
from rivercore.errors import InvalidInput
from triggers.models import MetricSample, Trigger, TriggerFiring
from triggers.threshold import METRIC, ThresholdRule, threshold_parse
from triggers.types import ThresholdConfig

logger = logging.getLogger("river.triggers")

MAX_SAMPLES = 1000
MAX_LABELS = 16
LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}\Z")
LABEL_VALUE_MAX = 200
FUTURE_SKEW_SECONDS = 300
PRUNE_BATCH = 10_000
MAX_JUDGEMENTS = 200
Reason = TriggerFiring.Reason

_VIOLATES = {  # the samples that break "value <op> N"
    ">": lambda n: Q(value__lte=n), ">=": lambda n: Q(value__lt=n), "<": lambda n: Q(value__gte=n),
    "<=": lambda n: Q(value__gt=n), "==": lambda n: ~Q(value=n), "!=": lambda n: Q(value=n),
}


@dataclass(frozen=True, slots=True)
class Ingested:
    accepted: int
    firings: list[TriggerFiring]


def _bad(path: str, message: str) -> InvalidInput:
    return InvalidInput("The metric batch is invalid.", details={path: [message]})


def _timestamp(raw, *, path: str, now: datetime, oldest: datetime) -> datetime:
    if raw is None:
        return now
    if isinstance(raw, bool):
        raise _bad(path, "An ISO 8601 date-time with an offset, or Unix seconds.")
    if isinstance(raw, int | float):
        if not math.isfinite(raw) or not 0 <= raw < 1e11:
            raise _bad(path, "Unix seconds must be a finite, positive number.")
        value = datetime.fromtimestamp(raw, tz=UTC)
    elif isinstance(raw, str) and len(raw) <= 40:
        try:
            value = parse_datetime(raw.strip())
        except ValueError:
            value = None
        if value is None:
            raise _bad(path, "Not an ISO 8601 date-time (for example 2026-01-31T08:00:00Z).")
        if timezone.is_naive(value):
            raise _bad(path, "Give the offset (Z or +01:00): a time without one is ambiguous.")
    else:
        raise _bad(path, "An ISO 8601 date-time with an offset, or Unix seconds.")
    if value > now + timedelta(seconds=FUTURE_SKEW_SECONDS):
        raise _bad(path, f"More than {FUTURE_SKEW_SECONDS} s in the future.")
    if value < oldest:
        raise _bad(path, f"Older than the {settings.RIVER_METRIC_RETENTION_HOURS} h samples are kept.")
    return value


def _labels(raw, *, path: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _bad(path, "An object of label names to strings.")
    if len(raw) > MAX_LABELS:
        raise _bad(path, f"At most {MAX_LABELS} labels.")
    for key, value in raw.items():
        if not LABEL_KEY.match(key):
            raise _bad(f"{path}.{key}"[:200], "A label name is letters, digits and _ . - (up to 63).")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX or "\x00" in value:
            raise _bad(f"{path}.{key}", f"A label value is a string of at most {LABEL_VALUE_MAX} characters.")
    return dict(sorted(raw.items()))


def metric_samples_parse(*, samples, now: datetime) -> list[tuple[str, float, dict, datetime]]:
    """The batch as (name, value, labels, ts), or a 400 naming the first bad field."""
    if not isinstance(samples, list) or not samples:
        raise _bad("samples", "A non-empty list of samples.")
    if len(samples) > MAX_SAMPLES:
        raise _bad("samples", f"At most {MAX_SAMPLES} samples per batch.")
    oldest = now - timedelta(hours=settings.RIVER_METRIC_RETENTION_HOURS)
    parsed = []
    for index, sample in enumerate(samples):
        path = f"samples.{index}"
        if not isinstance(sample, dict):
            raise _bad(path, "A sample is an object: {name, value, labels, timestamp}.")
        unknown = sorted(set(sample) - {"name", "value", "labels", "timestamp"})
        if unknown:
            raise _bad(f"{path}.{unknown[0]}"[:200], "Unknown field.")
        name = sample.get("name")
        if not isinstance(name, str) or not METRIC.match(name):
            raise _bad(f"{path}.name", "A metric name: a letter or _, then letters, digits and _ . : - (up to 100).")
        value = sample.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or abs(value) > 1e300:
            raise _bad(f"{path}.value", "A finite number.")
        parsed.append((name, float(value), _labels(sample.get("labels"), path=f"{path}.labels"),
                       _timestamp(sample.get("timestamp"), path=f"{path}.timestamp", now=now, oldest=oldest)))
    return parsed


def metrics_ingest(*, workspace, samples, now: datetime | None = None) -> Ingested:
    """Store a batch (all or nothing), then judge the threshold triggers it concerns."""
    now = now or timezone.now()
    parsed = metric_samples_parse(samples=samples, now=now)
    with transaction.atomic():
        MetricSample.objects.bulk_create([
            MetricSample(workspace=workspace, name=name, value=value, labels=labels, ts=ts, received_at=now)
            for name, value, labels, ts in parsed
        ])
    series: dict[str, list[dict]] = {}
    for name, _, labels, _ in parsed:
        if labels not in series.setdefault(name, []):
            series[name].append(labels)
    firings: list[TriggerFiring] = []
    try:
        firings = thresholds_evaluate(workspace_id=workspace.pk, series=series, now=now)
    except Exception:  # noqa: BLE001 - the samples are stored; the next batch judges again
        logger.exception("threshold evaluation failed for workspace %s", workspace.pk)
    return Ingested(accepted=len(parsed), firings=firings)


@dataclass(frozen=True, slots=True)
class Verdict:
    holds: bool
    value: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    count: int = 0


def threshold_window_judge(*, rule: ThresholdRule, workspace_id, metric: str, labels: dict,
                           now: datetime) -> Verdict:
    """Whether ``rule`` holds over its window for one series (see the module docstring)."""
    start = now - timedelta(seconds=rule.window_seconds)
    series = MetricSample.objects.filter(workspace_id=workspace_id, name=metric, labels=labels)
    opening = series.filter(ts__lte=start).order_by("-ts", "-id").values_list("value", flat=True).first()
    if opening is None:
        return Verdict(holds=False)
    inside = series.filter(ts__gt=start, ts__lte=now)
    stats = inside.aggregate(total=Sum("value"), count=Count("id"), low=Min("value"), high=Max("value"))
    if not stats["count"]:
        return Verdict(holds=False)  # nothing reported inside the window: stale, not a breach
    count = stats["count"] + 1
    low = min(opening, stats["low"]) if stats["low"] is not None else opening
    high = max(opening, stats["high"]) if stats["high"] is not None else opening
    average = ((stats["total"] or 0.0) + opening) / count
    if rule.aggregate is None:
        holds = rule.holds(opening) and not inside.filter(_VIOLATES[rule.op](rule.value)).exists()
        latest = inside.order_by("-ts", "-id").values_list("value", flat=True).first()
        value = opening if latest is None else latest
    else:
        value = {"avg": average, "min": low, "max": high}[rule.aggregate]
        holds = rule.holds(value)
    return Verdict(holds=holds, value=value, minimum=low, maximum=high, count=count)


def thresholds_evaluate(*, workspace_id, series: dict[str, list[dict]],
                        now: datetime | None = None) -> list[TriggerFiring]:
    """Judge every enabled threshold trigger of the workspace whose metric is in
    ``series`` (metric name -> label sets); fire those that hold, unless cooling down."""
    from triggers.selectors import triggers_enabled_of_type

    firings = []
    judged = 0
    for trigger in triggers_enabled_of_type(workspace_id=workspace_id, trigger_type=TriggerType.THRESHOLD):
        config = ThresholdConfig.model_validate(trigger.config)
        rule = threshold_parse(config.expression)
        for labels in series.get(rule.metric, ()):
            judged += 1
            if judged > MAX_JUDGEMENTS:
                logger.warning("workspace %s: threshold evaluation stopped after %s judgements", workspace_id,
                               MAX_JUDGEMENTS)
                return firings
            at = now or timezone.now()
            verdict = threshold_window_judge(rule=rule, workspace_id=workspace_id, metric=rule.metric,
                                             labels=labels, now=at)
            if verdict.holds:
                firing = threshold_fire(trigger=trigger, rule=rule, cooldown_seconds=config.cooldown_seconds,
                                        labels=labels, verdict=verdict, now=at)
                if firing is not None:
                    firings.append(firing)
                break  # one firing per trigger per evaluation
    return firings


def threshold_fire(*, trigger: Trigger, rule: ThresholdRule, cooldown_seconds: int, labels: dict,
                   verdict: Verdict, now: datetime) -> TriggerFiring | None:
    """Fire unless the trigger is cooling down. Holds the trigger's row lock while it
    decides, so concurrent evaluations fire once. None: nothing recorded (a cooldown
    skip was already recorded for this quiet period)."""
    from triggers.services import trigger_fire, trigger_firing_skip

    source = f"threshold:{trigger.name}"
    payload = {
        "metric": rule.metric, "labels": labels, "expression": rule.source, "value": verdict.value,
        "min": verdict.minimum, "max": verdict.maximum, "samples": verdict.count,
        "window": {"seconds": rule.window_seconds, "end": now.isoformat(),
                   "start": (now - timedelta(seconds=rule.window_seconds)).isoformat()},
    }
    with transaction.atomic():
        locked = Trigger.objects.select_for_update().filter(pk=trigger.pk, enabled=True).first()
        if locked is None:
            return None
        fresh_now = timezone.now()
        last = (TriggerFiring.objects.filter(trigger=trigger).exclude(reason__in=[Reason.COOLDOWN, Reason.DUPLICATE])
                .order_by("-fired_at", "-id").first())
        if last is not None and cooldown_seconds and last.fired_at > fresh_now - timedelta(seconds=cooldown_seconds):
            if TriggerFiring.objects.filter(trigger=trigger, reason=Reason.COOLDOWN,
                                            fired_at__gte=last.fired_at).exists():
                return None
            until = last.fired_at + timedelta(seconds=cooldown_seconds)
            return trigger_firing_skip(trigger=trigger, source=source, reason=Reason.COOLDOWN, payload=payload,
                                       detail=f"{rule.source} holds; quiet until {until.isoformat()}",
                                       fired_at=fresh_now)
        return trigger_fire(trigger=trigger, payload=payload, source=source, triggered_at=now)


def metrics_prune(*, now: datetime | None = None) -> int:
    """Delete samples older than the retention, in batches; returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.RIVER_METRIC_RETENTION_HOURS)
    removed = 0
    while True:
        ids = list(MetricSample.objects.filter(ts__lt=cutoff).values_list("id", flat=True)[:PRUNE_BATCH])
        if not ids:
            return removed
        removed += MetricSample.objects.filter(id__in=ids).delete()[0]
