"""The shared socket client (static/live.js) in Chromium.

First against the real stack: the run page's socket is dropped from the server's side
(Playwright stands between the page and Daphne and closes the page's end), and the page
comes back on its own, asks for the events after the last one it showed, gets the one
stored while it was away, and then follows live events again.

Then River.live's policy on its own, on a blank page with a stand-in WebSocket and a
stand-in setTimeout that the test drives by hand: no real waiting, no timing luck."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import zoneinfo
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.utils import dateformat, timezone
from playwright.sync_api import expect

from demo.seed import SUPPORT_ANALYST
from executions.models import Execution, ExecutionEvent
from rivercore.events import event_message
from telemetry.events import EVENT_MESSAGE_TYPE, execution_group

LIVE_JS = Path(__file__).resolve().parents[2] / "static" / "live.js"

FIRST_EVENTS = [
    ("run_started", {"trigger_type": "manual", "started_at": "2026-01-01T10:00:00+00:00"}),
    ("turn_reasoning", {"turn": 1, "thought_summary": "First I classify the request.", "step_number": 1}),
    ("tool_called", {"turn": 1, "tool_name": "classify_intent", "args_summary": "{}", "call_id": "c1",
                     "step_number": 2}),
]


def _publish_live(stack_redis_url: str, run_id: int, seq: int, event_type: str, payload: dict) -> None:
    """Send one event to the run's group on the server's channel layer, as the journal does
    (in a thread of its own: Playwright's sync API keeps an event loop in this one)."""
    from channels_redis.core import RedisChannelLayer

    message = event_message(event_type=event_type, seq=seq, execution_id=run_id, created_at=timezone.now(),
                            payload=payload)

    async def send() -> None:
        layer = RedisChannelLayer(hosts=[stack_redis_url], prefix=os.environ.get("RIVER_CHANNEL_PREFIX", "river"))
        await layer.group_send(execution_group(run_id), {"type": EVENT_MESSAGE_TYPE, "events": [message]})
        await layer.close_pools()

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, send()).result(timeout=30)


def test_the_run_page_resumes_after_the_server_drops_its_socket(signed_in, demo, river_stack):
    from executions.services import execution_start, person_run_request

    run = execution_start(agent=demo["agents"][SUPPORT_ANALYST], request=person_run_request(
        agent=demo["agents"][SUPPORT_ANALYST], user=demo["admin"], prompt="How many open tickets are there?"))
    Execution.objects.filter(pk=run.pk).update(status=Execution.Status.RUNNING)
    ExecutionEvent.objects.bulk_create([
        ExecutionEvent(execution_id=run.pk, seq=seq, event_type=kind, payload={"execution_id": run.pk, **payload})
        for seq, (kind, payload) in enumerate(FIRST_EVENTS, start=1)])

    page = signed_in(demo["admin"])
    routes = []

    def between_page_and_server(route):
        routes.append(route)
        route.connect_to_server()  # everything passes through unchanged

    page.route_web_socket(re.compile(r"/ws/executions/\d+/"), between_page_and_server)
    page.goto(f"/runs/{run.pk}/")
    feed = page.locator("#run-feed > li")
    expect(feed).to_have_count(3)
    expect(page.locator("#run-connection")).to_have_text("Live")
    assert len(routes) == 1 and routes[0].url.endswith("?after=3")

    # The run goes on while the page is cut off: seq 4 is journaled (no live copy reaches
    # the page), then the server side drops the socket.
    ExecutionEvent.objects.create(execution_id=run.pk, seq=4, event_type="observation_received",
                                  payload={"execution_id": run.pk, "turn": 1, "tool_name": "classify_intent",
                                           "result_summary": "DATA_QUERY (0.9)", "duration_ms": 14,
                                           "call_id": "c1", "step_number": 3, "status": "completed"})
    routes[0].close(code=1011, reason="server restarting")

    # The page reconnects by itself, from the last sequence number it showed.
    expect(feed).to_have_count(4)
    expect(page.locator("#run-event-4")).to_contain_text("DATA_QUERY (0.9)")
    expect(page.locator("#run-connection")).to_have_text("Live")
    expect(page.locator("#run-feed[data-live]")).to_have_count(1)
    assert len(routes) == 2, [route.url for route in routes]
    assert routes[1].url.endswith("?after=3")

    # And follows the run live on the new socket.
    _publish_live(river_stack.redis_url, run.pk, 5, "turn_complete", {"turn": 1, "duration_ms": 40})
    expect(feed).to_have_count(5)
    expect(page.locator("#run-event-5")).to_contain_text("Turn 1 took 40 ms.")
    assert page.eval_on_selector_all("#run-feed > li", "items => items.map(i => Number(i.dataset.seq))") == [
        1, 2, 3, 4, 5]


