"""Bearer secrets shown once and kept only as a digest: personal access tokens
(``rvr_…``, tenancy) and trigger API keys (``rtk_…``, triggers) are issued, parsed and
checked here, once, so the two cannot drift apart again.

A secret reads ``<marker>_<prefix>_<secret>``. The marker names the kind; the prefix
(12 lowercase hex characters) is stored in clear so a lookup is one indexed query; only
the SHA-256 of the whole text is stored.

``secret_verify`` does the same work whatever is wrong with what it is given: at most
one lookup (when the text parses) and exactly one constant-time comparison, against a
stand-in digest when no row matched. A caller that knows no prefix learns nothing
from the time an answer takes that it would not learn from a wrong secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

PREFIX_BYTES = 6  # 12 hex characters
SECRET_BYTES = 32  # 43 URL-safe characters
MAX_LENGTH = 256  # far above an issued secret (~60 characters); longer text is refused unread
_PREFIX = re.compile(r"[0-9a-f]{1,16}\Z")  # hex, and never past the prefix columns' 16 characters
_NO_MATCH = b"0" * 64  # compared against when nothing matched; no SHA-256 hex digest is this


class HasDigest(Protocol):
    digest: str


Row = TypeVar("Row", bound=HasDigest)


@dataclass(frozen=True)
class IssuedSecret:
    prefix: str
    plaintext: str  # shown once, never stored
    digest: str


def secret_digest(plaintext: str) -> str:
    """The stored form of a secret: SHA-256 of its UTF-8 text, in hex."""
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


def secret_issue(*, marker: str) -> IssuedSecret:
    prefix = secrets.token_hex(PREFIX_BYTES)
    plaintext = f"{marker}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return IssuedSecret(prefix=prefix, plaintext=plaintext, digest=secret_digest(plaintext))


def secret_prefix(*, plaintext: str, marker: str) -> str | None:
    """The lookup prefix of ``plaintext`` (already stripped) when it has the form of a
    ``marker`` secret, else None. The secret part may itself hold ``_``."""
    if len(plaintext) > MAX_LENGTH:
        return None
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != marker or not parts[2] or not _PREFIX.match(parts[1]):
        return None
    return parts[1]


def secret_verify(*, plaintext: str | None, marker: str, lookup: Callable[[str], Row | None]) -> Row | None:
    """The row whose digest matches ``plaintext`` (surrounding white space ignored), or
    None. ``lookup`` takes a prefix and returns the row holding it, or None; it runs only
    for text of the right form, and one comparison in constant time runs on every path."""
    text = (plaintext or "").strip()
    prefix = secret_prefix(plaintext=text, marker=marker)
    row = lookup(prefix) if prefix is not None else None
    expected = row.digest.encode("utf-8", "surrogatepass") if row is not None else _NO_MATCH
    given = secret_digest(text if prefix is not None else "").encode()
    matched = hmac.compare_digest(expected, given)
    return row if matched and row is not None else None
