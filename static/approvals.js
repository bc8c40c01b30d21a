/* Approval cards: JSON editor validation, expiry countdown, error swaps; the inbox kept
   live through River.live (static/live.js). */
(function () {
  "use strict";

  // --- edit-and-approve: the textarea must hold a JSON object before anything is sent ---
  function editorProblem(text) {
    var value;
    try {
      value = JSON.parse(text);
    } catch (err) {
      return "Not valid JSON: " + err.message;
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return "The arguments must be a JSON object ({...}).";
    }
    return "";
  }

  function checkEditor(form) {
    var area = form.querySelector("textarea[data-json-editor]");
    if (!area) {
      return true;
    }
    var problem = editorProblem(area.value);
    var out = form.querySelector(".approval-json-error");
    area.setCustomValidity(problem);
    if (out) {
      out.textContent = problem;
    }
    return problem === "";
  }

  // Capture phase on the document runs before htmx's own submit handler on the form,
  // so an invalid editor stops both the htmx request and a plain form post.
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    if (form instanceof HTMLFormElement && !checkEditor(form)) {
      evt.preventDefault();
      evt.stopImmediatePropagation();
    }
  }, true);

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt instanceof HTMLFormElement && !checkEditor(elt)) {
      evt.preventDefault();
    }
  });

  // --- the diff of an edit: which fields change, old -> new, before anything is sent ---
  // The same list governance.views.json_changes gives the resolved card.
  function shown(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function flat(value, prefix, out) {
    if (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
      Object.keys(value).sort().forEach(function (key) {
        flat(value[key], prefix ? prefix + "." + key : key, out);
      });
    } else {
      out[prefix || "(arguments)"] = value;
    }
    return out;
  }

  function changes(before, after) {
    var old = flat(before || {}, "", {});
    var fresh = flat(after || {}, "", {});
    var paths = Object.keys(old).concat(Object.keys(fresh).filter(function (p) { return !(p in old); })).sort();
    var list = [];
    paths.forEach(function (path) {
      if (!(path in fresh)) {
        list.push({path: path, change: "removed", old: shown(old[path])});
      } else if (!(path in old)) {
        list.push({path: path, change: "added", "new": shown(fresh[path])});
      } else if (JSON.stringify(old[path]) !== JSON.stringify(fresh[path])) {
        list.push({path: path, change: "changed", old: shown(old[path]), "new": shown(fresh[path])});
      }
    });
    return list;
  }

  function element(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined) { node.textContent = text; }
    if (className) { node.className = className; }
    return node;
  }

  function showDiff(area) {
    var list = document.querySelector('[data-diff-for="' + area.id + '"]');
    var source = document.getElementById(area.getAttribute("data-proposed") || "");
    if (!list || !source) {
      return;
    }
    var edited;
    try {
      edited = JSON.parse(area.value);
    } catch (err) {
      return;  // the editor's own message says what is wrong
    }
    if (edited === null || typeof edited !== "object" || Array.isArray(edited)) {
      return;
    }
    var found = changes(JSON.parse(source.textContent), edited);
    list.textContent = "";
    if (!found.length) {
      list.appendChild(element("li", "No changes yet: edit the arguments above.", "muted"));
      return;
    }
    found.forEach(function (change) {
      var item = element("li", undefined, "diff-" + change.change);
      item.appendChild(element("code", change.path));
      if (change.change === "changed") {
        item.appendChild(document.createTextNode(": "));
        item.appendChild(element("del", change.old));
        item.appendChild(document.createTextNode(" → "));
        item.appendChild(element("ins", change["new"]));
      } else if (change.change === "added") {
        item.appendChild(document.createTextNode(": added "));
        item.appendChild(element("ins", change["new"]));
      } else {
        item.appendChild(document.createTextNode(": removed "));
        item.appendChild(element("del", change.old));
      }
      list.appendChild(item);
    });
  }

  function showAllDiffs() {
    var areas = document.querySelectorAll("textarea[data-json-editor][data-proposed]");
    for (var i = 0; i < areas.length; i++) {
      showDiff(areas[i]);
    }
  }

  document.addEventListener("input", function (evt) {
    var area = evt.target;
    if (area instanceof HTMLTextAreaElement && area.hasAttribute("data-json-editor") && area.form) {
      checkEditor(area.form);
      showDiff(area);
    }
  });
  document.addEventListener("htmx:afterSettle", showAllDiffs);
  document.addEventListener("river:parts", showAllDiffs);
  showAllDiffs();

  // --- errors come back inside the card (400/403/409): let htmx swap them in ---
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var xhr = evt.detail.xhr;
    if (xhr && xhr.status >= 400 && xhr.status < 500 && xhr.getResponseHeader("X-River-Card")) {
      evt.detail.shouldSwap = true;
      evt.detail.isError = false;
    }
  });

  // --- expiry countdown ---
  function remaining(ms) {
    if (ms <= 0) {
      return "expired";
    }
    var total = Math.floor(ms / 1000);
    var days = Math.floor(total / 86400);
    var hours = Math.floor((total % 86400) / 3600);
    var minutes = Math.floor((total % 3600) / 60);
    var seconds = total % 60;
    var parts = [];
    if (days) { parts.push(days + "d"); }
    if (days || hours) { parts.push(hours + "h"); }
    parts.push(minutes + "m");
    if (!days) { parts.push(seconds + "s"); }
    return "in " + parts.join(" ");
  }

  function tick() {
    var now = Date.now();
    var clocks = document.querySelectorAll("[data-expires-at]");
    for (var i = 0; i < clocks.length; i++) {
      var at = Date.parse(clocks[i].getAttribute("data-expires-at"));
      if (!isNaN(at)) {
        clocks[i].textContent = remaining(at - now);
        clocks[i].classList.toggle("approval-expired-now", at <= now);
      }
    }
  }

  tick();
  setInterval(tick, 1000);

  // --- the inbox, live: new requests appear, decided ones leave (the workspace feed) ---
  var box = document.querySelector("[data-approvals-live]");
  if (!box) {
    return;
  }
  var notice = document.getElementById("approvals-live");
  var loading = false;
  var again = false;

  function cardsById(root) {
    var found = {};
    var cards = root.querySelectorAll("article.approval-card[id]");
    for (var i = 0; i < cards.length; i++) { found[cards[i].id] = cards[i]; }
    return found;
  }

  function refreshList() {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    fetch(box.getAttribute("data-list-url"), {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[data-part='list']");
        var current = box.querySelector("[data-part='list']");
        if (!fresh || !current) { return; }
        fresh = document.importNode(fresh, true);
        var before = cardsById(current);
        var after = cardsById(fresh);
        var added = 0;
        var left = 0;
        Object.keys(after).forEach(function (id) {
          var old = before[id];
          if (!old) {
            added += 1;
          } else if (old.getAttribute("data-state") === after[id].getAttribute("data-state")) {
            after[id].replaceWith(old);  // unchanged: kept as it is (someone may be editing it)
          }
        });
        Object.keys(before).forEach(function (id) { if (!after[id]) { left += 1; } });
        current.replaceWith(fresh);
        if (window.htmx) { window.htmx.process(fresh); }
        showAllDiffs();
        tick();
        var words = [];
        if (added) { words.push(added === 1 ? "A new request is waiting." : added + " new requests are waiting."); }
        if (left) { words.push(left === 1 ? "A request was decided." : left + " requests were decided."); }
        if (notice && words.length) { notice.textContent = words.join(" "); }
      })
      .catch(function () { /* the next event refreshes it */ })
      .then(function () {
        loading = false;
        if (again) {
          again = false;
          refreshList();
        }
      });
  }

  window.River.live.connect({
    path: "/ws/workspace/?workspace=" + encodeURIComponent(box.getAttribute("data-workspace")),
    onOpen: function (info) {
      if (info.reconnected) { refreshList(); }  // the feed has no replay: catch up after a reconnect
      box.setAttribute("data-live", "1");
    },
    onMessage: function (event) {
      if (event.type === "approval_required" || event.type === "approval_resolved") {
        refreshList();
      }
    },
    onClose: function () {
      box.removeAttribute("data-live");
    }
  });
})();
