"""River's server edge under the production command (``daphne riverapp.asgi:application``),
driven over raw sockets on 127.0.0.1: a body over the limit, a request line or header
block over the limit, each answered before the body is read and never with a dropped
connection."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.daphne_edge import HEADER_BLOCK_MAX_BYTES, MAX_HEADERS, REQUEST_LINE_MAX_BYTES

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_SECONDS = 90
BODY_LIMIT = 2 * 1024 * 1024  # RIVER_MAX_REQUEST_BYTES below
UPLOAD_PATH = "/api/v1/artifacts/"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _read_response(sock: socket.socket, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response read off ``sock`` (status, lower-cased headers, body)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without a response; got {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        while not body.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk, "connection closed mid-body"
            body += chunk
        return status, headers, _dechunk(body)
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return status, headers, body[:length]


def _dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, data = data.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2:]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edge")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REDIS_", "RIVER_", "DATABASE_")) and key not in {"DJANGO_SETTINGS_MODULE", "SECRET_KEY"}
    }
    # The refusals never reach the database; the requests that pass only need to be answered.
    env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{tmp / 'river.sqlite3'}", RIVER_VAR_DIR=str(tmp),
               LOG_LEVEL="WARNING", RIVER_MAX_REQUEST_BYTES=str(BODY_LIMIT), TMPDIR=str(tmp))
    port = _free_port()
    log = (tmp / "server.log").open("w+")
    process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "riverapp.asgi:application"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while True:
        assert process.poll() is None, f"daphne exited early:\n{(tmp / 'server.log').read_text()}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if _read_response(sock)[0] == 200:
                    break
        except (OSError, AssertionError):
            pass
        assert time.monotonic() < deadline, (
            f"no /health within {START_DEADLINE_SECONDS}s:\n{(tmp / 'server.log').read_text()}"
        )
        time.sleep(0.3)
    yield {"port": port, "pid": process.pid, "tmp": tmp}
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    log.close()


def _connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server["port"]), timeout=5)


def _error(body: bytes) -> dict:
    return json.loads(body)["error"]


def test_an_announced_length_over_the_limit_is_a_413_at_once_without_sending_the_body(server):
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /api/v1/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 99999999999\r\n\r\n{")
        status, headers, body = _read_response(sock)
        elapsed = time.monotonic() - started
    assert status == 413 and headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert _error(body)["code"] == "request_too_large"
    assert _error(body)["details"] == {"body": [f"At most {BODY_LIMIT} bytes."]}
    assert elapsed < 1.0


def test_a_60_mib_body_is_refused_within_a_second_and_never_held_by_the_server(server):
    body = b"x" * (60 * 1024 * 1024)
    rss_before = _rss_kib(server["pid"])
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /api/v1/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        sender = threading.Thread(target=lambda: _send_quietly(sock, body), daemon=True)
        sender.start()
        status, _, answer = _read_response(sock)
        elapsed = time.monotonic() - started
        sender.join(timeout=10)
    assert status == 413 and _error(answer)["code"] == "request_too_large"
    assert elapsed < 1.0
    assert _rss_kib(server["pid"]) - rss_before < 16 * 1024  # far from the 60 MiB sent
    assert sum(f.stat().st_size for f in server["tmp"].rglob("*") if f.is_file()) < 8 * 1024 * 1024


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the server closed after answering: the point of the test


def test_a_chunked_body_is_counted_and_refused_once_it_passes_the_limit(server):
    chunk = b"y" * (256 * 1024)
    with _connect(server) as sock:
        sock.sendall(b"POST /api/v1/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(BODY_LIMIT // len(chunk) + 1):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _, answer = _read_response(sock)
    assert status == 413 and _error(answer)["details"] == {"body": [f"At most {BODY_LIMIT} bytes."]}


def test_a_small_chunked_body_still_reaches_the_application(server):
    with _connect(server) as sock:
        sock.sendall(b"POST /api/v1/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        status, _, answer = _read_response(sock)
    assert status == 401 and _error(answer)["code"] == "not_authenticated"


def test_the_upload_path_keeps_its_larger_limit(server):
    size = BODY_LIMIT + 1024 * 1024  # over the ordinary limit, under the upload limit
    with _connect(server) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % (UPLOAD_PATH.encode(), size))
        sock.sendall(b"z" * size)
        status, _, answer = _read_response(sock, timeout=20)
    assert status == 401, answer  # the application answered: no credentials


def test_a_page_path_over_the_limit_gets_a_plain_413(server):
    with _connect(server) as sock:
        sock.sendall(b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
                     % (BODY_LIMIT + 1))
        status, headers, answer = _read_response(sock)
    assert status == 413 and headers["content-type"].startswith("text/plain")
    assert b"larger than" in answer


@pytest.mark.parametrize(("path", "json_answer"), [("/api/v1/agents/", True), ("/agents/", False)])
def test_a_request_line_over_the_limit_is_a_414(server, path, json_answer):
    target = path + "?q=" + "a" * (REQUEST_LINE_MAX_BYTES + 100)
    with _connect(server) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % target.encode())
        status, headers, answer = _read_response(sock)
    assert status == 414
    if json_answer:
        assert _error(answer)["code"] == "uri_too_long" and "path" in _error(answer)["details"]
    else:
        assert headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(b"X-Big: " + b"a" * (HEADER_BLOCK_MAX_BYTES + 10) + b"\r\n", id="one-line-too-long"),
        pytest.param(b"".join(b"X-Part-%d: %s\r\n" % (i, b"b" * 1000) for i in range(20)), id="block-too-large"),
        pytest.param(b"".join(b"X-N-%d: 1\r\n" % i for i in range(MAX_HEADERS + 5)), id="too-many-lines"),
    ],
)
def test_a_header_block_over_the_limit_is_a_431_naming_the_headers(server, headers):
    with _connect(server) as sock:
        sock.sendall(b"GET /api/v1/agents/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
        status, _, answer = _read_response(sock)
    assert status == 431
    assert _error(answer)["code"] == "headers_too_large" and "headers" in _error(answer)["details"]


def test_an_api_path_with_a_newline_is_the_json_404(server):
    for target in (b"/api%0A", b"/api/v1/agents/%0A", b"/api/v1/agents/1%0A/"):
        with _connect(server) as sock:
            sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % target)
            status, headers, answer = _read_response(sock)
        assert (status, headers["content-type"]) == (404, "application/json"), target
        assert _error(answer)["code"] == "not_found"


def test_requests_within_the_limits_keep_the_connection(server):
    with _connect(server) as sock:
        for _ in range(2):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Fine: " + b"c" * 4000 + b"\r\n\r\n")
            status, headers, _ = _read_response(sock)
            assert status == 200 and headers.get("connection") != "close"