# --- River.live's policy, with a stand-in socket and clock ---------------------------------

HARNESS = """
() => {
  window.timers = [];
  window.setTimeout = (fn, ms) => { timers.push({fn, ms, live: true}); return timers.length; };
  window.clearTimeout = (id) => { if (timers[id - 1]) { timers[id - 1].live = false; } };
  window.pending = () => timers.filter((t) => t.live).map((t) => t.ms);
  window.fire = () => {  // the one pending timer, now
    const live = timers.filter((t) => t.live);
    if (live.length !== 1) { throw new Error(live.length + " timers pending"); }
    live[0].live = false;
    live[0].fn();
  };
  window.sockets = [];
  window.WebSocket = class extends EventTarget {
    constructor(url) { super(); this.url = url; this.readyState = 0; sockets.push(this); }
    open() { this.readyState = 1; this.dispatchEvent(new Event("open")); }
    send_(data) { this.dispatchEvent(new MessageEvent("message", {data: JSON.stringify(data)})); }
    drop(code) { this.readyState = 3; this.dispatchEvent(new CloseEvent("close", {code})); }
    close() {
      this.closedByPage = true;
      this.readyState = 3;
      this.dispatchEvent(new CloseEvent("close", {code: 1005}));
    }
  };
  window.randomValue = 0;
  Math.random = () => window.randomValue;
  window.seen = [];
  window.closes = [];
  window.opens = [];
}
"""


@pytest.fixture
def harness(page):
    page.set_content("<!doctype html><title>live.js</title>")
    page.evaluate(HARNESS)
    page.evaluate(LIVE_JS.read_text())
    return page


def _connect(page, keep_trying: str = "() => true") -> None:
    page.evaluate("""(keepTrying) => {
      window.cursor = 7;
      window.live = River.live.connect({
        path: "/ws/executions/12/", after: () => cursor,
        onOpen: (info) => opens.push(info.reconnected),
        onMessage: (event) => seen.push(event.seq),
        onClose: (info) => closes.push([info.code, info.retrying]),
        keepTrying: new Function("return (" + keepTrying + ")()"),
      });
    }""", keep_trying)


def test_waits_double_with_jitter_up_to_thirty_seconds_and_reset_once_open(harness):
    _connect(harness)
    waits = {}
    for label, value in (("shortest", 0), ("longest", 1)):
        harness.evaluate(f"window.randomValue = {value}")
        waits[label] = []
        for _ in range(8):
            harness.evaluate("sockets[sockets.length - 1].drop(1006)")
            waits[label].append(harness.evaluate("pending()[0]"))
            harness.evaluate("fire()")
    assert waits["shortest"] == [500, 1000, 2000, 4000, 8000, 15000, 15000, 15000]
    assert waits["longest"] == [30000] * 8  # the same attempts go on: capped
    harness.evaluate("sockets[sockets.length - 1].open(); window.randomValue = 0")
    harness.evaluate("sockets[sockets.length - 1].drop(1006)")
    assert harness.evaluate("pending()") == [500]  # an open socket starts the count again
    assert harness.evaluate("opens") == [False]


def test_every_connection_resumes_after_the_last_sequence_number_shown(harness):
    _connect(harness)
    harness.evaluate("sockets[0].open(); sockets[0].send_({seq: 8}); window.cursor = 8; sockets[0].drop(1000)")
    harness.evaluate("fire(); sockets[1].open()")
    urls = harness.evaluate("sockets.map((s) => s.url)")
    assert [url.split("/ws/", 1)[1] for url in urls] == ["executions/12/?after=7", "executions/12/?after=8"]
    assert harness.evaluate("opens") == [False, True]
    assert harness.evaluate("seen") == [8]
    harness.evaluate("""() => { River.live.connect({path: "/ws/workspace/?workspace=3", after: () => 0}); }""")
    assert harness.evaluate("sockets[2].url").endswith("/ws/workspace/?workspace=3&after=0")


@pytest.mark.parametrize("code", [4401, 4403])
def test_a_refusal_is_not_asked_again(harness, code):
    _connect(harness)
    harness.evaluate(f"sockets[0].drop({code})")
    assert harness.evaluate("pending()") == []
    assert harness.evaluate("closes") == [[code, False]]
    assert harness.evaluate("sockets.length") == 1


def test_a_page_that_is_done_stops_retrying(harness):
    _connect(harness, "() => !window.finished")
    harness.evaluate("window.finished = true; sockets[0].open(); sockets[0].drop(1006)")
    assert harness.evaluate("pending()") == []
    assert harness.evaluate("closes") == [[1006, False]]
    harness.evaluate("window.finished = false; window.other = River.live.connect({path: '/ws/frame/'})")
    harness.evaluate("other.close()")
    assert harness.evaluate("sockets[1].closedByPage") is True
    assert harness.evaluate("pending()") == []
    assert harness.evaluate("sockets.length") == 2


