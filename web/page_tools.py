"""Small helpers the catalog pages (agents, triggers, data sources, audit) share.

Pages show the current workspace (``web.context.current_workspace``); what the user
may do there is read once per request (``workspace_permissions``). A service's
``InvalidInput`` names fields by their API path (``connection_config.host``,
``config.cron``); ``errors_onto_form`` puts each message next to the page's field
that holds it, and the rest above the form.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404

from rivercore.errors import NotFound, RiverError
from tenancy.selectors import workspace_permissions
from web.context import current_workspace

PER_PAGE = 25


def page_login_required(view):
    """Every page's sign-in guard: a visitor goes to ``settings.LOGIN_URL`` (set once, as
    the sign-in page's URL name) with ``?next=`` back to the page."""
    return login_required(view)


def workspace_and_permissions(request):
    """(the page's workspace or None, the permissions the user holds there)."""
    workspace = current_workspace(request)
    if workspace is None:
        return None, frozenset()
    return workspace, workspace_permissions(user=request.user, workspace=workspace)


def require(granted: frozenset[str], permission: str) -> None:
    """403 unless ``permission`` is granted (the object was already found: no leak)."""
    if permission not in granted:
        raise PermissionDenied("Your role in this workspace may not do this.")


def or_404(lookup, **kwargs):
    """A tenant-scoped selector's result, its NotFound turned into the page's 404."""
    try:
        return lookup(**kwargs)
    except NotFound as exc:
        raise Http404(exc.message) from None


def mark_invalid_fields(form, *, prefix: str = "") -> None:
    """Mark each field the form refused for assistive technology (``aria-invalid``, and
    ``aria-describedby`` naming the ``<id>-error`` element the template renders). Errors
    not tied to a field (``__all__``) and names the form does not have are skipped."""
    for name in form.errors:
        if name not in form.fields:
            continue
        form.fields[name].widget.attrs.update(
            {"aria-invalid": "true", "aria-describedby": f"{prefix}{form[name].id_for_label}-error"})


def paginate(request, rows, per_page: int = PER_PAGE):
    return Paginator(rows, per_page).get_page(request.GET.get("page"))


def query_without_page(request) -> str:
    """The page's GET query minus ``page``, for the pagination links."""
    pairs = [(key, value) for key, values in request.GET.lists() if key != "page" for value in values if value]
    return urlencode(pairs)


def errors_onto_form(form, exc: RiverError, field_map: dict[str, str] | None = None) -> None:
    """Put a service's error messages next to the form's fields.

    ``field_map`` maps the service's detail keys (or their prefixes, such as
    ``connection_config.host``) to form field names; a key naming a form field goes
    there; anything else is shown above the form with the key in plain words."""
    field_map = field_map or {}
    details = exc.details if isinstance(exc.details, dict) else {}
    placed = False
    for key, messages in details.items():
        target = field_map.get(key)
        if target is None:
            target = next((name for prefix, name in field_map.items() if key.startswith(prefix + ".")), None)
        if target is None and key in form.fields:
            target = key
        for message in _messages(messages):
            if target is not None:
                form.add_error(target, message)
            else:
                form.add_error(None, f"{key.replace('_', ' ').replace('.', ' › ')}: {message}")
            placed = True
    if not placed:
        form.add_error(None, exc.message)


def _messages(value) -> list[str]:
    if isinstance(value, dict):
        return [f"{key.replace('_', ' ')}: {message}" for key, inner in value.items() for message in _messages(inner)]
    if isinstance(value, list | tuple):
        return [message for item in value for message in _messages(item)]
    return [str(value)]
