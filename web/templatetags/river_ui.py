"""Small filters that turn numbers into the words business users read."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def wait_words(value: dt.timedelta | None) -> str:
    """A wait as people say it: "40 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    if value is None:
        return "—"
    seconds = max(int(value.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def usd(value: Decimal | float | None) -> str:
    """Dollars with cents; fractions of a cent show as "< $0.01" rather than "$0.00"."""
    amount = Decimal(value or 0)
    if 0 < amount < Decimal("0.01"):
        return "< $0.01"
    return f"${amount:,.2f}"


@register.filter
def thousands(value: int | None) -> str:
    return f"{int(value or 0):,}"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


@register.filter
def get_item(mapping: dict, key):
    return mapping.get(key, 0) if mapping else 0
