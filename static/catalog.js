// Catalog pages (agents, triggers, data sources): checks a JSON field as it is typed and
// before its form is sent, so a typo is shown at the field without a round trip. The
// server checks again and shows its own message at the same place.
(function () {
  "use strict";

  function problem(textarea) {
    var text = textarea.value.trim();
    if (!text) { return ""; }
    var value;
    try {
      value = JSON.parse(text);
    } catch (error) {
      return "This is not valid JSON: " + error.message;
    }
    if (textarea.dataset.json === "object" && (value === null || typeof value !== "object" || Array.isArray(value))) {
      return "This must be a JSON object, for example {\"ticket_id\": 42}.";
    }
    return "";
  }

  function messageFor(textarea) {
    var id = textarea.id + "-jsoncheck";
    var element = document.getElementById(id);
    if (!element) {
      element = document.createElement("p");
      element.id = id;
      element.className = "field-error";
      element.setAttribute("aria-live", "polite");
      textarea.insertAdjacentElement("afterend", element);
      var described = (textarea.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      described.push(id);
      textarea.setAttribute("aria-describedby", described.join(" "));
    }
    return element;
  }

  function check(textarea) {
    var text = problem(textarea);
    messageFor(textarea).textContent = text;
    if (text) {
      textarea.setAttribute("aria-invalid", "true");
    } else if (!textarea.dataset.serverError) {
      textarea.removeAttribute("aria-invalid");
    }
    return text === "";
  }

  document.addEventListener("input", function (event) {
    var target = event.target;
    if (target instanceof HTMLTextAreaElement && target.dataset.json) {
      target.dataset.serverError = "";
      check(target);
    }
  });

  document.addEventListener("submit", function (event) {
    var fields = event.target.querySelectorAll("textarea[data-json]");
    for (var i = 0; i < fields.length; i++) {
      if (!check(fields[i])) {
        event.preventDefault();
        fields[i].focus();
        return;
      }
    }
  });

  document.querySelectorAll("textarea[data-json][aria-invalid='true']").forEach(function (textarea) {
    textarea.dataset.serverError = "1";
  });

  // "Copy" buttons next to a secret shown once.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) { return; }
    var source = document.getElementById(button.dataset.copy);
    if (!source || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      var status = document.getElementById(button.dataset.copy + "-copied");
      if (status) { status.textContent = "Copied."; }
    }, function () { /* the text stays selectable */ });
  });
})();
