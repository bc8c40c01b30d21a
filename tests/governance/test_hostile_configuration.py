"""The hostile-configuration corpus: the worst regexes, schemas, conditions, templates and
spreadsheets we know, stored through the public API (or refused there with a 400 naming
the field), then exercised. Every case finishes inside CPU_BOUND_SECONDS (a bound, not
a timing target) and none is a 500."""

from __future__ import annotations

import io
import json
import statistics
import time
import zipfile

import pytest
from django.db import connection
from rest_framework.test import APIClient

from artifacts.models import Artifact
from governance.expressions import ExpressionEvalError, matches
from tests.artifacts.conftest import artifact_dirs, nothing_stored, upload, xlsx_bytes  # noqa: F401 - fixture
from tests.factories import make_agent
from triggers.apikeys import api_key_issue
from triggers.models import Trigger, TriggerFiring
from triggers.prompt import MAX_PLACEHOLDERS, prompt_render
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db

CPU_BOUND_SECONDS = 2.0


@pytest.fixture
def active_agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Triage")


@pytest.fixture
def zendesk(workspace, owner):
    from triggers.webhooks import webhook_endpoint_create

    return webhook_endpoint_create(workspace=workspace, slug="zendesk", created_by=owner).endpoint


class Bounded:
    """The CPU time this process spent in its block (every thread's, so a machine busy
    with other work does not count); the test asserts ``seconds`` afterwards. A hostile
    input that got through would cost minutes or hours of it, not a few seconds."""

    def __enter__(self):
        self.started = time.process_time()
        return self

    def __exit__(self, *exc):
        self.seconds = time.process_time() - self.started


def _trigger_body(workspace, agent, **overrides):
    data = {"workspace": workspace.pk, "agent": str(agent.pk), "name": "Hostile", "type": "api",
            "prompt": "Look at {{ payload.x }}", "config": {}}
    data.update(overrides)
    return data


def _self_dag(levels: int) -> dict:
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
            for i in range(levels)}
    defs[f"a{levels}"] = {"type": "string", "pattern": "(a+)+$"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


def _deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"not": schema}
    return schema


