"""No secret reaches a log line: River's tokens, trigger API keys, webhook secrets,
data-source passwords, provider keys, Authorization headers and River's configured
secrets are redacted on every handler, in both formats, including inside exception
messages and tracebacks."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from executions import services, tasks
from telemetry.logs import REDACTED, TURN_LOGGER, logging_config, redact
from tests.factories import ScriptedLLM, make_agent

LLM_KEY = "llm-key-Zq81vXc0pL3mN7"  # RIVER_LLM_API_KEY, no known prefix: caught as a configured value
PROVIDER_KEY = "sk-proj-4hT9sQ2wVb7Yx1Lk"
RIVER_TOKEN = "rvr_ab12cd34_Secr3tTokenValue9"
TRIGGER_KEY = "rtk_ef56gh78_TriggerKeySecret1"
WEBHOOK_SECRET = "whsec_8YpQ2mZ4rT6vN1kL"
DB_PASSWORD = "Db-Pa55w0rd-xyz"
BEARER = "opaque-bearer-value-77Kq"
SECRETS = [LLM_KEY, PROVIDER_KEY, RIVER_TOKEN, TRIGGER_KEY, WEBHOOK_SECRET, DB_PASSWORD, BEARER]


# --- the redactor on the class of inputs -------------------------------------------


@pytest.mark.parametrize("text, secret", [
    (f"connect to postgres://river:{DB_PASSWORD}@db.internal:5432/app failed", DB_PASSWORD),
    ("postgresql://river:p%40ss%2Fw0rd@127.0.0.1/app", "p%40ss%2Fw0rd"),
    ("postgresql://river:p%40ss%2Fw0rd@127.0.0.1/app", "p@ss/w0rd"),
    (f"host=127.0.0.1 user=river password={DB_PASSWORD} dbname=app", DB_PASSWORD),
    (f"host=127.0.0.1 password='{DB_PASSWORD} with space' dbname=app", DB_PASSWORD),
    (f'{{"host": "127.0.0.1", "password": "{DB_PASSWORD}"}}', DB_PASSWORD),
    (f"{{'host': '127.0.0.1', 'password': '{DB_PASSWORD}'}}", DB_PASSWORD),
    (f"https://h/hook?password%3D{DB_PASSWORD}&x=1", DB_PASSWORD),
    (f"Incorrect API key provided: {PROVIDER_KEY}.", PROVIDER_KEY),
    (f"token {RIVER_TOKEN} rejected", RIVER_TOKEN),
    (f"api key {TRIGGER_KEY} unknown", TRIGGER_KEY),
    (f"endpoint secret {WEBHOOK_SECRET}", WEBHOOK_SECRET),
    (f"headers={{'Authorization': 'Bearer {BEARER}'}}", BEARER),
    (f"Authorization: Basic {BEARER}", BEARER),
    (f'{{"api_key": "{BEARER}"}}', BEARER),
    (f"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: "
     f"bad dsn postgres://u:{DB_PASSWORD}@h/db\n  and key {PROVIDER_KEY}", DB_PASSWORD),
])
def test_redact_removes_the_secret_from_each_shape(text, secret):
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def test_redact_keeps_ordinary_text_and_the_dsn_shape():
    assert redact("turn 3 of execution 9: 120 tokens_in") == "turn 3 of execution 9: 120 tokens_in"
    assert redact("postgres://river:secretpw@db:5432/app") == f"postgres://river:{REDACTED}@db:5432/app"


def test_redact_removes_configured_secret_values(settings):
    settings.RIVER_LLM_API_KEY = LLM_KEY
    assert LLM_KEY not in redact(f"provider said: key {LLM_KEY} is invalid")
    assert settings.SECRET_KEY not in redact(f"oops {settings.SECRET_KEY!r}")


def test_a_bad_log_format_stops_startup_naming_the_variable():
    from tests.riverapp.test_settings import _check

    result = _check({"DEBUG": "true", "RIVER_LOG_FORMAT": "xml"})
    assert result.returncode != 0
    assert "RIVER_LOG_FORMAT must be one of text, json, got 'xml'" in result.stderr


def test_json_format_makes_every_logger_a_json_line_with_the_exception_as_a_field():
    from tests.riverapp.test_settings import _check

    result = _check({"DEBUG": "true", "RIVER_LOG_FORMAT": "json"})
    assert result.returncode == 0, result.stderr
    buffer = _capture("json")
    try:
        logging.getLogger("django.request").warning("Not Found: %s", "/x")
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("celery.worker").exception("task failed")
    finally:
        logging.config.dictConfig(settings.LOGGING)
    first, second = (json.loads(line) for line in buffer.getvalue().splitlines())
    assert first["logger"] == "django.request" and first["message"] == "Not Found: /x"
    assert first["level"] == "WARNING" and "exception" not in first
    assert second["logger"] == "celery.worker" and second["level"] == "ERROR"
    assert "ValueError: boom" in second["exception"] and "Traceback" in second["exception"]


# --- every logger, both formats, real code paths ------------------------------------


def _capture(log_format: str) -> io.StringIO:
    buffer = io.StringIO()
    logging.config.dictConfig(logging_config(log_format=log_format, level="DEBUG"))
    for handler in {*logging.getLogger().handlers, *logging.getLogger(TURN_LOGGER).handlers}:
        handler.setStream(buffer)
    return buffer


@pytest.fixture
def logs_as():
    yield _capture
    logging.config.dictConfig(settings.LOGGING)


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


@pytest.mark.django_db
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_reaches_any_log_line_from_real_failures(
    workspace, owner, sent, logs_as, log_format, settings, client,
):
    settings.RIVER_LLM_API_KEY = LLM_KEY
    buffer = logs_as(log_format)

    # 1. A run whose model client fails with an error echoing its key, a data source DSN
    #    and request headers: the segment crashes and logs the traceback.
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="hi"))
    failure = RuntimeError(
        f"provider rejected key {LLM_KEY} ({PROVIDER_KEY}); while reading "
        f"postgresql://river:{DB_PASSWORD}@127.0.0.1:1/app with "
        f"{{'Authorization': 'Bearer {BEARER}', 'X-River-Signature': 't=1,v1=abc'}}"
    )
    assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([failure])) == "failed"

    # 2. A real failed connection to a PostgreSQL data source whose URL holds the password.
    import psycopg

    dsn = f"postgresql://river:{DB_PASSWORD}@127.0.0.1:1/app?connect_timeout=1"
    try:
        psycopg.connect(dsn)
    except psycopg.OperationalError:
        logging.getLogger("datasources").exception("data source connection failed: %s", dsn)

    # 3. Requests with a bad River token, a bad trigger API key and a forged webhook secret.
    client.get("/api/v1/agents/", HTTP_AUTHORIZATION=f"Bearer {RIVER_TOKEN}")
    client.post("/api/v1/executions/", HTTP_AUTHORIZATION=f"Bearer {TRIGGER_KEY}",
                data={"password": DB_PASSWORD}, content_type="application/json")
    logging.getLogger("triggers").warning("delivery refused with %r", {"secret": WEBHOOK_SECRET})

    # 4. River's own secrets, as a careless line would print them.
    logging.getLogger("riverapp").error("settings dump: %s %s", settings.SECRET_KEY, LLM_KEY)

    output = buffer.getvalue()
    assert "segment of execution" in output and "data source connection failed" in output
    assert "Traceback" in output or '"exception"' in output
    for secret in [*SECRETS, settings.SECRET_KEY]:
        assert secret not in output, secret
    if log_format == "json":
        records = [json.loads(line) for line in output.splitlines() if line.strip()]
        crash = next(r for r in records if "segment of execution" in r.get("message", ""))
        assert crash["level"] == "ERROR" and "RuntimeError" in crash["exception"]
        assert all(r["service"] == "river" and r["timestamp"].endswith("Z") for r in records)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_turn_line_is_redacted_by_its_formatter_alone(logs_as, log_format, settings):
    settings.RIVER_LLM_API_KEY = "sk-turn-line-secret-0123456789"
    buffer = logs_as(log_format)
    turns = logging.getLogger(TURN_LOGGER)
    assert not any(handler.filters for handler in turns.handlers)  # one redaction, the formatter's
    try:
        raise RuntimeError("failed with sk-turn-line-secret-0123456789")
    except RuntimeError:
        turns.info("turn %s", 1, exc_info=True, extra={"river": {
            "turn_number": 1, "tool_calls": [{"arguments": "key=sk-turn-line-secret-0123456789"}]}})

    text = buffer.getvalue()
    assert "sk-turn-line-secret-0123456789" not in text
    line = json.loads(text.splitlines()[0])
    assert line["turn_number"] == 1 and "[REDACTED]" in line["tool_calls"][0]["arguments"]


# --- the redactor's shortcut -------------------------------------------------------

_FRAGMENTS = ["rvr_", "rtk_", "whsec_", "sk-", "://", "@", ":", "=", "%3D", "'", '"', " ", "Authorization", "BEARER ",
              "basic ", "password", "Api-Key", "token", "secret", "x-river-signature", "abcdefgh12345678", "_", "-"]


@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=12).map("".join))
@settings_h(max_examples=600, derandomize=True)
def test_the_shortcut_skips_only_text_no_pattern_would_change(text):
    """Text without any pattern's literal skips the patterns; whatever the text, the
    result is what running every pattern gives."""
    from telemetry import logs

    everything = text
    for pattern, replacement in logs._PATTERNS:
        everything = pattern.sub(replacement, everything)
    assert logs._redact_patterns(text) == everything
    if not logs._COULD_MATCH.search(text):
        assert everything == text
