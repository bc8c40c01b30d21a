/* The run page (templates/runs/run.html), live.

   The activity feed is rendered here from the run's events: first the stored ones the
   page embeds (#run-events), then the WebSocket's, subscribed after the last embedded
   sequence number. Every event carries its run's sequence number: an event at or below
   the last one shown is a duplicate and is dropped; one that skips a number means
   something was missed, so the socket is reopened from the last number shown and the
   server replays the rest from the event log. A lost connection reconnects the same
   way (River.live in static/live.js: the shared backoff). Events that change the page's
   server-rendered parts (status and progress, the approval and question cards, the
   outcome, the cause) make it fetch those parts again.
   Each reasoning, tool and result line has a "Why?" panel, rendered by the server from
   what GET /api/v1/executions/{id}/steps/{n}/why answers (/runs/{id}/steps/{n}/why).

   No dependencies but static/live.js (the socket, local times) and htmx (for the cards'
   forms); the result's chart is SVG drawn by the server (web/results.py).
   River's CSP allows no inline script: this file is the page's behaviour. */
(function () {
  "use strict";

  var feed = document.getElementById("run-feed");
  if (!feed) {
    return;
  }
  var runId = feed.getAttribute("data-run-id");
  var partsUrl = feed.getAttribute("data-parts-url");
  var whyUrl = feed.getAttribute("data-why-url");  // .../steps/0/why
  var connection = document.getElementById("run-connection");
  var lastSeq = 0;
  var finished = feed.getAttribute("data-terminal") === "1";
  var statusLabels = readJson("run-status-labels") || {};

  function readJson(id) {
    var node = document.getElementById(id);
    if (!node) {
      return null;
    }
    try {
      return JSON.parse(node.textContent);
    } catch (err) {
      return null;
    }
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function duration(ms) {
    if (typeof ms !== "number") { return ""; }
    if (ms < 1000) { return ms + " ms"; }
    if (ms < 60000) { return (ms / 1000).toFixed(1) + " s"; }
    var minutes = Math.floor(ms / 60000);
    return minutes + " min " + Math.round((ms % 60000) / 1000) + " s";
  }

  function localTimes(root) {
    window.River.time.localize(root, "date-second");
  }

  function statusLabel(status) {
    return statusLabels[status] || String(status || "").replace(/_/g, " ");
  }

  // --- one event as one line of the feed ------------------------------------------------

  var KIND = {
    run_started: "Started",
    turn_reasoning: "Reasoning",
    tool_called: "Tool call",
    observation_received: "Result",
    turn_complete: "Turn done",
    approval_required: "Approval needed",
    approval_resolved: "Approval decided",
    interaction_required: "Question",
    interaction_resolved: "Answered",
    run_completed: "Finished"
  };
  var RESOLUTIONS = {
    approved: "approved", edited_approved: "approved with edited arguments", edited: "approved with edited arguments",
    rejected: "rejected", expired: "expired without a decision", cancelled: "closed: the run was cancelled"
  };
  var BAD_STEP = {failed: true, blocked: true, rejected: true, timeout: true};

  function describe(event) {
    switch (event.type) {
      case "run_started":
        return "The run started (" + (event.trigger_type || "manual") + ").";
      case "turn_reasoning":
        return event.thought_summary || "The model chose its next step.";
      case "tool_called":
        return event.args_summary || "";
      case "observation_received":
        return event.result_summary || "(no result text)";
      case "turn_complete":
        return "Turn " + event.turn + " took " + duration(event.duration_ms) + ".";
      case "approval_required":
        return "The agent wants to use " + event.tool_name + "; a person must approve it.";
      case "approval_resolved":
        return "The request was " + (RESOLUTIONS[event.resolution] || event.resolution) + ".";
      case "interaction_required":
        return event.message || "The agent asks a question.";
      case "interaction_resolved":
        return event.resolution === "answered" ? "The question was answered; the run goes on." :
          "The question was closed (" + event.resolution + ").";
      case "run_completed":
        return statusLabel(event.status) + " after " + event.turns_used + " turn" +
          (event.turns_used === 1 ? "" : "s") + " (" + duration(event.duration_ms) + ")." +
          (event.final_output_summary ? " " + event.final_output_summary : "");
      default:
        return "";
    }
  }

  function render(event) {
    var item = el("li", "run-event run-event-" + event.type);
    item.id = "run-event-" + event.seq;
    item.setAttribute("data-seq", event.seq);
    var line = el("div", "run-event-line");
    line.appendChild(el("span", "run-event-kind", KIND[event.type] || event.type));
    var body = el("div", "run-event-body");
    var aside = el("div", "run-event-aside");
    line.appendChild(body);
    line.appendChild(aside);
    if (event.tool_name && (event.type === "tool_called" || event.type === "observation_received" ||
                            event.type === "approval_required")) {
      body.appendChild(el("span", "badge badge-accent tool-badge", event.tool_name));
    }
    if (event.type === "observation_received" && event.status && BAD_STEP[event.status]) {
      body.appendChild(el("span", "badge badge-danger", event.status));
    }
    if (event.type === "run_completed") {
      // Only an answered outcome is green: a completed run may still be blocked or rejected.
      body.appendChild(el("span", "badge " + (event.outcome === "answered" ? "badge-ok" :
        event.status === "cancelled" ? "" : event.status === "completed" ? "badge-warn" : "badge-danger"),
        statusLabel(event.status) + (event.outcome ? " · " + event.outcome.replace(/_/g, " ") : "")));
    }
    var clamp = {tool_called: 1, observation_received: 1, run_completed: 1}[event.type] ? " run-event-clamp" : "";
    body.appendChild(el(event.type === "tool_called" ? "code" : "span", "run-event-text" + clamp, describe(event)));
    var meta = el("span", "run-event-meta");
    var bits = [];
    if (typeof event.turn === "number" && event.type !== "turn_complete") { bits.push("turn " + event.turn); }
    if (event.type === "observation_received") { bits.push(duration(event.duration_ms)); }
    if (event.type === "turn_reasoning" && event.model_used) { bits.push(event.model_used); }
    meta.textContent = bits.join(" · ");
    if (event.created_at) {
      var time = el("time");
      time.setAttribute("datetime", event.created_at);
      var clock = window.River.time.format(event.created_at, "clock");
      if (clock) {
        time.textContent = clock;
        time.title = window.River.time.format(event.created_at, "full");
      }
      if (bits.length) { meta.appendChild(document.createTextNode(" · ")); }
      meta.appendChild(time);
    }
    aside.appendChild(meta);
    if (event.type === "approval_required" && event.approval_id) {
      var jump = el("a", "run-event-link", "Go to the request");
      jump.href = "#approval-" + event.approval_id;
      body.appendChild(jump);
    }
    if (typeof event.step_number === "number") {
      var why = el("button", "btn btn-quiet run-why-button", "Why?");
      why.type = "button";
      why.setAttribute("aria-expanded", "false");
      why.setAttribute("aria-controls", "run-why-" + event.seq);
      why.setAttribute("data-step", event.step_number);
      why.setAttribute("aria-label", "Why: " + (KIND[event.type] || event.type) + ", step " + event.step_number);
      aside.appendChild(why);
    }
    item.appendChild(line);
    if (typeof event.step_number === "number") {
      var panel = el("div", "run-why");
      panel.id = "run-why-" + event.seq;
      panel.hidden = true;
      item.appendChild(panel);
    }
    return item;
  }

  // --- the Why panel -----------------------------------------------------------------------
  // Rendered by the server (web/run.py run_step_why, templates/runs/_why.html): the same
  // structured views as the audit page, with each value's raw JSON behind a toggle.

  function fillWhy(panel, html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var content = doc.querySelector(".run-why-content");
    panel.textContent = "";
    if (!content) {
      throw new Error("no explanation in the answer");
    }
    panel.appendChild(document.importNode(content, true));
  }

  feed.addEventListener("click", function (evt) {
    var button = evt.target.closest ? evt.target.closest(".run-why-button") : null;
    if (!button) {
      return;
    }
    var panel = document.getElementById(button.getAttribute("aria-controls"));
    var open = button.getAttribute("aria-expanded") === "true";
    button.setAttribute("aria-expanded", open ? "false" : "true");
    panel.hidden = open;
    if (open || panel.getAttribute("data-loaded")) {
      return;
    }
    panel.textContent = "Loading…";
    fetch(whyUrl.replace("/steps/0/", "/steps/" + button.getAttribute("data-step") + "/"),
          {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        fillWhy(panel, html);
        panel.setAttribute("data-loaded", "1");
      })
      .catch(function () {
        panel.textContent = "The explanation could not be loaded. Try again in a moment.";
      });
  });

  // --- the server-rendered parts -----------------------------------------------------------

  var PARTS_FOR = {
    run_started: ["head", "cause"],
    turn_reasoning: ["head"],
    tool_called: ["head"],
    observation_received: ["head", "outcome", "cause"],
    turn_complete: ["head"],
    approval_required: ["head", "cards"],
    approval_resolved: ["head", "cards"],
    interaction_required: ["head", "cards"],
    interaction_resolved: ["head", "cards"],
    run_completed: ["head", "cards", "outcome", "cause"]
  };
  var wanted = {};
  var fetching = false;
  var timer = null;

  function mergeCards(current, fresh) {
    // A card whose state did not change is kept as it is (someone may be editing it).
    var kept = {};
    Array.prototype.forEach.call(current.children, function (child) {
      if (child.id) { kept[child.id] = child; }
    });
    var next = [];
    Array.prototype.forEach.call(fresh.children, function (child) {
      var old = child.id ? kept[child.id] : null;
      next.push(old && old.getAttribute("data-state") === child.getAttribute("data-state") ? old : child);
    });
    current.textContent = "";
    next.forEach(function (child) {
      current.appendChild(child);
    });
    return current;
  }

  function swapPart(fresh) {
    var name = fresh.getAttribute("data-part");
    var current = document.getElementById("run-part-" + name);
    if (!current) {
      return;
    }
    if (name === "cards") {
      fresh = mergeCards(current, fresh);
    } else {
      var cancel = current.querySelector("details.run-cancel");
      var freshCancel = fresh.querySelector("details.run-cancel");
      if (cancel && freshCancel && cancel.open) { freshCancel.open = true; }
      current.replaceWith(fresh);
    }
    localTimes(fresh);
    if (window.htmx) { window.htmx.process(fresh); }
  }

  function refreshParts() {
    timer = null;
    var names = Object.keys(wanted);
    if (!names.length) {
      return;
    }
    if (fetching) {
      timer = window.setTimeout(refreshParts, 200);
      return;
    }
    wanted = {};
    fetching = true;
    var query = names.map(function (n) { return "part=" + encodeURIComponent(n); }).join("&");
    fetch(partsUrl + "?" + query, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        Array.prototype.forEach.call(doc.querySelectorAll("[data-part]"), function (fresh) {
          swapPart(document.importNode(fresh, true));
        });
        document.dispatchEvent(new CustomEvent("river:parts"));
      })
      .catch(function () {
        names.forEach(function (n) { wanted[n] = true; });  // try again with the next event
      })
      .then(function () {
        fetching = false;
      });
  }

  function want(names) {
    names.forEach(function (n) { wanted[n] = true; });
    if (!timer) {
      timer = window.setTimeout(refreshParts, 150);
    }
  }

  // --- the feed: stored events, then the socket --------------------------------------------

  function show(event, live) {
    if (typeof event.seq !== "number" || event.seq <= lastSeq) {
      return true;  // seen already
    }
    if (event.seq !== lastSeq + 1) {
      return false;  // a gap: ask for the missing ones
    }
    var empty = document.getElementById("run-feed-empty");
    if (empty) { empty.remove(); }
    feed.appendChild(render(event));
    lastSeq = event.seq;
    feed.setAttribute("data-last-seq", String(lastSeq));
    if (live && PARTS_FOR[event.type]) { want(PARTS_FOR[event.type]); }
    if (event.type === "run_completed") { finished = true; }
    return true;
  }

  (readJson("run-events") || []).forEach(function (event) { show(event, false); });
  // Announced from now on: what arrives live, not the history the page opened with.
  feed.setAttribute("aria-live", "polite");
  feed.setAttribute("aria-relevant", "additions");
  localTimes(document);

  function state(text) {
    if (connection) { connection.textContent = text; }
  }

  var live = window.River.live.connect({
    path: "/ws/executions/" + runId + "/",
    after: function () { return lastSeq; },
    keepTrying: function () { return !finished; },  // an ended run sends nothing more
    onOpen: function () {
      state(finished ? "Finished" : "Live");
      feed.setAttribute("data-live", "1");
    },
    onMessage: function (event, connection) {
      if (!show(event, true)) {
        connection.reopen();  // reopened from lastSeq: the server replays what is missing
        return;
      }
      if (finished) { state("Finished"); }
    },
    onClose: function (info) {
      feed.removeAttribute("data-live");
      state(finished ? "Finished" : info.retrying ? "Reconnecting…" : "Not connected");
    }
  });
  // Tests and people debugging: drop the socket to see the page resume from lastSeq.
  feed.riverReconnect = function () {
    live.reopen();
  };
})();