# (case id, input_schema, the field path the 400 must name)
REFUSED_SCHEMAS = [
    ("backreference", {"properties": {"x": {"pattern": r"(a)\1"}}}, "config.input_schema.properties.x.pattern"),
    ("lookahead", {"properties": {"x": {"pattern": "(?=a)a"}}}, "config.input_schema.properties.x.pattern"),
    ("negative-lookbehind", {"properties": {"x": {"pattern": "(?<!b)a"}}},
     "config.input_schema.properties.x.pattern"),
    ("nested-huge-quantifier", {"properties": {"x": {"pattern": "a{1000}{1000}"}}},
     "config.input_schema.properties.x.pattern"),
    ("quantifier-over-1000", {"properties": {"x": {"pattern": "(ab){5000}"}}},
     "config.input_schema.properties.x.pattern"),
    ("pattern-properties-backreference", {"patternProperties": {r"^(\w)\1$": {}}},
     "config.input_schema.patternProperties"),
    ("long-pattern", {"properties": {"x": {"pattern": "a" * 5000}}}, "config.input_schema.properties.x.pattern"),
    ("unused-definition-backreference", {"$defs": {"x": {"pattern": r"(a)\1"}}},
     "config.input_schema.$defs.x.pattern"),
    ("self-reference", {"$defs": {"x": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"}, "config.input_schema.$defs.x"),
    ("root-reference-in-anyOf", {"anyOf": [{"$ref": "#"}]}, "config.input_schema.anyOf.0"),
    ("mutual-recursion", {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
                          "$ref": "#/$defs/a"}, "config.input_schema.$defs"),
    ("recursion-through-if", {"$defs": {"a": {"if": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"},
     "config.input_schema.$defs.a"),
    ("exponential-allOf", _self_dag(30), "config.input_schema.$defs"),
    ("deep-not", _deep(200), "config.input_schema"),
    ("remote-reference", {"$ref": "https://example.com/schema.json"}, "config.input_schema.$ref"),
    ("dangling-reference", {"$ref": "#/$defs/missing"}, "config.input_schema.$ref"),
    ("dynamic-reference", {"$dynamicRef": "#"}, "config.input_schema.$dynamicRef"),
    ("nested-id", {"properties": {"a": {"$id": "urn:x", "$ref": "#"}}}, "config.input_schema.properties.a.$id"),
]


@pytest.mark.parametrize(("schema", "path"), [(s, p) for _, s, p in REFUSED_SCHEMAS],
                         ids=[case for case, _, _ in REFUSED_SCHEMAS])
def test_an_unsafe_input_schema_is_refused_at_save_naming_the_field(api_client_for, owner, workspace, active_agent,
                                                                   schema, path):
    client = api_client_for(owner)
    client.post("/api/v1/triggers/", _trigger_body(workspace, active_agent, config={"input_schema": {"type": 1}}),
                format="json")  # warm: the first request of a process loads the URLs and the validators
    with Bounded() as timer:
        response = client.post("/api/v1/triggers/", _trigger_body(
            workspace, active_agent, config={"input_schema": schema}), format="json")
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]
    details = response.json()["error"]["details"]
    assert any(key.startswith(path) for key in details), details
    assert not Trigger.objects.exists()


# (case id, input_schema, a payload that makes a backtracking engine explode)
CATASTROPHIC = [
    ("nested-plus", {"properties": {"x": {"type": "string", "pattern": "(a+)+$"}}}, {"x": "a" * 40 + "!"}),
    ("alternation-star", {"properties": {"x": {"type": "string", "pattern": "(a|aa)*c"}}}, {"x": "a" * 5000}),
    ("repeated-dot-star", {"properties": {"x": {"type": "string", "pattern": "(.*a){20}"}}},
     {"x": "a" * 19 + "b" * 20_000}),
    ("pattern-properties", {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
                            "additionalProperties": False}, {"a" * 5000 + "!": 1}),
    ("format-regex-in-payload", {"properties": {"x": {"type": "string", "format": "regex"}}}, {"x": r"(a)\1"}),
    ("recursive-tree-deep-payload", {"type": "object", "properties": {"c": {"$ref": "#"}}, "required": ["c"]},
     None),
    ("wide-payload", {"type": "object", "additionalProperties": {"type": "string", "pattern": "(x+x+)+y"}},
     {f"k{i}": "x" * 200 for i in range(5000)}),
]


def _nested(levels: int) -> dict:
    payload: dict = {"c": 1}
    for _ in range(levels):
        payload = {"c": payload}
    return payload


@pytest.mark.parametrize(("schema", "payload"), [(s, p) for _, s, p in CATASTROPHIC],
                         ids=[case for case, _, _ in CATASTROPHIC])
def test_a_catastrophic_pattern_is_stored_and_judged_in_linear_time(api_client_for, owner, workspace,
                                                                   active_agent, schema, payload):
    created = api_client_for(owner).post("/api/v1/triggers/", _trigger_body(
        workspace, active_agent, config={"input_schema": schema}), format="json")
    assert created.status_code == 201, created.json()
    key = api_key_issue(created_by=owner, workspace=workspace, name="Hostile").plaintext
    payload = payload if payload is not None else _nested(55)
    with Bounded() as timer:
        response = APIClient().post(f"/api/v1/triggers/{created.json()['id']}/invoke", payload, format="json",
                                    HTTP_X_API_KEY=key)
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]
    assert all(path.startswith("payload") for path in response.json()["error"]["details"])
    assert TriggerFiring.objects.get().reason == TriggerFiring.Reason.SCHEMA_INVALID


def test_a_schema_stored_before_these_rules_fails_the_payload_not_the_process(owner, workspace, active_agent):
    trigger = trigger_create(actor=owner, workspace=workspace, agent=active_agent, name="Old", trigger_type="api",
                             prompt="", config={})
    # Written straight to the row (the model field checks every write), as a schema
    # saved by an older River would be.
    stale = {"trigger_type": "api", "input_schema": {
        "$defs": {"x": {"$ref": "#/$defs/x"}}, "properties": {"y": {"pattern": r"(a)\1"}}, "$ref": "#/$defs/x"}}
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Trigger._meta.db_table} SET config = %s WHERE id = %s",
                       [json.dumps(stale), Trigger._meta.pk.get_db_prep_value(trigger.pk, connection)])
        assert cursor.rowcount == 1  # the id in the form this database stores it (hex on SQLite)
    key = api_key_issue(created_by=owner, workspace=workspace, name="Old").plaintext
    with Bounded() as timer:
        response = APIClient().post(f"/api/v1/triggers/{trigger.pk}/invoke", {"y": "aa"}, format="json",
                                    HTTP_X_API_KEY=key)
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]


# --- conditions ------------------------------------------------------------------------------

REFUSED_CONDITIONS = [
    ("deep-parentheses", "(" * 500 + "payload.a == 1" + ")" * 500),
    ("deep-not", "NOT " * 500 + "payload.a == 1"),
    ("huge-literal", "payload.a == '" + "x" * 5000 + "'"),
    ("huge-number", "payload.a == " + "9" * 400),
    ("many-tokens", " OR ".join(["payload.a == 1"] * 600)),
    ("nested-lists", "payload.a IN " + "[" * 100 + "1" + "]" * 100),
]


@pytest.mark.parametrize("condition", [c for _, c in REFUSED_CONDITIONS], ids=[i for i, _ in REFUSED_CONDITIONS])
def test_an_unbounded_condition_is_refused_at_save_naming_the_field(api_client_for, owner, workspace,
                                                                   active_agent, zendesk, condition):
    with Bounded() as timer:
        response = api_client_for(owner).post("/api/v1/triggers/", _trigger_body(
            workspace, active_agent, type="event",
            config={"endpoint": "zendesk", "event_type": "ticket.created", "condition": condition}), format="json")
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]
    assert "config.condition" in response.json()["error"]["details"]
    assert not Trigger.objects.exists()


