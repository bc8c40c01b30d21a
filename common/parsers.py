"""The one parser of River's API: JSON, refused whole when it is too deep, holds a NUL
or a lone surrogate.

Every request body goes through here before any serializer sees it, so no view can
forget the check: a NUL (``\\u0000``) or a lone UTF-16 surrogate (``\\ud800``) in any
key or string value, or nesting deeper than ``RIVER_JSON_MAX_DEPTH``, is a 400 naming
where it was found. A NUL would be truncated or refused by PostgreSQL and C libraries
further in; a lone surrogate is valid JSON escape syntax but no character at all, so
it cannot be encoded as UTF-8 and fails at the first database write, log line or
response (a 500, or a webhook event dropped); deep nesting costs recursion in every
later walk (pydantic, governance, the audit hash).

Webhook deliveries parse their raw body with this same parser; any other code that
reads JSON from outside calls ``json_problems_check`` on the value.
"""

from __future__ import annotations

import codecs
import json
import math

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from rivercore.errors import InvalidInput


def _path(parts: tuple) -> str:
    return ".".join(str(part) for part in parts) or "body"


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a code point U+D800..U+DFFF (what ``"\\ud800"`` in JSON
    decodes to in Python), which no UTF-8 encoder accepts."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escaped(text: str) -> str:
    """``text`` printable in an error message: NULs and surrogates as ``\\uXXXX``."""
    return "".join(f"\\u{ord(ch):04x}" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text)


def _surrogate_refusal(where: tuple, message: str) -> InvalidInput:
    return InvalidInput(
        "The request holds a lone UTF-16 surrogate, which is not a character.",
        code="invalid_unicode",
        details={_path(tuple(_escaped(part) if isinstance(part, str) else part for part in where)): [message]},
    )


def text_problems_check(*, value: str, field: str) -> None:
    """Raise InvalidInput naming ``field`` when one string from outside (a form value,
    a query parameter, a header) holds a NUL or a lone surrogate."""
    if "\x00" in value:
        raise InvalidInput("NUL bytes are not allowed in the request.", code="nul_byte",
                           details={field: ["NUL bytes (\\u0000) are not allowed."]})
    if has_lone_surrogate(value):
        raise _surrogate_refusal((field,), "A lone surrogate (\\ud800-\\udfff) is not a character.")


def json_problems_check(*, value, max_depth: int) -> None:
    """Raise InvalidInput naming the first NUL, lone surrogate or place nested too deep.

    Walks iteratively (no recursion), so a hostile document cannot exhaust the stack
    here either.
    """
    stack: list[tuple[object, tuple, int]] = [(value, (), 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, (dict, list)) and depth > max_depth:
            raise InvalidInput(
                f"The JSON body is nested more than {max_depth} levels deep.",
                code="too_deep",
                details={_path(where): [f"Nested more than {max_depth} levels deep."]},
            )
        if isinstance(node, dict):
            for key, item in node.items():
                if "\x00" in key:
                    raise InvalidInput(
                        "NUL bytes are not allowed in the request.",
                        code="nul_byte",
                        details={_path((*where, _escaped(key))): ["A key contains a NUL byte."]},
                    )
                if has_lone_surrogate(key):
                    raise _surrogate_refusal((*where, key), "A key holds a lone surrogate (\\ud800-\\udfff).")
                stack.append((item, (*where, key), depth + 1))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                stack.append((item, (*where, index), depth + 1))
        elif isinstance(node, str):
            if "\x00" in node:
                raise InvalidInput(
                    "NUL bytes are not allowed in the request.",
                    code="nul_byte",
                    details={_path(where): ["NUL bytes (\\u0000) are not allowed."]},
                )
            if has_lone_surrogate(node):
                raise _surrogate_refusal(where, "A lone surrogate (\\ud800-\\udfff) is not a character.")


class JSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            value = json.loads(text, parse_constant=_refuse, parse_float=_finite_float)
        except RecursionError:
            raise InvalidInput(
                f"The JSON body is nested more than {settings.RIVER_JSON_MAX_DEPTH} levels deep.",
                code="too_deep",
                details={"body": [f"Nested more than {settings.RIVER_JSON_MAX_DEPTH} levels deep."]},
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        json_problems_check(value=value, max_depth=settings.RIVER_JSON_MAX_DEPTH)
        return value


def _finite_float(text: str) -> float:
    """1e400 would become infinity, which no JSON column can store."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _refuse(constant: str):
    """NaN and Infinity are not JSON; Python's json would accept them."""
    raise ValueError(f"{constant} is not valid JSON")
