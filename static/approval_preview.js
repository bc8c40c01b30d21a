/* Issue 29 §1: the effect of edited arguments is shown before they are approved.
   - After each edit of an approval card's arguments (once the text holds a JSON object
     and typing paused), the card's "Preview the effect" button asks the server (htmx).
   - Submitting arguments that were not previewed yet previews them first, then submits
     with the fingerprint of that preview. The server refuses an edited approval whose
     arguments were not previewed, and one whose effect changed since, either way. */
(function () {
  "use strict";
  var timers = new WeakMap();

  function isObject(text) {
    try {
      var value = JSON.parse(text);
      return value !== null && typeof value === "object" && !Array.isArray(value);
    } catch (err) {
      return false;
    }
  }

  function parts(form) {
    var area = form && form.querySelector("textarea[data-json-editor]");
    var button = form && form.querySelector("[data-effect-preview]");
    return area && button ? {area: area, button: button} : null;
  }

  function preview(form, found) {
    form.setAttribute("data-previewed-text", found.area.value);
    found.button.click();
  }

  document.addEventListener("input", function (evt) {
    var area = evt.target;
    if (!(area instanceof HTMLTextAreaElement) || !area.hasAttribute("data-json-editor")) {
      return;
    }
    var found = parts(area.form);
    if (!found) {
      return;
    }
    clearTimeout(timers.get(area));
    timers.set(area, setTimeout(function () {
      if (isObject(area.value) && area.value !== area.form.getAttribute("data-previewed-text")) {
        preview(area.form, found);
      }
    }, 700));
  });

  // Registered after approvals.js's own check (capture phase, before htmx's handler).
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var found = form instanceof HTMLFormElement ? parts(form) : null;
    if (!found || found.area.value === form.getAttribute("data-previewed-text")) {
      return;
    }
    evt.preventDefault();
    evt.stopImmediatePropagation();
    form.setAttribute("data-submit-after-preview", "1");
    preview(form, found);
  }, true);

  // The preview came back (swapped into its box, which stays): submit what waited for it.
  document.addEventListener("htmx:afterSwap", function (evt) {
    var xhr = evt.detail && evt.detail.xhr;
    document.querySelectorAll("form[data-submit-after-preview]").forEach(function (form) {
      var box = form.querySelector(".approval-effect-edit");
      if (!box || !box.contains(form.querySelector("[data-effect-preview]"))) {
        return;
      }
      form.removeAttribute("data-submit-after-preview");
      if (xhr && xhr.status === 200) {
        form.requestSubmit();
      }
    });
  });
})();
