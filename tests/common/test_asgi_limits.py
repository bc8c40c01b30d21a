"""The body limit at the ASGI layer: refused from the announced length without calling
the application, and counted while a body without one is read."""

from __future__ import annotations

import asyncio
import json

import pytest

from common.asgi_limits import BodyLimitMiddleware

LIMIT = 4096


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT
    settings.RIVER_UPLOAD_BODY_LIMITS = {"/api/v1/artifacts/": 4 * LIMIT}


async def _reading_app(scope, receive, send):
    """Reads the whole body, then answers 200 with its length."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _drive(*, path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]], method: str = "POST"):
    calls = {"app": 0, "received": 0}
    sent: list[dict] = []

    async def app(scope, receive, send):
        calls["app"] += 1
        await _reading_app(scope, receive, send)

    async def receive():
        index = calls["received"]
        calls["received"] += 1
        return {"type": "http.request", "body": chunks[index], "more_body": index < len(chunks) - 1}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(BodyLimitMiddleware(app)(scope, receive, send))
    return calls, sent


def _status_and_body(sent: list[dict]) -> tuple[int, bytes]:
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_an_announced_length_over_the_limit_is_refused_without_calling_the_application():
    calls, sent = _drive(path="/api/v1/agents/", chunks=[b""], headers=[(b"content-length", b"99999999999")])
    status, body = _status_and_body(sent)
    assert (status, calls["app"], calls["received"]) == (413, 0, 0)
    assert json.loads(body)["error"]["details"] == {"body": [f"At most {LIMIT} bytes."]}


def test_a_body_without_a_length_is_refused_once_the_count_passes_the_limit():
    chunks = [b"a" * 1024] * 10  # 10 KiB in all
    calls, sent = _drive(path="/api/v1/agents/", chunks=chunks, headers=[(b"transfer-encoding", b"chunked")])
    status, body = _status_and_body(sent)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    assert calls["received"] == LIMIT // 1024 + 1  # stopped at the chunk that passed the limit


def test_a_page_path_gets_a_plain_413():
    _, sent = _drive(path="/accounts/login/", chunks=[b""], headers=[(b"content-length", str(LIMIT + 1).encode())])
    status, body = _status_and_body(sent)
    assert status == 413 and b"larger than" in body
    assert (b"content-type", b"text/plain; charset=utf-8") in sent[0]["headers"]


def test_a_body_within_the_limit_reaches_the_application():
    _, sent = _drive(path="/api/v1/agents/", chunks=[b"b" * 1000, b"b" * 1000], headers=[])
    assert _status_and_body(sent) == (200, b"2000")


def test_the_upload_path_keeps_its_own_larger_limit():
    chunks = [b"c" * 1024] * 8  # twice the ordinary limit, half the upload limit
    _, sent = _drive(path="/api/v1/artifacts/", chunks=chunks, headers=[(b"content-length", b"8192")])
    assert _status_and_body(sent) == (200, b"8192")
    _, refused = _drive(path="/api/v1/artifacts/", chunks=[b""], headers=[(b"content-length", b"99999")])
    assert refused[0]["status"] == 413
