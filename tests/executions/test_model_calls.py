"""Every model call of a durable run is recorded with its turn: exact input and output,
redacted, each message stored once per run, so storage grows linearly with the run."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from executions import services, tasks
from executions.modelcalls import model_calls_for_run, secrets_redact
from executions.models import Execution, ModelCallBlob, ModelCallRecord
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _run(workspace, owner, turns: int, prompt: str = "echo") -> tuple[Execution, ScriptedLLM]:
    agent = make_agent(workspace=workspace, owner=owner, name=f"echo {turns}", tools=["test_echo"],
                       model_config={"max_turns": turns + 1, "token_budget": 10_000_000})
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=prompt))
    replies = [tool_reply("test_echo", {"text": f"line {n} " + "x" * 200}, call_id=f"call_{n}") for n in range(turns)]
    llm = ScriptedLLM([*replies, text_reply("done")])
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    return execution, llm


def _stored_bytes(execution_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM executions_model_call_blob b WHERE execution_id = %s",
            [execution_id])
        blobs = cursor.fetchone()[0]
        cursor.execute(
            "SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM executions_model_call c WHERE execution_id = %s",
            [execution_id])
        return blobs + cursor.fetchone()[0]


@pytest.mark.django_db
def test_each_model_call_is_stored_with_its_exact_input_and_output(workspace, owner, sent):
    execution, llm = _run(workspace, owner, 3)

    calls = model_calls_for_run(execution_id=execution.pk)

    assert [c["turn"] for c in calls] == [1, 2, 3, 4]
    for call, request in zip(calls, llm.requests, strict=True):
        assert call["messages"] == request["messages"]
        assert call["tools"] == request["tools"]
        assert call["parameters"]["tier"] == request["tier"].value
    assert calls[0]["output"]["reply"]["tool_calls"][0]["arguments"]["text"].startswith("line 0")
    assert calls[-1]["output"]["reply"]["content"] == "done" and calls[-1]["model"] == "scripted"


@pytest.mark.django_db
def test_a_message_shared_by_consecutive_calls_is_stored_once(workspace, owner, sent):
    execution, llm = _run(workspace, owner, 5)
    distinct = {str(m) for request in llm.requests for m in request["messages"]}
    # One blob per distinct message, plus the tool list.
    assert ModelCallBlob.objects.filter(execution=execution).count() == len(distinct) + 1
    later = ModelCallRecord.objects.filter(execution=execution).order_by("turn")[2]
    assert later.shared_prefix > 0 and len(later.digests) < len(llm.requests[2]["messages"])


@pytest.mark.django_db
@pytest.mark.postgres(reason="measures stored row sizes with pg_column_size")
def test_storage_grows_linearly_with_turns(workspace, owner, sent):
    short, _ = _run(workspace, owner, 15)
    long, _ = _run(workspace, owner, 60)
    per_turn_short = _stored_bytes(short.pk) / 15
    per_turn_long = _stored_bytes(long.pk) / 60
    # Quadratic storage would make the 60-turn run's bytes per turn about 4x the 15's.
    assert per_turn_long < per_turn_short * 1.5, (per_turn_short, per_turn_long)


def test_secrets_are_redacted():
    text = ("key sk-proj-abcdefghijklmnop1234 and Authorization: Bearer abc.def.ghi123 "
            "url postgres://river:hunter2pw@db.example/x token rvr_ABCDEFGH12345678 "
            "webhook whsec_abcdefgh12345678 apikey rtk_abcdefgh1234567 password=s3cr3tpass")
    redacted = secrets_redact(text)
    for secret in ("sk-proj-abcdefghijklmnop1234", "abc.def.ghi123", "hunter2pw", "rvr_ABCDEFGH12345678",
                   "whsec_abcdefgh12345678", "rtk_abcdefgh1234567", "s3cr3tpass"):
        assert secret not in redacted
    assert "postgres://river:[REDACTED]@db.example/x" in redacted


@pytest.mark.django_db
def test_a_secret_in_a_prompt_is_not_stored(workspace, owner, sent):
    execution, _ = _run(workspace, owner, 1, prompt="connect with postgres://app:topsecret99@db/x please")
    calls = model_calls_for_run(execution_id=execution.pk)
    assert "topsecret99" not in str(calls) and "[REDACTED]" in str(calls[0]["messages"])
    raw = b"".join(bytes(b.body) for b in ModelCallBlob.objects.filter(execution=execution))
    assert b"topsecret99" not in raw


@pytest.mark.django_db
def test_prune_forgets_the_calls_of_runs_past_retention(workspace, owner, sent, settings):
    import datetime as dt

    from django.utils import timezone

    execution, _ = _run(workspace, owner, 1)
    settings.RIVER_MODEL_CALL_RETENTION_DAYS = 7
    assert tasks.model_calls_prune() == 0
    Execution.objects.filter(pk=execution.pk).update(finished_at=timezone.now() - dt.timedelta(days=8))
    assert tasks.model_calls_prune() == 2
    assert not ModelCallBlob.objects.filter(execution=execution).exists()


@pytest.mark.django_db
def test_a_message_every_run_sends_is_redacted_once_per_process_and_stored_with_each_run(
        workspace, owner, sent, monkeypatch):
    from executions import modelcalls

    redacted = []
    real = modelcalls._redacted_json
    monkeypatch.setattr(modelcalls, "_redacted_json", lambda value: redacted.append(value) or real(value))
    monkeypatch.setattr(modelcalls, "_packed_cache", type(modelcalls._packed_cache)())  # as in a fresh process
    agent = make_agent(workspace=workspace, owner=owner, name="echo twice", tools=["test_echo"])
    runs = []
    for _ in range(2):
        execution = services.execution_start(agent=agent, request=services.person_run_request(
            agent=agent, user=owner, prompt="same question"))
        assert services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM([text_reply("done")])) \
            == "success"
        runs.append(execution)

    tools_blobs = [value for value in redacted if isinstance(value, dict) and "__tools__" in value]
    assert len(tools_blobs) == 1  # the second run's identical tool schemas were not redacted again
    for run in runs:  # each run still stores every message it sent, the shared ones included
        call = model_calls_for_run(execution_id=run.pk)[0]
        assert call["tools"] and call["messages"][-1]["content"] == "same question"


_FRAGMENTS = ["Authorization", "authorization: ", "bearer ", "Basic ", "://", "postgres://u:", "@h", "rvr_", "rtk_",
              "whsec_", "sk-", "sk-proj-", "sk-ant-", "AKIA", "akia", "AIza", "aiza", "api_key", "Api-Key", "apikey",
              "secret", "SECRET", "password", "passwd", "token", '": "', "=", ":", " ", "ABCDEFGH12345678",
              "abcdefghijklmnopqrstuvwxyz0123", "_", "-", "input_tokens", "x_secret", "my_api_key", "ſ", "K", "é"]


@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=14).map("".join))
@settings_h(max_examples=600, derandomize=True)
def test_the_redaction_shortcut_skips_only_text_no_pattern_would_change(text):
    """Text without any pattern's literal skips the patterns; whatever the text, the
    result is what running every pattern gives."""
    from executions import modelcalls

    everything = text
    for pattern, replacement in modelcalls._SECRET_PATTERNS:
        everything = pattern.sub(replacement, everything)
    assert secrets_redact(text) == everything
    if not modelcalls._could_match(text):
        assert everything == text


def test_the_characters_ignoring_case_takes_for_ascii_letters_are_the_ones_folded():
    """``_could_match`` lower-cases text to look for the literals; ``(?i)`` also takes a
    few characters outside ASCII for ASCII letters ("ſ" for "s"): exactly those are folded
    first, so text written with them is still looked at."""
    import re

    from executions import modelcalls

    letter = re.compile("(?i)[a-z]")
    taken = {chr(code) for code in range(0x80, 0x110000) if letter.fullmatch(chr(code))}
    assert taken == {chr(code) for code in modelcalls._ASCII_FOLD}
    for text in ("\u017fecret=hunter22", "api_\u212aey: abcdef12", "authorİzation: Bearer abcdefgh12"):
        assert modelcalls._could_match(text) and secrets_redact(text) != text


def test_a_reply_s_token_counts_skip_the_patterns_and_a_token_value_does_not():
    """The shortcut looks for each literal where its pattern would: after a word boundary.
    A reply's ``input_tokens`` is no secret; ``token=`` and ``api_key:`` values are."""
    from executions import modelcalls

    counts = '{"input_tokens": 1843, "output_tokens": 96, "provider": "openai", "my_secretary": "Ann"}'
    assert not modelcalls._could_match(counts) and not modelcalls._could_match(counts.replace("Ann", "Ånn"))
    assert secrets_redact(counts) == counts
    assert secrets_redact('{"token": "abcd1234efgh"}') == '{"token": "[REDACTED]"}'
    assert secrets_redact("api_key=sk-live-000111222333") == "api_key=[REDACTED]"
    assert secrets_redact("see sk-abcdefghijklmnop1234") == "see [REDACTED]"
