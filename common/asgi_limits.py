"""The body limit at the ASGI layer, before Django reads a byte of the body.

Under Daphne, River's server edge (common.daphne_edge) already refuses a body over the
limit while it arrives. This middleware holds the same limit for any ASGI server that
streams the body to the application (uvicorn, hypercorn, a test's communicator), so
Django never spools more than the limit:

- a ``Content-Length`` over the path's limit (``common.edge.body_limit_for``) is answered
  ``413`` at once, and the application is not called;
- a body without one (chunked) is counted as the application receives it; once the
  count passes the limit the application's read fails, and the request is answered
  ``413`` if the application has not started its response.
"""

from __future__ import annotations

import json

from common.edge import body_limit_for, is_api_path, too_large_message


class BodyTooLarge(Exception):
    """The body passed the limit while the application was reading it."""


def _declared_length(headers) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # Django's edge answers 400 naming the header
    return None


async def _send_too_large(send, *, path: str, limit: int) -> None:
    message = too_large_message(limit)
    if is_api_path(path):
        body = json.dumps({"error": {"code": "request_too_large", "message": message,
                                     "details": {"body": [f"At most {limit} bytes."]}}}).encode()
        content_type = b"application/json"
    else:
        body, content_type = message.encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = body_limit_for(method=scope.get("method", ""), path=path)
        declared = _declared_length(scope.get("headers") or [])
        if declared is not None and declared > limit:
            await _send_too_large(send, path=path, limit=limit)
            return None
        received = 0
        started = False

        async def counted_receive():
            nonlocal received
            message = await receive()
            if message.get("type") == "http.request":
                received += len(message.get("body") or b"")
                if received > limit:
                    raise BodyTooLarge
            return message

        async def tracked_send(message):
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            return await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _send_too_large(send, path=path, limit=limit)
            return None
