"""Follow-up questions inside a session: "and last month?" read against the question the
previous turn's query was planned from. The previous question is rewritten with the
follow-up's time window (or extended with what the follow-up adds) and planned again,
so the query keeps the previous one's shape with the filter the follow-up changed.
Deterministic and plain text in, plain text out: no model, no SQL parsed back."""

from __future__ import annotations

import re

from rivercore.planner.rules import time_window

_LEAD = re.compile(
    r"^\s*(?:and\s+(?:what|how)\s+about|what\s+about|how\s+about|same\s+(?:for|but)|and\s+also|and|also|"
    r"now|then)\b[\s,:]*", re.IGNORECASE)
_PREPOSITION = re.compile(r"^(?:in|within|over|during|for|from)\s+(?:the\s+)?", re.IGNORECASE)
_TRAILING_PREPOSITION = re.compile(r"\s*\b(?:in|within|over|during|for|from)\s+(?:the\s+)?$", re.IGNORECASE)
_RELATIVE = re.compile(r"(?:last|past)\b")
_GLUE = frozenset({"in", "the", "for", "over", "within", "during", "from", "of", "please", "then", "ones", "one"})


def _core(phrase: str) -> str:
    """A time phrase without its leading preposition ("in the last month" -> "last month")."""
    return _PREPOSITION.sub("", phrase.strip())


def followup_resolve(prompt: str, previous: str) -> str | None:
    """The full question a follow-up stands for, or None when ``prompt`` is not a
    follow-up: it does not open with "and", "what about", "how about", "same for", ...
    and is not just a time window ("last month?")."""
    base = previous.strip().rstrip("?.! ").strip()
    text = prompt.strip()
    if not base or not text:
        return None
    lead = _LEAD.match(text)
    rest = (text[lead.end():] if lead else text).strip().rstrip("?.! ").strip()
    if not rest:
        return None
    window = time_window(rest.lower())
    leftover = rest
    if window is not None:
        at = rest.lower().find(window[3])
        leftover = (rest[:at] + rest[at + len(window[3]):]).strip() if at >= 0 else rest
    extra = " ".join(word for word in leftover.split() if word.lower().strip(",") not in _GLUE).strip(" ,")
    if lead is None and (window is None or extra):
        return None  # a question of its own
    merged = base
    if window is not None:
        new = _core(window[3])
        old = time_window(base.lower())
        old_core = _core(old[3]) if old is not None else ""
        at = base.lower().find(old_core) if old_core else -1
        if at >= 0:
            head = base[:at]
            if not _RELATIVE.match(new):  # "in the last 24 hours" -> "today", not "in the today"
                head = _TRAILING_PREPOSITION.sub("", head).rstrip() + " "
            elif not _TRAILING_PREPOSITION.search(head):  # "today" -> "in the last 3 days"
                head = head.rstrip() + " in the "
            merged = head + new + base[at + len(old_core):]
        else:
            preposition = "in the " if _RELATIVE.match(new) else ""
            merged = f"{base} {preposition}{new}"
    if extra:
        merged = f"{merged} {extra}"
    return f"{merged}?"
