/* What River's page scripts share (loaded by templates/base.html before any of them):

   River.live.connect(options): one server-to-client WebSocket that stays open. Every
   live page (the frame's counts, the runs list, the approvals inbox, a run, a
   conversation) uses it, so they all reconnect the same way:
   - a lost connection is retried after a jittered, exponentially growing wait
     (0.5–1 s, then 1–2 s, 2–4 s ... up to 15–30 s), reset once a socket opens;
   - a page that resumes (a run, a conversation) passes `after`, a function giving
     the last sequence number it has shown: every (re)connection asks for ?after=<n>,
     and the server replays what came since;
   - it is not retried when the page closed it (connection.close()), when the page is
     being left, when `keepTrying()` says no (a finished run), or when the server
     refused with a 44xx close code (4401 not signed in, 4403 not allowed): asking
     again would get the same answer;
   - a page shown again (tab visible, network back, back/forward cache) retries at
     once instead of waiting out its backoff.
   connect() returns {reopen(), close(), isOpen()}; reopen() drops the current socket
   and opens a new one from the current `after` (the run page's answer to a gap).

   River.time.format(date, style) and River.time.localize(root, style): River's one date
   and time format ("27 Nov 2026, 11:19"), in the reader's time zone, for the one place
   each style is used; River.number.format(n) the frame's
   counts; and the browser's time zone goes to the server as the river_tz cookie.
   No page script calls toLocale* itself.

   No dependencies; River's CSP allows no inline script. */
