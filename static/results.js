/* Query results (templates/results/_result.html): sorting and paging links load the
   component again (GET, marked as an htmx request so the server sends the component
   alone) and swap it in place, then move focus to it. Delegated from the document, so a
   component that a live page re-rendered (run.js, session.js) works the same. Without
   JavaScript the links open the result as a page of its own. */
(function () {
  "use strict";

  function swap(component, url) {
    component.setAttribute("aria-busy", "true");
    fetch(url, {headers: {"HX-Request": "true"}, credentials: "same-origin"})
      .then(function (response) {
        if (!response.ok) { throw new Error(String(response.status)); }
        return response.text();
      })
      .then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("[data-result]");
        if (!fresh) { throw new Error("no result"); }
        component.replaceWith(fresh);
        fresh.focus({preventScroll: false});
      })
      .catch(function () {
        window.location.assign(url);
      });
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[data-result-nav]");
    if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) {
      return;
    }
    var component = link.closest("[data-result]");
    if (!component) { return; }
    event.preventDefault();
    swap(component, link.href);
  });
}());