def test_a_condition_that_would_rescan_a_huge_payload_stops_within_its_budget():
    condition = " OR ".join(["contains_pii(payload)"] * 100)
    payload = {"payload": {"text": "%" * 1_000_000, "more": ["x" * 100_000] * 10}}
    with Bounded() as timer, pytest.raises(ExpressionEvalError) as stopped:
        matches(condition, payload)
    assert timer.seconds < CPU_BOUND_SECONDS
    assert "units of work" in stopped.value.reason


def test_contains_pii_on_runs_of_percent_signs_is_linear():
    with Bounded() as timer:
        assert matches("contains_pii(payload.text) == false", {"payload": {"text": "%" * 500_000}}) is True
    assert timer.seconds < CPU_BOUND_SECONDS


# --- prompt templates ------------------------------------------------------------------------


def test_unclosed_placeholders_are_scanned_in_linear_time(api_client_for, owner, workspace, active_agent):
    template = "{{" * 10_000  # the longest prompt, every pair an unclosed placeholder
    with Bounded() as timer:
        response = api_client_for(owner).post("/api/v1/triggers/", _trigger_body(
            workspace, active_agent, type="manual", prompt=template), format="json")
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 201, response.content[:500]
    with Bounded() as timer:
        assert prompt_render(template, {}) == template
    assert timer.seconds < CPU_BOUND_SECONDS


def test_a_template_with_too_many_placeholders_is_refused_naming_the_prompt(api_client_for, owner, workspace,
                                                                           active_agent):
    template = "{{ payload.a }}" * (MAX_PLACEHOLDERS + 1)
    response = api_client_for(owner).post("/api/v1/triggers/", _trigger_body(
        workspace, active_agent, type="manual", prompt=template), format="json")
    assert response.status_code == 400
    assert "prompt" in response.json()["error"]["details"]


def test_rendering_stops_when_the_prompt_is_full():
    from rivercore import limits

    template = "{{ payload.a }}" * MAX_PLACEHOLDERS
    with Bounded() as timer:
        rendered = prompt_render(template, {"a": "y" * 1_000_000})
    assert timer.seconds < CPU_BOUND_SECONDS
    assert len(rendered) == limits.PROMPT


