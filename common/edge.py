"""River's HTTP edge: limits checked once for every request, and JSON errors under /api/.

DRF views already answer errors as ``{"error": {"code", "message", "details"}}``. This
module covers what never reaches a DRF view: a URL no pattern matches, a body too large
to read, a NUL byte in the path or query string, a CSRF failure, a server error. Under
``/api/`` each answers in the same JSON shape; elsewhere Django's pages stay as they are.
"""

from __future__ import annotations

import functools
import re

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.csrf import csrf_exempt

API_PREFIX = "/api/"
# C0 controls and DEL: no River URL contains one (NUL has its own 400 below).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
# "/api", "/api/..." and "/api" followed at once by a control character ("/api\n"):
# each is answered as the API answers, in JSON.
_API_PATH = re.compile(r"/api(?:/|[\x00-\x1f\x7f]|\Z)")


def is_api_path(path: str) -> bool:
    return _API_PATH.match(path) is not None


def api_error(code: str, message: str, details=None, *, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "details": details or {}}}, status=status)


class EdgeLimitsMiddleware:
    """Refuse a request before any view runs when its path, query or size is out of bounds.

    - a NUL byte (raw or ``%00``) in the path, in any query parameter name or value, or in
      any header (a token, a cookie: each would otherwise reach a database lookup);
    - a query parameter value longer than ``RIVER_QUERY_PARAM_MAX_LENGTH``, or a query
      parameter given twice, which no API filter takes (API only);
    - a declared body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (an upload path: its own
      limit, ``body_limit``): 413 before it is read. DRF reads the body as a stream and
      so never applies Django's own limit itself.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        return self.get_response(request)

    def _refusal(self, request: HttpRequest) -> HttpResponse | None:
        api = is_api_path(request.path)
        if "\x00" in request.path or "\x00" in request.path_info:
            return _bad_request(
                api, "nul_byte", "NUL bytes are not allowed in the path.", {"path": ["Contains a NUL byte."]}
            )
        if api and (CONTROL_CHARACTERS.search(request.path) or CONTROL_CHARACTERS.search(request.path_info)):
            # No pattern was written for a newline (``.`` and ``$`` do not match one), so
            # such a path would fall through to an HTML page or an APPEND_SLASH redirect.
            return api_error("not_found", "No API endpoint at this path.", {"path": ["Contains a control character."]},
                             status=404)
        for key, value in request.META.items():
            if key.startswith("HTTP_") and isinstance(value, str) and "\x00" in value:
                header = key[5:].replace("_", "-").title()
                return _bad_request(
                    api, "nul_byte", f"NUL bytes are not allowed in the {header} header.",
                    {header: ["Contains a NUL byte."]},
                )
        if any("\x00" in name or "\x00" in value for name, value in request.COOKIES.items()):
            return _bad_request(
                api, "nul_byte", "NUL bytes are not allowed in cookies.", {"Cookie": ["Contains a NUL byte."]}
            )
        try:
            params = request.GET
        except Exception:  # noqa: BLE001 - a query string Django cannot parse at all
            return _bad_request(api, "bad_query", "The query string cannot be parsed.", {"query": ["Malformed."]})
        for name, values in params.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                field = name.replace("\x00", "\\u0000")
                return _bad_request(
                    api, "nul_byte", "NUL bytes are not allowed in the query string.", {field: ["Contains a NUL byte."]}
                )
            if api and len(values) > 1:
                return _bad_request(
                    api, "repeated_parameter", f"Query parameter {name!r} is given more than once.",
                    {name: ["Give this parameter once."]},
                )
            limit = settings.RIVER_QUERY_PARAM_MAX_LENGTH
            if api and any(len(value) > limit for value in values):
                return _bad_request(
                    api, "too_long", f"Query parameter {name!r} is too long.",
                    {name: [f"At most {limit} characters."]},
                )
        declared = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(declared)
        except ValueError:
            length = -1
        if length < 0:
            return _bad_request(
                api, "bad_request", "Content-Length is not a valid length.", {"Content-Length": ["Invalid."]}
            )
        limit = body_limit(request)
        if limit is not None and length > limit:
            return request_too_large(request, limit=limit)
        return None


def body_limit(request: HttpRequest) -> int | None:
    """The largest body a request may declare (``body_limit_for``). The upload view
    still counts the file's bytes as they arrive (a body without Content-Length)."""
    return body_limit_for(method=request.method or "", path=request.path)


