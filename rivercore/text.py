"""Text that PostgreSQL can store.

PostgreSQL's ``text`` and ``jsonb`` cannot hold the NUL character, and UTF-8 (so
every column and JSON document) cannot hold a lone UTF-16 surrogate. Such
characters arrive from tool outputs, query rows, model replies and request bodies;
stored as is they make the statement fail, and a statement that fails the same way
on every retry would keep a run in a retry loop. Values are escaped on their way in:
NUL becomes the visible text ``\\0`` and a lone surrogate becomes U+FFFD.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

NUL_ESCAPE = "\\0"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _replace(match: re.Match[str]) -> str:
    return NUL_ESCAPE if match.group() == "\x00" else "\ufffd"


def text_storable(text: str) -> str:
    """``text`` with NUL escaped and lone surrogates replaced."""
    return _UNSTORABLE.sub(_replace, text) if _UNSTORABLE.search(text) else text


def has_unstorable(text: str) -> bool:
    return bool(_UNSTORABLE.search(text))


def json_storable(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string and key
    made storable; other values are returned unchanged. A clean container is
    returned as is after one pass of orjson (C speed): nearly every value is clean."""
    if isinstance(value, dict | list) and _clean(value):
        return value
    return _storable(value)


def _clean(value: Any) -> bool:
    try:
        dumped = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: lone surrogates, or a type it does not know
        return False
    return b"\\u0000" not in dumped


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return text_storable(value)
    if isinstance(value, dict):
        return {(text_storable(k) if isinstance(k, str) else k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def json_unstorable_path(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (or key) PostgreSQL cannot store, if any."""
    if isinstance(value, str):
        return (path or "value") if has_unstorable(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and has_unstorable(key):
                return text_storable(key_path)
            found = json_unstorable_path(item, key_path)
            if found:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = json_unstorable_path(item, f"{path}[{index}]")
            if found:
                return found
    return None