(function () {
  "use strict";

  var River = window.River = window.River || {};

  // --- local time -----------------------------------------------------------------------

  // One format everywhere, the server's as well (Django's "j M Y, H:i"): day, short
  // English month, year, 24-hour clock. Each style is a part of it. The time zone is the
  // one the page names (<body data-time-zone>, the person's setting), else the browser's.
  var STYLES = {
    // "12 Mar 2026, 14:05": a row of the runs list.
    "date-minute": ["day", "month", "year", "hour", "minute"],
    // "12 Mar 2026, 14:05:09": the run page's times.
    "date-second": ["day", "month", "year", "hour", "minute", "second"],
    // "14:05:09": a line of the run's feed.
    "clock": ["hour", "minute", "second"],
    // "12 Mar": a day on the overview's charts (a date without a time).
    "day": ["day", "month"],
    // "12 Mar 2026, 14:05:09 (Europe/Paris)": a tooltip.
    "full": ["day", "month", "year", "hour", "minute", "second", "zone"]
  };
  var PART_OPTIONS = {day: "numeric", month: "numeric", year: "numeric", hour: "2-digit", minute: "2-digit",
                      second: "2-digit"};
  // Django's "M" names, not the browser's ("Sept" in some locales' data).
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  function timeZone() {
    var named = document.body && document.body.getAttribute("data-time-zone");
    if (named) { return named; }
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return undefined; }
  }

  function asDate(value) {
    if (value instanceof Date) { return value; }
    if (/^\d{4}-\d{2}-\d{2}$/.test(String(value))) {
      // A calendar day ("2026-03-12") is that day where the reader is, not UTC midnight.
      var parts = String(value).split("-");
      return new Date(Number(parts[0]), Number(parts[1]) - 1, Number(parts[2]));
    }
    return new Date(value);
  }

  function formatTime(value, style) {
    var when = asDate(value);
    if (isNaN(when.getTime())) { return ""; }
    if (!Object.prototype.hasOwnProperty.call(STYLES, style)) {
      throw new Error("River.time.format: unknown style " + style);
    }
    var wanted = STYLES[style];
    var options = {hourCycle: "h23"};
    // A calendar day is already where the reader is: no time zone conversion.
    var zone = style === "day" ? undefined : timeZone();
    if (zone) { options.timeZone = zone; }
    wanted.forEach(function (part) { if (PART_OPTIONS[part]) { options[part] = PART_OPTIONS[part]; } });
    var got = {};
    var formatter;
    try { formatter = new Intl.DateTimeFormat("en-GB", options); } catch (e) {
      delete options.timeZone;  // a zone this browser does not know: its own
      formatter = new Intl.DateTimeFormat("en-GB", options);
    }
    formatter.formatToParts(when).forEach(function (part) { got[part.type] = part.value; });
    var month = got.month && MONTHS[Number(got.month) - 1];
    var day = got.day && String(Number(got.day));  // "7", as Django's "j"
    var date = [day, month, got.year].filter(Boolean).join(" ");
    var clock = [got.hour, got.minute, got.second].filter(Boolean).join(":");
    var text = [date, clock].filter(Boolean).join(", ");
    var zoneName = formatter.resolvedOptions().timeZone === undefined ? "" : (options.timeZone || "");
    if (wanted.indexOf("zone") >= 0 && zoneName) { text += " (" + zoneName + ")"; }
    return text;
  }

  // Every <time datetime=... data-local> under root (or root itself) shows its moment in
  // River's format and the reader's time zone; one whose datetime does not parse keeps the server's text.
  function localize(root, style) {
    var node = root || document;
    var times = Array.prototype.slice.call(node.querySelectorAll("time[data-local]"));
    if (node.matches && node.matches("time[data-local]")) { times.push(node); }
    times.forEach(function (time) {
      var text = formatTime(time.getAttribute("datetime"), style);
      if (text) { time.textContent = text; }
    });
  }

  River.time = {format: formatTime, localize: localize, styles: Object.keys(STYLES)};

  // The browser's own zone, told to the server as a cookie (tenancy.time_zones checks
  // it against the zones it knows): pages are written in it unless the person chose a
  // zone in their settings. Set again only when it changes (a trip, a new laptop).
  (function rememberBrowserZone() {
    var zone;
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return; }
    if (!zone || !/^[A-Za-z0-9_+\-\/]{1,64}$/.test(zone)) { return; }
    try {  // a document without cookies (a sandboxed frame, about:blank) throws here: nothing to remember
      if (document.cookie.split("; ").indexOf("river_tz=" + zone) >= 0) { return; }
      document.cookie = "river_tz=" + zone + "; path=/; max-age=31536000; SameSite=Lax" +
        (window.location.protocol === "https:" ? "; Secure" : "");
    } catch (e) { return; }
  })();
  River.number = {
    format: function (value) { return Number(value).toLocaleString("en-US"); }
  };

  // --- live sockets -----------------------------------------------------------------------

  var BASE_MS = 1000;
  var CAP_MS = 30000;
  var listeners = [];  // sockets that want to hear "the page is back"
  var leaving = false;

  // The wait before retry number `attempt` (0 first): half of the step for certain, the
  // other half at random, so a server restart is not met by every page at once.
  function backoff(attempt) {
    var step = Math.min(CAP_MS, BASE_MS * Math.pow(2, Math.min(attempt, 16)));
    return Math.round(step / 2 + Math.random() * step / 2);
  }

  function refused(code) {
    return code >= 4400 && code < 4500;
  }

  function socketUrl(path, after) {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + window.location.host + path;
    if (after !== undefined && after !== null) {
      url += (path.indexOf("?") === -1 ? "?" : "&") + "after=" + encodeURIComponent(after);
    }
    return url;
  }

  function connect(options) {
    var socket = null;
    var timer = null;
    var attempt = 0;
    var opened = false;  // a socket of this connection was open before
    var stopped = false;
    var asleep = false;  // lost while the page was being left: retried when it is back
    var keepTrying = options.keepTrying || function () { return true; };

    function open() {
      timer = null;
      if (stopped || !window.WebSocket) { return; }
      if (leaving) { asleep = true; return; }
      var mine = new WebSocket(socketUrl(options.path, options.after ? options.after() : undefined));
      socket = mine;
      mine.addEventListener("open", function () {
        if (mine !== socket) { return; }
        attempt = 0;
        var reconnected = opened;
        opened = true;
        if (options.onOpen) { options.onOpen({reconnected: reconnected}); }
      });
      mine.addEventListener("message", function (message) {
        if (mine !== socket) { return; }  // a socket this connection already gave up
        var event;
        try { event = JSON.parse(message.data); } catch (err) { return; }
        if (event && typeof event === "object" && options.onMessage) { options.onMessage(event, handle); }
      });
      mine.addEventListener("close", function (event) {
        if (mine !== socket) { return; }
        socket = null;
        var retrying = !stopped && !refused(event.code) && keepTrying();
        if (retrying && leaving) {
          asleep = true;
          retrying = false;
        } else if (retrying) {
          schedule(backoff(attempt++));
        }
        if (options.onClose) { options.onClose({code: event.code, retrying: retrying}); }
      });
    }

    function schedule(ms) {
      asleep = false;
      if (timer !== null) { window.clearTimeout(timer); }
      timer = window.setTimeout(open, ms);
    }

    var handle = {
      // Drop the current socket and open another from the current `after`.
      reopen: function () {
        if (stopped) { return; }
        var old = socket;
        socket = null;
        if (old) { old.close(); }
        if (options.onClose) { options.onClose({code: null, retrying: true}); }
        schedule(backoff(attempt++));
      },
      close: function () {
        stopped = true;
        asleep = false;
        if (timer !== null) { window.clearTimeout(timer); timer = null; }
        var old = socket;
        socket = null;
        if (old) { old.close(); }
      },
      isOpen: function () {
        return socket !== null && socket.readyState === 1;
      },
      // The page is back: a socket waiting out its backoff tries now.
      wake: function () {
        if (!stopped && socket === null && (timer !== null || asleep)) { schedule(0); }
      }
    };
    listeners.push(handle);
    open();
    return handle;
  }

  function wakeAll() {
    leaving = false;
    listeners.forEach(function (handle) { handle.wake(); });
  }

  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted) { return; }
    leaving = false;
    wakeAll();  // back from the back/forward cache: sockets lost while away open again
  });
  window.addEventListener("online", wakeAll);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { wakeAll(); }
  });

  River.live = {connect: connect, backoff: backoff};
})();