def body_limit_for(*, method: str, path: str) -> int:
    """The largest body a request may send: ``DATA_UPLOAD_MAX_MEMORY_SIZE``, or for a POST
    to a file upload path its own limit (``RIVER_UPLOAD_BODY_LIMITS``). One table for the
    server's edge (common.daphne_edge, before the body is read), the ASGI layer
    (common.asgi_limits) and this middleware."""
    if method.upper() == "POST":
        upload_limit = getattr(settings, "RIVER_UPLOAD_BODY_LIMITS", {}).get(path)
        if upload_limit is not None:
            return int(upload_limit)
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large_message(limit: int) -> str:
    return f"The request body is larger than {limit} bytes."


def _bad_request(api: bool, code: str, message: str, details: dict) -> HttpResponse:
    if api:
        return api_error(code, message, details, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


def request_too_large(request: HttpRequest, *, limit: int) -> HttpResponse:
    message = too_large_message(limit)
    if is_api_path(request.path):
        return api_error("request_too_large", message, {"body": [f"At most {limit} bytes."]}, status=413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


# ---------------------------------------------------------------- views for riverapp.urls


def read_only_endpoint(view):
    """For plain Django views that only read: GET and HEAD run the view, OPTIONS answers
    200 with ``Allow``, any other method is a 405 with ``Allow`` (as DRF views do)."""
    allowed = "GET, HEAD, OPTIONS"

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method in {"GET", "HEAD"}:
            return view(request, *args, **kwargs)
        if request.method == "OPTIONS":
            response = HttpResponse(status=200)
        else:
            response = HttpResponseNotAllowed(["GET", "HEAD", "OPTIONS"])
        response["Allow"] = allowed
        return response

    return wrapper



@csrf_exempt
def api_not_found(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """The last pattern under /api/: any method on a path nothing else matched."""
    details = {}
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            details = {"path": [f"Did you mean {request.path}/ ?"]}
    return api_error("not_found", "No API endpoint at this path.", details, status=404)


def handler400(request: HttpRequest, exception=None) -> HttpResponse:
    if is_api_path(request.path):
        return api_error("bad_request", "The request is malformed.", status=400)
    return defaults.bad_request(request, exception)


def handler403(request: HttpRequest, exception=None) -> HttpResponse:
    if is_api_path(request.path):
        return api_error("permission_denied", "You do not have permission to do this.", status=403)
    return defaults.permission_denied(request, exception)


def handler404(request: HttpRequest, exception=None) -> HttpResponse:
    if is_api_path(request.path):
        return api_error("not_found", "Not found.", status=404)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if is_api_path(request.path):
        return api_error("server_error", "Something went wrong on our side; it has been logged.", status=500)
    return defaults.server_error(request)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    if is_api_path(request.path):
        return api_error("csrf_failed", f"CSRF check failed: {reason}", status=403)
    return django_csrf_failure(request, reason=reason)


# ---------------------------------------------------------------- response headers

# Stylesheets are files too; inline <style> blocks are not allowed.
STYLE_SRC = "'self'"

PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer", "autoplay", "camera", "display-capture", "encrypted-media", "geolocation",
        "gyroscope", "magnetometer", "microphone", "midi", "payment", "usb", "xr-spatial-tracking",
    )
)


def content_security_policy(request: HttpRequest) -> str:
    """No inline script anywhere: every page loads its scripts as files from River itself.

    WebSockets are allowed to this host only (``'self'`` does not cover ws: in every
    browser, so the host is named; it passed ALLOWED_HOSTS validation already).
    """
    try:
        host = request.get_host()
    except Exception:  # noqa: BLE001 - DisallowedHost: the response is an error page anyway
        host = ""
    sockets = f" ws://{host} wss://{host}" if host else ""
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            f"style-src {STYLE_SRC}",
            "img-src 'self' data:",
            "font-src 'self'",
            f"connect-src 'self'{sockets}",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


class SecurityHeadersMiddleware:
    """Content-Security-Policy and Permissions-Policy on every response.

    Referrer-Policy, X-Content-Type-Options and X-Frame-Options come from Django's own
    SecurityMiddleware and XFrameOptionsMiddleware (settings SECURE_REFERRER_POLICY,
    SECURE_CONTENT_TYPE_NOSNIFF, X_FRAME_OPTIONS).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", content_security_policy(request))
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response
