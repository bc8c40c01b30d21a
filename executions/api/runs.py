"""REST endpoints (see executions.api)."""

urlpatterns: list = []