# --- spreadsheets and CSV ----------------------------------------------------------------------


def _workbook_with(parts: dict[str, bytes]) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(xlsx_bytes({"Data": [["a"], [1]]})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in source.namelist():
            archive.writestr(name, parts.pop(name, source.read(name)))
        for name, data in parts.items():
            archive.writestr(name, data)
    return out.getvalue()


_ENTITY = '<?xml version="1.0" encoding="{enc}"?><!DOCTYPE w [<!ENTITY e "boom">]><worksheet>&e;</worksheet>'
_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
           '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]><sst>&d;</sst>')

HOSTILE_WORKBOOKS = [
    ("utf16-entity-worksheet", {"xl/worksheets/sheet1.xml": _ENTITY.format(enc="UTF-16").encode("utf-16")},
     "DTD or entities"),
    ("utf16le-no-bom-entity", {"xl/sharedStrings.xml": _ENTITY.format(enc="UTF-16LE").encode("utf-16-le")},
     "DTD or entities"),
    ("utf16be-entity-oddly-named-part", {"xl/worksheets/sheet9.dat": _ENTITY.format(enc="UTF-16BE").encode(
        "utf-16-be")}, "DTD or entities"),
    ("billion-laughs", {"xl/sharedStrings.xml": _LAUGHS.encode()}, "DTD or entities"),
    ("external-entity", {"xl/workbook.xml": b'<?xml version="1.0"?><!DOCTYPE w [<!ENTITY x SYSTEM '
                                            b'"file:///etc/passwd">]><workbook>&x;</workbook>'}, "DTD or entities"),
    ("utf32-entity", {"xl/worksheets/sheet1.xml": _ENTITY.format(enc="UTF-32").encode("utf-32")},
     "cannot be read"),
]


@pytest.mark.parametrize(("parts", "expected"), [(p, e) for _, p, e in HOSTILE_WORKBOOKS],
                         ids=[case for case, _, _ in HOSTILE_WORKBOOKS])
def test_a_workbook_with_hostile_xml_is_refused_and_nothing_is_stored(api_client_for, owner, workspace,
                                                                     artifact_dirs, parts, expected):  # noqa: F811
    client = api_client_for(owner)
    upload(client, workspace, "warm.xlsx", b"not a workbook")  # warm: loads the upload path
    body = _workbook_with(dict(parts))
    with Bounded() as timer:
        response = upload(client, workspace, "hostile.xlsx", body)
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]
    message = " ".join(response.json()["error"]["details"]["file"])
    assert expected in message, message
    assert nothing_stored(artifact_dirs)


HOSTILE_CSV = [
    ("one-huge-field", b"a,b\n" + b"x" * 300_000 + b",1\n", "CSV"),
    ("ten-thousand-columns", b",".join([b"c"] * 10_000) + b"\n" + b",".join([b"1"] * 10_000) + b"\n", "columns"),
    ("unterminated-quote", b'a,b\n"' + b"y" * 500_000 + b"\n", "CSV"),
]


@pytest.mark.parametrize(("content", "expected"), [(c, e) for _, c, e in HOSTILE_CSV],
                         ids=[case for case, _, _ in HOSTILE_CSV])
def test_a_hostile_csv_is_refused_within_the_bound(api_client_for, owner, workspace, artifact_dirs,  # noqa: F811
                                                  content, expected):
    with Bounded() as timer:
        response = upload(api_client_for(owner), workspace, "hostile.csv", content)
    assert timer.seconds < CPU_BOUND_SECONDS
    assert response.status_code == 400, response.content[:500]
    assert expected in " ".join(response.json()["error"]["details"]["file"])
    assert not Artifact.objects.exists()


# --- one workspace's hostile configuration never slows /health ----------------------------------

