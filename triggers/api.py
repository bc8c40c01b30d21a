"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls)."""

urlpatterns: list = []
