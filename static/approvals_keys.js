/* The approvals inbox worked from the keyboard alone (docs/ui.md, "Approvals"): when
   focus is not in a field, j / k move to the next / previous request waiting for the
   reader's decision, o opens it, a approves it, r moves to its rejection comment, where
   Ctrl+Enter (or Tab to Reject, then Enter) rejects with that comment. Escape leaves the
   comment for the card. The cards' own forms do the work (htmx), so nothing here
   decides anything the buttons could not. */
(function () {
  "use strict";

  var list = document.getElementById("approvals-list");
  if (!list) {
    return;
  }
  var currentId = null;

  function cards() {
    // Only the requests the reader may decide have an Approve button.
    return Array.prototype.filter.call(list.querySelectorAll("article.approval-card[data-state='pending']"),
      function (card) { return card.querySelector(".approval-approve button.approve"); });
  }

  function current() {
    var card = currentId && document.getElementById("approval-" + currentId);
    return card && card.getAttribute("data-state") === "pending" ? card : null;
  }

  function select(card) {
    var before = list.querySelectorAll(".approval-card.kbd-current");
    for (var i = 0; i < before.length; i++) {
      before[i].classList.remove("kbd-current");
    }
    if (!card) {
      currentId = null;
      return;
    }
    currentId = card.getAttribute("data-approval-id");
    card.classList.add("kbd-current");
    card.setAttribute("tabindex", "-1");
    card.focus();
    if (card.scrollIntoView) {
      card.scrollIntoView({block: "nearest"});
    }
  }

  function move(step) {
    var all = cards();
    if (!all.length) {
      return;
    }
    var at = all.indexOf(current());
    var next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
    select(all[next]);
  }

  function typing(target) {
    return target instanceof Element &&
      !!target.closest("input, textarea, select, [contenteditable]:not([contenteditable='false'])");
  }

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    // In a rejection comment: Ctrl+Enter rejects, Escape goes back to the card.
    if (target instanceof HTMLTextAreaElement && target.name === "resolution_comment" &&
        target.closest(".approval-reject")) {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        target.closest("form").querySelector("button.reject").click();
      } else if (event.key === "Escape") {
        event.preventDefault();
        select(target.closest(".approval-card"));
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented || typing(target)) {
      return;
    }
    var card = current();
    if (event.key === "j") {
      event.preventDefault();
      move(1);
    } else if (event.key === "k") {
      event.preventDefault();
      move(-1);
    } else if (card && event.key === "o") {
      event.preventDefault();
      card.querySelector("a.approval-link").click();
    } else if (card && event.key === "a") {
      event.preventDefault();
      card.querySelector(".approval-approve button.approve").click();
    } else if (card && event.key === "r") {
      event.preventDefault();
      card.querySelector(".approval-reject textarea").focus();
    }
  });

  // A decided card is swapped in place (htmx): keep the reader on it, so j goes on from there.
  document.body.addEventListener("htmx:afterSwap", function () {
    var card = currentId && document.getElementById("approval-" + currentId);
    if (card) {
      card.setAttribute("tabindex", "-1");
      card.classList.add("kbd-current");
      card.focus();
    }
  });
})();
