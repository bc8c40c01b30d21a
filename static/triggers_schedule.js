/* A schedule's form (new and edit trigger): the next run times of the cron expression
   and time zone typed so far, from triggers/schedule-preview, which checks them as a
   save would (the API's messages, shown at the field at fault). River's CSP allows no
   inline script; without this file the form still works and is checked on save. */
(function () {
  "use strict";

  var preview = document.querySelector("[data-schedule-preview]");
  if (!preview) { return; }
  var form = preview.closest("form");
  var cron = form.querySelector("[name=cron]");
  var zone = form.querySelector("[name=timezone]");
  var list = document.getElementById("next-runs");
  var status = document.getElementById("next-runs-status");
  var fields = { "config.cron": cron, "config.timezone": zone };
  var latest = 0;
  var timer = null;

  function errorElement(input) {
    var id = input.id + "-preview-error";
    var element = document.getElementById(id);
    if (!element) {
      element = document.createElement("span");
      element.id = id;
      element.className = "field-error";
      element.setAttribute("aria-live", "polite");
      input.insertAdjacentElement("afterend", element);
      var described = (input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      described.push(id);
      input.setAttribute("aria-describedby", described.join(" "));
    }
    return element;
  }

  function showErrors(details) {
    Object.keys(fields).forEach(function (key) {
      var input = fields[key];
      var messages = details[key] || [];
      if (!messages.length && !document.getElementById(input.id + "-preview-error")) { return; }
      errorElement(input).textContent = messages.join(" ");
      if (messages.length) {
        input.setAttribute("aria-invalid", "true");
      } else {
        input.removeAttribute("aria-invalid");
      }
    });
  }

  function showRuns(runs) {
    list.textContent = "";
    runs.forEach(function (run) {
      var item = document.createElement("li");
      var time = document.createElement("time");
      time.dateTime = run.at;
      time.textContent = run.text;
      item.appendChild(time);
      list.appendChild(item);
    });
  }

  function refresh() {
    var cronText = cron.value.trim();
    if (!cronText) {
      showRuns([]);
      showErrors({});
      status.textContent = "Type a cron expression to see when it runs.";
      return;
    }
    var query = new URLSearchParams({ cron: cronText, timezone: zone.value.trim() });
    var ticket = ++latest;
    fetch(preview.dataset.url + "?" + query.toString(), {
      credentials: "same-origin", headers: { Accept: "application/json" }
    }).then(function (response) {
      return response.json();
    }).then(function (answer) {
      if (ticket !== latest) { return; }  // an older answer, overtaken by typing
      if (answer.valid) {
        showErrors({});
        showRuns(answer.next);
        status.textContent = answer.next.length ? "" : "No date matches this expression: it never runs.";
        return;
      }
      var details = (answer.error && answer.error.details) || {};
      showErrors(details);
      showRuns([]);
      status.textContent = "No run times until the schedule is valid: " +
        (Object.keys(details).length ? "see the field marked above." : answer.error.message);
    }).catch(function () {
      if (ticket === latest) { status.textContent = "The run times could not be worked out just now."; }
    });
  }

  function later() {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 300);
  }

  cron.addEventListener("input", later);
  zone.addEventListener("input", later);
  zone.addEventListener("change", later);
  if (cron.value.trim() && !list.children.length) { refresh(); }
})();
