"""Times follow the reader: a browser in Asia/Kolkata sees the pages in its zone (its
time zone reaches River as a cookie on the first page, and the server writes times in it
from the next one, in River's one format); a zone chosen in the settings wins over the
browser's. The settings page passes axe in light and dark, at 1280 and 390 pixels."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from agents.models import AgentVersion
from tenancy.models import PersonSettings
from tests.browser.conftest import WAIT_MS, axe_violations, screenshot

PHONE = {"width": 390, "height": 844}
CREATED = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def kolkata(chromium_browser, river_stack, demo, page_errors):
    """A page of a browser whose clock is in Asia/Kolkata, signed in as the demo admin."""
    context = chromium_browser.new_context(base_url=river_stack.url, timezone_id="Asia/Kolkata",
                                           viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    client = Client()
    client.force_login(demo["admin"])
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                          "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": river_stack.url}])
    page = context.new_page()
    page.on("pageerror", lambda error: page_errors.append(f"pageerror: {error}"))
    yield page
    context.close()
    assert page_errors == []


def _version_time(page, agent):
    page.goto(f"/agents/{agent.pk}/")
    return page.locator(f'time[datetime^="{CREATED.date().isoformat()}"]').first


def test_pages_show_times_in_the_browsers_zone(kolkata, demo):
    agent = demo["agents"]["Support Analyst"]
    AgentVersion.objects.filter(agent=agent).update(created_at=CREATED)
    kolkata.goto("/")  # the first page tells River the zone
    # Chromium's ICU may name Kolkata by its older alias, Asia/Calcutta: both are IANA names.
    zone = kolkata.evaluate("() => Intl.DateTimeFormat().resolvedOptions().timeZone")
    assert zone in ("Asia/Kolkata", "Asia/Calcutta")
    cookie = [c for c in kolkata.context.cookies() if c["name"] == "river_tz"]
    assert cookie and cookie[0]["value"] == zone
    time = _version_time(kolkata, agent)
    expect(time).to_have_text("15 Jan 2026, 17:30")
    expect(time).to_have_attribute("title", zone)
    expect(kolkata.locator("body")).to_have_attribute("data-time-zone", zone)

    # A zone chosen in the settings wins over the browser's.
    kolkata.goto("/settings/time-zone")
    expect(kolkata.get_by_label("Time zone")).to_have_value("")
    expect(kolkata.get_by_label("Time zone").locator("option").first).to_have_text(f"Follow my browser ({zone})")
    kolkata.get_by_label("Time zone").select_option("America/New_York")
    kolkata.get_by_role("button", name="Save").click()
    expect(kolkata.get_by_text("Times are now shown in America/New_York.")).to_be_visible()
    assert PersonSettings.objects.get(user=demo["admin"]).time_zone == "America/New_York"
    expect(_version_time(kolkata, agent)).to_have_text("15 Jan 2026, 07:00")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_settings_page_passes_axe(kolkata, scheme):
    kolkata.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    for width, viewport in (("1280", {"width": 1280, "height": 800}), ("390", PHONE)):
        kolkata.set_viewport_size(viewport)
        kolkata.goto("/settings/time-zone")
        expect(kolkata.get_by_role("heading", name="Time zone")).to_be_visible()
        assert axe_violations(kolkata) == [], (scheme, width)
        screenshot(kolkata, f"time-zone-{scheme}-{width}")
