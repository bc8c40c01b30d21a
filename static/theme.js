/* Light or dark: the person's choice for this browser (localStorage "river-theme"), else
   the system's prefers-color-scheme. Loaded in <head> without defer, so the page never
   shows in the other theme first; static/theme.css holds the colours. The toggle is any
   button with data-theme-toggle: it switches to the other theme and remembers it. */
(function () {
  "use strict";
  var KEY = "river-theme";
  var root = document.documentElement;
  var system = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function saved() {
    try { return window.localStorage.getItem(KEY); } catch (e) { return null; }
  }

  function current() {
    var chosen = saved();
    if (chosen === "dark" || chosen === "light") { return chosen; }
    return system && system.matches ? "dark" : "light";
  }

  function apply() {
    var chosen = saved();
    if (chosen === "dark" || chosen === "light") { root.setAttribute("data-theme", chosen); }
    else { root.removeAttribute("data-theme"); }
    var dark = current() === "dark";
    Array.prototype.forEach.call(document.querySelectorAll("[data-theme-toggle]"), function (button) {
      button.setAttribute("aria-pressed", dark ? "true" : "false");
    });
  }

  apply();
  if (system && system.addEventListener) { system.addEventListener("change", apply); }
  document.addEventListener("DOMContentLoaded", function () {
    apply();
    document.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest("[data-theme-toggle]");
      if (!button) { return; }
      try { window.localStorage.setItem(KEY, current() === "dark" ? "light" : "dark"); } catch (e) { /* private mode */ }
      apply();
    });
  });
})();
