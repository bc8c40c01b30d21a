"""The one parser of River's API: JSON, refused whole when it is too deep or holds a NUL.

Every request body goes through here before any serializer sees it, so no view can
forget the check: a NUL (``\\u0000``) in any key or string value, or nesting deeper
than ``RIVER_JSON_MAX_DEPTH``, is a 400 naming where it was found. A NUL would be
truncated or refused by PostgreSQL and C libraries further in; deep nesting costs
recursion in every later walk (pydantic, governance, the audit hash).
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


def json_problems_check(*, value, max_depth: int) -> None:
    """Raise InvalidInput naming the first NUL or the first place nested too deep.

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
                        details={_path((*where, key.replace("\x00", "\\u0000"))): ["A key contains a NUL byte."]},
                    )
                stack.append((item, (*where, key), depth + 1))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                stack.append((item, (*where, index), depth + 1))
        elif isinstance(node, str) and "\x00" in node:
            raise InvalidInput(
                "NUL bytes are not allowed in the request.",
                code="nul_byte",
                details={_path(where): ["NUL bytes (\\u0000) are not allowed."]},
            )


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
