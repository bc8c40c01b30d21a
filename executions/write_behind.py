"""Write-behind for the durable journal on PostgreSQL.

A turn's journal statement commits by itself (see ``executions.journal``), so the
engine does not have to wait for it: it sends the statement on a connection of its
own and goes on with the next turn while PostgreSQL executes and commits it.

The result is read by whichever comes first: the journal itself, when it next
needs the outcome, or, a few milliseconds after the send, a thread per connection
(the settler), for when the engine is busy elsewhere (in a model call, say).
Whichever reads it records the outcome and hands the turn's events to the publisher
once the commit is acknowledged. Before the journal sends the next statement, and
before anything that must not run ahead of the record (a write tool's dispatch, the
end of a segment), it waits for that outcome and raises if the write failed or
found the lease gone.

The connection belongs to the thread that runs segments (a Celery worker's), is
opened on first use, prepared once (unless ``prepare_threshold`` is none: behind a
pooler in transaction mode it sends the statement unnamed), checked when a new segment starts using it, and
replaced once it is older than ``CONN_MAX_AGE``; it is used for nothing else, so a
pending statement never collides with Django's own use of its connection.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import re
import select
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg import pq

logger = logging.getLogger(__name__)

_PARAM = re.compile(r"%\((\w+)\)s")
# How long after a statement is sent the settler takes over reading its result, if
# the owning thread has not read it yet (it is then busy elsewhere, in a model call
# say); also the longest a committed turn's events wait for it.
SETTLER_GRACE_SECONDS = 0.005


def numbered(sql: str) -> tuple[bytes, list[str]]:
    """``sql`` with its ``%(name)s`` placeholders numbered ``$1``, ``$2`` and so on
    (the form a server-side prepared statement takes), and the names in that order."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql).encode(), names


def _text(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


class Pending:
    """One statement on its way: whoever reads its result fills ``rows`` or
    ``error`` and sets ``done``."""

    __slots__ = ("done", "rows", "error", "on_commit", "sent_at", "settled_at")

    def __init__(self, on_commit: Callable[[], None] | None):
        self.done = threading.Event()
        self.rows: int | None = None
        self.error: BaseException | None = None
        self.on_commit = on_commit
        self.sent_at = time.perf_counter()
        self.settled_at: float | None = None


class JournalConnection:
    """A psycopg connection in autocommit mode used only by the journal, with its
    settler thread. At most one statement is pending at a time: ``submit`` must be
    followed by ``wait`` before the next ``submit``.

    Whoever comes first reads a pending statement's result, under ``_lock``: the
    owning thread in ``wait`` (usually: it then has no other thread to wake and be
    woken by), or the settler, which looks ``SETTLER_GRACE_SECONDS`` after the send,
    when the owning thread is busy elsewhere."""

    def __init__(self, key: tuple, params: dict, max_age: float | None):
        self.key = key
        self.pid = os.getpid()
        self.expires_at = None if max_age is None else time.monotonic() + max_age
        self.conn = psycopg.connect(**params, autocommit=True)
        self.prepared: set[bytes] = set()
        self.broken = False
        self._closed = False
        self._socket = self.conn.pgconn.socket
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._settle_loop, name="river-journal-settler", daemon=True)
        self._thread.start()

    # --- the owning thread -----------------------------------------------------------
    def usable(self) -> bool:
        return not (self.broken or self._closed or self.conn.closed or self.pid != os.getpid())

    def expired(self) -> bool:
        """Older than ``CONN_MAX_AGE``: replaced between segments, never during one."""
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def check(self) -> bool:
        """Whether a reused connection is still good, without a round trip (Django's
        CONN_HEALTH_CHECKS spends one). Between segments no statement waits for a result,
        so a socket with anything to read means the server has spoken unasked: a session
        ended by a restart or ``pg_terminate_backend`` sends its goodbye and closes. Any
        such connection is replaced."""
        pgconn = self.conn.pgconn
        with self._lock:
            if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
                return False
            try:
                readable, _, _ = select.select([self._socket], [], [], 0)
            except (OSError, ValueError):
                return False
            return not readable

    def submit(self, name: bytes, sql: bytes, values: list, on_commit: Callable[[], None] | None) -> Pending:
        """Send the prepared statement ``name`` (preparing it on first use) and return
        at once; its result is read by ``wait`` or by the settler."""
        pgconn = self.conn.pgconn
        # Behind a pooler in transaction mode (``prepare_threshold`` none) a prepared
        # statement would live on a server session the next statement may not get:
        # send it unnamed, parsed and executed in one round trip.
        named = self.conn.prepare_threshold is not None
        if named and name not in self.prepared:
            result = pgconn.prepare(name, sql)
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise _error(result)
            self.prepared.add(name)
        pending = Pending(on_commit)
        try:
            if named:
                pgconn.send_query_prepared(name, [_text(v) for v in values])
            else:
                pgconn.send_query_params(sql, [_text(v) for v in values])
            # The connection is non-blocking: push out what the socket did not take.
            while pgconn.flush() == 1:
                readable, _, _ = select.select([self._socket], [self._socket], [])
                if readable:
                    pgconn.consume_input()
        except psycopg.Error:
            self.broken = True
            raise
        self._work.put(pending)
        return pending

    def wait(self, pending: Pending) -> int:
        """Block until ``pending`` has its result; return the rows it returned or
        raise its error (a psycopg exception)."""
        if not pending.done.is_set():
            with self._lock:
                if not pending.done.is_set():
                    self._finish(pending)
        if pending.error is not None:
            raise pending.error
        return pending.rows or 0

    def close(self) -> None:
        self._closed = True
        self._work.put(None)
        if self.pid == os.getpid() and not self.conn.closed:
            self.conn.close()

    # --- either thread ---------------------------------------------------------------
    def _finish(self, pending: Pending) -> None:
        """Read ``pending``'s result, hand its events over if it committed, mark it
        done. Called with ``_lock`` held."""
        try:
            pending.rows = self._result()
        except BaseException as exc:  # noqa: BLE001 - kept for the owning thread, which raises it
            pending.error = exc
        pending.settled_at = time.perf_counter()
        if pending.error is None and pending.rows and pending.on_commit is not None:
            try:
                pending.on_commit()
            except Exception:  # noqa: BLE001 - publishing is best effort; the rows are committed
                logger.warning("could not hand committed journal events to the publisher", exc_info=True)
        pending.done.set()

    def _result(self) -> int:
        pgconn = self.conn.pgconn
        try:
            while True:
                pgconn.consume_input()
                if not pgconn.is_busy():
                    break
                select.select([self._socket], [], [])
            rows, error = 0, None
            while (result := pgconn.get_result()) is not None:
                if result.status == pq.ExecStatus.TUPLES_OK:
                    rows = result.ntuples
                elif result.status == pq.ExecStatus.FATAL_ERROR:
                    error = _error(result)
        except psycopg.Error:
            self.broken = True
            raise
        except OSError as exc:  # the socket itself failed: a connection error like any other
            self.broken = True
            raise psycopg.OperationalError(f"journal connection failed: {exc}") from exc
        if error is not None:
            raise error
        return rows

    # --- the settler thread ----------------------------------------------------------
    def _settle_loop(self) -> None:
        pending: Pending | None = None
        while True:
            if pending is None:
                pending = self._work.get()  # idle until a statement is sent
                if pending is None:
                    return
            # Let the owning thread read the result if it gets there soon: waking this
            # thread for every statement would make the two take turns at the GIL.
            delay = pending.sent_at + SETTLER_GRACE_SECONDS - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            # Statements sent meanwhile: only the newest can still be unsettled.
            newest = pending
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    return
                newest = item
            if newest is not pending:
                pending = newest  # give it its own grace
                continue
            self._take_over(pending)
            pending = None

    def _take_over(self, pending: Pending) -> None:
        while not pending.done.is_set():
            try:
                # Wake up now and then, so a connection closed meanwhile ends the wait.
                readable, _, _ = select.select([self._socket], [], [], 1.0)
            except (OSError, ValueError):
                readable = [self._socket]  # the socket is gone: _finish reports why
            if readable or self._closed:
                with self._lock:
                    if not pending.done.is_set():
                        self._finish(pending)


