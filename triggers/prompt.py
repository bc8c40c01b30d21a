"""A trigger's prompt template: ``{{ payload.a.b }}`` placeholders and nothing else.

Not Django or Jinja templates: a template written by a workspace editor must not reach
attributes, filters, tags or anything but the firing's payload. A placeholder names a
dotted path into the payload; a missing path renders as nothing; a value that is not a
string is written as compact JSON; each value is cut at ``VALUE_MAX`` characters and
the whole prompt at ``limits.PROMPT``. Any other ``{{ ... }}`` is refused when the
trigger is saved (``prompt_validate``), so a typo is caught then, not at 8 a.m.

The work is bounded by the template, not by the payload: placeholders are found in one
left-to-right scan (a regular expression over thousands of unclosed ``{{`` took
quadratic time), a template holds at most MAX_PLACEHOLDERS of them, and rendering stops
as soon as the prompt is full.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from rivercore import limits

PATH = re.compile(r"\s*payload((?:\.[A-Za-z0-9_-]{1,100}){1,10})\s*\Z")
VALUE_MAX = 2_000
MAX_PLACEHOLDERS = 200
TRUNCATED = "…"


class PromptTemplateError(ValueError):
    pass


def _placeholders(template: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, inner text) of each ``{{ ... }}``, left to right, in linear time:
    a placeholder ends at the first ``}}`` after its ``{{``."""
    position = 0
    while True:
        start = template.find("{{", position)
        if start < 0:
            return
        end = template.find("}}", start + 2)
        if end < 0:
            return
        yield start, end + 2, template[start + 2 : end]
        position = end + 2


def prompt_validate(template: str) -> str:
    """The template if every placeholder is ``{{ payload.<path> }}`` and there are at most
    MAX_PLACEHOLDERS; else PromptTemplateError."""
    for count, (start, end, inner) in enumerate(_placeholders(template), start=1):
        if count > MAX_PLACEHOLDERS:
            raise PromptTemplateError(f"a prompt template may hold at most {MAX_PLACEHOLDERS} placeholders")
        if len(inner) > 1_200 or not PATH.match(inner):
            raise PromptTemplateError(
                f"{template[start:end][:60]!r} is not a placeholder River fills; write {{{{ payload.field }}}} "
                "(dotted paths such as {{ payload.ticket.id }})"
            )
    return template


def _lookup(payload, path: list[str]):
    value = payload
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _text(value) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= VALUE_MAX else text[:VALUE_MAX] + TRUNCATED


def prompt_render(template: str, payload) -> str:
    """The prompt with each placeholder replaced by the payload's value at its path
    (at most MAX_PLACEHOLDERS of them; rendering stops once the prompt is full)."""
    parts: list[str] = []
    length, position = 0, 0
    for count, (start, end, inner) in enumerate(_placeholders(template), start=1):
        if count > MAX_PLACEHOLDERS or length > limits.PROMPT:
            break
        parts.append(template[position:start])
        path = PATH.match(inner) if len(inner) <= 1_200 else None
        # Refused at save time; rendered as nothing if one slipped in.
        value = _text(_lookup(payload, path.group(1).lstrip(".").split("."))) if path else ""
        parts.append(value)
        length += start - position + len(value)
        position = end
    if length <= limits.PROMPT:
        parts.append(template[position:])
    rendered = "".join(parts)
    return rendered if len(rendered) <= limits.PROMPT else rendered[: limits.PROMPT - 1] + TRUNCATED
