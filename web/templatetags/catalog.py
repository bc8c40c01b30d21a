"""Template helpers of the pages: times as <time> elements in River's one format and the
reader's time zone, statuses and cron expressions in words."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import mark_safe

register = template.Library()


# River's one date and time format (static/live.js formats the same way in the browser):
# "27 Nov 2026, 11:19", with seconds where a run's steps need them, and a day alone.
FORMATS = {"minute": "j M Y, H:i", "second": "j M Y, H:i:s", "day": "j M Y"}


@register.simple_tag
def when(value, empty: str = "—", style: str = "minute", local: bool = False):
    """``value`` as ``<time datetime=…>`` in River's format and the time zone of the
    request (``tenancy.time_zones``), named in its title (``empty`` when None).
    ``local`` marks it for static/live.js to re-render where pages update live."""
    if not value:
        return empty
    if style == "day" or not isinstance(value, datetime):
        day = value.date() if isinstance(value, datetime) else value
        return format_html('<time datetime="{}">{}</time>', day.isoformat(), date_format(day, FORMATS["day"]))
    moment = timezone.localtime(value) if timezone.is_aware(value) else value
    return format_html('<time datetime="{}" title="{}"{}>{}</time>', moment.isoformat(),
                       timezone.get_current_timezone_name(), mark_safe(" data-local") if local else "",
                       date_format(moment, FORMATS[style]))


@register.filter
def when_text(value, style: str = "minute") -> str:
    """``value`` in River's format and the request's time zone, as plain text (for an
    attribute such as aria-label)."""
    if not value:
        return ""
    if isinstance(value, datetime) and style != "day":
        return date_format(timezone.localtime(value) if timezone.is_aware(value) else value, FORMATS[style])
    return date_format(value.date() if isinstance(value, datetime) else value, FORMATS["day"])


@register.filter
def words(value) -> str:
    """An enum value in words: ``act_with_approval`` -> ``Act with approval``."""
    text = str(value or "").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


@register.filter
def run_status(value) -> str:
    from executions.models import Execution

    try:
        return str(Execution.Status(value).label)
    except ValueError:
        return words(value)


@register.filter
def cron_words(expression) -> str:
    """A cron expression in words (``0 8 * * 1-5`` -> ``At 08:00, Monday through Friday``);
    the expression itself when it cannot be described."""
    from cron_descriptor import ExpressionDescriptor, Options

    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        return ExpressionDescriptor(str(expression), options).get_description()
    except Exception:  # noqa: BLE001 - any expression it cannot read is shown as typed
        return str(expression)


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)
