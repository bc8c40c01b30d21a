"""Real MCP servers for the tool server tests: mcp-server-time and mcp-server-git from
PyPI over stdio (a temporary repository for git), and an HTTP MCP server built here
with the SDK's own server classes, served on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

BIN = Path(sys.executable).parent
TIME_COMMAND = str(BIN / "mcp-server-time")
GIT_COMMAND = str(BIN / "mcp-server-git")


@pytest.fixture(autouse=True)
def _mcp_commands(settings):
    settings.RIVER_MCP_STDIO_COMMANDS = [TIME_COMMAND, GIT_COMMAND]
    settings.RIVER_MCP_TIMEOUT_SECONDS = 20.0


@pytest.fixture
def git_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for command in (["init", "-q"], ["config", "user.email", "river@example.test"], ["config", "user.name", "River"]):
        subprocess.run(["git", *command], cwd=repo, check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "first"], cwd=repo, check=True)
    return repo


def git_log(repo: Path) -> list[str]:
    out = subprocess.run(["git", "log", "--format=%s"], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


class HttpMcp:
    """An MCP server on 127.0.0.1 with a read tool ``echo`` and a write tool ``note``;
    ``headers`` holds the headers of every request it received."""

    def __init__(self):
        self.server = MCPServer("river-test")
        self.notes: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.describe_echo("Echo the text back.")

        def note(text: str) -> str:
            self.notes.append(text)
            return f"noted {text}"

        self.server.add_tool(
            note,
            name="note",
            description="Keep a note.",
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False),
        )
        app = self.server.streamable_http_app(json_response=True, stateless_http=True)

        async def recording(scope, receive, send):
            if scope["type"] == "http":
                self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(recording, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def describe_echo(self, description: str) -> None:
        with contextlib.suppress(Exception):  # not there yet
            self.server.remove_tool("echo")

        def echo(text: str) -> str:
            return text

        self.server.add_tool(echo, name="echo", description=description, annotations=ToolAnnotations(readOnlyHint=True))

    def start(self) -> HttpMcp:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.uvicorn.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test MCP server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def http_mcp():
    server = HttpMcp().start()
    yield server
    server.stop()
