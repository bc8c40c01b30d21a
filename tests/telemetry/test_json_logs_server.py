"""``RIVER_LOG_FORMAT=json``: everything a real Daphne server writes is JSON, its access
log, Django's own request warnings and Python warnings included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from telemetry.logs import AccessLog, json_line

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_SECONDS = 60

# Daphne's own command line, as `daphne riverapp.asgi:application` runs it; the application
# is imported first so that a warning can be raised once Django's logging is configured.
SERVER = """
import sys
import warnings

import daphne.cli

import riverapp.asgi  # noqa: F401 - Django set up, River's logging configured

warnings.warn("a probe warning from the server process", UserWarning, stacklevel=1)
daphne.cli.CommandLineInterface().run(["-b", "127.0.0.1", "-p", sys.argv[1], "riverapp.asgi:application"])
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - 127.0.0.1 only
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow  # a real server process
def test_every_line_a_json_server_writes_is_json(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(DJANGO_SETTINGS_MODULE="riverapp.settings", RIVER_LOG_FORMAT="json", LOG_LEVEL="INFO",
               PYTHONWARNINGS="always", PYTHONUNBUFFERED="1")
    out, err = (tmp_path / "stdout").open("w+"), (tmp_path / "stderr").open("w+")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=ROOT, env=env, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while True:
            try:
                assert _status(f"http://127.0.0.1:{port}/health") == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
                assert time.monotonic() < deadline, "the server did not answer /health in time"
                time.sleep(0.2)
        assert _status(f"http://127.0.0.1:{port}/no-such-page?api_key=sk-abcdefgh12345678") == 404
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        out.close()
        err.close()

    lines = [line for name in ("stdout", "stderr") for line in (tmp_path / name).read_text().splitlines()]
    assert lines
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    access = [p for p in parsed if p.get("logger") == "river.access"]
    assert {(p["method"], p["path"].split("?")[0], p["status"]) for p in access} >= {
        ("GET", "/health", 200), ("GET", "/no-such-page", 404)}
    assert all("sk-abcdefgh12345678" not in json.dumps(p) for p in parsed)  # redacted like any line
    warned = [p for p in parsed if p.get("logger") == "py.warnings"]
    assert any("a probe warning from the server process" in p["message"] for p in warned)
    assert any(p.get("logger") == "django.request" and "Not Found" in p["message"] for p in parsed)


def test_the_access_log_writes_one_record_per_request_and_websocket_step(caplog):
    caplog.set_level("INFO", logger="river.access")
    log = AccessLog()
    log("http", "complete", {"client": "127.0.0.1:5000", "method": "POST", "path": "/api/v1/x", "status": 201,
                             "size": 12})
    log("websocket", "connected", {"client": "127.0.0.1:5001", "path": "/ws/workspace/"})
    log("http", "started", {"client": "127.0.0.1:5000"})  # not a line of the access log
    records = [r for r in caplog.records if r.name == "river.access"]
    assert [r.river["message"] for r in records] == [
        '127.0.0.1:5000 "POST /api/v1/x" 201 12', '127.0.0.1:5001 "WSCONNECT /ws/workspace/" - -']
    assert records[0].river["status"] == 201 and records[1].river["method"] == "WSCONNECT"


def test_a_command_line_in_json_is_one_object_naming_its_logger():
    line = json.loads(json_line(logger="river.server", message="River is running at http://127.0.0.1:8000/"))
    assert line["logger"] == "river.server" and line["level"] == "INFO"
    assert line["message"] == "River is running at http://127.0.0.1:8000/"
