"""The API keys page in the browser: revoke an API key and see it refused (created on
the page, used against /api/v1/ from outside the browser, revoked after the confirm
step, then refused with 401), the same for a personal access token, and the page, the
new secret and the confirm step pass axe in light and dark at 1280 and 390 pixels."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import axe_violations, screenshot
from triggers.services import trigger_create

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}


def _status(url: str, *, method: str = "GET", headers: dict) -> int:
    """The HTTP status of one request from outside the browser (no cookie, no session)."""
    request = urllib.request.Request(url, method=method, headers=headers,
                                     data=b"{}" if method == "POST" else None)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - 127.0.0.1 only
            return answer.status
    except urllib.error.HTTPError as refused:
        json.loads(refused.read() or b"{}")  # River answers errors as JSON
        return refused.code


def capture_both_themes(page, name: str) -> None:
    """No serious axe violation, and a screenshot, in light and dark, at 1280 and 390 pixels."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for label, size in (("1280", LAPTOP), ("390", PHONE)):
            page.set_viewport_size(size)
            assert axe_violations(page) == [], (name, scheme, label)
            screenshot(page, f"{name}-{scheme}-{label}")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(LAPTOP)


@pytest.fixture
def api_trigger_off(demo):
    """An API trigger that is switched off: a live key gets 409 from it, a dead key 401."""
    agent = next(iter(demo["agents"].values()))
    return trigger_create(actor=demo["admin"], workspace=demo["workspace"], agent=agent, name="Orders in",
                          trigger_type="api", enabled=False)


def test_revoke_an_api_key_and_see_it_refused(signed_in, demo, api_trigger_off, river_stack, page_errors):
    page = signed_in(demo["admin"])
    page.goto("/")
    page.get_by_role("link", name="API keys", exact=True).click()
    expect(page.get_by_role("heading", name="API keys and tokens", level=1)).to_be_visible()
    capture_both_themes(page, "api-keys")

    form = page.get_by_role("form", name="Create an API key")
    form.get_by_label("Name").fill("CRM relay")
    form.get_by_label("Calls per minute at most").fill("30")
    form.get_by_role("button", name="Create the API key").click()
    secret = page.locator("#issued-secret")
    expect(secret).to_have_text(re.compile(r"^rtk_[0-9a-f]+_\S+$"))
    plaintext = secret.inner_text().strip()
    expect(page.get_by_role("row", name=re.compile("CRM relay"))).to_contain_text("Active")
    capture_both_themes(page, "api-keys-created")

    invoke = f"{river_stack.url}/api/v1/triggers/{api_trigger_off.pk}/invoke"
    assert _status(invoke, method="POST", headers={"X-API-Key": plaintext}) == 409  # the key works; the trigger is off

    page.goto("/settings/api-keys")
    assert plaintext not in page.content()  # shown once
    page.get_by_role("link", name="Revoke CRM relay", exact=True).click()
    expect(page.get_by_role("heading", name="Revoke the API key CRM relay?")).to_be_visible()
    capture_both_themes(page, "api-key-revoke")
    page.get_by_role("button", name="Revoke CRM relay").click()
    expect(page.get_by_role("status").first).to_contain_text("CRM relay is revoked")
    expect(page.get_by_role("row", name=re.compile("CRM relay"))).to_contain_text("Revoked")
    assert _status(invoke, method="POST", headers={"X-API-Key": plaintext}) == 401


def test_revoke_a_token_and_see_the_api_refuse_it(signed_in, demo, river_stack):
    page = signed_in(demo["admin"])
    page.goto("/settings/api-keys")
    form = page.get_by_role("form", name="Create a token")
    form.get_by_label("Name").fill("Reporting script")
    form.get_by_role("button", name="Create the token").click()
    secret = page.locator("#issued-secret")
    expect(secret).to_have_text(re.compile(r"^rvr_[0-9a-f]+_\S+$"))
    bearer = {"Authorization": f"Bearer {secret.inner_text().strip()}"}
    assert _status(f"{river_stack.url}/api/v1/workspaces/", headers=bearer) == 200
    page.get_by_role("link", name="Revoke Reporting script", exact=True).click()
    page.get_by_role("button", name="Revoke Reporting script").click()
    expect(page.get_by_role("status").first).to_contain_text("Reporting script is revoked")
    assert _status(f"{river_stack.url}/api/v1/workspaces/", headers=bearer) == 401


def test_a_viewer_sees_the_keys_but_may_not_create_or_revoke(signed_in, demo, page_errors):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from triggers.apikeys import api_key_issue

    viewer = get_user_model().objects.create_user(username="viewer", password="pw-viewer-123")
    Membership.objects.create(workspace=demo["workspace"], user=viewer, role="viewer")
    issued = api_key_issue(created_by=demo["admin"], workspace=demo["workspace"], name="CRM relay")
    page = signed_in(viewer)
    page.goto("/settings/api-keys")
    expect(page.get_by_role("row", name=re.compile("CRM relay"))).to_be_visible()
    expect(page.get_by_role("form", name="Create an API key")).to_have_count(0)
    expect(page.get_by_role("link", name="Revoke CRM relay", exact=True)).to_have_count(0)
    page_errors.clear()
    assert page.goto(f"/settings/api-keys/{issued.key.pk}/revoke").status == 403
    page_errors.clear()
