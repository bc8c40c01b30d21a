"""River's own 400, 403, 404 and 500 pages: styled by river.css, nothing the CSP blocks,
the right status, in every mode (DEBUG on as well, unless a developer asks for Django's
technical pages); under /api/ the errors stay JSON."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from tests.riverapp.test_security_headers import _inline_problems

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.riverapp.error_urls")]

TITLES = {
    400: "River could not read this request",
    403: "You may not do this",
    404: "Page not found",
    500: "Something went wrong on our side",
}
PAGES = [("/fail/400", 400), ("/fail/400-suspicious", 400), ("/fail/403", 403), ("/no/such/page", 404),
         ("/fail/500", 500)]


def _client(user=None) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def _assert_river_page(response, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert f"<h1 id=\"error-title\">{TITLES[status]}</h1>" in html
    assert f"Error {status}" in html
    assert "/static/river.css" in html
    assert _inline_problems(html) == []
    assert "URLconf" not in html and "Traceback" not in html and "technical" not in html.lower()
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    return html


@pytest.mark.parametrize(("path", "status"), PAGES)
@pytest.mark.parametrize("debug", [True, False])
def test_each_error_is_rivers_page_with_debug_on_or_off(path, status, debug):
    with override_settings(DEBUG=debug):
        _assert_river_page(_client().get(path), status)


@pytest.mark.parametrize(("path", "status"), [("/no/such/page", 404), ("/runs/999999999/", 404), ("/fail/403", 403)])
@pytest.mark.parametrize("debug", [True, False])
def test_a_signed_in_user_keeps_the_frame_on_a_404_and_a_403(owner, path, status, debug):
    """/runs/999999999/ is a 404 the view raises (no such run), not a path no pattern matches."""
    with override_settings(DEBUG=debug):
        html = _assert_river_page(_client(owner).get(path), status)
    assert 'aria-label="Main"' in html and "Sign out" in html


@override_settings(DEBUG=True, RIVER_DEBUG_TECHNICAL_ERRORS=True)
def test_a_developer_who_asks_gets_djangos_technical_pages():
    missing = _client().get("/no/such/page")
    assert missing.status_code == 404 and "URLconf" in missing.content.decode()
    broken = _client().get("/fail/500", headers={"Accept": "text/html"})
    assert broken.status_code == 500 and "The test broke this view." in broken.content.decode()


@override_settings(DEBUG=False, RIVER_DEBUG_TECHNICAL_ERRORS=True)
def test_the_technical_pages_never_show_with_debug_off():
    _assert_river_page(_client().get("/no/such/page"), 404)
    _assert_river_page(_client().get("/fail/500"), 500)


@override_settings(DEBUG=True)
def test_the_server_error_is_still_logged_and_raised_to_the_test_client(caplog):
    with pytest.raises(RuntimeError, match="broke this view"):
        Client().get("/fail/500")
    assert any(record.levelname == "ERROR" and "/fail/500" in record.getMessage() for record in caplog.records)


@override_settings(DEBUG=True)
def test_a_missing_slash_still_redirects():
    response = _client().get("/runs")
    assert response.status_code == 301 and response["Location"] == "/runs/"


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/api/v1/fail/400", 400, "bad_request"), ("/api/v1/fail/403", 403, "permission_denied"),
    ("/api/v1/no/such/endpoint", 404, "not_found"), ("/api/v1/fail/500", 500, "server_error"),
])
@pytest.mark.parametrize("debug", [True, False])
def test_api_paths_keep_their_json_errors(path, status, code, debug):
    with override_settings(DEBUG=debug):
        response = _client().get(path)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
