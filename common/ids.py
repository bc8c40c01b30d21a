"""Ids and whole numbers that arrive from outside: ASCII digits only, one rule for all.

Python's ``str.isdigit()`` is true for ``"²"`` (which ``int()`` then refuses: a 500
wherever the pair was trusted), and ``int()`` itself accepts ``"٣"``, ``"１２"``,
``" 7 "``, ``"+7"`` and ``"1_000"``. An id in a path, a query string, a form or a
JSON string is therefore read here, and only ``[0-9]`` of a bounded length that fits a
PostgreSQL bigint is an id. Anything else is a 400 naming the field (API) or a form
error (pages), never a 500 and never a different row.
"""

from __future__ import annotations

import re
from uuid import UUID

from rivercore.errors import InvalidInput

BIGINT_MAX = 2**63 - 1
_ASCII_DIGITS = re.compile(r"[0-9]{1,19}")


def id_from_text(raw) -> int | None:
    """The id ``raw`` spells (1 to BIGINT_MAX in ASCII digits), else None."""
    if not isinstance(raw, str) or not _ASCII_DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if 1 <= value <= BIGINT_MAX else None


def count_from_text(raw) -> int | None:
    """A whole number 0 to BIGINT_MAX in ASCII digits (a cursor such as ``after``), else None."""
    if not isinstance(raw, str) or not _ASCII_DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if value <= BIGINT_MAX else None


def id_parse(*, value, field: str) -> int:
    """``value`` as an id, or a 400 naming ``field``."""
    parsed = id_from_text(value)
    if parsed is None:
        raise InvalidInput(f"{field} must be an id.",
                           details={field: [f"An id: 1 to {BIGINT_MAX} in ASCII digits (0-9)."]})
    return parsed


def _present(params, name: str) -> str | None:
    """The parameter's value; None when absent; a 400 when given empty (``?agent=``):
    an empty filter is a mistake in the caller, never "no filter"."""
    if name not in params:
        return None
    raw = params.get(name)
    if raw is None or raw == "":
        raise InvalidInput(f"{name} is empty.",
                           details={name: ["Give a value, or leave the parameter out."]})
    return raw


def id_query_param(*, params, name: str) -> int | None:
    """An id filter from a query string: None when absent, a 400 when empty or not an id."""
    raw = _present(params, name)
    return None if raw is None else id_parse(value=raw, field=name)


def count_query_param(*, params, name: str, default: int = 0) -> int:
    """A whole-number parameter (0 or more, ASCII digits) such as ``after``: ``default``
    when absent, a 400 naming it when empty or anything else."""
    raw = _present(params, name)
    if raw is None:
        return default
    value = count_from_text(raw)
    if value is None:
        raise InvalidInput(f"{name} must be a whole number.",
                           details={name: [f"0 to {BIGINT_MAX} in ASCII digits (0-9)."]})
    return value


def uuid_from_text(raw) -> UUID | None:
    """The UUID ``raw`` spells (ASCII hex only), else None."""
    if not isinstance(raw, str) or not raw.isascii():
        return None
    try:
        return UUID(raw)
    except ValueError:
        return None


def uuid_query_param(*, params, name: str) -> UUID | None:
    """A UUID filter from a query string: None when absent, a 400 when empty or not a UUID."""
    raw = _present(params, name)
    if raw is None:
        return None
    value = uuid_from_text(raw)
    if value is None:
        raise InvalidInput(f"{name} must be a UUID.",
                           details={name: ["A UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)."]})
    return value


def text_query_param(*, params, name: str) -> str | None:
    """A non-id filter (a status, a name): None when absent, a 400 when empty."""
    return _present(params, name)
