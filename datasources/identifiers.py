"""SQL identifiers as the database resolves them, and as policies compare them.

Two questions are kept apart:

* **Which table does a name reach?** That follows the dialect's own rules.
  PostgreSQL folds an unquoted identifier to lower case (ASCII letters only, as the
  server does in a UTF-8 database) and keeps a quoted one exactly, so ``Canary`` and
  ``canary`` reach ``canary`` while ``"Canary"`` reaches only a table created as
  ``"Canary"``. SQLite keeps the spelling but compares names without regard to ASCII
  case, quoted or not (``"CANARY"``, ``[Canary]`` and ``canary`` are one table).
  ``identifier_fold`` and ``table_resolve`` answer it; the SQL guard and write-back
  use them, so a name only ever reaches a table the data source exposes.
* **Does a name match a policy?** Policies compare names with ``identifier_key``:
  Unicode NFKC, then case-folded, quotes and schema qualifier removed. A policy on
  ``canary`` therefore covers ``Canary``, ``"CANARY"``, ``public.canary``,
  ``"public"."Canary"`` and ``main.canary``. On PostgreSQL this deliberately also
  covers a distinct table created as ``"CANARY"``: for a policy the stricter reading
  is the safe one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError

SQLGLOT_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite"}
DEFAULT_SCHEMAS = {"postgresql": "public", "sqlite": "main"}
MAX_IDENTIFIER_CHARS = 1000

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def identifier_fold(*, name: str, quoted: bool, dialect: str) -> str:
    """The spelling the database looks up for one identifier (see the module docstring)."""
    if dialect == "postgresql" and not quoted:
        return ascii_lower(name)
    return name


def identifier_key(name: str) -> str:
    """The form policies compare: NFKC-normalized and case-folded."""
    return unicodedata.normalize("NFKC", name).casefold()


def identifiers_equal(*, looked_up: str, existing: str, dialect: str) -> bool:
    """Whether a folded name reaches an existing name under the dialect's comparison."""
    if dialect == "sqlite":
        return ascii_lower(looked_up) == ascii_lower(existing)
    return looked_up == existing


def table_resolve(*, name: str, quoted: bool, exposed: Iterable[str], dialect: str) -> str | None:
    """The exposed table (as the schema spells it) that ``name`` reaches, or None."""
    looked_up = identifier_fold(name=name, quoted=quoted, dialect=dialect)
    for existing in exposed:
        if identifiers_equal(looked_up=looked_up, existing=existing, dialect=dialect):
            return existing
    return None


def schema_matches(*, name: str, quoted: bool, schema_name: str, dialect: str) -> bool:
    looked_up = identifier_fold(name=name, quoted=quoted, dialect=dialect)
    return identifiers_equal(looked_up=looked_up, existing=schema_name, dialect=dialect)


def qualified_table_parse(*, text: str, dialect: str) -> exp.Table:
    """Parse a table name given as text (``canary``, ``"public"."Canary"``, ``[Canary]``).

    Raises ValueError unless the text is exactly one (optionally schema-qualified)
    table name in the dialect's syntax.
    """
    read = SQLGLOT_DIALECTS.get(dialect)
    if read is None:
        raise ValueError(f"unsupported dialect {dialect!r}")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_IDENTIFIER_CHARS or "\x00" in text:
        raise ValueError("not a table name")
    try:
        table = exp.to_table(text.strip(), dialect=read)
    except (SqlglotError, ValueError, RecursionError) as exc:
        raise ValueError("not a table name") from exc
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or not table.name:
        raise ValueError("not a table name")
    extra = set(table.args) - {"this", "db", "catalog"}
    if any(table.args.get(key) for key in extra) or any(node.comments for node in table.walk()):
        raise ValueError("not a table name")
    return table


def policy_name_key(text: str) -> str:
    """The policy key of a table name written in any supported syntax.

    ``"public"."Canary"``, ``public.canary``, ``[Canary]`` and ``Canary`` all give
    ``canary``. Text that is not a table name is keyed as it stands.
    """
    if not isinstance(text, str):
        return text
    if len(text) > MAX_IDENTIFIER_CHARS:
        return identifier_key(text)  # not a table name; kept out of the cache
    return _policy_name_key(text)


@lru_cache(maxsize=4096)
def _policy_name_key(text: str) -> str:
    for dialect in ("sqlite", "postgresql"):  # SQLite's quoting ("", [], ``) covers PostgreSQL's
        try:
            table = qualified_table_parse(text=text, dialect=dialect)
        except ValueError:
            continue
        return identifier_key(table.name)
    return identifier_key(text)

