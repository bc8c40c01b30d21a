"""The effect of a write-back, computed for real and rolled back (a preview), or
checked against a preview in the write's own transaction (an approved write).

Both run the write's own statements (``write_plan``: the table and columns checked
against the cached schema, values bound by the driver) with ``RETURNING``, on a
read-write connection with the source's statement timeout, after reading the
matched rows' before-values under a lock (PostgreSQL ``FOR UPDATE``, SQLite's
``BEGIN IMMEDIATE``). A preview always ends in ROLLBACK. An approved write commits
only when its fingerprint (keys and before-values of the rows it changes) is the
previewed one and its row count is within the approver's ceiling; otherwise it
rolls back and says what moved. PostgreSQL statements are sent prepared, so each
holds one command; SQLite's driver runs one statement per call.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql as pgsql

from datasources import connectors
from datasources.connectors import PROGRESS_EVERY, pg_param, sqlite_param, sqlite_quote, write_timeout_ms
from datasources.models import DataSource
from datasources.services import WritePlan, connector_error_raise, source_connector, write_plan
from datasources.write_retry import write_with_retry
from rivercore.errors import Conflict
from rivercore.fence import FenceClosed, current_fence
from rivercore.types.previews import ROWS_INDEXED, ROWS_KEPT, EffectPreview, RowChange, canonical, digest

SQLITE_RETURNING = (3, 35, 0)


class EffectChanged(Conflict):
    """The approved write's effect is no longer the previewed one: nothing was written."""

    def __init__(self, fresh: EffectPreview, *, expected: str):
        rows = f"{fresh.rows_affected} row{'s' if fresh.rows_affected != 1 else ''}"
        super().__init__(
            f"The data changed after the preview was approved (it would now change {rows}); nothing was written.",
            code="preview_stale", details={"expected_fingerprint": expected, "preview": fresh.public()})
        self.fresh = fresh


class CeilingExceeded(Conflict):
    def __init__(self, fresh: EffectPreview, *, max_rows: int):
        super().__init__(
            f"The write would change {fresh.rows_affected} rows, more than the approver's ceiling of {max_rows}; "
            "nothing was written.", code="row_ceiling_exceeded",
            details={"rows_affected": fresh.rows_affected, "max_rows": max_rows})
        self.fresh = fresh


@dataclass(frozen=True)
class EffectTerms:
    """What an approver agreed to: the previewed fingerprint and an optional row ceiling."""

    fingerprint: str | None = None
    max_rows: int | None = None


@dataclass(frozen=True)
class _Keys:
    """How rows are named: the primary key's columns, else the engine's row id."""

    names: list[str]
    exprs: list[str]


# --- public services ---------------------------------------------------------------------------


def write_back_preview(
    *, data_source: DataSource, table_name: str, operation: str, data: Any, conditions: dict | None = None
) -> EffectPreview:
    """The write's effect, computed in a transaction that is always rolled back."""
    plan = write_plan(data_source=data_source, table_name=table_name, operation=operation, data=data,
                      conditions=conditions)
    connector = source_connector(data_source)
    try:
        return _run(connector, plan, commit=None)
    except connectors.ConnectorError as exc:
        connector_error_raise(exc)
        raise


def write_back_apply_checked(
    *, data_source: DataSource, table_name: str, operation: str, data: Any, conditions: dict | None,
    terms: EffectTerms,
) -> EffectPreview:
    """The approved write, committed only if its effect is still the previewed one
    (``terms.fingerprint``) and within the ceiling (``terms.max_rows``), both checked in
    its own transaction. Transient errors are retried like any write (write_retry)."""
    plan = write_plan(data_source=data_source, table_name=table_name, operation=operation, data=data,
                      conditions=conditions)
    connector = source_connector(data_source)
    applied: list[EffectPreview] = []

    def attempt() -> int:
        applied.append(_run(connector, plan, commit=terms))
        return applied[-1].rows_affected

    try:
        write_with_retry(attempt)
    except connectors.ConnectorError as exc:
        connector_error_raise(exc)
    return applied[-1]


# --- building the statements ------------------------------------------------------------------


def _keys(plan: WritePlan, dialect: str, quote: Callable[[str], str]) -> _Keys:
    primary = [c.column_name for c in plan.table.columns if c.is_primary_key]
    if primary:
        return _Keys(names=primary, exprs=[quote(c) for c in primary])
    if dialect == "postgresql":
        return _Keys(names=["ctid"], exprs=["ctid::text"])
    return _Keys(names=["rowid"], exprs=["rowid"])