def _error(result) -> psycopg.Error:
    """The psycopg exception for a failed result (``UniqueViolation`` for 23505, ...)."""
    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (result.error_message or b"").decode(errors="replace").strip()
    try:
        cls = psycopg.errors.lookup(sqlstate)
    except KeyError:
        cls = psycopg.DatabaseError
    return cls(message)


_local = threading.local()
_open: set[JournalConnection] = set()
_open_lock = threading.Lock()


def journal_connection(db) -> JournalConnection:
    """This thread's journal connection for Django connection ``db``. An existing one
    is checked with a round trip first (callers do this once per segment, not per
    statement) and replaced if it fails, is broken or is older than ``CONN_MAX_AGE``."""
    settings = db.settings_dict
    key = (db.alias, settings["NAME"], settings["HOST"], settings["PORT"], settings["USER"])
    current: JournalConnection | None = getattr(_local, "connection", None)
    if current is not None and (current.key != key or not current.usable() or current.expired()
                                or not current.check()):
        _discard(current)
        current = None
    if current is not None:
        return current
    max_age = settings.get("CONN_MAX_AGE", 0)
    params = db.get_connection_params()
    params.pop("cursor_factory", None)  # the journal sends raw protocol messages, not cursors
    current = JournalConnection(key, params, None if max_age is None else float(max_age))
    _local.connection = current
    with _open_lock:
        _open.add(current)
    return current


def journal_connection_release(connection: JournalConnection) -> None:
    """Called when a segment ends: close a connection that must not outlive it
    (``CONN_MAX_AGE = 0``) or that is broken."""
    if not connection.usable() or connection.expired():
        _discard(connection)


def _discard(connection: JournalConnection) -> None:
    if getattr(_local, "connection", None) is connection:
        _local.connection = None
    with _open_lock:
        _open.discard(connection)
    try:
        connection.close()
    except psycopg.Error:
        logger.debug("closing a journal connection failed", exc_info=True)


def journal_connections_close() -> None:
    """Close every journal connection of this process (at exit, and before a test
    database is dropped)."""
    with _open_lock:
        connections = list(_open)
        _open.clear()
    for connection in connections:
        try:
            connection.close()
        except psycopg.Error:
            logger.debug("closing a journal connection failed", exc_info=True)
    _local.connection = None


def _forget_after_fork() -> None:
    # A forked child shares the parent's sockets: closing them here would end the
    # parent's sessions, so the child keeps the objects and never uses them. The
    # lock is replaced, as another thread of the parent may have held it.
    global _open_lock
    _open_lock = threading.Lock()
    _inherited.extend(_open)
    _open.clear()
    _local.connection = None


_inherited: list[JournalConnection] = []
os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(journal_connections_close)
