"""Execution endpoints: runs, the stateless engine contract, LLM providers."""

from django.urls import include, path

urlpatterns = [
    path("", include("executions.api.providers")),
    path("", include("executions.api.runs")),
    path("", include("executions.api.replays")),
    path("", include("executions.api.sessions")),
    path("", include("executions.api.backtests")),
    path("", include("executions.api.evaluations")),
    path("", include("executions.api.canary")),
]