SERVER_SETUP = """
from django.contrib.auth import get_user_model
from agents.models import Agent
from triggers.apikeys import api_key_issue
from triggers.services import trigger_create

admin = get_user_model().objects.get(username="admin")
agent = Agent.objects.get(name="Support Analyst")
trigger = trigger_create(actor=admin, workspace=agent.workspace, agent=agent, name="Hostile", trigger_type="api",
                         prompt="{{ payload.x }}", config={"input_schema": {
                             "type": "object", "properties": {"x": {"type": "string", "pattern": "(a+)+$"}},
                             "patternProperties": {"^(b|bb)*c$": {"type": "integer"}}}})
key = api_key_issue(created_by=admin, workspace=agent.workspace, name="Hostile").plaintext
print("SETUP", trigger.pk, key, agent.workspace_id, agent.pk)
"""

HEALTH_BOUND_SECONDS = 0.100
HEALTH_STALL_SECONDS = 1.0  # no probe may take this long: a stall, not noise


@pytest.mark.slow
def test_health_answers_within_100_ms_while_hostile_configuration_is_stored_and_invoked(tmp_path):
    import os
    import subprocess
    import sys
    import threading
    import urllib.error
    import urllib.request

    from tests.riverapp.test_server import ROOT, START_DEADLINE_SECONDS, _free_port, _manage

    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("REDIS_", "RIVER_", "DATABASE_")) and key not in {"DJANGO_SETTINGS_MODULE",
                                                                                      "SECRET_KEY"}}
    env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{tmp_path / 'river.sqlite3'}", RIVER_VAR_DIR=str(tmp_path),
               RIVER_ADMIN_PASSWORD="hostile-test-password", LOG_LEVEL="ERROR")
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    line = next(x for x in _manage(env, "shell", "-c", SERVER_SETUP).splitlines() if x.startswith("SETUP "))
    trigger_id, key, workspace_id, agent_id = line.split()[1:]
    token = _manage(env, "issue_token", "admin").strip().splitlines()[-1]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "server.log").open("w+") as log:
        server = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
            [sys.executable, "manage.py", "runriver", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_DEADLINE_SECONDS
            while True:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.2)

            def post(path: str, body, headers: dict) -> int:
                request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST",
                                                 headers={"Content-Type": "application/json", **headers})
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        return response.status
                except urllib.error.HTTPError as error:
                    return error.code

            statuses: list[int] = []
            done = threading.Event()

            def attack() -> None:
                bearer = {"Authorization": f"Bearer {token}"}
                try:
                    for round_ in range(3):
                        for case, schema, _ in REFUSED_SCHEMAS:
                            statuses.append(post("/api/v1/triggers/", {
                                "workspace": int(workspace_id), "agent": agent_id, "name": f"{case}-{round_}",
                                "type": "api", "prompt": "", "config": {"input_schema": schema}}, bearer))
                        for payload in ({"x": "a" * 50_000 + "!"}, {"b" * 50_000 + "c": "not an integer"},
                                        {"x": "a" * 40 + "!", "c": "{{" * 10_000}):
                            statuses.append(post(f"/api/v1/triggers/{trigger_id}/invoke", payload,
                                                 {"X-API-Key": key}))
                finally:
                    done.set()

            attacker = threading.Thread(target=attack)
            attacker.start()
            latencies = []
            while not done.is_set():
                started = time.perf_counter()
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    assert response.status == 200
                latencies.append(time.perf_counter() - started)
                done.wait(0.02)
            attacker.join(timeout=120)
        finally:
            server.terminate()
            server.wait(timeout=45)
    print(f"/health: {len(latencies)} probes, max {max(latencies) * 1000:.1f} ms, slowest "
          f"{sorted(round(x * 1000) for x in latencies)[-5:]}; statuses {sorted(set(statuses))}")
    assert statuses and all(400 <= status < 500 for status in statuses), statuses
    assert len(latencies) >= 10
    # A stalled process (the backtracking regex of old) leaves /health unanswered for
    # seconds; scheduling noise on a loaded 2-core machine adds tens of milliseconds to a
    # few probes. So: the typical probe within the issue's 100 ms, and none near a stall.
    assert statistics.median(latencies) < HEALTH_BOUND_SECONDS, f"median {statistics.median(latencies) * 1000:.1f} ms"
    assert max(latencies) < HEALTH_STALL_SECONDS, f"max /health latency {max(latencies) * 1000:.1f} ms"
