"""Every page of ``web`` sends a visitor who is not signed in to the sign-in page (one
guard, ``web.page_tools.page_login_required``, reading ``settings.LOGIN_URL``), whatever
the method the page takes; none answers with content or a 500 first."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

pytestmark = pytest.mark.django_db

OPEN_TO_VISITORS = {"login", "logout"}


def _web_patterns(patterns=None, prefix: str = ""):
    """The URL patterns under ``web.urls`` (the project's own: health, API, admin, are not pages)."""
    top = patterns is None
    for entry in get_resolver().url_patterns if top else patterns:
        if isinstance(entry, URLResolver):
            if top and getattr(entry.urlconf_module, "__name__", "") != "web.urls":
                continue
            yield from _web_patterns(entry.url_patterns, prefix + str(entry.pattern))
        elif not top and isinstance(entry, URLPattern) and entry.name not in OPEN_TO_VISITORS:
            yield entry, prefix + str(entry.pattern)


def _path(route: str) -> str:
    filled = route
    for converter, value in (("<int:", "1"), ("<uuid:", str(uuid.uuid4())), ("<str:", "x"), ("<slug:", "x")):
        while converter in filled:
            start = filled.index(converter)
            filled = filled[:start] + value + filled[filled.index(">", start) + 1:]
    return "/" + filled


PAGES = [(entry.name, _path(route)) for entry, route in _web_patterns()]


def test_the_pages_were_found():
    names = {name for name, _ in PAGES}
    assert {"home", "runs-list", "run-page", "approvals-inbox", "approval-page", "agents", "triggers",
            "data-sources", "audit", "sessions-list", "notifications", "workspace-switch"} <= names


@pytest.mark.parametrize(("name", "path"), PAGES, ids=[name for name, _ in PAGES])
def test_a_visitor_is_sent_to_sign_in(name, path):
    client = Client()
    response = client.get(path)
    if response.status_code == 405:  # a POST-only page
        response = client.post(path)
    assert response.status_code == 302, (name, path, response.status_code)
    assert response["Location"].startswith("/accounts/login/?next="), (name, response["Location"])
