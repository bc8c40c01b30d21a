"""Schemathesis against River's own OpenAPI document, on the whole WSGI application.

Every operation of /api/schema/ gets generated requests (valid and invalid), sent
with a real bearer token of a user who administers a workspace full of data, next to
another organization's data. Each response must be no 5xx, carry a documented status
code and content type, and match the documented body schema.

Besides schemathesis's own cases, a third strategy takes valid cases and puts odd
Unicode into them: lone surrogates (JSON ``\\ud800`` escapes), superscript, Arabic-Indic
and full-width digits, bidirectional marks, text next to a NUL, emoji, combining marks.
Lone surrogates go into JSON bodies (keys and values) only: a query string or a path
is bytes, and Django decodes invalid UTF-8 there to U+FFFD.

RIVER_FUZZ_MAX_EXAMPLES bounds the examples per operation (CI default small and
derandomized so the run is repeatable; ``make fuzz`` runs many more at random).
Nothing may leave the machine: a guard refuses every name lookup and connection that
is not loopback before a packet is sent, whatever host a generated body names.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import socket
import zlib
from collections import Counter
from urllib.parse import urlencode

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from datasources.models import DataSource
from executions import services as execution_services
from governance import services as governance_services
from tenancy.models import OrganizationMember
from tenancy.services import token_issue
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance.approval_tools import WRITE_TOOL

MAX_EXAMPLES = int(os.environ.get("RIVER_FUZZ_MAX_EXAMPLES", "20"))
RANDOM = os.environ.get("RIVER_FUZZ_RANDOM", "") == "1"
UPSTREAM_CODES = {503: "data_source_unavailable", 504: "query_timeout"}


@schemathesis.check
def no_server_error(ctx, response, case):
    """No 5xx, except the documented answer of an operation that had to reach a
    customer's database and could not (the fault is that database's, not River's)."""
    code = UPSTREAM_CODES.get(response.status_code)
    if code and str(response.status_code) in case.operation.definition.raw.get("responses", {}):
        try:
            if response.json()["error"]["code"] == code:
                return None
        except (ValueError, KeyError, TypeError):
            pass
    return not_a_server_error(ctx, response, case)


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

STATS: Counter = Counter()  # cases sent per operation
STATUSES: Counter = Counter()  # responses by status class


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    if STATS:
        print(
            f"\nschema fuzz: {len(STATS)} operations, {sum(STATS.values())} cases "
            f"(max {MAX_EXAMPLES} per operation, {'random' if RANDOM else 'derandomized'}), "
            f"responses {dict(sorted(STATUSES.items()))}"
        )


# ---------------------------------------------------------------- no packet leaves


def _loopback(host) -> bool:
    if host is None or host in {"localhost", "localhost.localdomain"}:
        return True
    try:
        return ipaddress.ip_address(str(host).strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def loopback_only(monkeypatch):
    """Refuse, before any packet, every lookup or connection not to 127.0.0.0/8 or ::1.

    psycopg resolves host names through socket.getaddrinfo before libpq connects, and
    httpx (litellm) connects through Python sockets, so both paths pass through here.
    """
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    refused: list[str] = []

    def getaddrinfo(host, *args, **kwargs):
        if not _loopback(host.decode() if isinstance(host, bytes) else host):
            refused.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"fuzz guard: {host!r} is not loopback")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            refused.append(str(address))
            raise ConnectionRefusedError(f"fuzz guard: {address!r} is not loopback")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return refused


# ---------------------------------------------------------------- a workspace full of data


