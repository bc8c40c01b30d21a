"""ASGI entry point: HTTP through Django, WebSockets through Channels.

HTTP passes the body limit first (common.asgi_limits); ``/mcp`` and ``/a2a/`` go to River's
MCP server and A2A endpoints instead of Django (interop.asgi). Served by Daphne
(``daphne riverapp.asgi:application`` or ``manage.py runriver``), River's server edge
(common.daphne_edge) also holds the limits Daphne applies before any application runs:
the body's size while it arrives, the request line and the header block.
"""

import os
import sys

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

from common.asgi_limits import BodyLimitMiddleware  # noqa: E402
from interop.asgi import interop_route  # noqa: E402
from riverapp.routing import websocket_urlpatterns  # noqa: E402

if "daphne.server" in sys.modules:
    # Daphne is serving (importing it elsewhere would install its Twisted reactor).
    from common.daphne_edge import daphne_edge_install
    from telemetry.logs import AccessLog

    daphne_edge_install(access_log=AccessLog)

from telemetry.traces import traces_asgi_wrap  # noqa: E402

# With tracing on, a server span per request and per WebSocket connection (telemetry.traces).
application = traces_asgi_wrap(ProtocolTypeRouter(
    {"http": BodyLimitMiddleware(interop_route(django_asgi_app)), "websocket": URLRouter(websocket_urlpatterns)}
))
