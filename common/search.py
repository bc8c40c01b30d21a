"""Text search over a queryset: PostgreSQL full-text search, ``LIKE`` on SQLite.

The search box (``/search/``) and the runs list's text filter read through the owning
apps' selectors, which all match the same way: the query's words (letters, digits and
``_``; at most ``MAX_WORDS``), each a prefix of a word of one of the searched fields.

On PostgreSQL the fields form one ``SearchVector`` with the ``simple`` configuration (no
stemming, no stop words: names, ids and prompts in any language match as typed) and
the words one prefix ``tsquery`` (``word:* & word:*``). The runs, the table that grows
fastest, keep that vector in a column of its own (``Execution.search_vector``), written by a
database trigger on every insert and on every update of the fields it is made of, with a GIN
index on the column: a search tests and ranks the stored vector instead of computing one per
row, and the planner can walk the newest runs when a word is common. Audit entries
(append-only at the database level, so a column could not be backfilled) have a GIN index
on exactly the expression (``vector_index``), which the filter's expression matches. On
SQLite every word must be contained (``icontains``, a ``LIKE``) in one of the fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from django.contrib.auth import get_user_model
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector, SearchVectorExact
from django.db import connection
from django.db.models import F, Q, QuerySet

from common.compiled import CompiledQuery

# The most words of a query that are matched; the rest are ignored.
MAX_WORDS = 8
# The longest query the search box and the runs list's text filter accept.
MAX_QUERY_LENGTH = 200
CONFIG = "simple"
_WORD = re.compile(r"\w+")


def query_words(text: str) -> list[str]:
    """The words of ``text`` a search matches, lower-cased, at most ``MAX_WORDS``."""
    return [word.lower() for word in _WORD.findall(text or "")][:MAX_WORDS]


def search_vector(*fields) -> SearchVector:
    """The vector searched over ``fields`` (names or expressions); ``vector_index`` indexes
    the same expression."""
    return SearchVector(*fields, config=CONFIG)


def vector_index(*fields, name: str) -> GinIndex:
    """A functional GIN index on ``search_vector(*fields)``, for ``Meta.indexes``. Only
    PostgreSQL builds it (the migration that adds it skips other databases)."""
    return GinIndex(search_vector(*fields), name=name)


def _tsquery_text(words: Sequence[str]) -> str:
    # Each word is letters, digits and underscores only, so the raw query is well formed.
    return " & ".join(f"{word}:*" for word in words)


def _tsquery(words: Sequence[str]) -> SearchQuery:
    return SearchQuery(_tsquery_text(words), search_type="raw", config=CONFIG)


def full_text() -> bool:
    return connection.vendor == "postgresql"


def _vector(fields: Sequence, stored: str | None):
    return F(stored) if stored else search_vector(*fields)


def text_match(fields: Sequence, like_fields: Sequence[str], words: Sequence[str], *, stored: str | None = None) -> Q:
    """A condition true for rows whose ``fields`` hold every one of ``words``;
    ``like_fields`` are the same fields as lookups (``result__summary``) for SQLite;
    ``stored`` names a column that holds ``search_vector(*fields)`` already, read instead."""
    if full_text():
        return Q(SearchVectorExact(_vector(fields, stored), _tsquery(words)))
    condition = Q()
    for word in words:
        any_field = Q()
        for field in like_fields:
            any_field |= Q(**{f"{field}__icontains": word})
        condition &= any_field
    return condition


def ranked(rows: QuerySet, fields: Sequence, words: Sequence[str], *, tiebreak: str = "-pk",
           stored: str | None = None) -> QuerySet:
    """``rows`` best match first: by ``SearchRank`` on PostgreSQL (of the ``stored``
    column when given), by ``tiebreak`` alone on SQLite (which has no rank)."""
    if full_text():
        return rows.annotate(search_rank=SearchRank(_vector(fields, stored), _tsquery(words))).order_by(
            "-search_rank", tiebreak)
    return rows.order_by(tiebreak)


class CompiledSearch:
    """A search selector's query, compiled to SQL once per ``limit`` (common/compiled.py)
    on PostgreSQL and afterwards only run with the user's id, the workspace's id and the
    words: building and compiling the ORM query (the tenant scope's subqueries, the joins,
    the rank) cost several times what PostgreSQL spends answering it. There the query's
    shape does not depend on the words (they are one ``tsquery`` parameter); on SQLite
    each word is one more ``LIKE``, so the query is built afresh each time.

    ``build(user=, workspace_id=, words=, limit=)`` returns the queryset, scoped with the
    app's usual ``*_for_user`` selector: it is compiled with a stand-in user and workspace
    (ids no row has) and a stand-in word, whose values are then replaced by the real ones.
    A signed-out user is never compiled for (their scope is empty, a different query).
    ``build`` must read nothing but its arguments (no clock, no changing setting): what
    it reads is frozen into the compiled SQL."""

    _USER_ID, _WORKSPACE_ID, _WORD = -28_001, -28_002, "riverstandinword"

    def __init__(self, build: Callable[..., QuerySet]):
        self._build = build
        self._compiled: dict[int, CompiledQuery] = {}

    def rows(self, *, user, workspace_id: int, words: Sequence[str], limit: int) -> list:
        if not full_text() or not user.is_authenticated:
            return list(self._build(user=user, workspace_id=workspace_id, words=words, limit=limit))
        compiled = self._compiled.get(limit)
        if compiled is None:
            compiled = self._compiled.setdefault(limit, self._compile(limit))
        return compiled.all(user_id=user.pk, workspace_id=workspace_id, tsquery=_tsquery_text(words))

    def _compile(self, limit: int) -> CompiledQuery:
        def build(*, user_id: int, workspace_id: int, tsquery: str) -> QuerySet:
            return self._build(user=get_user_model()(pk=user_id), workspace_id=workspace_id, words=[self._WORD],
                               limit=limit)

        return CompiledQuery(build, user_id=self._USER_ID, workspace_id=self._WORKSPACE_ID,
                             tsquery=_tsquery_text([self._WORD]))


class AddVectorIndex(AddIndexConcurrently):
    """A migration's ``AddIndex`` for a ``vector_index``: built concurrently on
    PostgreSQL (the table stays writable while it builds; the migration must say
    ``atomic = False``), and skipped on other databases, which search with ``LIKE``."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class RemoveVectorIndex(RemoveIndexConcurrently):
    """The ``RemoveIndex`` of an ``AddVectorIndex``: dropped concurrently on PostgreSQL,
    nothing to drop on other databases."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
