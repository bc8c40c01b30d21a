/* The runs list: rows follow their run's status live (the workspace's WebSocket feed,
   kept open by River.live), and times are shown in the reader's locale (River.time);
   both from static/live.js. River's CSP allows no inline script, so this file is the
   page's only behaviour. */
(function () {
  "use strict";

  function localTimes(root) {
    window.River.time.localize(root, "date-minute");
  }
  localTimes(document);

  var table = document.querySelector("table[data-runs-live]");
  if (!table) {
    return;
  }
  var rowUrl = table.getAttribute("data-row-url");  // .../runs/0/row
  var notice = document.getElementById("runs-live");
  var firstPage = table.getAttribute("data-first-page") === "1";
  // Events after which a row's status, turns, tokens or cost may read differently.
  var CHANGES = {
    run_started: true, turn_complete: true, approval_required: true, approval_resolved: true,
    interaction_required: true, interaction_resolved: true, run_completed: true
  };
  var TERMINAL = {
    completed: true, failed: true, max_turns_exceeded: true, budget_exceeded: true, timeout: true,
    cancelled: true, approval_expired: true
  };
  var loading = {};   // run id -> a fetch is in flight
  var again = {};     // run id -> another change arrived meanwhile
  var newRuns = {};

  function refreshRow(id) {
    if (loading[id]) {
      again[id] = true;
      return;
    }
    loading[id] = true;
    fetch(rowUrl.replace("/0/", "/" + id + "/"), {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        var row = document.getElementById("run-row-" + id);
        if (html && row) {
          var holder = document.createElement("tbody");
          holder.innerHTML = html.trim();
          var fresh = holder.firstElementChild;
          if (fresh) {
            var changed = row.getAttribute("data-status") !== fresh.getAttribute("data-status");
            row.replaceWith(fresh);
            localTimes(fresh);
            if (changed) {
              fresh.classList.add("run-row-changed");
              var badge = fresh.querySelector(".badge");
              if (notice && badge) {
                notice.textContent = "Run #" + id + " is now " + badge.textContent.trim().toLowerCase() + ".";
              }
            }
          }
        }
      })
      .catch(function () { /* the next event or reconnect refreshes it */ })
      .then(function () {
        loading[id] = false;
        if (again[id]) {
          again[id] = false;
          refreshRow(id);
        }
      });
  }

  // On the first page of the unfiltered, newest-first list a new run is fetched and put
  // at the top (the page keeps its length); elsewhere the reader is told and offered a link.
  var pageSize = parseInt(table.getAttribute("data-page-size") || "25", 10);

  function insertNew(id) {
    if (newRuns[id]) {
      return;
    }
    newRuns[id] = true;
    fetch(rowUrl.replace("/0/", "/" + id + "/"), {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html || document.getElementById("run-row-" + id)) {
          return;
        }
        var holder = document.createElement("tbody");
        holder.innerHTML = html.trim();
        var fresh = holder.firstElementChild;
        var body = table.tBodies[0];
        if (!fresh || !body) {
          return;
        }
        // Newest first: before the first row with a smaller id.
        var rows = body.querySelectorAll("tr[data-run-id]");
        var before = null;
        for (var i = 0; i < rows.length; i++) {
          if (parseInt(rows[i].getAttribute("data-run-id"), 10) < id) {
            before = rows[i];
            break;
          }
        }
        body.insertBefore(fresh, before);
        fresh.classList.add("runs-row-new");
        localTimes(fresh);
        var all = body.querySelectorAll("tr[data-run-id]");
        if (all.length > pageSize) {
          all[all.length - 1].remove();
        }
        if (notice) {
          notice.textContent = "Run #" + id + " started.";
        }
      })
      .catch(function () { newRuns[id] = false; });
  }

  function announceNew(id) {
    if (firstPage) {
      insertNew(id);
      return;
    }
    if (!notice || newRuns[id]) {
      return;
    }
    newRuns[id] = true;
    var count = Object.keys(newRuns).length;
    notice.textContent = "";
    notice.appendChild(document.createTextNode(count === 1 ? "A new run started. " : count + " new runs started. "));
    var link = document.createElement("a");
    link.href = window.location.pathname + window.location.search;
    link.textContent = "Show " + (count === 1 ? "it" : "them");
    notice.appendChild(link);
  }

  function onEvent(event) {
    if (!event || typeof event.execution_id !== "number" || !CHANGES[event.type]) {
      return;
    }
    if (document.getElementById("run-row-" + event.execution_id)) {
      refreshRow(event.execution_id);
    } else if (event.type === "run_started") {
      announceNew(event.execution_id);
    }
  }

  function refreshOpenRows() {
    var rows = table.querySelectorAll("tr[data-run-id]");
    for (var i = 0; i < rows.length; i++) {
      if (!TERMINAL[rows[i].getAttribute("data-status")]) {
        refreshRow(rows[i].getAttribute("data-run-id"));
      }
    }
  }

  window.River.live.connect({
    path: "/ws/workspace/?workspace=" + encodeURIComponent(table.getAttribute("data-workspace")),
    onOpen: function (info) {
      if (info.reconnected) {
        refreshOpenRows();  // the workspace feed has no replay: catch up on what was missed
      }
      table.setAttribute("data-live", "1");
    },
    onMessage: onEvent,
    onClose: function () {
      table.removeAttribute("data-live");
    }
  });
})();
