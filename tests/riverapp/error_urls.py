"""River's URLs plus views that fail on purpose, for tests/riverapp/test_error_pages.py."""

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.urls import path

from riverapp.urls import handler400, handler403, handler404, handler500
from riverapp.urls import urlpatterns as river_urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


def bad_request(request):
    raise BadRequest("The test sent nonsense.")


def suspicious(request):
    raise SuspiciousOperation("The test looks suspicious.")


def forbidden(request):
    raise PermissionDenied("The test may not.")


def broken(request):
    raise RuntimeError("The test broke this view.")


failing = [
    path("fail/400", bad_request),
    path("fail/400-suspicious", suspicious),
    path("fail/403", forbidden),
    path("fail/500", broken),
]

urlpatterns = [
    *failing,
    *(path(f"api/v1/{pattern.pattern}", pattern.callback) for pattern in failing),
    *river_urlpatterns,
]
