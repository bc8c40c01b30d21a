// River's page frame: small behaviour every page shares (no inline scripts: River's CSP).
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  // A <select data-autosubmit> submits its form when the choice changes (the workspace
  // switcher); its submit button is for pages without JavaScript.
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target instanceof HTMLSelectElement && target.hasAttribute("data-autosubmit") && target.form) {
      target.form.requestSubmit();
    }
  });
})();
