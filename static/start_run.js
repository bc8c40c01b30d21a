/* "Start a run" in a dialog: a link marked data-start-run opens <dialog id=start-run-dialog>
   (a native modal: the page behind is inert, Tab stays inside, Escape closes it), whose
   form is fetched from the link's page (/runs/start) with X-River-Dialog. The form is
   posted back the same way: the server answers 201 with the new run's URL, followed at
   once, or 400 with the form again, its errors next to the fields. Without JavaScript
   (or without <dialog>) the link simply opens /runs/start. */
(function () {
  "use strict";

  var dialog = document.getElementById("start-run-dialog");
  var openers = document.querySelectorAll("[data-start-run]");
  if (!dialog || !openers.length || typeof dialog.showModal !== "function") {
    return;
  }
  var body = dialog.querySelector("[data-start-run-body]");
  var opener = null;
  var HEADERS = { "X-River-Dialog": "1", Accept: "text/html" };

  function focusFirst() {
    var target = body.querySelector("[aria-invalid=true], .has-error select, .has-error textarea") ||
      body.querySelector("select, textarea, input:not([type=hidden]), button, a[href]");
    if (target) { target.focus(); }
  }

  function show(html) {
    body.innerHTML = html;
    body.querySelectorAll("[data-dialog-close]").forEach(function (el) {
      el.addEventListener("click", function (event) { event.preventDefault(); dialog.close(); });
    });
    var form = body.querySelector("[data-start-run-form]");
    if (form) { form.addEventListener("submit", submit); }
    focusFirst();
  }

  function failed() {
    show('<p class="field-error" role="alert">The form could not be loaded just now.</p>' +
         '<p><a href="' + (opener ? opener.getAttribute("href") : "/runs/start") + '">Open it as a page</a></p>');
  }

  function submit(event) {
    event.preventDefault();
    var form = event.target;
    var button = form.querySelector("button[type=submit]");
    if (button) { button.disabled = true; }
    fetch(form.action, { method: "POST", body: new FormData(form), credentials: "same-origin", headers: HEADERS })
      .then(function (response) {
        if (response.status === 201) {
          return response.json().then(function (answer) { window.location.assign(answer.url); });
        }
        if (response.status === 400) {
          return response.text().then(show);
        }
        // 403, 404 or an error page: the full page says what happened.
        form.submit();
      })
      .catch(function () { if (button) { button.disabled = false; } failed(); });
  }

  function open(event) {
    event.preventDefault();
    opener = event.currentTarget;
    body.innerHTML = '<p class="muted" role="status">Loading…</p>';
    dialog.showModal();
    fetch(opener.getAttribute("href"), { credentials: "same-origin", headers: HEADERS })
      .then(function (response) {
        if (!response.ok) { throw new Error(String(response.status)); }
        return response.text();
      })
      .then(show)
      .catch(failed);
  }

  openers.forEach(function (link) { link.addEventListener("click", open); });
  dialog.querySelectorAll(".dialog-head [data-dialog-close]").forEach(function (button) {
    button.addEventListener("click", function () { dialog.close(); });
  });
  // Clicking the backdrop (outside the dialog's box) closes it too.
  dialog.addEventListener("click", function (event) {
    if (event.target === dialog) { dialog.close(); }
  });
  dialog.addEventListener("close", function () {
    body.textContent = "";
    if (opener) { opener.focus(); }
  });
})();