@dataclass(frozen=True)
class _Statements:
    before: tuple[str, list] | None  # the matched rows' keys and before-values, locked
    before_columns: list[str]
    change: list[tuple[str, list]]  # the write itself, RETURNING keys (and values)
    change_columns: list[str]


def _statements(plan: WritePlan, keys: _Keys, quote, placeholder, *, lock: str) -> _Statements:
    table = quote(plan.table.table_name)
    written = connectors.build_write_statements(table=plan.table.table_name, operation=plan.operation,
                                                rows=plan.rows, conditions=plan.conditions, quote=quote,
                                                placeholder=placeholder)
    if plan.operation == "insert":
        every = [c.column_name for c in plan.table.columns]
        returning = ", ".join(keys.exprs + [quote(c) for c in every if c not in keys.names])
        columns = keys.names + [c for c in every if c not in keys.names]
        return _Statements(before=None, before_columns=[], change=[(f"{text} RETURNING {returning}", params)
                                                                  for text, params in written],
                           change_columns=columns)
    if plan.operation == "update":
        shown = [c for c in plan.rows[0] if c not in keys.names]
    else:
        shown = [c.column_name for c in plan.table.columns if c.column_name not in keys.names]
    select_list = ", ".join(keys.exprs + [quote(c) for c in shown])
    where, params = connectors.conditions_sql(plan.conditions or {}, quote, placeholder)
    order = ", ".join(keys.exprs)
    before = (f"SELECT {select_list} FROM {table} WHERE {' AND '.join(where)} ORDER BY {order}{lock}", params)
    text, change_params = written[0]
    returning = select_list if plan.operation == "update" else ", ".join(keys.exprs)
    return _Statements(before=before, before_columns=keys.names + shown,
                       change=[(f"{text} RETURNING {returning}", change_params)],
                       change_columns=keys.names + (shown if plan.operation == "update" else []))


# --- turning rows into an effect --------------------------------------------------------------


def _split(row, columns: list[str], key_names: list[str]) -> tuple[dict, dict]:
    values = {name: connectors.jsonable(value) for name, value in zip(columns, row, strict=True)}
    return ({k: values[k] for k in key_names}, {k: v for k, v in values.items() if k not in key_names})


def _effect(plan: WritePlan, keys: _Keys, statements: _Statements, before_rows: list, changed_rows: list
            ) -> EffectPreview:
    target, operation = plan.table.table_name, plan.operation
    if operation == "insert":
        changes = [RowChange(key=key, after=rest)
                   for key, rest in (_split(r, statements.change_columns, keys.names) for r in changed_rows)]
        pairs: list[list] = [[c.key, c.after] for c in changes]
    else:
        after_by_key = {canonical(key): rest for key, rest in
                        (_split(r, statements.change_columns, keys.names) for r in changed_rows)}
        changes = []
        for row in before_rows:
            key, before = _split(row, statements.before_columns, keys.names)
            after = None
            if operation == "update":
                after = after_by_key.get(canonical(key)) or {c: connectors.jsonable(v)
                                                             for c, v in plan.rows[0].items() if c in before}
            changes.append(RowChange(key=key, before=before, after=after))
        pairs = [[c.key, c.before] for c in changes]
    count = len(changed_rows)
    fingerprint = digest({"target": target, "operation": operation, "values": plan.rows,
                          "conditions": plan.conditions, "rows": pairs if operation != "insert" else []})
    return EffectPreview(
        kind="rows", target=target, operation=operation,
        columns=list(plan.rows[0]) if operation == "update" else [],
        rows_affected=count, changes=changes[:ROWS_KEPT], truncated=len(changes) > ROWS_KEPT,
        fingerprint=fingerprint, summary=_summary(operation, target, count, changes, plan),
        index=[[canonical(key), digest(before)] for key, before in pairs[:ROWS_INDEXED]],
    )


def _summary(operation: str, target: str, count: int, changes: list[RowChange], plan: WritePlan) -> str:
    rows = f"{count} row{'s' if count != 1 else ''}"
    if count == 0:
        return f"No rows match: nothing will change in {target}."
    if operation == "insert":
        return f"{rows} will be inserted into {target}."
    if operation == "delete":
        return f"{rows} will be deleted from {target}."
    parts = []
    for column, value in plan.rows[0].items():
        olds = {canonical((c.before or {}).get(column)) for c in changes}
        old = _word((changes[0].before or {}).get(column)) if len(olds) == 1 else f"({len(olds)} values)"
        parts.append(f"{column} {old} → {_word(connectors.jsonable(value))}")
    return f"{rows} will change in {target}: {'; '.join(parts)}."


