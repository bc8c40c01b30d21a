"""Structured views of JSON values: step details, the run page's Why panel, audit entries.

``{% struct value %}`` renders ``_struct.html``: nested objects and lists as key/value
lists a person reads (keys in words, long text clamped behind "Show all", JSON text
inside a string opened up), with the raw JSON behind a toggle. ``{% struct_diff before
after %}`` renders ``_struct_diff.html``: what an edit changed, per field.

Every value is someone else's input (a model's output, a tool's result, a webhook's
payload), so the view is bounded whatever it is given: ``MAX_DEPTH`` levels, at most
``MAX_ITEMS`` entries of one object or list and ``MAX_NODES`` in the whole view (the rest
counted as "… N more"), text cut at ``MAX_CHARS`` and the raw JSON at ``RAW_MAX_CHARS``.
The templates escape everything; nothing here marks text safe.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import islice

from django import template

from web.approval_card import json_changes

register = template.Library()

MAX_DEPTH = 5
MAX_ITEMS = 40
MAX_NODES = 300
CLAMP_CHARS = 280  # text longer than this (or of more than CLAMP_LINES lines) is clamped
CLAMP_LINES = 4
MAX_CHARS = 20_000
KEY_CHARS = 80
RAW_MAX_CHARS = 200_000
JSON_TEXT_MAX = 100_000  # a string this long or shorter that holds a JSON object or list is opened up
MAX_CHANGES = 100
CHANGE_CHARS = 2_000

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def key_words(key) -> str:
    """``tool_name`` → "Tool name", ``maxRows`` → "Max rows", ``SQL_text`` → "SQL text";
    cut at ``KEY_CHARS``."""
    text = _CAMEL.sub(" ", str(key)).replace("_", " ").replace("-", " ")
    words = [word if word.isupper() and len(word) > 1 else word.lower() for word in text.split()]
    if not words:
        return "(blank)"
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    return text if len(text) <= KEY_CHARS else text[:KEY_CHARS - 1] + "…"


@dataclass
class Node:
    """One value of the view. ``kind``: map, list, text, number, bool, null, diff, cut
    (below the depth limit: counted, shown in the raw JSON only)."""

    kind: str
    text: str = ""
    entries: list[dict] = field(default_factory=list)
    more: int = 0
    clamped: bool = False
    head: str = ""
    cut_chars: int = 0
    from_json_text: bool = False
    changes: list[dict] = field(default_factory=list)


class _Budget:
    def __init__(self, nodes: int):
        self.nodes = nodes

    def take(self) -> bool:
        if self.nodes <= 0:
            return False
        self.nodes -= 1
        return True


def _text_node(value: str, budget: _Budget, depth: int) -> Node:
    opened = _json_text(value)
    if opened is not None and depth < MAX_DEPTH:
        node = _node(opened, budget, depth)
        node.from_json_text = True
        return node
    shown, cut = value[:MAX_CHARS], max(len(value) - MAX_CHARS, 0)
    long = len(value) > CLAMP_CHARS or value.count("\n") >= CLAMP_LINES
    head = " ".join(value[:CLAMP_CHARS].split()[:60])[:CLAMP_CHARS] if long else ""
    return Node(kind="text", text=shown, clamped=long, head=head, cut_chars=cut)


def _json_text(value: str):
    """The object or list a string holds as JSON text (tool results often do), else None."""
    stripped = value.strip()
    if len(stripped) < 2 or len(stripped) > JSON_TEXT_MAX or stripped[0] not in "{[":
        return None
    try:
        opened = json.loads(stripped)
    except ValueError:
        return None
    return opened if isinstance(opened, dict | list) and opened else None


def _edit_pairs(value: dict) -> bool:
    """An audit entry's ``diff``: ``{field: {"from": ..., "to": ...}}``."""
    return bool(value) and all(isinstance(v, dict) and set(v) == {"from", "to"} for v in value.values())


def _children(items, total: int, budget: _Budget, depth: int, *, keyed: bool):
    entries = []
    for key, child in islice(items, MAX_ITEMS):
        if not budget.take():
            break
        entries.append({"label": key_words(key) if keyed else str(key), "key": str(key)[:KEY_CHARS * 4],
                        "node": _node(child, budget, depth + 1)})
    return entries, total - len(entries)


def _node(value, budget: _Budget, depth: int = 0) -> Node:
    if value is None:
        return Node(kind="null", text="none")
    if isinstance(value, bool):
        return Node(kind="bool", text="yes" if value else "no")
    if isinstance(value, int | float):
        return Node(kind="number", text=str(value))
    if isinstance(value, str):
        return _text_node(value, budget, depth)
    if isinstance(value, dict | list | tuple) and value and depth >= MAX_DEPTH:
        return Node(kind="cut", more=len(value))
    if isinstance(value, dict):
        if _edit_pairs(value):
            before = {str(k): v["from"] for k, v in value.items()}
            after = {str(k): v["to"] for k, v in value.items()}
            changes, more = changes_of(before, after)
            return Node(kind="diff", changes=changes, more=more)
        entries, more = _children(iter(value.items()), len(value), budget, depth, keyed=True)
        return Node(kind="map", entries=entries, more=more)
    if isinstance(value, list | tuple):
        entries, more = _children(enumerate(value, start=1), len(value), budget, depth, keyed=False)
        return Node(kind="list", entries=entries, more=more)
    return _text_node(str(value), budget, depth)


def struct_tree(value) -> Node:
    """The view of ``value`` (any JSON value), bounded as the module says."""
    return _node(value, _Budget(MAX_NODES))


def raw_json(value) -> tuple[str, int]:
    """(the pretty-printed JSON, cut at ``RAW_MAX_CHARS``; how many characters were cut)."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # a cycle, a float key: not from a JSON field
        text = repr(value)
    return text[:RAW_MAX_CHARS], max(len(text) - RAW_MAX_CHARS, 0)


def _clip(text: str) -> str:
    if len(text) <= CHANGE_CHARS:
        return text
    return text[:CHANGE_CHARS] + f"… ({len(text) - CHANGE_CHARS:,} more characters)"


def changes_of(before, after) -> tuple[list[dict], int]:
    """What changed from ``before`` to ``after``, field by field (dotted paths, the approval
    card's ``json_changes``), each value clipped: at most ``MAX_CHANGES`` of them, and how
    many more there were."""
    before = before if isinstance(before, dict) else {"(value)": before}
    after = after if isinstance(after, dict) else {"(value)": after}
    changes = json_changes(before, after)
    shown = [{**change, "old": _clip(change["old"]), "new": _clip(change["new"])} for change in changes[:MAX_CHANGES]]
    return shown, len(changes) - len(shown)


@register.inclusion_tag("_struct.html")
def struct(value, label: str = "", raw: bool = True):
    """``{% struct value "Arguments" %}``: the structured view, its raw JSON behind a toggle
    (``raw=False`` leaves the toggle out)."""
    text, cut = raw_json(value) if raw else ("", 0)
    return {"tree": struct_tree(value), "label": label, "raw": text, "raw_cut": cut}


@register.inclusion_tag("_struct_diff.html")
def struct_diff(before, after, label: str = ""):
    """``{% struct_diff proposed edited "Edited arguments" %}``: before and after per field."""
    changes, more = changes_of(before, after)
    return {"changes": changes, "more": more, "label": label}
