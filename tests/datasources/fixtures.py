"""Real external databases for the data source tests: a throwaway PostgreSQL database
(with a least-privileged login role, as production sources should use) and a SQLite file.

Import the fixtures into a test module with ``from tests.datasources.fixtures import *``.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import uuid

import psycopg
import pytest

from datasources.connectors import own_database_identity
from datasources.services import data_source_create

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_ADMIN = {"host": PG_HOST, "port": PG_PORT, "user": "postgres", "dbname": "postgres", "autocommit": True}

SUPPORT_SCHEMA_PG = """
CREATE TABLE customers (
    id serial PRIMARY KEY,
    name text NOT NULL,
    email text,
    company text,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE customers IS 'People and companies we support';
CREATE TABLE tickets (
    id serial PRIMARY KEY,
    customer_id integer NOT NULL REFERENCES customers(id),
    subject text NOT NULL,
    priority text NOT NULL,
    status text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE charges (
    id serial PRIMARY KEY,
    customer_id integer REFERENCES customers(id),
    amount numeric(10, 2) NOT NULL,
    status text,
    created_at timestamptz
);
CREATE SEQUENCE audit_seq;
"""

SUPPORT_SCHEMA_SQLITE = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    company TEXT,
    created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE tickets (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    subject TEXT NOT NULL,
    priority TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER REFERENCES customers(id),
    amount NUMERIC NOT NULL,
    status TEXT,
    created_at TEXT
);
"""

CUSTOMERS = [
    (1, "Ada Lovelace", "ada@example.com", "Analytical"),
    (2, "Grace Hopper", "grace@example.com", "Navy"),
    (3, "Alan Turing", "alan@example.com", "Bletchley"),
]
# (id, customer_id, subject, priority, status, hours ago)
TICKETS = [
    (1, 1, "Cannot log in", "high", "open", 2),
    (2, 2, "Refund request", "high", "open", 5),
    (3, 3, "Invoice missing", "high", "open", 50),
    (4, 1, "Feature idea", "low", "open", 1),
    (5, 2, "Password reset", "high", "closed", 3),
    (6, 3, "Slow dashboard", "medium", "pending", 10),
]
CHARGES = [(1, 1, "120.50", "paid"), (2, 2, "35.00", "refunded"), (3, 3, "99.99", "paid"), (4, 1, "10.00", "failed")]


class TcpRelay:
    """Forwards connections from 127.0.0.1:<port> to the test PostgreSQL server.

    River refuses its own database's host and port as a data source, and the suite has
    one PostgreSQL server; the relay gives the test data sources an endpoint of their
    own on this machine (as a customer database on another port would have)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="pg-relay").start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            source.close()

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


@pytest.fixture(scope="session")
def pg_relay():
    relay = TcpRelay((PG_HOST, PG_PORT))
    yield relay
    relay.close()


@pytest.fixture(scope="session")
def pg_server(pg_relay):
    """A throwaway database plus a login role that may read and write its tables but is
    not a superuser; dropped at the end of the session. Data sources reach it through
    ``pg_relay`` (the returned port)."""
    suffix = uuid.uuid4().hex[:8]
    database = f"river_data_ext_{suffix}"
    role = f"river_data_reader_{suffix}"
    password = f"pw-{uuid.uuid4().hex}"
    with psycopg.connect(**PG_ADMIN) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
    try:
        yield {"host": PG_HOST, "port": pg_relay.port, "database": database, "user": role, "password": password}
    finally:
        with psycopg.connect(**PG_ADMIN) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def pg_admin_connect(pg_server) -> psycopg.Connection:
    return psycopg.connect(**{**PG_ADMIN, "dbname": pg_server["database"]})


@pytest.fixture
def pg_tables(pg_server, django_db_setup, django_db_blocker):
    """Fresh support tables (customers, tickets, charges) for each test.

    A connector refuses River's own database by comparing identities; River's side is
    read once per process from the default connection, so it is read here, where the
    database may be reached, for tests that otherwise touch no River table (whatever
    test of the process happens to run first)."""
    with django_db_blocker.unblock():
        own_database_identity()
    role = pg_server["user"]
    with pg_admin_connect(pg_server) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.execute(SUPPORT_SCHEMA_PG)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO customers (id, name, email, company) VALUES (%s, %s, %s, %s)", CUSTOMERS)
            cur.executemany(
                "INSERT INTO tickets (id, customer_id, subject, priority, status, created_at) "
                "VALUES (%s, %s, %s, %s, %s, now() - make_interval(hours => %s))",
                TICKETS,
            )
            cur.executemany(
                "INSERT INTO charges (id, customer_id, amount, status, created_at) VALUES (%s, %s, %s, %s, now())",
                CHARGES,
            )
        for table in ("customers", "tickets", "charges"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), 100)")
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        conn.execute("ANALYZE")
    return pg_server


def pg_count(pg_server, sql: str) -> int:
    with pg_admin_connect(pg_server) as conn:
        return conn.execute(sql).fetchone()[0]


@pytest.fixture
def sqlite_dir(tmp_path, settings):
    settings.RIVER_SQLITE_DATA_DIR = tmp_path
    return tmp_path


@pytest.fixture
def sqlite_file(sqlite_dir, workspace):
    """The support database in ``workspace``'s directory (RIVER_SQLITE_DATA_DIR/<id>/)."""
    path = sqlite_dir / str(workspace.pk) / "support.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SUPPORT_SCHEMA_SQLITE)
        conn.executemany("INSERT INTO customers (id, name, email, company) VALUES (?, ?, ?, ?)", CUSTOMERS)
        conn.executemany(
            "INSERT INTO tickets (id, customer_id, subject, priority, status, created_at) "
            "VALUES (?, ?, ?, ?, ?, datetime('now', '-' || ? || ' hours'))",
            TICKETS,
        )
        conn.executemany(
            "INSERT INTO charges (id, customer_id, amount, status, created_at) VALUES (?, ?, ?, ?, datetime('now'))",
            CHARGES,
        )
        conn.commit()
    finally:
        conn.close()
    return path


def sqlite_count(path, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def pg_source(workspace, pg_tables):
    return data_source_create(
        workspace=workspace,
        name="Support PG",
        type="postgresql",
        connection_config={"host": pg_tables["host"], "port": pg_tables["port"], "database": pg_tables["database"]},
        credentials={"user": pg_tables["user"], "password": pg_tables["password"]},
        access_level="read_write",
    )


@pytest.fixture
def sqlite_source(workspace, sqlite_file):
    return data_source_create(
        workspace=workspace,
        name="Support SQLite",
        type="sqlite",
        connection_config={"path": sqlite_file.name},
        credentials={},
        access_level="read_write",
    )
