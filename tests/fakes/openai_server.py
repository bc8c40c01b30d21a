"""A local OpenAI-compatible chat-completions server for tests, so litellm's real
HTTP path runs against scripted replies.

Each server has a queue of scripted responses, served in order, one per request:
text replies, tool calls, empty replies, HTTP errors, each optionally delayed
(delays make client timeouts testable). When the queue is empty the server
answers with its ``default`` response (unset: HTTP 500 "script exhausted", so a
test that under-scripts fails loudly). Every request body and its headers are
recorded.

A request with ``"stream": true`` is answered as server-sent events, the way OpenAI
streams: the content in small pieces, each tool call's id and name once and its
arguments in several pieces, the finish reason, the usage when asked
(``stream_options.include_usage``), then ``[DONE]``. ``cut_after=n`` drops the
connection after n events (a stream cut mid-way); ``hold_after=n`` with ``resume`` (a
``threading.Event``) stops after n events until the test sets it.

Usage in a test::

    def test_something(fake_openai):
        server = fake_openai()
        server.tool_call("classify_intent", {"user_prompt": "hi"}).text("done")
        provider = ProviderConfig(name="fake", models={"balanced": "openai/fake"}, base_url=server.base_url)
        ...
        assert server.requests[0]["tools"]
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Scripted:
    status: int = 200
    message: dict | None = None  # the assistant message, for status 200
    error: str = ""
    delay: float = 0.0
    model: str | None = None
    usage: dict | None = None
    # Streaming only: see the module docstring.
    piece_chars: int = 6
    cut_after: int | None = None
    hold_after: int | None = None
    resume: threading.Event | None = None


@dataclass
class FakeOpenAI:
    """One server. Script it with the chainable methods below."""

    model: str = "fake-model"
    script: list[Scripted] = field(default_factory=list)
    default: Scripted | None = None
    # Consulted when the queue is empty, before ``default``: a function of the request
    # body that returns the reply, for a model that reacts to what it is shown.
    responder: Callable[[dict], Scripted] | None = None
    requests: list[dict] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    model_list_requests: int = 0  # GET /models (a readiness probe)
    headers: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()

    # --- scripting ----------------------------------------------------------------
    def text(self, content: str, **options) -> FakeOpenAI:
        return self._push(Scripted(message={"role": "assistant", "content": content}, **options))

    def tool_call(self, name: str, arguments: dict | str, *, call_id: str | None = None, content: str | None = None,
                  **options) -> FakeOpenAI:
        return self.tool_calls([(name, arguments, call_id)], content=content, **options)

    def tool_calls(self, calls: list[tuple], *, content: str | None = None, **options) -> FakeOpenAI:
        """``calls``: (name, arguments) or (name, arguments, call_id); arguments as a
        dict, or a string sent as is (to script invalid JSON)."""
        rendered = []
        for call in calls:
            name, arguments = call[0], call[1]
            call_id = (call[2] if len(call) > 2 else None) or f"call_{next(self._ids)}"
            rendered.append({"id": call_id, "type": "function", "function": {
                "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
        return self._push(Scripted(message={"role": "assistant", "content": content, "tool_calls": rendered},
                                   **options))

    def empty(self, **options) -> FakeOpenAI:
        """A reply with no content and no tool call."""
        options.setdefault("usage", {"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10})
        return self._push(Scripted(message={"role": "assistant", "content": ""}, **options))

    def error(self, status: int = 500, message: str = "scripted failure", **options) -> FakeOpenAI:
        return self._push(Scripted(status=status, error=message, **options))

    def always(self, kind: str = "error", *args, **options) -> FakeOpenAI:
        """Set the response used once the queue is empty, e.g. ``always("error", 503)``
        or ``always("text", "ok")``."""
        before = len(self.script)
        getattr(self, kind)(*args, **options)
        with self._lock:
            self.default = self.script.pop(before)
        return self

    def respond_with(self, responder: Callable[[dict], Scripted]) -> FakeOpenAI:
        """Answer each request past the scripted queue with ``responder(request_body)``."""
        with self._lock:
            self.responder = responder
        return self

    def _push(self, item: Scripted) -> FakeOpenAI:
        with self._lock:
            self.script.append(item)
        return self

    # --- inspection -----------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def remaining(self) -> int:
        with self._lock:
            return len(self.script)

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # --- serving --------------------------------------------------------------------
    def _next(self, request: dict) -> Scripted:
        with self._lock:
            if self.script:
                return self.script.pop(0)
            responder = self.responder
        if responder is not None:
            return responder(request)
        with self._lock:
            return self.default or Scripted(status=500, error="fake server script exhausted")

    def _body(self, request: dict, item: Scripted) -> dict:
        message = dict(item.message or {})
        if not message.get("tool_calls"):
            message.pop("tool_calls", None)
        prompt_tokens = len(json.dumps(request.get("messages", []))) // 4
        completion_tokens = len(json.dumps(message)) // 4
        usage = item.usage or {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                               "total_tokens": prompt_tokens + completion_tokens}
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": item.model or self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": usage,
        }

    def _stream_events(self, request: dict, item: Scripted) -> list[dict]:
        """The reply of ``_body`` as stream chunks (without the final ``[DONE]``)."""
        body = self._body(request, item)
        message, size = body["choices"][0]["message"], max(1, item.piece_chars)
        base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
                "model": body["model"]}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        content = message.get("content") or ""
        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": content[i:i + size]}) for i in range(0, len(content), size)]
        for index, call in enumerate(message.get("tool_calls") or []):
            arguments = call["function"]["arguments"]
            pieces = [arguments[i:i + size] for i in range(0, len(arguments), size)] or [""]
            events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": call["function"]["name"],
                                                              "arguments": pieces[0]}}]}))
            events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                       for piece in pieces[1:]]
        events.append(chunk({}, body["choices"][0]["finish_reason"]))
        if (request.get("stream_options") or {}).get("include_usage"):
            events.append({**base, "choices": [], "usage": body["usage"]})
        return events

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the model list, the free call a readiness probe makes
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                with server._lock:
                    server.model_list_requests += 1
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})

            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    request = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    request = {"_invalid": raw.decode(errors="replace")}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                with server._lock:
                    server.requests.append(request)
                    server.paths.append(self.path)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                item = server._next(request)
                if item.delay and server._stopping.wait(item.delay):
                    return
                if item.status != 200:
                    self._send(item.status, {"error": {"message": item.error, "type": "server_error",
                                                       "code": item.status}})
                    return
                if request.get("stream"):
                    self._stream(server._stream_events(request, item), item)
                    return
                self._send(200, server._body(request, item))

            def _stream(self, events: list[dict], item: Scripted) -> None:
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for sent, event in enumerate(events):
                        if sent == item.cut_after:
                            self.close_connection = True
                            self.connection.shutdown(2)  # mid-stream: no last chunk, no [DONE]
                            return
                        if sent == item.hold_after and item.resume is not None:
                            item.resume.wait(10)
                        self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the client gave up

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args):
                return None

        return Handler


@pytest.fixture
def fake_openai():
    """Factory: ``fake_openai(model="gpt-4o-mini")`` starts a server; all stop at teardown."""
    servers: list[FakeOpenAI] = []

    def start(**options) -> FakeOpenAI:
        server = FakeOpenAI(**options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