def test_reopen_drops_the_old_socket_and_ignores_what_it_still_says(harness):
    _connect(harness)
    harness.evaluate("sockets[0].open(); window.cursor = 9; live.reopen()")
    assert harness.evaluate("sockets[0].closedByPage") is True
    harness.evaluate("sockets[0].send_({seq: 99})")  # late words from the dropped socket
    assert harness.evaluate("seen") == []
    harness.evaluate("fire(); sockets[1].open(); sockets[1].send_({seq: 10})")
    assert harness.evaluate("seen") == [10]
    assert harness.evaluate("sockets[1].url").endswith("?after=9")
    assert harness.evaluate("closes") == [[None, True]]  # reported once, as a reconnect


def test_a_page_shown_again_or_back_online_retries_at_once(harness):
    _connect(harness)
    harness.evaluate("window.randomValue = 1; sockets[0].drop(1006)")
    harness.evaluate("fire(); sockets[1].drop(1006)")
    assert harness.evaluate("pending()") == [2000]
    harness.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    assert harness.evaluate("pending()") == [0]
    harness.evaluate("fire(); sockets[2].drop(1006)")
    assert harness.evaluate("pending()") == [4000]
    harness.evaluate("window.dispatchEvent(new Event('online'))")
    assert harness.evaluate("pending()") == [0]


def test_a_socket_lost_while_the_page_is_left_comes_back_with_the_page(harness):
    _connect(harness)
    harness.evaluate("sockets[0].open(); window.dispatchEvent(new PageTransitionEvent('pagehide', {persisted: true}))")
    harness.evaluate("sockets[0].drop(1001)")
    assert harness.evaluate("pending()") == []  # nobody is looking: no retries
    harness.evaluate("window.dispatchEvent(new PageTransitionEvent('pageshow', {persisted: true}))")
    assert harness.evaluate("pending()") == [0]
    harness.evaluate("fire()")
    assert harness.evaluate("sockets[1].url").endswith("?after=7")


def test_times_have_one_format_the_servers_in_the_pages_time_zone(harness):
    """Each style is a part of River's one format, Django's "j M Y, H:i" (the server's
    |date filters), in the zone the page names (<body data-time-zone>), else the browser's."""
    formats = harness.evaluate("""() => {
      const when = "2026-03-12T14:05:09Z";
      const out = {browser: {}, named: {}};
      River.time.styles.forEach((style) => { out.browser[style] = River.time.format(when, style); });
      out.browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
      document.body.setAttribute("data-time-zone", "Asia/Kolkata");
      River.time.styles.forEach((style) => { out.named[style] = River.time.format(when, style); });
      out.september = River.time.format("2026-09-07T09:05:03Z", "date-minute");
      out.dayOnly = River.time.format("2026-03-12", "day");
      out.bad = River.time.format("not a date", "clock");
      document.body.innerHTML = '<time datetime="2026-03-12T14:05:09Z" data-local>server</time>' +
                                '<time datetime="nonsense" data-local>kept</time>';
      River.time.localize(document, "date-second");
      out.localized = Array.from(document.querySelectorAll("time")).map((t) => t.textContent);
      try { River.time.format(when, "fancy"); } catch (err) { out.unknown = err.message; }
      out.count = River.number.format(12345);
      return out;
    }""")
    kolkata = dt.datetime(2026, 3, 12, 14, 5, 9, tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo("Asia/Kolkata"))
    assert formats["named"] == {
        "date-minute": dateformat.format(kolkata, "j M Y, H:i"),  # what the server's templates write
        "date-second": dateformat.format(kolkata, "j M Y, H:i:s"),
        "clock": "19:35:09",
        "day": "12 Mar",
        "full": "12 Mar 2026, 19:35:09 (Asia/Kolkata)",
    }
    assert formats["named"]["date-minute"] == "12 Mar 2026, 19:35"
    browser = dt.datetime(2026, 3, 12, 14, 5, 9, tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(formats["browserZone"]))
    assert formats["browser"]["date-minute"] == dateformat.format(browser, "j M Y, H:i")
    assert formats["september"] == "7 Sep 2026, 14:35"  # Django's month names, no leading zero
    assert formats["dayOnly"] == "12 Mar"  # the calendar day itself, whatever the reader's offset
    assert formats["bad"] == ""
    assert formats["localized"] == [formats["named"]["date-second"], "kept"]
    assert "fancy" in formats["unknown"]
    assert formats["count"] == "12,345"
