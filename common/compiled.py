"""Querysets compiled to SQL once per process and run again with other values.

Compiling a queryset (resolving its filters, joins, subqueries and annotations into
SQL) costs far more CPU than sending the statement: on the lookups every API request
makes (the bearer token, the agent with the caller's roles) it was most of the
request's time in Django. ``CompiledQuery`` keeps the ORM's definition of the query as
the one source of truth, compiles it the first time it is used, and afterwards only
substitutes the values and builds the instances the way the ORM would (the same
converters, ``from_db``, ``select_related`` and annotations).

The values are given as named placeholders: the queryset is built once with a
stand-in value for each name, and the stand-ins are found again among the compiled
statement's parameters. A stand-in the compiled parameters do not hold exactly (a
value the field transformed) is refused when the query is first compiled, so a
query this cannot serve fails loudly instead of sending the wrong value.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators


class CompiledQuery:
    """``build(**stand_ins)`` returns the queryset; ``first(**values)`` runs it (with
    ``LIMIT 1`` added by ``build`` when it should stop at one row) and returns the first
    instance, or None; ``all(**values)`` returns every instance. ``stand_ins`` maps each
    name to a value that appears nowhere else in the query: a parameter equal to it is
    replaced by the name's value."""

    def __init__(self, build: Callable[..., QuerySet], **stand_ins: Any):
        self._build = build
        self._stand_ins = stand_ins
        self._compiled: _Compiled | None = None
        self._lock = threading.Lock()

    def _compile(self) -> _Compiled:
        with self._lock:
            if self._compiled is None:
                self._compiled = _Compiled(self._build(**self._stand_ins), self._stand_ins)
        return self._compiled

    def first(self, **values: Any) -> Model | None:
        compiled = self._compiled or self._compile()
        return compiled.first(values)

    def all(self, **values: Any) -> list[Model]:
        """Every row the query gives, as instances (no ``LIMIT`` added)."""
        compiled = self._compiled or self._compile()
        return compiled.all(values)


class _Compiled:
    def __init__(self, queryset: QuerySet, stand_ins: dict[str, Any]):
        self.db = queryset.db
        compiler = queryset.query.get_compiler(using=self.db)
        self.sql, params = compiler.as_sql()
        # A field may send a value in another form (a UUID as its hex on SQLite): each
        # stand-in is looked for as itself and in those forms, and the form found is the
        # one a real value is sent in.
        by_value = {(type(sent), sent): (name, form) for name, value in stand_ins.items()
                    for form in _FORMS if (sent := form(value)) is not None}
        # Each parameter: (name, form) of a placeholder, or (None, the constant).
        self.params: list[tuple[str | None, Any]] = []
        for param in params:
            found = by_value.get((type(param), param)) if _hashable(param) else None
            self.params.append(found if found is not None else (None, param))
        missing = set(stand_ins) - {name for name, _ in self.params if name is not None}
        if missing:
            raise ValueError(f"stand-ins {sorted(missing)} are not among the compiled parameters")
        select, klass_info = compiler.select, compiler.klass_info
        self.model = klass_info["model"]
        fields = klass_info["select_fields"]
        self.start, self.end = fields[0], fields[-1] + 1
        self.init_list = [column[0].target.attname for column in select[self.start:self.end]]
        self.related = get_related_populators(klass_info, select, self.db)
        self.annotations = list(compiler.annotation_col_map.items())
        self.converters = list(compiler.get_converters([s[0] for s in select[:compiler.col_count]]).items())

    def _execute(self, values: dict[str, Any], fetch: Callable) -> Any:
        connection = connections[self.db or DEFAULT_DB_ALIAS]
        params = [form(values[name]) if name is not None else form for name, form in self.params]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            return fetch(cursor)

    def first(self, values: dict[str, Any]) -> Model | None:
        row = self._execute(values, lambda cursor: cursor.fetchone())
        return None if row is None else self._instance(row, connections[self.db or DEFAULT_DB_ALIAS])

    def all(self, values: dict[str, Any]) -> list[Model]:
        connection = connections[self.db or DEFAULT_DB_ALIAS]
        return [self._instance(row, connection) for row in self._execute(values, lambda cursor: cursor.fetchall())]

    def _instance(self, row, connection) -> Model:
        if self.converters:
            row = list(row)
            for position, (converters, expression) in self.converters:
                value = row[position]
                for converter in converters:
                    value = converter(value, expression, connection)
                row[position] = value
        instance = self.model.from_db(self.db, self.init_list, row[self.start:self.end])
        for populator in self.related:
            populator.populate(row, instance)
        for name, position in self.annotations:
            setattr(instance, name, row[position])
        return instance


class CompiledInsert:
    """``insert(instance)`` writes one new row as ``instance.save(force_insert=True)``
    would: every concrete field but an auto primary key, each value through the field's
    ``pre_save`` and ``get_db_prep_save``, the generated key read back. The INSERT's SQL
    is built by the ORM once per process and database (its compilation cost more than
    the statement on the journal's path). No ``pre_save``/``post_save`` signal is sent,
    so it serves models no receiver listens to (River registers none)."""

    def __init__(self, model: type[Model]):
        self.model = model
        self._compiled: dict[str, tuple[str, list, bool]] = {}
        self._lock = threading.Lock()

    def _compile(self, alias: str) -> tuple[str, list, bool]:
        from django.db.models.sql import InsertQuery

        connection = connections[alias]
        meta = self.model._meta
        fields = [field for field in meta.local_concrete_fields
                  if field is not meta.auto_field and not getattr(field, "generated", False)]
        query = InsertQuery(self.model)
        query.insert_values(fields, [self.model()])
        compiler = query.get_compiler(using=alias)
        returning = meta.auto_field is not None and connection.features.can_return_columns_from_insert
        compiler.returning_fields = [meta.auto_field] if returning else None
        (sql, params), = compiler.as_sql()
        # A field with its own placeholder (a geometry, say) is sent as an expression around
        # the parameter, which ``insert`` does not rebuild: such a model is refused here.
        if len(params) != len(fields) or any(hasattr(field, "get_placeholder") for field in fields):
            raise ValueError(f"{meta.label}: a field is not sent as a plain parameter")
        with self._lock:
            self._compiled[alias] = (sql, fields, returning)
        return sql, fields, returning

    def insert(self, instance: Model, *, using: str = DEFAULT_DB_ALIAS) -> Model:
        sql, fields, returning = self._compiled.get(using) or self._compile(using)
        connection = connections[using]
        params = [field.get_db_prep_save(field.pre_save(instance, True), connection=connection) for field in fields]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            auto = self.model._meta.auto_field
            if auto is not None:
                key = cursor.fetchone()[0] if returning else connection.ops.last_insert_id(
                    cursor, self.model._meta.db_table, auto.column)
                setattr(instance, auto.attname, key)
        instance._state.adding = False
        instance._state.db = using
        return instance


def _same(value: Any) -> Any:
    return value


def _uuid_hex(value: Any) -> str | None:
    return value.hex if isinstance(value, uuid.UUID) else None


try:  # Django sends a BigIntegerField's lookup value to PostgreSQL as psycopg's Int8
    from psycopg.types.numeric import Int8
except ImportError:  # pragma: no cover - psycopg is a dependency; SQLite never sends Int8
    Int8 = None


def _int8(value: Any) -> Any:
    return Int8(value) if Int8 is not None and type(value) is int else None


_FORMS = (_same, _uuid_hex, _int8)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
