"""Atomic fixed-window counters behind rate and budget policies.

One row per (key, window_start) in ``PolicyCounter``, bumped by a single
``INSERT ... ON CONFLICT ... DO UPDATE ... RETURNING`` statement: the database
serialises concurrent bumps on the row, so there is no read-then-write race.
The same SQL runs on PostgreSQL and on SQLite 3.35+.

Windows are aligned to the Unix epoch in UTC (an hourly window starts on the hour).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from governance.models import PolicyCounter

HOUR = 3600


def _seconds(window: int | timedelta) -> int:
    seconds = int(window.total_seconds()) if isinstance(window, timedelta) else int(window)
    if seconds <= 0:
        raise ValueError("window must be positive")
    return seconds


def window_start(*, window: int | timedelta, now: datetime | None = None) -> datetime:
    seconds = _seconds(window)
    stamp = int((now or timezone.now()).timestamp())
    return datetime.fromtimestamp(stamp - stamp % seconds, tz=UTC)


def _sql(*, guarded: bool) -> str:
    qn = connection.ops.quote_name
    table, key, start, value = qn(PolicyCounter._meta.db_table), qn("key"), qn("window_start"), qn("value")
    sql = (
        f"INSERT INTO {table} ({key}, {start}, {value}) VALUES (%s, %s, %s) "
        f"ON CONFLICT ({key}, {start}) DO UPDATE SET {value} = {table}.{value} + excluded.{value}"
    )
    if guarded:
        sql += f" WHERE {table}.{value} + excluded.{value} <= %s"
    return sql + f" RETURNING {value}"


def counter_hit(*, key: str, window: int | timedelta, amount: int = 1, now: datetime | None = None) -> int:
    """Add ``amount`` (may be negative, to give back) and return the window's new value."""
    start = connection.ops.adapt_datetimefield_value(window_start(window=window, now=now))
    with connection.cursor() as cursor:
        cursor.execute(_sql(guarded=False), [key, start, amount])
        return int(cursor.fetchone()[0])


def counter_try_consume(
    *, key: str, window: int | timedelta, limit: int, amount: int = 1, now: datetime | None = None
) -> tuple[bool, int]:
    """Add ``amount`` only if the total stays within ``limit``. Returns (allowed, value).

    The limit is checked inside the same statement that adds, on the locked row, so
    concurrent callers can never jointly pass the limit.
    """
    if amount > limit:
        return False, counter_value(key=key, window=window, now=now)
    start = connection.ops.adapt_datetimefield_value(window_start(window=window, now=now))
    with connection.cursor() as cursor:
        cursor.execute(_sql(guarded=True), [key, start, amount, limit])
        row = cursor.fetchone()
    if row is not None:
        return True, int(row[0])
    return False, counter_value(key=key, window=window, now=now)


def counter_value(*, key: str, window: int | timedelta, now: datetime | None = None) -> int:
    value = (
        PolicyCounter.objects.filter(key=key, window_start=window_start(window=window, now=now))
        .values_list("value", flat=True)
        .first()
    )
    return int(value or 0)


def counter_prune(*, older_than: timedelta = timedelta(days=2), now: datetime | None = None) -> int:
    """Delete windows that started before ``now - older_than``; returns rows deleted."""
    deleted, _ = PolicyCounter.objects.filter(window_start__lt=(now or timezone.now()) - older_than).delete()
    return deleted
