"""Day filters (``since=2026-03-01&until=2026-03-31``) as the instants a query compares.

A day is the server's local day (``TIME_ZONE``). ``since`` is inclusive: its local
midnight. ``until`` is inclusive too, so its bound is the *next* day's midnight, compared
with ``<``. The first and last days the calendar has bound nothing (everything is after
0001-01-01 and before 9999-12-31's end), and their midnights are not computed: the next
day after 9999-12-31 does not exist, and 0001-01-01's midnight east of UTC is before year 1.
"""

from __future__ import annotations

import datetime as dt
import re

from django.utils import timezone

_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def day_from_text(raw) -> dt.date | None:
    """The day ``raw`` spells as ``YYYY-MM-DD`` in ASCII digits (what a date input sends),
    else None: one rule for the pages' and the API's day filters."""
    if not isinstance(raw, str) or not _DAY.fullmatch(raw):
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        return None


def day_start(day: dt.date) -> dt.datetime:
    """The local midnight that starts ``day``."""
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


def day_window(*, since: dt.date | None, until: dt.date | None) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(inclusive start, exclusive end) of the days ``since`` to ``until``; None where
    that side bounds nothing."""
    start = day_start(since) if since is not None and since > dt.date.min else None
    end = day_start(until + dt.timedelta(days=1)) if until is not None and until < dt.date.max else None
    return start, end
