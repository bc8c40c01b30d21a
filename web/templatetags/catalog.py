"""Template helpers of the catalog pages: times as <time> elements, statuses and cron
expressions in words."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html

register = template.Library()


@register.simple_tag
def when(value, empty: str = "—"):
    """``value`` as ``<time datetime=…>`` with a readable local time (``empty`` when None)."""
    if not value:
        return empty
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return format_html('<time datetime="{}">{}</time>', local.isoformat(), date_format(local, "j M Y, H:i"))


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
