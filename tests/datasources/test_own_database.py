"""A PostgreSQL data source that reaches River's own database another way (here through
the suite's TCP relay, which no address check can tell from another server) is refused
by asking the server who it is; other databases of the same cluster stay reachable."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from datasources import connectors
from rivercore.types.datasources import ConnectionConfig
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import PG_ADMIN

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("River's own database is PostgreSQL only in this check")


def _connector(pg_relay, *, database: str, user: str = "postgres", password: str = "") -> connectors.PostgresConnector:
    return connectors.connector_for(connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host="127.0.0.1", port=pg_relay.port, database=database),
        credentials={"user": user, "password": password},
    ))


def test_rivers_own_database_through_a_relay_is_refused_as_rivers_own(pg_relay):
    own = _connector(pg_relay, database=connection.settings_dict["NAME"])
    result = own.test_connection()
    assert result.success is False
    assert "River's own database" in result.message
    with pytest.raises(connectors.HostRefused):
        own.run_read_query(sql="SELECT 1", max_rows=1)


def test_a_least_privileged_login_to_rivers_database_is_refused_too(pg_relay):
    database = connection.settings_dict["NAME"]
    with psycopg.connect(**PG_ADMIN) as admin:
        admin.execute("DROP ROLE IF EXISTS river_own_probe")
        admin.execute("CREATE ROLE river_own_probe LOGIN PASSWORD 'probe-password'")
        admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO river_own_probe')
    try:
        result = _connector(pg_relay, database=database, user="river_own_probe",
                            password="probe-password").test_connection()  # noqa: S106 - a throwaway role
    finally:
        with psycopg.connect(**PG_ADMIN) as admin:
            admin.execute(f'REVOKE CONNECT ON DATABASE "{database}" FROM river_own_probe')
            admin.execute("DROP ROLE IF EXISTS river_own_probe")
    assert result.success is False and "River's own database" in result.message


def test_another_database_of_the_same_cluster_is_still_a_data_source(pg_tables):
    result = _connector_for(pg_tables).test_connection()
    assert result.success is True, result.message


def _connector_for(pg) -> connectors.PostgresConnector:
    return connectors.connector_for(connectors.ConnectionSpec(
        type="postgresql",
        config=ConnectionConfig(host=pg["host"], port=pg["port"], database=pg["database"]),
        credentials={"user": pg["user"], "password": pg["password"]},
    ))


def test_the_identity_falls_back_to_the_start_time_when_the_identifier_is_unreadable():
    own = connectors.DatabaseIdentity(system_identifier="7712", started_at="2026-01-01 00:00:00+00", database_oid=5)
    unreadable = connectors.DatabaseIdentity(system_identifier=None, started_at=own.started_at, database_oid=5)
    elsewhere = connectors.DatabaseIdentity(system_identifier=None, started_at="2026-02-02 00:00:00+00",
                                            database_oid=5)
    other_cluster = connectors.DatabaseIdentity(system_identifier="9999", started_at=own.started_at,
                                                database_oid=5)
    assert own.same_database(unreadable) is True
    assert own.same_database(elsewhere) is False
    assert own.same_database(other_cluster) is False
    assert own.same_database(connectors.DatabaseIdentity("7712", own.started_at, 6)) is False
