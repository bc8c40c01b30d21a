"""No input reaches a 500: lone surrogates, digits of other Unicode classes, empty id filters.

A lone surrogate (``"\\ud800"`` in JSON) anywhere in a JSON body is a 400
``invalid_unicode`` naming where it was; an id is ASCII digits only (``²``, ``٣`` and
``１２`` are refused, not read as 2, 3 and 12); an empty id filter is a 400 naming it.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from common.renderers import JSONRenderer
from governance.models import Notification
from tests.factories import make_agent
from tests.module_data import rows_for_the_module
from tests.riverapp.test_schema_fuzz import seed_world, seeded_settings

pytestmark = pytest.mark.django_db

SURROGATE = '"\\ud800"'  # JSON text: decodes to the lone surrogate U+D800
ODD_IDS = ["²", "٣", "１２", "١", " 1", "1 ", "+1", "1_0", "0", "-1", "1.0", "9" * 19, str(2**63), "\u200f1", "1\u0301"]


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker, tmp_path_factory):
    """The schema fuzz test's world, built once for this module (its tests only send
    requests that are refused; tests/module_data.py): an organization and users of its
    own, so the tests that also build the usual fixtures do not collide with it."""
    from django.contrib.auth import get_user_model
    from django.test.utils import override_settings

    from tenancy.models import Membership, Organization, Workspace
    from tenancy.permissions import Role

    tmp = tmp_path_factory.mktemp("unicode-world")
    with rows_for_the_module(django_db_blocker), override_settings(**seeded_settings(tmp)):
        users = get_user_model().objects
        org = Organization.objects.create(name="Unicode org", slug="unicode-org")
        workspace = Workspace.objects.create(organization=org, name="Unicode", slug="unicode")
        other_org = Organization.objects.create(name="Unicode other", slug="unicode-other")
        other_workspace = Workspace.objects.create(organization=other_org, name="Other", slug="unicode-other")
        owner = users.create_user(username="unicode-owner", password="pw-unicode-owner")
        outsider = users.create_user(username="unicode-outsider", password="pw-unicode-outsider")
        Membership.objects.create(workspace=workspace, user=owner, role=Role.ADMIN)
        Membership.objects.create(workspace=other_workspace, user=outsider, role=Role.ADMIN)
        yield seed_world(org=org, workspace=workspace, owner=owner, other_workspace=other_workspace,
                         outsider=outsider)


def _error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.json()["error"]


# ---------------------------------------------------------------- every JSON operation, every string field


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _string_fields() -> list[tuple[str, str, str]]:
    """(method, path, field) for each top-level string property of every JSON request body."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = (operation.get("requestBody") or {}).get("content", {})
            if "application/json" not in content:
                continue
            body = _resolve(schema, content["application/json"]["schema"])
            fields = [name for name, prop in body.get("properties", {}).items()
                      if _resolve(schema, prop).get("type") == "string" and not prop.get("readOnly")]
            found.extend((method, path, name) for name in fields or ["any"])
    return found


# Both authenticate the sender before reading the body; each has its own test below.
SEPARATELY_TESTED = {"/api/v1/hooks/{endpoint_id}", "/api/v1/triggers/{trigger_id}/invoke"}
ALL_STRING_FIELDS = _string_fields()
STRING_FIELDS = [(m, p, f) for m, p, f in ALL_STRING_FIELDS if p not in SEPARATELY_TESTED]


def test_the_sweep_covers_the_api():
    paths = {path for _, path, _ in ALL_STRING_FIELDS}
    assert len(STRING_FIELDS) >= 40
    assert {"/api/v1/agents/{agent_id}/run", "/api/v1/metrics/", "/api/v1/execute",
            "/api/v1/executions/{execution_id}/replay", "/api/v1/triggers/{trigger_id}/invoke"} <= paths


def _path_for(path: str, ids: dict) -> str:
    for name, values in ids.items():
        path = path.replace("{" + name + "}", str(values[0]))
    return path


