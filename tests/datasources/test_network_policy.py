"""Which hosts a PostgreSQL data source may name, and that a refused one is never contacted.

Every refusal here happens before a packet leaves: ``psycopg.connect`` is replaced by
a function that fails the test if called, and names resolve through a table in the
test (tests/conftest.py keeps DNS out of the suite)."""

from __future__ import annotations

import psycopg
import pytest

from datasources import connectors, network, services
from datasources.errors import HostNotAllowed
from datasources.models import DataSource
from rivercore.errors import InvalidInput
from rivercore.types.datasources import ConnectionConfig

FORBIDDEN_BY_DEFAULT = [
    "10.0.0.1",
    "10.255.255.254",
    "172.16.0.1",
    "172.31.255.1",
    "192.168.1.10",
    "100.64.0.1",  # carrier-grade NAT
    "169.254.169.254",  # cloud metadata
    "169.254.0.1",
    "127.0.0.1",
    "127.8.9.10",
    "localhost",
    "::1",
    "[::1]",
    "::ffff:10.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "fe80::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "64:ff9b::a00:1",  # NAT64 form of 10.0.0.1
    "2002:a00:1::",  # 6to4 form of 10.0.0.1
    "::10.0.0.1",  # IPv4-compatible (deprecated) form
    "2130706433",  # 127.0.0.1 as one decimal number
    "0x7f000001",
    "0x7f.1",
    "0177.0.0.1",
    "127.1",
    "0x0a.0.0.1",
    "012.0.0.1",  # octal 10.0.0.1
    "167772161",  # 10.0.0.1
    "0.0.0.0",
    "0",
    "::",
    "224.0.0.1",
    "255.255.255.255",
]


@pytest.fixture
def no_connect(monkeypatch):
    """Fail the test if anything tries to open a PostgreSQL connection."""
    attempts: list[dict] = []

    def refuse(*args, **kwargs):
        attempts.append(kwargs)
        raise AssertionError(f"a connection was attempted: {kwargs.get('hostaddr') or kwargs.get('host')}")

    monkeypatch.setattr(psycopg, "connect", refuse)
    return attempts


@pytest.fixture
def resolve_as(monkeypatch):
    """Make names resolve to chosen addresses (no DNS)."""
    table: dict[str, list[str]] = {}
    monkeypatch.setattr(network, "resolver", lambda host, port: list(table.get(host.lower().rstrip("."), [])))
    return table


@pytest.fixture
def public_only(settings):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["public"]


def _pg_test(host: str, port: int = 5432) -> str:
    spec = connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host=host, port=port, database="crm"),
        credentials={"user": "u", "password": "p"},
    )
    result = connectors.connector_for(spec).test_connection()
    assert result.success is False
    return result.message


@pytest.mark.parametrize("host", FORBIDDEN_BY_DEFAULT)
def test_private_loopback_link_local_and_odd_spellings_are_refused_before_connecting(host, public_only, no_connect):
    with pytest.raises(network.HostNotAllowed):
        network.host_check(host=host, port=5433)
    assert _pg_test(host, port=5433).startswith("Not allowed")
    assert no_connect == []


@pytest.mark.parametrize(
    ("name", "address"),
    [
        ("internal.example.com", "10.1.2.3"),
        ("metadata.example.com", "169.254.169.254"),
        ("rebind.example.com", "127.0.0.1"),
        ("v6.example.com", "::ffff:192.168.0.1"),
        ("link.example.com", "fe80::1"),
    ],
)
def test_names_are_judged_by_what_they_resolve_to(name, address, public_only, resolve_as, no_connect):
    resolve_as[name] = [address]
    with pytest.raises(network.HostNotAllowed):
        network.host_check(host=name, port=5432)
    assert _pg_test(name).startswith("Not allowed")
    assert no_connect == []


def test_one_forbidden_address_among_several_refuses_the_name(public_only, resolve_as, no_connect):
    resolve_as["mixed.example.com"] = ["93.184.216.34", "10.0.0.7"]
    with pytest.raises(network.HostNotAllowed):
        network.host_check(host="mixed.example.com", port=5432)


def test_a_public_address_passes_with_the_default_allow_list(public_only, resolve_as):
    resolve_as["db.example.com"] = ["93.184.216.34"]
    checked = network.host_check(host="db.example.com", port=5432)
    assert (checked.host, checked.address, checked.port) == ("db.example.com", "93.184.216.34", 5432)


def test_hosts_outside_an_explicit_allow_list_are_refused(settings, resolve_as, no_connect):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["db.partner.example", "10.20.0.0/16"]
    resolve_as["db.partner.example"] = ["10.99.0.5"]
    resolve_as["other.example.com"] = ["93.184.216.34"]
    assert network.host_check(host="db.partner.example", port=5432).address == "10.99.0.5"
    assert network.host_check(host="10.20.3.4", port=5432).address == "10.20.3.4"
    for host in ("other.example.com", "93.184.216.34", "10.21.0.1", "127.0.0.1"):
        with pytest.raises(network.HostNotAllowed):
            network.host_check(host=host, port=5432)


