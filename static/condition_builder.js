/* River's condition builder, shared by every form that takes a condition in River's
   condition language (a policy's condition, an agent version's auto-approve
   conditions). Loaded before the page's own script, which says what can be looked at
   (the subjects) and where the server validates a draft.

   River.conditions.builder(fieldset, expression, subjects): the selects of a
     <fieldset data-condition-builder> (templates/_condition_builder.html) write one
     comparison at a time into the `expression` textarea; "Add with AND/OR" joins it to
     what is there.
   River.conditions.validateAsYouType(expression, status, settings): the textarea's
     text is sent to settings.url (with settings.extra()'s fields) a moment after each
     change; the answer's API error is shown in `status` (role=status) and marks the
     textarea aria-invalid. Returns a function that checks again at once.
   River.conditions.subjectOptions(values), catalogColumns(tables), errorText(body).

   No dependencies; River's CSP allows no inline script. Without JavaScript the forms
   still work: the condition is typed and checked when the form is saved. */
(function () {
  "use strict";

  var River = window.River = window.River || {};
  var NUMBER = /^-?[0-9]+(\.[0-9]+)?$/;

  function subjectOptions(values) {
    return values.map(function (v) { return typeof v === "string" ? { value: v, label: v } : v; });
  }

  // The columns of the catalog's tables that a condition can name without quoting.
  function catalogColumns(tables) {
    var columns = [];
    tables.forEach(function (t) {
      t.columns.forEach(function (c) {
        if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(c) && columns.indexOf(c) < 0) { columns.push(c); }
      });
    });
    return columns.sort();
  }

  function fill(select, items) {
    select.textContent = "";
    items.forEach(function (item) {
      var option = document.createElement("option");
      option.value = item.value;
      option.textContent = item.label;
      select.appendChild(option);
    });
  }

  function quote(text) {
    return "'" + String(text).replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "'";
  }

  function part(fieldset, name) {
    return fieldset.querySelector("[data-builder=" + name + "]");
  }

  // One comparison from the builder's selects, or "" while it is incomplete.
  function comparison(subject, op, choice, typed) {
    if (subject.column) {
      if (!choice) { return ""; }
      return "args.data." + choice + (op === "is set" ? " != null" : " == null");
    }
    if (subject.number) {
      return NUMBER.test(typed) ? subject.path + " " + op + " " + typed : "";
    }
    var value = subject.values && subject.values.length ? choice : typed;
    if (!value) { return ""; }
    return subject.path + " " + op + " " + (subject.literal ? value : quote(value));
  }

  function joined(before, text, join) {
    if (!before || !join) { return before ? before + " AND " + text : text; }
    return (join === "OR" ? "(" + before + ") OR " : before + " AND ") + text;
  }

  function builder(fieldset, expression, subjects) {
    var subject = part(fieldset, "subject");
    var operator = part(fieldset, "operator");
    var valueChoice = part(fieldset, "value-choice");
    var valueText = part(fieldset, "value-text");
    var preview = part(fieldset, "preview");
    var adders = fieldset.querySelectorAll("[data-builder-add]");
    fill(subject, subjects.map(function (s, i) { return { value: String(i), label: s.label }; }));

    function current() {
      return comparison(subjects[Number(subject.value)], operator.value, valueChoice.value, valueText.value.trim());
    }
    function refresh() {
      var text = current();
      preview.textContent = text || "(choose a value)";
      adders.forEach(function (button) { button.disabled = !text; });
    }
    function subjectChanged() {
      var s = subjects[Number(subject.value)];
      fill(operator, s.ops.map(function (o) { return { value: o, label: o }; }));
      var choices = !s.number && s.values && s.values.length;
      valueChoice.hidden = !choices;
      valueText.hidden = !!choices;
      if (choices) { fill(valueChoice, s.values); }
      valueText.value = "";
      valueText.inputMode = s.number ? "decimal" : "text";
      valueText.placeholder = s.number ? "a number" : (s.values ? "nothing in the catalog: type a value" : "");
      refresh();
    }
    subject.addEventListener("change", subjectChanged);
    [operator, valueChoice].forEach(function (el) { el.addEventListener("change", refresh); });
    valueText.addEventListener("input", refresh);
    adders.forEach(function (button) {
      button.addEventListener("click", function () {
        var text = current();
        if (!text) { return; }
        expression.value = joined(expression.value.trim(), text, button.getAttribute("data-builder-add"));
        expression.dispatchEvent(new Event("input"));
        expression.focus();
      });
    });
    subjectChanged();
    fieldset.hidden = false;
  }

  // The API's error body in one line: each field's messages (a condition's position and
  // reason repeat its message), else the message.
  function errorText(body) {
    var error = body.error || {};
    var errors = error.details || {};
    var lines = [];
    Object.keys(errors).forEach(function (key) {
      if (key === "position" || key === "reason") { return; }
      var list = Array.isArray(errors[key]) ? errors[key] : [errors[key]];
      list.forEach(function (message) { lines.push(key.replace(/_/g, " ") + ": " + message); });
    });
    return lines.length ? lines.join(" ") : error.message;
  }

  function show(expression, status, text, state) {
    status.textContent = text;
    status.className = "expression-status" + (state ? " " + state : "");
    if (state === "error") {
      expression.setAttribute("aria-invalid", "true");
    } else {
      expression.removeAttribute("aria-invalid");
    }
  }

  function validateAsYouType(expression, status, settings) {
    var timer = null;
    var asked = 0;

    function validate() {
      var ticket = ++asked;
      if (!expression.value.trim()) {
        show(expression, status, "", "");
        return;
      }
      var fields = settings.extra ? settings.extra() : {};
      fields.expression = expression.value;
      var query = new URLSearchParams(fields);
      fetch(settings.url + "?" + query.toString(),
            { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.json(); })
        .then(function (body) {
          if (ticket !== asked) { return; }
          if (body.valid) {
            show(expression, status, settings.okText(body), "ok");
          } else {
            show(expression, status, errorText(body), "error");
          }
        })
        .catch(function () {
          if (ticket === asked) {
            show(expression, status, "Could not check the condition just now; it is checked again when you save.", "");
          }
        });
    }
    function soon() {
      window.clearTimeout(timer);
      timer = window.setTimeout(validate, 250);
    }
    expression.setAttribute("aria-describedby",
      ((expression.getAttribute("aria-describedby") || "") + " " + status.id).trim());
    expression.addEventListener("input", soon);
    if (expression.value.trim()) { validate(); }
    return soon;
  }

  River.conditions = {
    EQUALITY: ["==", "!="],
    ORDER: [">", ">=", "<", "<=", "==", "!="],
    subjectOptions: subjectOptions,
    catalogColumns: catalogColumns,
    builder: builder,
    errorText: errorText,
    validateAsYouType: validateAsYouType
  };
})();