@pytest.fixture
def connection_kept():
    """Like Django's test client: the request signals must not close the connection
    that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def seeded_settings(tmp_path) -> dict:
    """The settings the seeded world needs: artifacts and SQLite files under ``tmp_path``."""
    from django.conf import settings

    return {
        "STORAGES": {**settings.STORAGES, "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "store")}}},
        "RIVER_SQLITE_DATA_DIR": tmp_path / "sqlite",
    }


@pytest.fixture
def seeded(connection_kept, db, org, workspace, owner, other_workspace, outsider, tmp_path, settings):
    for name, value in seeded_settings(tmp_path).items():
        setattr(settings, name, value)
    return seed_world(org=org, workspace=workspace, owner=owner, other_workspace=other_workspace, outsider=outsider)


def seed_world(*, org, workspace, owner, other_workspace, outsider) -> dict:
    """A workspace full of data beside another organization's (with seeded_settings in
    force): the token of ``owner``, made an admin of ``org``, and the ids of each kind."""
    OrganizationMember.objects.create(organization=org, user=owner, role=OrganizationMember.OrgRole.ADMIN)
    from artifacts.services import artifact_create

    artifacts = [
        artifact_create(workspace=workspace, stream=io.BytesIO(b"region,amount\nNorth,1\n"), file_name="ours.csv",
                        created_by=owner),
        artifact_create(workspace=other_workspace, stream=io.BytesIO(b"theirs"), file_name="theirs.txt",
                        created_by=outsider),
    ]
    ours = make_agent(
        workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL], action_level="act_with_approval",
        require_approval_for=[WRITE_TOOL], approver_roles=["admin"],
    )
    draft = make_agent(workspace=workspace, owner=owner, name="Draft", status="draft")
    theirs = make_agent(workspace=other_workspace, owner=outsider, name="Theirs")
    execution = execution_services.execution_start(agent=ours, request=execution_services.person_run_request(
        agent=ours, user=owner, prompt="Refund ticket 7"))
    execution_services.execution_run_segment(
        execution_id=execution.pk,
        llm=ScriptedLLM([tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0}, call_id="call_refund")]),
    )
    their_run = execution_services.execution_start(agent=theirs, request=execution_services.person_run_request(
        agent=theirs, user=outsider, prompt="hello"))
    sources = [
        DataSource.objects.create(workspace=workspace, name="Ours", type="sqlite", connection_config={"path": "f.db"}),
        DataSource.objects.create(
            workspace=other_workspace, name="Theirs", type="sqlite", connection_config={"path": "t.db"}
        ),
    ]
    policies = [
        governance_services.policy_create(
            actor=owner, scope="workspace", workspace_id=workspace.pk, name="Cap",
            conditions={"expression": "cost.tokens > 5000"}, enforcement="block",
        ),
        governance_services.policy_create(
            actor=outsider, scope="workspace", workspace_id=other_workspace.pk, name="Their cap",
            conditions={"expression": "cost.tokens > 5000"}, enforcement="block",
        ),
    ]
    from executions.providers import llm_provider_create
    from governance.models import ApprovalRequest

    provider = llm_provider_create(
        organization=org, provider_name="local", base_url="http://127.0.0.1:9/v1", models={"fast": "m"},
        max_retries=0, timeout_seconds=2, enabled=False,
    )

    from triggers.apikeys import api_key_issue
    from triggers.services import trigger_create, trigger_fire
    from triggers.webhooks import webhook_endpoint_create

    endpoints = [webhook_endpoint_create(workspace=workspace, slug="desk", created_by=owner).endpoint,
                 webhook_endpoint_create(workspace=other_workspace, slug="desk", created_by=outsider).endpoint]
    keys = [api_key_issue(created_by=owner, workspace=workspace, name="ours").key,
            api_key_issue(created_by=outsider, workspace=other_workspace, name="theirs").key]
    triggers = [
        trigger_create(actor=owner, workspace=workspace, agent=ours, name="Tickets", trigger_type="event",
                       prompt="Triage {{ payload.id }}", config={"endpoint": "desk", "event_type": "ticket.created"}),
        trigger_create(actor=outsider, workspace=other_workspace, agent=theirs, name="Theirs", trigger_type="api"),
    ]
    trigger_fire(trigger=triggers[0], payload={"id": 1}, source="webhook:desk", dedupe_key="evt-1")

    from executions.services.sessions import session_create

    sessions = [session_create(workspace=workspace, agent=ours, user=owner),
                session_create(workspace=other_workspace, agent=theirs, user=outsider)]
    approvals = [str(pk) for pk in ApprovalRequest.objects.values_list("pk", flat=True)]
    token = token_issue(user=owner)
    their_token = token_issue(user=outsider)
    ids = {
        "agent_id": [str(ours.pk), str(draft.pk), str(theirs.pk)],
        "version": ["1", "2"],
        "execution_id": [execution.pk, their_run.pk],
        "approval_id": approvals,
        "data_source_id": [source.pk for source in sources],
        "policy_id": [str(policy.pk) for policy in policies],
        "workspace_id": [workspace.pk, other_workspace.pk],
        "token_id": [token.token.pk, their_token.token.pk],
        "provider_id": [provider.pk],
        "trigger_id": [str(trigger.pk) for trigger in triggers],
        "endpoint_id": [str(endpoint.pk) for endpoint in endpoints],
        "api_key_id": [key.pk for key in keys],
        "session_id": [session.pk for session in sessions],
        "artifact_id": [artifact.pk for artifact in artifacts],
    }
    from toolservers.models import McpTool, ToolServer  # issue 31: MCP tool servers, ours and theirs

    tool_servers = [ToolServer.objects.create(workspace=ws, name="notes", transport="http", url="http://127.0.0.1:9/mcp")
                    for ws in (workspace, other_workspace)]
    for server in tool_servers:
        McpTool.objects.create(server=server, name="echo", digest="0" * 64)
    ids["server_id"] = [server.pk for server in tool_servers]
    ids["tool_name"] = ["echo"]
    return {"token": token.plaintext, "ids": ids}


def _load_schema():
    """River's OpenAPI document as served at /api/schema/ (no database needed for it)."""
    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())


SCHEMA = _load_schema()
OPERATIONS = {operation.label: operation for operation in (result.ok() for result in SCHEMA.get_all_operations())}


def test_the_fuzzer_sees_every_operation_of_the_schema():
    assert len(OPERATIONS) >= 45
    assert "POST /api/v1/agents/" in OPERATIONS and "POST /api/v1/approvals/{approval_id}/resolve" in OPERATIONS


