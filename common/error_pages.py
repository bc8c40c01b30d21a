"""River's own error pages when DEBUG is on.

With DEBUG off Django answers 400, 403, 404 and 500 through the handlers in
``riverapp.urls`` (``common.edge``), which render River's templates (``400.html``,
``403.html``, ``404.html``, ``500.html``) or, under ``/api/``, JSON. With DEBUG on Django
answers 400, 404 and 500 with its technical pages instead: they list the URL patterns or
a traceback, and River's Content-Security-Policy blocks their inline styles. This
middleware gives DEBUG the same pages as production, unless a developer asks for the
technical ones (``RIVER_DEBUG_TECHNICAL_ERRORS=true``). Off DEBUG it does nothing.

It sits after the authentication middleware (the 404 page shows the frame to a signed-in
user) and before ``common.dbpool.DatabaseUnavailableMiddleware`` (whose 503 comes first).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core import signals
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, get_urlconf, resolve
from django.utils.log import log_response

from common import edge


def river_pages_in_debug() -> bool:
    return settings.DEBUG and not settings.RIVER_DEBUG_TECHNICAL_ERRORS


class DebugErrorPagesMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if river_pages_in_debug():
            # A path no pattern matches never reaches process_exception: Django's own
            # handler would answer it with the technical 404. The slash-appending
            # redirect still happens (CommonMiddleware sees this 404 on its way out).
            try:
                resolve(request.path_info, urlconf=getattr(request, "urlconf", None) or get_urlconf())
            except Resolver404 as exc:
                return edge.handler404(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not river_pages_in_debug():
            return None
        if isinstance(exception, Http404):
            return edge.handler404(request, exception)
        if isinstance(exception, PermissionDenied):
            return None  # Django renders handler403 in every mode already.
        if isinstance(exception, (BadRequest, SuspiciousOperation)):
            response = edge.handler400(request, exception)
            # The loggers Django's own handler uses (django.security.* for a suspicious request).
            where = {} if isinstance(exception, BadRequest) else {
                "logger": logging.getLogger(f"django.security.{exception.__class__.__name__}"), "level": "error"}
            log_response("%s: %s", str(exception), request.path, response=response, request=request,
                         exception=exception, **where)
            return response
        if settings.DEBUG_PROPAGATE_EXCEPTIONS:
            return None
        # As Django's own handler does: tell the listeners (the test client re-raises),
        # then log the traceback; the page itself shows none.
        signals.got_request_exception.send(sender=None, request=request)
        response = edge.handler500(request)
        log_response("%s: %s", "Internal Server Error", request.path, response=response, request=request,
                     exception=exception)
        return response
