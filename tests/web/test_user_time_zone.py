"""Each person's time zone: a setting (validated against the zones the server knows),
else the browser's (a cookie, ignored when it is not a known zone), else the server's;
activated per request from the session (no query per page); every page writes times in
River's one format, in that zone, across daylight-saving changes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection
from django.template import Context, Template
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import AgentVersion
from tenancy.models import PersonSettings
from tenancy.time_zones import COOKIE, SESSION_KEY, person_time_zone_set
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def _client(user, cookie: str | None = None) -> Client:
    client = Client()
    if cookie is not None:
        client.cookies[COOKIE] = cookie
    client.force_login(user)
    return client


@pytest.fixture
def agent(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, name="Clock agent")
    AgentVersion.objects.filter(agent=agent).update(created_at=datetime(2026, 1, 15, 12, 0, tzinfo=UTC))
    return agent


def _version_time(client, agent) -> str:
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    return re.search(r'<time datetime="2026-01-15T[^"]*"[^>]*>[^<]*</time>', page).group(0)


def test_the_setting_is_saved_and_every_page_follows_it(owner, agent):
    client = _client(owner)
    assert client.get("/settings/time-zone").status_code == 200
    response = client.post("/settings/time-zone", {"time_zone": "Asia/Kolkata"})
    assert response.status_code == 302
    assert PersonSettings.objects.get(user=owner).time_zone == "Asia/Kolkata"
    assert _version_time(client, agent) == (
        '<time datetime="2026-01-15T17:30:00+05:30" title="Asia/Kolkata">15 Jan 2026, 17:30</time>')
    assert 'data-time-zone="Asia/Kolkata"' in client.get("/agents/").content.decode()
    # Signing in again (a new session) brings the setting back.
    assert _version_time(_client(owner), agent).endswith(">15 Jan 2026, 17:30</time>")


def test_the_browser_zone_is_the_default_and_the_setting_wins(owner, agent):
    client = _client(owner, cookie="America/New_York")
    assert _version_time(client, agent).endswith('title="America/New_York">15 Jan 2026, 07:00</time>')
    assert "Follow my browser (America/New_York)" in client.get("/settings/time-zone").content.decode()
    client.post("/settings/time-zone", {"time_zone": "Europe/Paris"})
    assert _version_time(client, agent).endswith(">15 Jan 2026, 13:00</time>")
    client.post("/settings/time-zone", {"time_zone": ""})  # back to the browser's
    assert PersonSettings.objects.get(user=owner).time_zone == ""
    assert _version_time(client, agent).endswith(">15 Jan 2026, 07:00</time>")


@pytest.mark.parametrize("value", ["Mars/Olympus_Mons", "../../etc/passwd", "Europe/Paris\x00", "x" * 5000,
                                   " UTC", "CEST", "localtime", "Factory", "Europe/paris", "<script>"])
def test_a_hostile_setting_is_a_form_error_and_stores_nothing(owner, value):
    response = _client(owner).post("/settings/time-zone", {"time_zone": value})
    assert response.status_code == 400 and 'id="id_time_zone_error"' in response.content.decode()
    assert not PersonSettings.objects.exists()
    with pytest.raises(ValueError):
        person_time_zone_set(user=owner, time_zone=value)


@pytest.mark.parametrize("cookie", ["Mars/Olympus_Mons", "../../etc/passwd", "Etc/GMT+99", "%2F", "localtime",
                                    "x" * 5000, ""])
def test_a_hostile_browser_zone_is_ignored(owner, agent, cookie, settings):
    settings.TIME_ZONE = "UTC"
    client = _client(owner, cookie=cookie)
    assert _version_time(client, agent).endswith('title="UTC">15 Jan 2026, 12:00</time>')
    assert "data-time-zone" not in client.get("/agents/").content.decode()


def test_daylight_saving_changes_are_followed(owner):
    """Europe/Paris falls back on 25 Oct 2026 at 03:00 CEST: 00:30 and 01:30 UTC are
    both 02:30 on the wall clock, an hour apart; each keeps its own offset."""
    template = Template("{% load catalog %}{% when first %}|{% when second %}|{% when summer %}|{% when winter %}")
    with timezone.override("Europe/Paris"):
        text = template.render(Context({
            "first": datetime(2026, 10, 25, 0, 30, tzinfo=UTC), "second": datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
            "summer": datetime(2026, 7, 1, 12, 0, tzinfo=UTC), "winter": datetime(2026, 12, 1, 12, 0, tzinfo=UTC)}))
    first, second, summer, winter = text.split("|")
    assert 'datetime="2026-10-25T02:30:00+02:00"' in first and ">25 Oct 2026, 02:30<" in first
    assert 'datetime="2026-10-25T02:30:00+01:00"' in second and ">25 Oct 2026, 02:30<" in second
    assert ">1 Jul 2026, 14:00<" in summer and ">1 Dec 2026, 13:00<" in winter


def test_the_zone_is_read_from_the_session_not_queried_per_page(owner, agent):
    person_time_zone_set(user=owner, time_zone="Asia/Tokyo")
    client = _client(owner)
    assert client.session[SESSION_KEY] == "Asia/Tokyo"
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/agents/").status_code == 200
    assert not [q for q in queries.captured_queries if "tenancy_personsettings" in q["sql"]]


def test_a_session_from_before_the_setting_is_filled_in_once(owner, agent):
    person_time_zone_set(user=owner, time_zone="Asia/Tokyo")
    client = _client(owner)
    session = client.session
    del session[SESSION_KEY]
    session.save()
    assert _version_time(client, agent).endswith(">15 Jan 2026, 21:00</time>")
    assert client.session[SESSION_KEY] == "Asia/Tokyo"


def test_the_settings_page_needs_sign_in():
    response = Client().post("/settings/time-zone", {"time_zone": "UTC"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not PersonSettings.objects.exists()


def test_templates_write_times_only_through_the_one_format():
    """Display formats come from ``{% when %}``/``when_text`` (web/templatetags/catalog.py);
    ``|date`` is left only for machine formats (ISO 8601 and days in URLs)."""
    offenders = []
    for path in TEMPLATES.rglob("*.html"):
        if "admin" in path.parts or "drf_spectacular" in path.parts:
            continue
        for fmt in re.findall(r"\|date:\s*['\"]([^'\"]*)['\"]", path.read_text()):
            if fmt not in ("c", "Y-m-d"):
                offenders.append(f"{path.relative_to(TEMPLATES)}: {fmt}")
    assert offenders == []
