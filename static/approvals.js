/* Approval cards: JSON editor validation, expiry countdown, error swaps. No dependencies. */
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

  document.addEventListener("input", function (evt) {
    var area = evt.target;
    if (area instanceof HTMLTextAreaElement && area.hasAttribute("data-json-editor") && area.form) {
      checkEditor(area.form);
    }
  });

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
})();