@pytest.mark.parametrize(("method", "path", "field"), STRING_FIELDS, ids=[f"{m} {p} {f}" for m, p, f in STRING_FIELDS])
def test_a_lone_surrogate_in_any_string_field_is_a_400_naming_it(seeded, method, path, field):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {seeded['token']}")
    body = "{" + json.dumps(field) + ": " + SURROGATE + "}"
    response = getattr(client, method)(_path_for(path, seeded["ids"]), data=body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    error = _error(response)
    assert error["code"] == "invalid_unicode"
    assert list(error["details"]) == [field]


@pytest.mark.parametrize(("method", "path"), sorted({(m, p) for m, p, _ in STRING_FIELDS}))
def test_a_lone_surrogate_in_a_key_is_a_400_with_the_key_escaped(seeded, method, path):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {seeded['token']}")
    body = '{"outer": {"k\\udc00y": 1}}'
    response = getattr(client, method)(_path_for(path, seeded["ids"]), data=body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    error = _error(response)
    assert error["code"] == "invalid_unicode"
    assert list(error["details"]) == ["outer.k\\udc00y"]


# ---------------------------------------------------------------- the issue's four examples, and webhooks


@pytest.fixture
def client(owner, api_client_for):
    return api_client_for(owner)


def test_run_payload_with_a_lone_surrogate_is_a_400_and_starts_no_run(client, workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner)
    body = '{"input_prompt": "hi", "payload": {"ticket": {"subject": ["ok", "\\ud83d"]}}}'
    response = client.post(f"/api/v1/agents/{agent.pk}/run", data=body, content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["details"] == {"payload.ticket.subject.1": [
        "A lone surrogate (\\ud800-\\udfff) is not a character."]}
    assert not agent.executions.exists()


def test_metric_label_with_a_lone_surrogate_is_a_400(client, workspace):
    body = '{"workspace": WS, "samples": [{"name": "cpu", "value": 1, "labels": {"host": "\\udfff"}}]}'
    body = body.replace("WS", str(workspace.pk))
    response = client.post("/api/v1/metrics/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert list(_error(response)["details"]) == ["samples.0.labels.host"]


def test_replay_policy_name_with_a_lone_surrogate_is_a_400(client, seeded):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {seeded['token']}")
    execution_id = seeded["ids"]["execution_id"][0]
    body = '{"policies": [{"name": "\\ud800", "conditions": {"expression": "true"}, "enforcement": "block"}]}'
    response = client.post(f"/api/v1/executions/{execution_id}/replay", data=body, content_type="application/json")
    assert response.status_code == 400
    assert list(_error(response)["details"]) == ["policies.0.name"]


def test_trigger_invoke_with_a_lone_surrogate_is_a_400(workspace, owner):
    from triggers.apikeys import api_key_issue
    from triggers.services import trigger_create

    agent = make_agent(workspace=workspace, owner=owner)
    trigger = trigger_create(actor=owner, workspace=workspace, agent=agent, name="Api", trigger_type="api")
    key = api_key_issue(created_by=owner, workspace=workspace, name="k").plaintext
    response = Client().post(f"/api/v1/triggers/{trigger.pk}/invoke", data='{"note": "a\\ud800"}',
                             content_type="application/json", HTTP_X_API_KEY=key)
    assert response.status_code == 400
    assert list(_error(response)["details"]) == ["note"]
    assert not agent.executions.exists()


def test_a_signed_webhook_with_a_lone_surrogate_is_a_400_not_a_silent_202(workspace, owner):
    from standardwebhooks.webhooks import Webhook

    from triggers.services import trigger_create
    from triggers.webhooks import webhook_endpoint_create

    issued = webhook_endpoint_create(workspace=workspace, slug="desk", created_by=owner)
    agent = make_agent(workspace=workspace, owner=owner)
    trigger_create(actor=owner, workspace=workspace, agent=agent, name="Tickets", trigger_type="event",
                   prompt="Triage", config={"endpoint": "desk", "event_type": "ticket.created"})
    body = '{"type": "ticket.created", "timestamp": "2026-01-01T00:00:00Z", "data": {"subject": "\\ud800"}}'
    at = timezone.now()
    response = Client().post(
        f"/api/v1/hooks/{issued.endpoint.pk}", data=body, content_type="application/json",
        HTTP_WEBHOOK_ID="msg_1", HTTP_WEBHOOK_TIMESTAMP=str(int(at.timestamp())),
        HTTP_WEBHOOK_SIGNATURE=Webhook(issued.secret).sign("msg_1", at, body))
    assert response.status_code == 400, response.content
    assert _error(response)["code"] == "invalid_unicode"
    assert list(_error(response)["details"]) == ["data.subject"]
    assert not agent.executions.exists()


def test_a_surrogate_escaped_as_a_valid_pair_is_text_and_accepted(client, workspace, settings, tmp_path):
    settings.RIVER_SQLITE_DATA_DIR = tmp_path
    body = json.dumps({"workspace": workspace.pk, "type": "sqlite", "name": "pair \ud83d\ude00",
                       "connection_config": {"path": "x.sqlite3"}, "create_file": True})
    assert "\\ud83d\\ude00" in body  # json.dumps escapes the pair; it decodes to one emoji
    response = client.post("/api/v1/data-sources/", data=body, content_type="application/json")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["name"] == "pair 😀"


def test_a_stored_surrogate_renders_escaped_instead_of_failing():
    rendered = JSONRenderer().render({"name": "bad \ud800 text", "ok": "é"})
    assert json.loads(rendered) == {"name": "bad \ud800 text", "ok": "é"}
    assert b"\\ud800" in rendered


def test_text_renders_as_utf8_when_it_can():
    assert JSONRenderer().render({"ok": "é"}) == '{"ok":"é"}'.encode()


# ---------------------------------------------------------------- ids of the wrong Unicode class


@pytest.mark.parametrize("raw", ["²", "٣", "１２", "", " 1", "1e3", "9" * 30])
def test_notification_read_with_an_odd_id_is_a_400_and_marks_nothing(owner, workspace, raw):
    Notification.objects.create(workspace=workspace, user=owner, kind="run_outcome", title="Run 1 failed")
    client = Client()
    client.force_login(owner)
    response = client.post("/notifications/read", {"id": raw})
    assert response.status_code == 400
    assert Notification.objects.filter(user=owner, read_at__isnull=True).count() == 1


@pytest.mark.parametrize("raw", ["²", "٣", "１２", ""])
def test_workspace_switch_with_an_odd_id_is_a_404(owner, raw):
    client = Client()
    client.force_login(owner)
    assert client.post("/workspace/", {"workspace": raw}).status_code == 404


LIST_ID_FILTERS = [
    ("/api/v1/agents/", "workspace"), ("/api/v1/executions/", "workspace"), ("/api/v1/executions/", "agent"),
    ("/api/v1/sessions/", "workspace"), ("/api/v1/sessions/", "agent"), ("/api/v1/triggers/", "workspace"),
    ("/api/v1/triggers/", "agent"), ("/api/v1/data-sources/", "workspace"), ("/api/v1/artifacts/", "workspace"),
    ("/api/v1/artifacts/", "session"), ("/api/v1/policies/", "workspace_id"), ("/api/v1/memory/", "workspace"),
    ("/api/v1/memory/", "agent"), ("/api/v1/audit/", "execution_id"), ("/api/v1/audit/", "workspace_id"),
    ("/api/v1/audit/", "organization_id"), ("/api/v1/audit/", "policy_id"), ("/api/v1/audit/", "agent_id"),
    ("/api/v1/audit/", "approval_id"), ("/api/v1/audit/verify", "organization_id"),
]


@pytest.mark.parametrize(("path", "name"), LIST_ID_FILTERS)
def test_an_empty_id_filter_is_a_400_naming_it(client, path, name):
    response = client.get(f"{path}?{name}=")
    assert response.status_code == 400, response.content[:300]
    assert list(_error(response)["details"]) == [name]


@pytest.mark.parametrize("raw", ODD_IDS)
@pytest.mark.parametrize(("path", "name"), [(p, n) for p, n in LIST_ID_FILTERS if n not in {
    "agent", "policy_id", "agent_id", "approval_id"}])
def test_an_integer_id_filter_of_the_wrong_class_is_a_400_naming_it(client, path, name, raw):
    response = client.get(path, {name: raw})
    assert response.status_code == 400, response.content[:300]
    assert list(_error(response)["details"]) == [name]


@pytest.mark.parametrize("raw", ["٣" * 32, "１" * 32, "not-a-uuid", "0" * 31 + "²"])
@pytest.mark.parametrize(("path", "name"), [("/api/v1/executions/", "agent"), ("/api/v1/audit/", "policy_id")])
def test_a_uuid_filter_of_the_wrong_class_is_a_400_naming_it(client, path, name, raw):
    response = client.get(path, {name: raw})
    assert response.status_code == 400
    assert list(_error(response)["details"]) == [name]


@pytest.mark.parametrize("path", ["/api/v1/executions/{execution_id}/events/", "/api/v1/sessions/{session_id}/events"])
@pytest.mark.parametrize("raw", ["²", "٣", "１２", "", "-1"])
def test_an_after_cursor_of_the_wrong_class_is_a_400(seeded, path, raw):  # noqa: F811
    client = Client(HTTP_AUTHORIZATION=f"Bearer {seeded['token']}")
    response = client.get(_path_for(path, seeded["ids"]), {"after": raw})
    assert response.status_code == 400
    assert list(_error(response)["details"]) == ["after"]


def test_an_ascii_id_filter_still_filters(client, workspace, owner, other_workspace):
    make_agent(workspace=workspace, owner=owner, name="Ours")
    response = client.get("/api/v1/agents/", {"workspace": str(workspace.pk)})
    assert response.status_code == 200
    assert [row["name"] for row in response.json()["results"]] == ["Ours"]


@pytest.mark.parametrize("query", ["page=٣", "page=1\u2028", "page=²", "page_size=１２", "page_size=٣"])
def test_page_numbers_of_the_wrong_class_are_a_400(client, query):
    response = client.get("/api/v1/agents/?" + query)
    assert response.status_code == 400
    assert list(_error(response)["details"]) == [query.split("=")[0]]
