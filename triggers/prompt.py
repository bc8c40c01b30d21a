"""A trigger's prompt template: ``{{ payload.a.b }}`` placeholders and nothing else.

Not Django or Jinja templates: a template written by a workspace editor must not reach
attributes, filters, tags or anything but the firing's payload. A placeholder names a
dotted path into the payload; a missing path renders as nothing; a value that is not a
string is written as compact JSON; each value is cut at ``VALUE_MAX`` characters and
the whole prompt at ``limits.PROMPT``. Any other ``{{ ... }}`` is refused when the
trigger is saved (``prompt_validate``), so a typo is caught then, not at 8 a.m.
"""

from __future__ import annotations

import json
import re

from rivercore import limits

PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
PATH = re.compile(r"\s*payload((?:\.[A-Za-z0-9_-]{1,100}){1,10})\s*\Z")
VALUE_MAX = 2_000
TRUNCATED = "…"


class PromptTemplateError(ValueError):
    pass


def prompt_validate(template: str) -> str:
    """The template if every placeholder is ``{{ payload.<path> }}``; else PromptTemplateError."""
    for match in PLACEHOLDER.finditer(template):
        if not PATH.match(match.group(1)):
            raise PromptTemplateError(
                f"{match.group(0)[:60]!r} is not a placeholder River fills; write {{{{ payload.field }}}} "
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
    """The prompt with each placeholder replaced by the payload's value at its path."""

    def fill(match: re.Match) -> str:
        path = PATH.match(match.group(1))
        if not path:  # refused at save time; rendered as nothing if one slipped in
            return ""
        return _text(_lookup(payload, path.group(1).lstrip(".").split(".")))

    rendered = PLACEHOLDER.sub(fill, template)
    return rendered if len(rendered) <= limits.PROMPT else rendered[: limits.PROMPT - 1] + TRUNCATED
