"""The threshold expression of a threshold trigger: a tiny grammar of its own.

    expression := subject OP NUMBER "for" DURATION
    subject    := METRIC | AGG "(" METRIC ")"
    AGG        := avg | min | max
    OP         := > | >= | < | <= | == | !=
    DURATION   := INTEGER ("s" | "m" | "h")

``cpu_percent > 90 for 5m`` holds when every sample of the last five minutes is above
90; ``avg(latency_ms) > 500 for 10m`` when their average is. The expression is parsed
when the trigger is saved; what the parse yields (``ThresholdRule``) is what the
evaluator reads, never the text again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,99}\Z")
_TOKEN = re.compile(r"\s*(>=|<=|==|!=|>|<|\(|\)|[A-Za-z_][A-Za-z0-9_.:-]*|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?[smh]?)")
AGGREGATES = ("avg", "min", "max")
OPERATORS = (">", ">=", "<", "<=", "==", "!=")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
MIN_WINDOW_SECONDS = 1
MAX_WINDOW_SECONDS = 86_400
EXAMPLE = "for example 'cpu_percent > 90 for 5m' or 'avg(latency_ms) > 500 for 10m'"


class ThresholdSyntaxError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ThresholdRule:
    metric: str
    aggregate: str | None  # None: every sample of the window must satisfy the comparison
    op: str
    value: float
    window_seconds: int

    @property
    def source(self) -> str:
        subject = f"{self.aggregate}({self.metric})" if self.aggregate else self.metric
        number = int(self.value) if self.value == int(self.value) else self.value
        return f"{subject} {self.op} {number} for {_duration(self.window_seconds)}"

    def holds(self, value: float) -> bool:
        return {
            ">": value > self.value, ">=": value >= self.value, "<": value < self.value,
            "<=": value <= self.value, "==": value == self.value, "!=": value != self.value,
        }[self.op]


def _duration(seconds: int) -> str:
    for unit in ("h", "m"):
        if seconds % UNIT_SECONDS[unit] == 0:
            return f"{seconds // UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ThresholdSyntaxError(f"unexpected {text[pos:].strip()[:20]!r}; {EXAMPLE}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def threshold_parse(text: str) -> ThresholdRule:
    """The rule ``text`` states, or ThresholdSyntaxError saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ThresholdSyntaxError(f"an expression is required; {EXAMPLE}")
    tokens = _tokens(text)
    aggregate = None
    if len(tokens) >= 4 and tokens[0].lower() in AGGREGATES and tokens[1] == "(":
        if tokens[3] != ")":
            raise ThresholdSyntaxError(f"{tokens[0]}( needs one metric name and a closing ')'; {EXAMPLE}")
        aggregate, metric, rest = tokens[0].lower(), tokens[2], tokens[4:]
    else:
        metric, rest = tokens[0], tokens[1:]
    if not METRIC.match(metric) or metric.lower() in AGGREGATES:
        raise ThresholdSyntaxError(f"{metric!r} is not a metric name; {EXAMPLE}")
    if len(rest) != 4 or rest[2].lower() != "for":
        raise ThresholdSyntaxError(f"expected '<metric> <operator> <number> for <duration>'; {EXAMPLE}")
    op, number, _, duration = rest
    if op not in OPERATORS:
        raise ThresholdSyntaxError(f"{op!r} is not a comparison; use one of {' '.join(OPERATORS)}")
    try:
        value = float(number)
    except ValueError:
        raise ThresholdSyntaxError(f"{number!r} is not a number; {EXAMPLE}") from None
    if not math.isfinite(value):
        raise ThresholdSyntaxError("the threshold must be a finite number")
    match = re.fullmatch(r"(\d+)([smh])", duration)
    if not match:
        raise ThresholdSyntaxError(f"{duration!r} is not a duration such as 30s, 5m or 1h")
    window = int(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if not MIN_WINDOW_SECONDS <= window <= MAX_WINDOW_SECONDS:
        raise ThresholdSyntaxError("the duration must be between 1s and 24h")
    return ThresholdRule(metric=metric, aggregate=aggregate, op=op, value=value, window_seconds=window)
