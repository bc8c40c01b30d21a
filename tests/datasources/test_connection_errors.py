"""Connection failures are reported by class, never with what the remote server said,
so a data source cannot be used to read banners off services on the network."""

from __future__ import annotations

import socket
import threading

import pytest

from datasources import connectors, services
from datasources.errors import DataSourceUnavailable
from datasources.types import DataSourceChanges
from rivercore.types.datasources import ConnectionConfig
from tests.datasources.fixtures import *  # noqa: F403

BANNER = b"SSH-2.0-OpenSSH_9.9 secret-build-banner-4711\r\n"


class _Listener:
    """A local TCP service: ``mode`` 'banner' greets and closes, 'silent' accepts and says nothing."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.open: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "banner":
                try:
                    client.sendall(BANNER)
                    client.recv(1024)
                finally:
                    client.close()
            else:
                self.open.append(client)

    def close(self):
        self.stop.set()
        self.sock.close()
        for client in self.open:
            client.close()


@pytest.fixture
def listener(request):
    server = _Listener(request.param)
    yield server
    server.close()


def _test(port: int, **credentials) -> str:
    spec = connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host="127.0.0.1", port=port, database="crm"),
        credentials={"user": "u", "password": "p", **credentials},
    )
    result = connectors.connector_for(spec).test_connection()
    assert result.success is False
    return result.message


@pytest.mark.parametrize("listener", ["banner"], indirect=True)
def test_a_non_postgres_service_is_a_protocol_failure_without_its_banner(listener):
    message = _test(listener.port)
    assert message.startswith("Connection failed: the server did not answer as PostgreSQL")
    assert "OpenSSH" not in message and "secret" not in message and "SSH" not in message


def test_a_closed_port_is_refused():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert _test(port).startswith("Connection refused")


@pytest.mark.parametrize("listener", ["silent"], indirect=True)
def test_a_silent_service_is_a_timeout(listener, monkeypatch):
    monkeypatch.setattr(connectors, "CONNECT_TIMEOUT_SECONDS", 2)  # libpq's smallest useful value
    message = _test(listener.port)
    assert message.startswith("Timed out")


# The suite's server trusts local logins, so a login it refuses is an unknown role.
UNKNOWN_ROLE = "river_no_such_role_4711"


def test_a_refused_login_is_an_auth_failure_that_echoes_nothing(pg_tables):
    spec = connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host=pg_tables["host"], port=pg_tables["port"], database=pg_tables["database"]),
        credentials={"user": UNKNOWN_ROLE, "password": "wrong-password-123"},
    )
    message = connectors.connector_for(spec).test_connection().message
    assert message.startswith("Authentication failed")
    assert UNKNOWN_ROLE not in message
    assert "wrong-password-123" not in message
    assert "FATAL" not in message


def test_the_api_reports_the_class_and_stores_it_as_the_status(api_client_for, owner, pg_source):
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(credentials={"user": UNKNOWN_ROLE}))
    response = api_client_for(owner).post(f"/api/v1/data-sources/{pg_source.pk}/test")
    assert response.status_code == 200
    assert response.json()["success"] is False
    assert response.json()["message"].startswith("Authentication failed")
    pg_source.refresh_from_db()
    assert pg_source.status == "error"
    assert "FATAL" not in pg_source.status_message


def test_discovery_failure_names_the_class_in_details(pg_source):
    services.data_source_update(data_source=pg_source, changes=DataSourceChanges(credentials={"user": UNKNOWN_ROLE}))
    with pytest.raises(DataSourceUnavailable) as caught:
        services.data_source_discover(data_source=pg_source)
    assert caught.value.details == {"failure": "auth"}