@pytest.mark.parametrize(
    "host",
    ["/var/run/postgresql", "db,10.0.0.1", "user@db", "db:5432", "db;x", "a b", "db\x00", "1.2.3.256", "", "x" * 300],
)
def test_what_is_not_an_address_or_a_name_is_refused(host, settings, no_connect):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["public", "0.0.0.0/0"]
    with pytest.raises(network.HostNotAllowed):
        network.host_check(host=host, port=5432)


# River's own database is a server on a port only on PostgreSQL; on SQLite it is a file.
OWN_DATABASE = pytest.mark.postgres(reason="River's own database must be a PostgreSQL server (its address is refused)")


@pytest.mark.parametrize(
    ("host", "port"),
    [
        pytest.param("127.0.0.1", 5432, marks=OWN_DATABASE),  # River's own database (tests/settings.py: DATABASE_URL)
        pytest.param("localhost", 5432, marks=OWN_DATABASE),
        pytest.param("127.0.0.2", 5432, marks=OWN_DATABASE),  # any loopback address on the port of a loopback service
        pytest.param("::1", 5432, marks=OWN_DATABASE),
        pytest.param("::ffff:127.0.0.1", 5432, marks=OWN_DATABASE),
        pytest.param("2130706433", 5432, marks=OWN_DATABASE),
        pytest.param("::127.0.0.1", 5432, marks=OWN_DATABASE),
        ("127.0.0.1", 6379),  # Redis: cache, broker and channel layer
    ],
)
def test_rivers_own_services_are_refused_even_when_allow_listed(host, port, settings, no_connect):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["public", "127.0.0.0/8", "::1", "localhost", "::/0"]
    settings.REDIS_URL = "redis://127.0.0.1:6379/1"
    with pytest.raises(network.HostNotAllowed) as caught:
        network.host_check(host=host, port=port)
    assert "River's own service" in caught.value.message
    assert _pg_test(host, port=port).startswith("Not allowed")
    assert no_connect == []


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@OWN_DATABASE
def test_rivers_own_database_by_name_is_refused(settings, resolve_as, no_connect):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["public", "db.internal", "10.0.0.0/8"]
    settings.DATABASES = {"default": {**settings.DATABASES["default"], "HOST": "db.internal", "PORT": "5432"}}
    resolve_as["db.internal"] = ["10.0.0.9"]
    resolve_as["alias.internal"] = ["10.0.0.9"]
    for host in ("db.internal", "10.0.0.9", "alias.internal", "::ffff:10.0.0.9"):
        with pytest.raises(network.HostNotAllowed):
            network.host_check(host=host, port=5432)
    assert network.host_check(host="10.0.0.9", port=5433).address == "10.0.0.9"


def test_creating_a_source_for_a_forbidden_host_is_a_400_naming_the_host(workspace, public_only, no_connect):
    with pytest.raises(HostNotAllowed) as caught:
        services.data_source_create(
            workspace=workspace,
            name="Metadata",
            type="postgresql",
            connection_config={"host": "169.254.169.254", "port": 80, "database": "x"},
            credentials={"user": "u"},
        )
    assert caught.value.status_code == 400
    assert "connection_config.host" in caught.value.details
    assert DataSource.objects.count() == 0


def test_a_name_that_changes_address_after_creation_is_refused_at_connect(workspace, public_only, resolve_as,
                                                                         no_connect):
    resolve_as["flip.example.com"] = ["93.184.216.34"]
    source = services.data_source_create(
        workspace=workspace,
        name="Flip",
        type="postgresql",
        connection_config={"host": "flip.example.com", "database": "x"},
        credentials={"user": "u"},
    )
    resolve_as["flip.example.com"] = ["10.0.0.5"]  # DNS rebinding
    result = services.data_source_test(data_source=source)
    assert result.success is False
    assert result.message.startswith("Not allowed")
    with pytest.raises(HostNotAllowed):
        services.data_source_discover(data_source=source)
    assert no_connect == []


def test_the_connection_goes_to_the_checked_address(monkeypatch, public_only, resolve_as):
    resolve_as["db.example.com"] = ["93.184.216.34"]
    seen: list[dict] = []

    def record(**kwargs):
        seen.append(kwargs)
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(psycopg, "connect", record)
    message = _pg_test("db.example.com")
    assert message.startswith("Connection refused")
    assert seen[0]["hostaddr"] == "93.184.216.34"
    assert seen[0]["host"] == "db.example.com"


def test_a_database_field_cannot_carry_a_connection_string(workspace, public_only, no_connect):
    with pytest.raises(InvalidInput) as caught:
        services.data_source_create(
            workspace=workspace,
            name="Sneaky",
            type="postgresql",
            connection_config={"host": "93.184.216.34", "database": "host=10.0.0.1 dbname=x"},
            credentials={"user": "u"},
        )
    assert "connection_config.database" in caught.value.details
