"""The admin index's "Recent actions", scoped like the rest of the admin."""

from __future__ import annotations

from collections import defaultdict

from django import template
from django.contrib import admin
from django.contrib.admin.models import LogEntry

register = template.Library()


@register.simple_tag(takes_context=True)
def admin_log_scoped(context, limit: int = 10) -> list[LogEntry]:
    """The signed-in user's latest admin actions. For a non-superuser, only those whose
    object still exists in an organization they administer: an entry names its object,
    and the person may since have lost access to it (deletions are left out, since a
    deleted object's organization can no longer be checked).

    One query for the entries and one per kind of object among them."""
    request = context["request"]
    entries = list(LogEntry.objects.filter(user_id=request.user.pk).select_related("content_type")[:limit])
    if request.user.is_superuser:
        return entries
    wanted: dict[type, set[str]] = defaultdict(set)
    for entry in entries:
        model = entry.content_type.model_class() if entry.content_type else None
        if model is not None and not entry.is_deletion():
            wanted[model].add(entry.object_id)
    visible: set[tuple[type, str]] = set()
    for model, ids in wanted.items():
        model_admin = admin.site._registry.get(model)
        if model_admin is None:
            continue
        try:
            found = model_admin.get_queryset(request).filter(pk__in=ids).values_list("pk", flat=True)
            visible.update((model, str(pk)) for pk in found)
        except (ValueError, TypeError):  # an id that is not of the model's key type
            continue
    return [
        entry for entry in entries
        if entry.content_type and (entry.content_type.model_class(), entry.object_id) in visible
    ]
