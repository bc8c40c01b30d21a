"""Test tools and a scripted model server for the durability tests.

Importing this module registers four tools (their names start with ``durable_`` so
the registry test ignores them). A Celery worker started with
``-I tests.executions.durable_support`` imports it too, so the worker and the test
process share the same tools. Every call is observable from outside the process:

- each call is appended to ``CALLS`` (in-process tests read it);
- when ``DURABLE_MARKER_DIR`` is set, each call also appends one line
  ``<tool> <call_marker> <pid>`` to ``<dir>/<tool>.log`` before it does anything
  else, and then waits while ``<dir>/hold-<tool>`` exists (so a test can kill the
  worker while the call is in flight without guessing with sleeps);
- an in-process test may set ``HOOKS[tool_name]`` to run code inside the handler.

``ScriptServer`` is an OpenAI-compatible chat-completions server whose reply is a
function of the conversation it receives (the number of assistant messages so
far), so re-asking the same turn after a crash gets the same answer.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rivercore.tools import Tool, ToolCategory, ToolContext, get_tool, register

CALLS: list[tuple[str, str]] = []  # (tool name, marker), in call order
HOOKS: dict[str, Callable[[ToolContext, BaseModel], None]] = {}
HOLD_LIMIT_SECONDS = 120.0


class MarkerInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    marker: str


class MarkerOutput(BaseModel):
    tool: str
    marker: str


def _observe(name: str, args: MarkerInput) -> MarkerOutput:
    CALLS.append((name, args.marker))
    directory = os.environ.get("DURABLE_MARKER_DIR")
    if directory:
        with open(Path(directory) / f"{name}.log", "a", encoding="utf-8") as log:
            log.write(f"{name} {args.marker} {os.getpid()}\n")
            log.flush()
            os.fsync(log.fileno())
        hold = Path(directory) / f"hold-{name}"
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return MarkerOutput(tool=name, marker=args.marker)


def _handler(name: str):
    def handle(ctx: ToolContext, args: MarkerInput) -> MarkerOutput:
        hook = HOOKS.get(name)
        if hook is not None:
            hook(ctx, args)
        return _observe(name, args)

    return handle


def _register(name: str, *, category: ToolCategory, writes: bool, idempotent: bool, description: str) -> Tool:
    existing = get_tool(name)
    if existing is not None:  # imported twice (e.g. as a module and via --include)
        return existing
    return register(
        Tool(
            name=name, description=description, category=category, input_model=MarkerInput,
            output_model=MarkerOutput, handler=_handler(name), permission=None,
            writes=writes, idempotent=idempotent,
        )
    )


WRITE = _register(
    "durable_write", category=ToolCategory.EXECUTION, writes=True, idempotent=False,
    description="Test write tool: records a marker once per call (not idempotent).",
)
IDEMPOTENT_WRITE = _register(
    "durable_idempotent_write", category=ToolCategory.EXECUTION, writes=True, idempotent=True,
    description="Test write tool declared idempotent: safe to repeat.",
)
READ = _register(
    "durable_slow_read", category=ToolCategory.EXECUTION, writes=False, idempotent=False,
    description="Test read tool: records a marker, may be held open by the test.",
)
NOTE = _register(
    "durable_note", category=ToolCategory.REASONING, writes=False, idempotent=True,
    description="Test reasoning tool (not governed): records a marker.",
)
TOOL_NAMES = [WRITE.name, IDEMPOTENT_WRITE.name, READ.name, NOTE.name]


def marker_lines(directory: Path, tool_name: str) -> list[str]:
    path = Path(directory) / f"{tool_name}.log"
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- a scripted OpenAI-compatible model ------------------------------------------------


def completion_tool_call(name: str, arguments: dict, call_id: str) -> dict:
    return {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)}}],
    }


def completion_text(text: str) -> dict:
    return {"role": "assistant", "content": text}


class ScriptServer:
    """Serves ``POST /chat/completions`` (also under ``/v1``). ``script[i]`` is the
    assistant message for a conversation that already holds ``i`` assistant
    messages; past the end, the last entry repeats."""

    def __init__(self, script: list[dict]):
        self.script = script
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append(body)
                reply = server.reply_for(body)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="script-server", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reply_for(self, body: dict) -> dict:
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        message = self.script[min(turn, len(self.script) - 1)]
        return {
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }

    def tool_messages_seen(self) -> list[str]:
        with self.lock:
            return [m.get("content") or "" for body in self.requests for m in body.get("messages", [])
                    if m.get("role") == "tool"]

    def __enter__(self) -> ScriptServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
