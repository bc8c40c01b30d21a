"""The /api/ edge: JSON 404/405, OPTIONS everywhere, and the body, depth and NUL limits."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver

from agents.models import Agent

pytestmark = pytest.mark.django_db


def _error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.json()["error"]


@pytest.fixture
def client(owner, api_client_for):
    return api_client_for(owner)


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete", "options"])
@pytest.mark.parametrize("path", ["/api/", "/api", "/api/v1/nothing-here/", "/api/v2/agents/", "/api/v1/agents/x/y/z"])
def test_unknown_api_path_is_a_json_404_for_every_method(client, method, path):
    response = getattr(client, method)(path)
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"


def test_unknown_api_path_is_a_json_404_without_credentials_too():
    response = Client().post("/api/v1/nothing-here", data="{}", content_type="application/json")
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"


def test_missing_trailing_slash_names_the_endpoint_it_probably_meant(client):
    response = client.post("/api/v1/agents", {"name": "x"}, format="json")
    assert response.status_code == 404
    assert _error(response)["details"] == {"path": ["Did you mean /api/v1/agents/ ?"]}


def test_unknown_page_outside_the_api_stays_html():
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_wrong_method_is_a_json_405_with_allow(client, workspace):
    response = client.delete("/api/v1/agents/")
    assert response.status_code == 405
    assert _error(response)["code"] == "method_not_allowed"
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "POST", "HEAD", "OPTIONS"}


def test_versions_are_immutable_so_put_is_405(client, owner, workspace):
    agent = Agent.objects.create(workspace=workspace, name="A", business_function="support", owner=owner)
    response = client.put(f"/api/v1/agents/{agent.pk}/versions/1/", {}, format="json")
    assert response.status_code == 405
    assert "PUT" not in response["Allow"]


def _api_routes(patterns=None, prefix=""):
    """Every concrete route under /api/ with each path converter filled in."""
    samples = {"IntConverter": "1", "UUIDConverter": "00000000-0000-0000-0000-000000000000"}
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            yield from _api_routes(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            route = prefix + str(entry.pattern)
            if not route.startswith("api/") or route.startswith("^"):
                continue
            for name, converter in entry.pattern.converters.items():
                route = re.sub(rf"<(\w+:)?{name}>", samples.get(type(converter).__name__, "x"), route)
            yield "/" + route


API_ROUTES = sorted(set(_api_routes()))


def test_every_api_route_is_covered_by_the_options_test():
    assert len(API_ROUTES) > 30
    assert "/api/v1/agents/" in API_ROUTES and "/api/schema/" in API_ROUTES


@pytest.mark.parametrize("path", API_ROUTES)
def test_options_answers_on_every_api_endpoint_even_without_credentials(path):
    response = Client().options(path)
    assert response.status_code == 200, (path, response.content[:300])
    assert "OPTIONS" in response["Allow"]
    if path.startswith("/api/v1/"):  # the schema and docs views answer in their own formats
        assert set(response.json()["allowed_methods"]) == {m.strip() for m in response["Allow"].split(",")}


def test_options_reveals_nothing_about_another_workspaces_objects(client, outsider, other_workspace):
    theirs = Agent.objects.create(workspace=other_workspace, name="T", business_function="support", owner=outsider)
    mine_missing = client.options("/api/v1/agents/11111111-1111-1111-1111-111111111111/")
    theirs_response = client.options(f"/api/v1/agents/{theirs.pk}/")
    assert mine_missing.status_code == theirs_response.status_code == 200
    assert mine_missing.json() == theirs_response.json()


# ---------------------------------------------------------------- body limits


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=4096)
def test_a_body_over_the_limit_is_a_json_413_before_it_is_parsed(client, workspace):
    body = json.dumps(
        {"workspace": workspace.pk, "name": "A", "business_function": "support", "description": "x" * 5000}
    )
    response = client.post("/api/v1/agents/", data=body, content_type="application/json")
    assert response.status_code == 413
    assert _error(response)["code"] == "request_too_large"
    assert not Agent.objects.exists()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=4096)
def test_a_body_over_the_limit_is_refused_without_credentials_too():
    response = Client().post("/api/v1/agents/", data="[" * 5000, content_type="application/json")
    assert response.status_code == 413


def test_json_nested_deeper_than_64_is_a_400_naming_the_problem(client, workspace):
    deep = {"workspace": workspace.pk, "name": "A", "business_function": "support"}
    nested: dict = {}
    cursor = nested
    for _ in range(70):
        cursor["k"] = {}
        cursor = cursor["k"]
    deep["description"] = nested
    response = client.post("/api/v1/agents/", data=json.dumps(deep), content_type="application/json")
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "too_deep"
    assert "64" in error["message"]
    assert list(error["details"])[0].startswith("description.k.k")


def test_json_nested_beyond_the_interpreters_recursion_is_still_a_400(client):
    response = client.post("/api/v1/execute", data="[" * 200_000 + "]" * 200_000, content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["code"] == "too_deep"


def test_json_at_the_depth_limit_is_accepted(client, workspace):
    value: list = []
    for _ in range(62):
        value = [value]
    body = {"workspace": workspace.pk, "name": "A", "business_function": "support", "connection_config": value}
    response = client.post("/api/v1/data-sources/", data=json.dumps(body), content_type="application/json")
    # 62 lists inside the body object: depth 64 is allowed, so a serializer (not the parser) answers.
    assert response.status_code == 400
    assert _error(response)["code"] == "validation_error"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a\u0000b"}, "name"),
        ({"name": "ok", "description": "x\x00"}, "description"),
        ({"connection_config": {"host": "db\u0000.internal"}}, "connection_config.host"),
        ({"connection_config": {"path": ["a", "b\u0000"]}}, "connection_config.path.1"),
    ],
)
def test_a_nul_byte_anywhere_in_the_json_body_is_a_400_naming_the_field(client, workspace, body, field):
    body = {"workspace": workspace.pk, "type": "sqlite", **body}
    response = client.post("/api/v1/data-sources/", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "nul_byte"
    assert list(error["details"]) == [field]


def test_a_nul_byte_in_a_json_key_is_refused(client):
    response = client.post("/api/v1/execute", data='{"a\\u0000b": 1}', content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["code"] == "nul_byte"


@pytest.mark.parametrize("query", ["?status=act%00ive", "?sta%00tus=active", "?search=%00"])
def test_a_nul_byte_in_the_query_string_is_a_400_naming_the_parameter(client, query):
    response = client.get("/api/v1/agents/" + query)
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "nul_byte"
    assert list(error["details"])[0].startswith("sta") or list(error["details"]) == ["search"]


def test_a_nul_byte_in_the_path_is_a_400(client):
    response = client.get("/api/v1/agents/ab%00cd/")
    assert response.status_code == 400
    assert _error(response)["details"] == {"path": ["Contains a NUL byte."]}


def test_a_nul_byte_in_a_page_path_is_a_plain_400():
    response = Client().get("/runs/1%00/")
    assert response.status_code == 400


def test_a_nul_byte_in_a_bearer_token_is_a_400_not_a_database_error():
    response = Client().get("/api/v1/agents/", HTTP_AUTHORIZATION="Bearer rvr_ab\x00cd_secret")
    assert response.status_code == 400
    assert _error(response)["details"] == {"Authorization": ["Contains a NUL byte."]}


def test_a_nul_byte_in_the_session_cookie_is_a_400_on_pages_too():
    browser = Client()
    browser.cookies["sessionid"] = "abcdefgh\x00ijkl"
    assert browser.get("/approvals/").status_code == 400
    assert browser.get("/api/v1/agents/").status_code == 400


def test_a_repeated_query_parameter_is_a_400_naming_it(client):
    response = client.get("/api/v1/data-sources/?search=a&search=b")
    assert response.status_code == 400
    assert _error(response)["details"] == {"search": ["Give this parameter once."]}


def test_an_overlong_query_parameter_is_a_400_naming_it(client):
    response = client.get("/api/v1/data-sources/?search=" + "x" * 1001)
    assert response.status_code == 400
    assert list(_error(response)["details"]) == ["search"]


@pytest.mark.parametrize(
    "text", ["NaN", '{"a": Infinity}', '{"a": 1e400}', '{"a": -1e999}', "{'a': 1}", '{"a": 1', "\ufeff{}", "1" * 5000]
)
def test_non_json_bodies_are_a_400_parse_error(client, text):
    response = client.post("/api/v1/execute", data=text, content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["code"] == "parse_error"


def test_invalid_utf8_is_a_400_parse_error(client):
    response = client.post("/api/v1/execute", data=b'{"a": "\xff\xfe"}', content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["code"] == "parse_error"


def test_form_bodies_are_refused_as_unsupported(client, workspace):
    response = client.post("/api/v1/agents/", data="name=a", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert _error(response)["code"] == "unsupported_media_type"


def test_a_csrf_failure_under_the_api_is_json():
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("csrf-user", password="pw")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    response = browser.post("/api/v1/tokens/", data="{}", content_type="application/json")
    assert response.status_code == 403
    assert _error(response)["code"] == "permission_denied"


@override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"])
def test_with_debug_off_a_bad_host_under_the_api_is_a_json_400_and_a_page_stays_html():
    api = Client(HTTP_HOST="evil.example").get("/api/v1/agents/")
    assert api.status_code == 400
    assert _error(api)["code"] == "bad_request"
    page = Client(HTTP_HOST="evil.example").get("/approvals/")
    assert page.status_code == 400
    assert not page["Content-Type"].startswith("application/json")


def test_a_server_error_under_the_api_is_json_and_says_nothing_internal(rf):
    from common import edge

    response = edge.handler500(rf.get("/api/v1/agents/"))
    assert response.status_code == 500
    assert json.loads(response.content) == {
        "error": {"code": "server_error", "message": "Something went wrong on our side; it has been logged.",
                  "details": {}}
    }
    assert not edge.handler500(rf.get("/approvals/"))["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/health", "/health/ready"])
def test_the_probes_answer_options_and_head_and_refuse_writes_with_allow(path):
    client = Client()
    options = client.options(path)
    assert options.status_code == 200 and options["Allow"] == "GET, HEAD, OPTIONS"
    assert client.head(path).status_code in (200, 503)
    post = client.post(path)
    assert post.status_code == 405 and post["Allow"] == "GET, HEAD, OPTIONS"


@pytest.mark.parametrize(
    "path",
    ["/api%0A", "/api%0D", "/api/%0A", "/api/v1/agents/%0A", "/api/v1/agents/1%0A/", "/api/v1/%0Aagents/",
     "/api/v1/agents/%09", "/api/schema/%0A", "/api/v1/executions/%7F/"],
)
def test_an_api_path_with_a_control_character_is_the_json_404(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert _error(response)["code"] == "not_found"


def test_a_page_path_with_a_newline_stays_an_html_404():
    response = Client().get("/agents%0A")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
