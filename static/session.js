/* The conversation page (templates/sessions/session.html), live.

   The conversation is server-rendered (#convo-part). This file follows the session's
   WebSocket, /ws/sessions/<id>/?after=<session_seq>, from the last stored event the page
   was rendered with: the pieces of the answer being written (answer_delta) are shown in
   the active run's bubble as they arrive; an event that changes the conversation (a
   message started or queued, a hand-off, an approval or a question, a run's end) makes
   the page fetch the conversation part again, which holds the complete answer. A lost
   connection reconnects from the last session_seq seen, waiting longer each time
   (River.live, static/live.js).

   The composer uploads each attached file to POST /api/v1/artifacts/ (with the session),
   then sends the message with their ids to POST /api/v1/sessions/<id>/messages. The
   approval and question cards are the run page's (templates/runs/_cards.html) and keep
   their behaviour from approvals.js. River's CSP allows no inline script: this file is
   the page's behaviour. */
(function () {
  "use strict";

  var live = document.getElementById("convo-live");
  if (!live) { return; }
  var sessionId = live.getAttribute("data-session-id");
  var workspaceId = live.getAttribute("data-workspace-id");
  var partUrl = live.getAttribute("data-part-url");
  var lastSeq = parseInt(live.getAttribute("data-last-seq"), 10) || 0;
  var connection = document.getElementById("convo-connection");
  var composer = document.getElementById("convo-composer");
  var REFRESH = {
    user_message: true, message_queued: true, agent_transferred: true, run_started: true,
    approval_required: true, approval_resolved: true, interaction_required: true,
    interaction_resolved: true, run_completed: true
  };
  var pieces = {};  // "<run>:<turn>" -> [text by index]
  var latestTurn = {};  // run -> the turn whose pieces are shown

  function csrfToken() {
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  function scrollToEnd() {
    var list = live.querySelector(".convo-list");
    if (list && list.lastElementChild) {
      list.lastElementChild.scrollIntoView({block: "nearest"});
    }
  }

  function showPieces(runId) {
    var bubble = live.querySelector('[data-stream-for="' + runId + '"] [data-stream-text]');
    var turn = latestTurn[runId];
    if (!bubble || turn === undefined) { return; }
    bubble.textContent = (pieces[runId + ":" + turn] || []).join("");
  }

  function onPiece(event) {
    var key = event.execution_id + ":" + event.turn;
    if (event.index === 0 || !pieces[key]) { pieces[key] = []; }
    pieces[key][event.index] = event.text;
    latestTurn[event.execution_id] = event.turn;
    showPieces(event.execution_id);
  }

  // --- the conversation part -----------------------------------------------------------

  var fetching = false;
  var again = false;

  function sameCards(current, fresh) {
    var a = current ? current.querySelectorAll("[data-state]") : [];
    var b = fresh ? fresh.querySelectorAll("[data-state]") : [];
    if (a.length !== b.length || a.length === 0) { return false; }
    for (var i = 0; i < a.length; i++) {
      if (a[i].id !== b[i].id || a[i].getAttribute("data-state") !== b[i].getAttribute("data-state")) {
        return false;
      }
    }
    return true;
  }

  // A new conversation is named after its first message: show the name once it has one.
  function showTitle(title) {
    var name = document.getElementById("convo-name");
    if (!title || !name || name.textContent === title) { return; }
    name.textContent = title;
    document.title = title + " · River";
    var field = document.getElementById("convo-title");
    if (field && !field.value) { field.value = title; }
  }

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(partUrl, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("convo-part");
        var current = document.getElementById("convo-part");
        if (!fresh || !current) { return; }
        var keepCards = sameCards(current.querySelector("#run-part-cards"), fresh.querySelector("#run-part-cards"));
        if (keepCards) {  // a card someone may be editing stays as it is
          fresh.querySelector("#run-part-cards").replaceWith(current.querySelector("#run-part-cards"));
        }
        current.replaceWith(fresh);
        if (window.htmx && !keepCards) { window.htmx.process(fresh); }
        var active = fresh.getAttribute("data-active");
        if (active) { showPieces(active); }
        showTitle(fresh.getAttribute("data-title"));
        scrollToEnd();
      })
      .catch(function () { again = true; })
      .then(function () {
        fetching = false;
        if (again) { again = false; window.setTimeout(refresh, 300); }
      });
  }

  // --- the socket ------------------------------------------------------------------------

  function state(text) { if (connection) { connection.textContent = text; } }

  function onEvent(event) {
    if (typeof event.session_seq === "number") {
      if (event.session_seq <= lastSeq) { return; }
      lastSeq = event.session_seq;
    }
    if (event.type === "answer_delta") { onPiece(event); return; }
    if (REFRESH[event.type]) { refresh(); }
  }

  function connect() {
    window.River.live.connect({
      path: "/ws/sessions/" + sessionId + "/",
      after: function () { return lastSeq; },
      onOpen: function (info) {
        state("Live");
        // The replay brings the stored events; the pieces of an answer are not stored,
        // so the conversation part is fetched again for what was written meanwhile.
        if (info.reconnected) { refresh(); }
      },
      onMessage: onEvent,
      onClose: function (info) { state(info.retrying ? "Reconnecting…" : "Not connected"); }
    });
  }

  // --- the composer ----------------------------------------------------------------------

  function problemText(body, fallback) {
    var error = body && body.error;
    if (!error) { return fallback; }
    var parts = [];
    var details = error.details || {};
    Object.keys(details).forEach(function (field) {
      parts.push(field + ": " + [].concat(details[field]).join(" "));
    });
    return (error.message || fallback) + (parts.length ? " (" + parts.join("; ") + ")" : "");
  }

  function post(url, body, json) {
    var headers = {"X-CSRFToken": csrfToken(), "Accept": "application/json"};
    if (json) { headers["Content-Type"] = "application/json"; }
    return fetch(url, {method: "POST", credentials: "same-origin", headers: headers,
                       body: json ? JSON.stringify(body) : body})
      .then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (data) {
          return {ok: response.ok, status: response.status, data: data};
        });
      });
  }

  if (composer) {
    var area = document.getElementById("convo-message");
    var files = document.getElementById("convo-files");
    var send = document.getElementById("convo-send");
    var out = document.getElementById("convo-composer-error");
    var max = parseInt(composer.getAttribute("data-attachments-max"), 10) || 10;

    function fail(text, field) {
      out.textContent = "Nothing was sent: " + text;
      if (field) { field.setAttribute("aria-invalid", "true"); field.focus(); }
      send.disabled = false;
    }

    composer.addEventListener("submit", function (evt) {
      evt.preventDefault();
      out.textContent = "";
      area.removeAttribute("aria-invalid");
      files.removeAttribute("aria-invalid");
      var content = area.value.trim();
      if (!content) { fail("write a message.", area); return; }
      var chosen = Array.prototype.slice.call(files.files || []);
      if (chosen.length > max) { fail("attach at most " + max + " files.", files); return; }
      send.disabled = true;
      var ids = [];
      var uploads = chosen.reduce(function (previous, file) {
        return previous.then(function () {
          var form = new FormData();
          form.append("workspace", workspaceId);
          form.append("session", sessionId);
          form.append("file", file, file.name);
          return post("/api/v1/artifacts/", form, false).then(function (result) {
            if (!result.ok) {
              throw {field: files, text: file.name + ": " + problemText(result.data, "the file was refused.")};
            }
            ids.push(result.data.id);
          });
        });
      }, Promise.resolve());
      uploads
        .then(function () {
          return post("/api/v1/sessions/" + sessionId + "/messages", {content: content, attachments: ids}, true);
        })
        .then(function (result) {
          if (!result.ok) {
            throw {field: area, text: problemText(result.data, "the message was refused.")};
          }
          area.value = "";
          files.value = "";
          send.disabled = false;
          area.focus();
          refresh();
        })
        .catch(function (problem) {
          fail(problem && problem.text ? problem.text : "the connection failed; try again.",
               problem && problem.field);
        });
    });
  }

  scrollToEnd();
  connect();
})();
