"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "riverapp.settings")
if not settings.configured:
    # Serving the web: borrow database connections from a pool (riverapp/settings.py).
    # A process that loaded its settings already (a test importing this module)
    # keeps them, and its child processes do not inherit the choice.
    os.environ.setdefault("RIVER_DB_POOL", "true")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from riverapp.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": URLRouter(websocket_urlpatterns)})