# ---------------------------------------------------------------- odd Unicode

ODD_TEXT = [
    "²", "³¹", "٣", "١٢", "１２", "\u0663\u0660", "𝟙𝟚", "Ⅻ", "½",  # digits of other classes
    "\u200f12", "12\u200e", "\u202eabc", "\u2066x\u2069",  # bidirectional marks
    "a\u0000", "\u0000", "\u00001", "1\u0000",  # NUL-adjacent
    "🙂", "👩‍👩‍👧", "🏳️‍🌈", "e\u0301", "\u0301", "a" + "\u0300" * 50,  # emoji and combining marks
    "\ufeff1", "\u00a01", "1\u2028", "\uffff", "\U0010ffff",  # invisible and edge code points
]
SURROGATES = ["\ud800", "\udfff", "a\udc00b", "\udbff\udbff", "1\ud83d"]
odd_text = st.sampled_from(ODD_TEXT) | st.text(
    alphabet=st.sampled_from("²٣１\u200f\u0301🙂\u0000Ⅻ"), min_size=1, max_size=6)
odd_json_text = odd_text | st.sampled_from(SURROGATES)


def _replace_strings(value, replacement: str, salt: int):
    """``value`` with its string leaves (and, for every other dict, one key) replaced."""
    if isinstance(value, str):
        return replacement
    if isinstance(value, list):
        return [_replace_strings(item, replacement, salt) for item in value]
    if isinstance(value, dict):
        replaced = {key: _replace_strings(item, replacement, salt) for key, item in value.items()}
        if salt % 2:
            replaced[replacement] = replacement
        return replaced
    return replacement if salt % 3 == 0 else value


def odd_unicode_cases(operation):
    """A valid case with odd Unicode to put in it (drawn apart: schemathesis revalidates
    a case it generated when its body changes, and cannot encode a lone surrogate)."""
    return st.tuples(operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                     odd_json_text, odd_text, st.integers(min_value=0, max_value=5))


def _send_with_odd_unicode(case, json_text: str, query_text: str, salt: int, token: str):
    """Send ``case`` with its strings replaced, straight through Django's test client
    (JSON bodies as ``json.dumps`` writes them: a surrogate as a ``\\ud800`` escape)."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    query = {name: query_text for name in case.query or {}}
    path = case.formatted_path + ("?" + urlencode(query) if query else "")
    method = getattr(client, case.method.lower())
    try:
        if case.media_type == "application/json" and isinstance(case.body, (dict, list, str)):
            body = json.dumps(_replace_strings(case.body, json_text, salt))
            return method(path, data=body, content_type="application/json")
        return method(path)
    finally:
        # Django's test client connects close_old_connections again after each request;
        # the schemathesis requests that follow must keep the test's connection.
        request_started.disconnect(close_old_connections)
def _point_at_seeded_objects(case, ids: dict) -> None:
    """Most generated ids exist nowhere; send two of three to a real object (ours or
    another organization's), chosen from the generated value so a replay is the same."""
    if case.meta is not None and case.meta.is_negative_at(ParameterLocation.PATH):
        return
    for name, value in list((case.path_parameters or {}).items()):
        candidates = ids.get(name) or []
        bucket = zlib.crc32(repr(value).encode())
        if candidates and bucket % 3:
            case.path_parameters[name] = candidates[bucket % len(candidates)]


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_operation_answers_as_documented_and_never_5xx(label, seeded, loopback_only):
    operation = OPERATIONS[label]
    strategy = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    odd = odd_unicode_cases(operation)
    headers = {"Authorization": f"Bearer {seeded['token']}"}

    @given(case=strategy | odd)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=not RANDOM,
        phases=[Phase.explicit, Phase.generate, Phase.shrink] if RANDOM else [Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case):
        if isinstance(case, tuple):
            case, json_text, query_text, salt = case
            _point_at_seeded_objects(case, seeded["ids"])
            STATS[label] += 1
            response = _send_with_odd_unicode(case, json_text, query_text, salt, seeded["token"])
            STATUSES[f"{response.status_code // 100}xx"] += 1
            upstream = UPSTREAM_CODES.get(response.status_code)
            documented = upstream and str(response.status_code) in operation.definition.raw.get("responses", {})
            assert response.status_code < 500 or (documented and response.json()["error"]["code"] == upstream), (
                case.formatted_path, json_text, response.content[:300])
            return
        _point_at_seeded_objects(case, seeded["ids"])
        STATS[label] += 1
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        STATUSES[f"{response.status_code // 100}xx"] += 1

    run()
    assert STATS[label] > 0


def test_the_guard_refuses_other_hosts_before_any_packet(loopback_only):
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(ConnectionRefusedError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.connect(("10.0.0.1", 5432))
    assert loopback_only == ["example.com", "('10.0.0.1', 5432)"]
    assert socket.getaddrinfo("127.0.0.1", 5432)
