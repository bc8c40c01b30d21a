from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from common import edge
from riverapp import health, metrics

admin.autodiscover()  # every app's admin module (the admin's AppConfig does not: riverapp/startup_apps.py)


class FaviconRedirect(RedirectView):
    """Browsers ask for /favicon.ico on pages that name no icon (Django admin's); the
    icon's static URL is looked up per request (hashed names need collectstatic)."""

    permanent = True

    def get_redirect_url(self, *args, **kwargs) -> str:
        return static("favicon.svg")


api_v1 = [
    path("", include("tenancy.api")),
    path("", include("agents.api")),
    path("", include("datasources.api")),
    path("", include("toolservers.api")),
    path("", include("artifacts.api")),
    path("", include("governance.api")),
    path("", include("governance.api_notifications")),
    path("", include("governance.api_unknown_outcome")),
    path("", include("executions.api")),
    path("", include("triggers.api")),
]

urlpatterns = [
    path("health", health.health, name="health"),
    path("favicon.ico", FaviconRedirect.as_view()),
    path("health/ready", health.ready, name="health-ready"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    # Slack calls these, signed (governance.integrations; docs/approvals.md).
    path("integrations/", include("governance.integrations")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script), so the page needs
    # no inline script under River's Content-Security-Policy.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # Anything else under /api/ is a JSON 404, whatever the method (and whatever DEBUG).
    re_path(r"^api(?:/.*)?$", edge.api_not_found),
    path("", include("web.urls")),
]

handler400 = edge.handler400
handler403 = edge.handler403
handler404 = edge.handler404
handler500 = edge.handler500
