"""River's HTTP edge below the ASGI application: the limits Daphne has to hold itself.

Daphne (on Twisted) reads a request's whole body, into memory or a temporary file,
before the application is called, so no ASGI or Django code can refuse a large body in
time; and Twisted answers an over-long request line or header block by dropping the
connection without a word. ``daphne_edge_install`` gives Daphne an HTTP channel that:

- answers ``413`` as soon as the headers announce a ``Content-Length`` over the path's
  limit (``common.edge.body_limit_for``: ``RIVER_MAX_REQUEST_BYTES``, or the upload
  path's own ``RIVER_UPLOAD_BODY_LIMITS``), before one byte of the body is read, and
  counts a chunked body's bytes as they arrive, answering ``413`` once they pass it;
- answers ``414`` to a request line over ``REQUEST_LINE_MAX_BYTES`` and ``431`` to a
  header line or a whole header block over ``HEADER_BLOCK_MAX_BYTES`` (request line
  included), or to more than ``MAX_HEADERS`` header lines.

Under ``/api/`` the answer is River's JSON error, elsewhere a line of text; either way
with ``Connection: close``. After answering, the channel stops parsing: it closes its
sending side and throws away what the client still sends (so a client busy sending its
body can still read the answer, instead of meeting a reset) for ``LINGER_SECONDS`` at
most, then closes.

Daphne's access log (``daphne riverapp.asgi:application`` writes one by default, NCSA
text to stdout) goes through River's logging instead: the caller passes the access-log
class (``telemetry.logs.AccessLog``, logger ``river.access``), so it follows
``RIVER_LOG_FORMAT`` and redaction.

``riverapp.asgi`` installs it when Daphne is the server (``daphne riverapp.asgi:application``,
``manage.py runriver``): Daphne builds its protocol factory by name when it starts
serving, so the name is replaced, once, before that. HTTP/2 (Daphne with TLS and the
``http2`` extra) keeps Daphne's own handling.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

import daphne.cli
import daphne.server
from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.web import http

from common.edge import body_limit_for, is_api_path, too_large_message

REQUEST_LINE_MAX_BYTES = 8 * 1024
HEADER_BLOCK_MAX_BYTES = 16 * 1024
MAX_HEADERS = 100
LINGER_SECONDS = 2.0

_REASONS = {413: b"Content Too Large", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


def _path_of(target: bytes) -> str:
    """The decoded path of a request target (origin or absolute form), as Daphne gives it."""
    path = target.split(b"?", 1)[0]
    if path.startswith((b"http://", b"https://")):
        slash = path.find(b"/", path.find(b"//") + 2)
        path = path[slash:] if slash >= 0 else b"/"
    return unquote(path.decode("latin-1"))


def refusal_bytes(*, status: int, path: str, code: str, message: str, field: str, problem: str) -> bytes:
    """A complete HTTP/1.1 response that closes the connection: River's JSON error under
    ``/api/`` (naming ``field``), plain text elsewhere."""
    if is_api_path(path):
        body = json.dumps({"error": {"code": code, "message": message, "details": {field: [problem]}}}).encode()
        content_type = b"application/json"
    else:
        body = message.encode()
        content_type = b"text/plain; charset=utf-8"
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status, _REASONS[status], content_type, len(body))
    return head + body


class RiverWebRequest(WebRequest):
    """Daphne's request, counting its body's bytes against the limit the channel set."""

    body_limit: int | None = None
    body_received = 0

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        if self.channel is None or self.channel.refused:
            return
        self.body_received += len(data)
        if self.body_limit is not None and self.body_received > self.body_limit:
            self.channel.refuse_body(self.body_limit)
            return
        super().handleContentChunk(data)


class RiverHTTPChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with River's limits and answers (module docstring)."""

    MAX_LENGTH = REQUEST_LINE_MAX_BYTES  # LineReceiver: the longest line it buffers
    totalHeadersSize = HEADER_BLOCK_MAX_BYTES
    maxHeaders = MAX_HEADERS
    refused = False
    _linger_call = None

    # --- reading, stopped once refused

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 - Twisted's name
        if self.refused:
            return
        super().dataReceived(data)

    def rawDataReceived(self, data: bytes) -> None:  # noqa: N802
        if self.refused:
            return
        super().rawDataReceived(data)

    def lineReceived(self, line: bytes) -> None:  # noqa: N802
        if self.refused:
            return
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse_head(line_is_request_line=self._receivedHeaderSize == 0)
            return
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:  # noqa: N802
        # Nothing of this request counted yet: the line too long is the request line.
        self._refuse_head(line_is_request_line=self._receivedHeaderSize == 0, start=line)

    def headerReceived(self, line: bytes) -> bool:  # noqa: N802
        if self.refused:
            return False
        if self._receivedHeaderCount >= self.maxHeaders:
            self._refuse_head(line_is_request_line=False)
            return False
        return super().headerReceived(line)

    def allHeadersReceived(self) -> None:  # noqa: N802
        if self.refused:
            return
        request = self.requests[-1]
        limit = body_limit_for(method=self._command.decode("latin-1"), path=_path_of(self._path))
        if self.length is not None and self.length > limit:
            self.refuse_body(limit)  # before the body, and before any "100 Continue"
            return
        request.body_limit = limit
        super().allHeadersReceived()

    def allContentReceived(self) -> None:  # noqa: N802
        if self.refused:
            return
        super().allContentReceived()

    # --- the answers

    def refuse_body(self, limit: int) -> None:
        self._refuse(refusal_bytes(
            status=413, path=_path_of(self._path), code="request_too_large", message=too_large_message(limit),
            field="body", problem=f"At most {limit} bytes.",
        ))

    def _refuse_head(self, *, line_is_request_line: bool, start: bytes = b"") -> None:
        if line_is_request_line:
            parts = start.split(b" ", 2)
            path = _path_of(parts[1]) if len(parts) > 1 else "/"
            self._refuse(refusal_bytes(
                status=414, path=path, code="uri_too_long",
                message=f"The request line is longer than {REQUEST_LINE_MAX_BYTES} bytes.",
                field="path", problem=f"The request line may be at most {REQUEST_LINE_MAX_BYTES} bytes.",
            ))
            return
        self._refuse(refusal_bytes(
            status=431, path=_path_of(getattr(self, "_path", b"/")), code="headers_too_large",
            message=(f"The request's headers are larger than {HEADER_BLOCK_MAX_BYTES} bytes "
                     f"or more than {MAX_HEADERS} lines."),
            field="headers", problem=f"At most {HEADER_BLOCK_MAX_BYTES} bytes and {MAX_HEADERS} header lines.",
        ))

    def _refuse(self, response: bytes) -> None:
        if self.refused or self.transport is None:
            return
        self.refused = True
        self.persistent = False
        self.clearLineBuffer()
        self.setTimeout(None)
        self.transport.write(response)
        try:
            # The client sees the end of the answer; what it still sends is read and dropped.
            self.transport.loseWriteConnection()
        except (AttributeError, NotImplementedError):
            pass
        self._linger_call = self.callLater(LINGER_SECONDS, self._linger_end)

    def _linger_end(self) -> None:
        self._linger_call = None
        if self.transport is not None:
            self.transport.abortConnection()

    def connectionLost(self, reason) -> None:  # noqa: N802
        if self._linger_call is not None and self._linger_call.active():
            self._linger_call.cancel()
        self._linger_call = None
        super().connectionLost(reason)


def _river_channel(factory: HTTPFactory) -> http._GenericHTTPChannelProtocol:
    # Twisted's own factory function builds the same wrapper around an HTTPChannel.
    return http._GenericHTTPChannelProtocol(RiverHTTPChannel())


class RiverHTTPFactory(HTTPFactory):
    protocol = _river_channel

    def buildProtocol(self, addr):  # noqa: N802 - Twisted's name
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = RiverWebRequest
        return protocol


def daphne_edge_install(*, access_log: type) -> None:
    """Make Daphne's ``Server`` serve HTTP through ``RiverHTTPFactory``, and its command
    line write the access log with ``access_log`` (a class Daphne calls with its access-log
    stream and then with each request's details). The command line imports the application,
    and so this, before it builds its access logger."""
    daphne.server.HTTPFactory = RiverHTTPFactory
    daphne.cli.AccessLogGenerator = access_log
