// River's page frame: small behaviour every page shares (no inline scripts: River's CSP).
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // --- Disclosure menus (the workspace switcher, the bell) ------------------------------
  // A <button data-disclosure aria-controls=ID aria-expanded> shows and hides #ID.
  // Escape closes the open menu and gives focus back to its button; a click outside
  // closes it; opening one closes the other. The opened panel hears "river-open" (the
  // bell's panel loads its list with htmx on it).
  var openButton = null;

  function panelOf(button) {
    return document.getElementById(button.getAttribute("aria-controls"));
  }

  function closeMenu(returnFocus) {
    if (!openButton) return;
    var button = openButton;
    openButton = null;
    button.setAttribute("aria-expanded", "false");
    var panel = panelOf(button);
    if (panel) panel.hidden = true;
    if (returnFocus) button.focus();
  }

  function openMenu(button) {
    closeMenu(false);
    var panel = panelOf(button);
    if (!panel) return;
    openButton = button;
    button.setAttribute("aria-expanded", "true");
    panel.hidden = false;
    var first = panel.querySelector("[aria-current='true']") || panel.querySelector("a[href], button:not([disabled])");
    (first || panel).focus();
    panel.dispatchEvent(new CustomEvent("river-open", { bubbles: false }));
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element ? event.target.closest("[data-disclosure]") : null;
    if (button) {
      if (openButton === button) closeMenu(false); else openMenu(button);
      return;
    }
    if (openButton && event.target instanceof Node) {
      var panel = panelOf(openButton);
      // A click inside that replaced the panel's content leaves a detached target.
      if (panel && !panel.contains(event.target) && document.contains(event.target)) closeMenu(false);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && openButton) {
      event.preventDefault();
      closeMenu(true);
    }
  });

  // Focus leaving the open menu (Tab past its last item) closes it.
  document.addEventListener("focusin", function (event) {
    if (!openButton) return;
    var panel = panelOf(openButton);
    var target = event.target;
    if (panel && target instanceof Node && target !== openButton && !panel.contains(target)) closeMenu(false);
  });

  // After htmx swapped the bell panel's content (its "mark read" forms), keep focus in
  // the panel rather than losing it with the removed button.
  document.addEventListener("htmx:afterSwap", function (event) {
    var panel = event.detail && event.detail.target;
    if (panel && panel.id === "bell-panel" && !panel.hidden && !panel.contains(document.activeElement)) {
      var next = panel.querySelector("a[href], button:not([disabled])");
      (next || panel).focus();
    }
  });

  // --- Live counts -------------------------------------------------------------------
  // The frame's socket (/ws/frame/, kept open by River.live from static/live.js) says
  // when the approvals or notifications may have changed; the page then asks
  // /nav/counts for the numbers and shows them. The body's data-live-counts is
  // "connected" while the socket is open (the browser tests wait for it before they
  // make something happen).
  var body = document.body;
  var countsUrl = body.getAttribute("data-counts-url");
  var socketPath = body.getAttribute("data-frame-socket");
  var shown = null;

  function setCount(name, value) {
    document.querySelectorAll("[data-live-count='" + name + "']").forEach(function (badge) {
      var slot = badge.querySelector("[data-live-value]") || badge;
      slot.textContent = String(value);
      badge.hidden = value === 0;
    });
    document.querySelectorAll("[data-live-count-mirror='" + name + "']").forEach(function (element) {
      element.textContent = window.River.number.format(value);
    });
    document.querySelectorAll("[data-live-label='" + name + "']").forEach(function (element) {
      element.setAttribute("aria-label", "Notifications, " + value + " unread");
    });
  }

  function plural(n, one, many) {
    return n + " " + (n === 1 ? one : many);
  }

  function announce(counts) {
    var region = document.getElementById("live-status");
    if (!region) return;
    region.textContent = plural(counts.approvals, "approval", "approvals") + " pending, " +
      plural(counts.notifications, "unread notification", "unread notifications") + ".";
  }

  function refreshCounts() {
    if (!countsUrl) return;
    fetch(countsUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        var type = response.headers.get("Content-Type") || "";
        return response.ok && type.indexOf("application/json") === 0 ? response.json() : null;
      })
      .then(function (counts) {
        if (!counts) return;
        setCount("approvals", counts.approvals);
        setCount("notifications", counts.notifications);
        var changed = shown && (shown.approvals !== counts.approvals || shown.notifications !== counts.notifications);
        shown = counts;
        if (changed) announce(counts);
      })
      .catch(function () { /* offline for a moment: the next event or visit retries */ });
  }

  function reloadBellPanel() {
    var panel = document.getElementById("bell-panel");
    if (panel && !panel.hidden) panel.dispatchEvent(new CustomEvent("river-open"));
  }

  // The panel's "mark read" answers carry HX-Trigger: river:counts-changed.
  body.addEventListener("river:counts-changed", refreshCounts);

  if (socketPath) {
    window.River.live.connect({
      path: socketPath,
      onOpen: function () {
        body.setAttribute("data-live-counts", "connected");
        refreshCounts(); // whatever changed while the socket was down
      },
      onMessage: function (event) {
        refreshCounts();
        if (event.type === "notifications_changed") reloadBellPanel();
      },
      onClose: function () {
        body.setAttribute("data-live-counts", "disconnected");
      }
    });
  }

  // --- The search box: "/" focuses it, unless the user is typing in a field ---------
  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    var target = event.target;
    if (target instanceof Element && target.closest("input, textarea, select, [contenteditable]:not([contenteditable='false'])")) return;
    var box = document.querySelector("[data-search-box]");
    if (!box) return;
    event.preventDefault();
    box.focus();
    box.select();
  });

  // --- Main navigation on a phone: the current section scrolled into view -----------
  var current = document.querySelector(".mainnav [aria-current='page']");
  if (current && current.scrollIntoView) current.scrollIntoView({ block: "nearest", inline: "nearest" });
})();