def _word(value: Any) -> str:
    return "null" if value is None else value if isinstance(value, str) else canonical(value)


def _check(fresh: EffectPreview, terms: EffectTerms) -> None:
    if terms.fingerprint and fresh.fingerprint != terms.fingerprint:
        raise EffectChanged(fresh, expected=terms.fingerprint)
    if terms.max_rows is not None and fresh.rows_affected > terms.max_rows:
        raise CeilingExceeded(fresh, max_rows=terms.max_rows)


# --- running them, per dialect -------------------------------------------------------------------


def _run(connector, plan: WritePlan, *, commit: EffectTerms | None) -> EffectPreview:
    """The effect; committed only when ``commit`` is given and its terms hold."""
    if isinstance(connector, connectors.PostgresConnector):
        return _run_postgres(connector, plan, commit=commit)
    if isinstance(connector, connectors.SQLiteConnector):
        return _run_sqlite(connector, plan, commit=commit)
    raise connectors.QueryRejected("This kind of data source cannot preview a write.")


def _run_postgres(connector: connectors.PostgresConnector, plan: WritePlan, *, commit: EffectTerms | None
                  ) -> EffectPreview:
    fence = current_fence() if commit is not None else None
    timeout_ms = write_timeout_ms(connector.timeout_ms, fence)
    with connector._connect(read_only=False, timeout_ms=timeout_ms) as conn:
        def quote(name: str) -> str:
            return pgsql.Identifier(name).as_string(conn)

        keys = _keys(plan, "postgresql", quote)
        statements = _statements(plan, keys, quote, lambda n: f"${n}", lock=" FOR UPDATE")
        committing = False
        try:
            try:
                cur = conn.cursor()
                cur.execute("SELECT set_config('statement_timeout', $1, true)", [str(int(timeout_ms))])
                cur.execute("SELECT set_config('search_path', $1, true)", [connector.schema])
                before_rows = []
                if statements.before is not None:
                    cur.execute(statements.before[0], [pg_param(p) for p in statements.before[1]], prepare=True)
                    before_rows = cur.fetchall()
                changed_rows = []
                for text, params in statements.change:
                    cur.execute(text, [pg_param(p) for p in params], prepare=True)
                    changed_rows.extend(cur.fetchall())
                effect = _effect(plan, keys, statements, before_rows, changed_rows)
                if commit is None:
                    return effect
                _check(effect, commit)
                committing = True
                with fence.commit() if fence is not None else contextlib.nullcontext():
                    conn.commit()
                return effect
            finally:
                if not committing and not conn.closed:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()  # a preview, a refused write, or an error: nothing stays
        except psycopg.Error as exc:
            raise connectors.failure_annotate(connector._translate(exc), exc, committing=committing) from None
        except FenceClosed as exc:
            raise connectors.QueryTimeout(str(exc)) from None


def _run_sqlite(connector: connectors.SQLiteConnector, plan: WritePlan, *, commit: EffectTerms | None
                ) -> EffectPreview:
    if sqlite3.sqlite_version_info < SQLITE_RETURNING:
        raise connectors.QueryRejected(f"SQLite {sqlite3.sqlite_version} has no RETURNING (3.35 or later needed).")
    keys = _keys(plan, "sqlite", sqlite_quote)
    statements = _statements(plan, keys, sqlite_quote, lambda n: f"?{n}", lock="")
    fence = current_fence() if commit is not None else None
    timeout_ms = write_timeout_ms(connector.timeout_ms, fence)
    conn = connector._connect(read_only=False)
    deadline = time.monotonic() + timeout_ms / 1000
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, PROGRESS_EVERY)
    conn.execute(f"PRAGMA busy_timeout = {min(5000, timeout_ms)}")
    try:
        conn.execute("BEGIN IMMEDIATE")  # the write lock: nobody changes the rows until we end
        try:
            before_rows = []
            if statements.before is not None:
                before_rows = conn.execute(statements.before[0],
                                           [sqlite_param(p) for p in statements.before[1]]).fetchall()
            changed_rows = []
            for text, params in statements.change:
                changed_rows.extend(conn.execute(text, [sqlite_param(p) for p in params]).fetchall())
            effect = _effect(plan, keys, statements, before_rows, changed_rows)
            if commit is not None:
                _check(effect, commit)
                with fence.commit() if fence is not None else contextlib.nullcontext():
                    conn.execute("COMMIT")
            return effect
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise connector._translate(exc) from None
    except FenceClosed as exc:
        raise connectors.QueryTimeout(str(exc)) from None
    finally:
        conn.close()
