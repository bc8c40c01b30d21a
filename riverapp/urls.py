from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from riverapp import health

api_v1 = [
    path("", include("tenancy.api")),
    path("", include("agents.api")),
    path("", include("datasources.api")),
    path("", include("governance.api")),
    path("", include("executions.api")),
    path("", include("triggers.api")),
]

urlpatterns = [
    path("health", health.health, name="health"),
    path("health/ready", health.ready, name="health-ready"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("riverapp.pages")),
]
