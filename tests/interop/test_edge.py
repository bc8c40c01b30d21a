"""The edge of /mcp/ and /a2a/ as an ASGI application (interop.asgi, interop.edge),
called directly: the routing, the host check, the headers, and a database that is busy."""

from __future__ import annotations

import json

import anyio
import pytest
from psycopg_pool import PoolTimeout

from interop import edge
from interop.asgi import interop_route
from tenancy.services import token_issue


def _call(
    app, *, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"", method: str = "POST"
) -> tuple[int, dict, bytes]:
    sent: list[dict] = []
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "scheme": "http",
        "query_string": b"",
        "headers": headers,
        "http_version": "1.1",
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    anyio.run(app, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body_out


async def _django(scope, receive, send):
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"django"})


ROUTE = interop_route(_django)
HOST = (b"host", b"127.0.0.1:8000")


def test_other_paths_go_to_django_and_mcp_paths_never_do(db):
    assert _call(ROUTE, path="/api/v1/agents/", headers=[HOST])[0] == 299
    assert _call(ROUTE, path="/mcpx", headers=[HOST])[0] == 299
    for path in ("/mcp", "/mcp/", "/a2a/agents/"):
        status, headers, body = _call(ROUTE, path=path, headers=[HOST])
        assert status == 401 and json.loads(body)["error"]["code"] == "authentication_failed"
        assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"


@pytest.mark.parametrize("host", [b"evil.example", b"", b"127.0.0.1.evil.example:8000"])
def test_a_host_outside_allowed_hosts_is_a_400_before_any_credential_is_read(db, host, monkeypatch):
    def never(**kwargs):
        raise AssertionError("the credential was looked up")

    monkeypatch.setattr(edge, "caller_authenticate", never)
    status, _, body = _call(ROUTE, path="/mcp/", headers=[(b"host", host), (b"authorization", b"Bearer rvr_x_y")])
    assert status == 400 and json.loads(body)["error"]["code"] == "bad_host"


def test_a_busy_database_is_a_503_with_retry_after_not_a_500(db, monkeypatch):
    def busy(**kwargs):
        from django.db import OperationalError

        raise OperationalError("no connection free") from PoolTimeout("pool timeout")

    monkeypatch.setattr(edge, "caller_authenticate", busy)
    status, headers, body = _call(ROUTE, path="/a2a/agents/", headers=[HOST, (b"authorization", b"Bearer x")])
    assert status == 503 and headers["retry-after"] == "5"
    assert json.loads(body)["error"]["code"] == "database_unavailable"


def test_a_valid_token_reaches_the_a2a_card_list(transactional_db, owner):
    # The edge reads the database from a worker thread (interop.runs.db): committed rows only.
    token = token_issue(user=owner).plaintext.encode()
    status, _, body = _call(
        ROUTE, path="/a2a/agents/", method="GET", headers=[HOST, (b"authorization", b"Bearer " + token)]
    )
    assert status == 200 and json.loads(body) == {"agents": []}
