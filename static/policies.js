/* The policy form: a condition builder that writes into the raw expression, the
   expression validated as it is typed (the server's validator, the API's errors), and
   the "Test this policy" panel. River's CSP allows no inline script, so this file is the
   page's only behaviour; without it the form still works and is checked on save. */
(function () {
  "use strict";

  var form = document.getElementById("policy-form");
  var dataNode = document.getElementById("policy-builder-data");
  if (!form || !dataNode) {
    return;
  }
  var data = JSON.parse(dataNode.textContent);
  var expression = form.querySelector("[data-policy-expression]");
  var policyType = form.querySelector("select[name=policy_type]");
  var enforcement = form.querySelector("select[name=enforcement]");
  var status = document.getElementById("expression-status");

  // --- the builder ---------------------------------------------------------------

  function options(values) {
    return values.map(function (v) { return typeof v === "string" ? { value: v, label: v } : v; });
  }
  var tables = data.tables.map(function (t) { return t.name; });
  var columns = [];
  data.tables.forEach(function (t) {
    t.columns.forEach(function (c) {
      if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(c) && columns.indexOf(c) < 0) { columns.push(c); }
    });
  });
  columns.sort();
  var EQUALITY = ["==", "!="];
  var ORDER = [">", ">=", "<", "<=", "==", "!="];
  var SUBJECTS = [
    { label: "Tool", path: "tool.name", ops: EQUALITY, values: options(data.tools) },
    { label: "Tool writes data", path: "tool.writes", ops: ["=="], literal: true,
      values: options([{ value: "true", label: "yes" }, { value: "false", label: "no" }]) },
    { label: "Table a write changes", path: "args.table_name", ops: EQUALITY, values: options(tables) },
    { label: "Column a write sets", column: true, ops: ["is set", "is not set"], values: options(columns) },
    { label: "Agent", path: "agent.id", ops: EQUALITY,
      values: data.agents.map(function (a) { return { value: a.id, label: a.name }; }) },
    { label: "Action level", path: "agent.action_level", ops: EQUALITY, values: options(data.action_levels) },
    { label: "Rows a query returned", path: "rows", ops: ORDER, number: true },
    { label: "Table a query read", path: "table.name", ops: EQUALITY, values: options(tables) },
    { label: "Hour of the day (0-23)", path: "time.hour", ops: ORDER, number: true },
    { label: "Day of the week", path: "time.day", ops: EQUALITY, values: options(data.days) },
    { label: "Tool calls this hour", path: "agent.tool_calls_this_hour", ops: ORDER, number: true }
  ];

  var builder = document.getElementById("policy-builder");
  var subject = builder.querySelector("[data-builder=subject]");
  var operator = builder.querySelector("[data-builder=operator]");
  var valueChoice = builder.querySelector("[data-builder=value-choice]");
  var valueText = builder.querySelector("[data-builder=value-text]");
  var preview = builder.querySelector("[data-builder=preview]");

  function fill(select, items) {
    select.textContent = "";
    items.forEach(function (item) {
      var option = document.createElement("option");
      option.value = item.value;
      option.textContent = item.label;
      select.appendChild(option);
    });
  }
  fill(subject, SUBJECTS.map(function (s, i) { return { value: String(i), label: s.label }; }));

  function quote(text) {
    return "'" + String(text).replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "'";
  }

  function current() {
    var s = SUBJECTS[Number(subject.value)];
    var op = operator.value;
    if (s.column) {
      if (!valueChoice.value) { return ""; }
      return "args.data." + valueChoice.value + (op === "is set" ? " != null" : " == null");
    }
    if (s.number) {
      var n = valueText.value.trim();
      return /^-?[0-9]+(\.[0-9]+)?$/.test(n) ? s.path + " " + op + " " + n : "";
    }
    var v = s.values.length ? valueChoice.value : valueText.value.trim();
    if (!v) { return ""; }
    return s.path + " " + op + " " + (s.literal ? v : quote(v));
  }

  function refresh() {
    var text = current();
    preview.textContent = text || "(choose a value)";
    builder.querySelectorAll("[data-builder-add]").forEach(function (button) {
      button.disabled = !text;
    });
  }

  function subjectChanged() {
    var s = SUBJECTS[Number(subject.value)];
    fill(operator, s.ops.map(function (o) { return { value: o, label: o }; }));
    var choices = !s.number && s.values && s.values.length;
    valueChoice.hidden = !choices;
    valueText.hidden = !!choices;
    if (choices) { fill(valueChoice, s.values); }
    valueText.value = "";
    valueText.inputMode = s.number ? "numeric" : "text";
    valueText.placeholder = s.number ? "a number" : (s.values ? "nothing in the catalog: type a value" : "");
    refresh();
  }
  subject.addEventListener("change", subjectChanged);
  [operator, valueChoice].forEach(function (el) { el.addEventListener("change", refresh); });
  valueText.addEventListener("input", refresh);
  builder.querySelectorAll("[data-builder-add]").forEach(function (button) {
    button.addEventListener("click", function () {
      var text = current();
      if (!text) { return; }
      var join = button.getAttribute("data-builder-add");
      var before = expression.value.trim();
      if (!before || !join) {
        expression.value = before ? before + " AND " + text : text;
      } else {
        expression.value = (join === "OR" ? "(" + before + ") OR " : before + " AND ") + text;
      }
      expression.dispatchEvent(new Event("input"));
      expression.focus();
    });
  });
  subjectChanged();
  builder.hidden = false;

  // --- validation as you type --------------------------------------------------------

  var validateUrl = form.getAttribute("data-validate-url") || "/policies/validate";
  var timer = null;
  var asked = 0;

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

  function validate() {
    var ticket = ++asked;
    if (!expression.value.trim()) {
      status.textContent = "";
      status.className = "expression-status";
      return;
    }
    var query = new URLSearchParams({ expression: expression.value, policy_type: policyType.value });
    fetch(validateUrl + "?" + query.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        if (ticket !== asked) { return; }
        if (body.valid) {
          status.textContent = "Valid. Checked as a " + body.policy_type.replace(/_/g, " ") + " policy.";
          status.className = "expression-status ok";
          expression.removeAttribute("aria-invalid");
        } else {
          status.textContent = errorText(body);
          status.className = "expression-status error";
          expression.setAttribute("aria-invalid", "true");
        }
      })
      .catch(function () {
        if (ticket === asked) {
          status.textContent = "Could not check the condition just now; it is checked again when you save.";
          status.className = "expression-status";
        }
      });
  }
  function soon() {
    window.clearTimeout(timer);
    timer = window.setTimeout(validate, 250);
  }
  expression.setAttribute("aria-describedby",
    ((expression.getAttribute("aria-describedby") || "") + " expression-status").trim());
  expression.addEventListener("input", soon);
  policyType.addEventListener("change", soon);
  if (expression.value.trim()) { validate(); }

  // --- test this policy ----------------------------------------------------------------

  var panel = document.getElementById("policy-test");
  if (!panel) {
    return;
  }
  panel.hidden = false;
  var run = document.getElementById("test-run");
  var go = document.getElementById("test-go");
  var result = document.getElementById("test-result");
  if (!run || !go) {
    return;
  }

  function line(parent, tag, text, className) {
    var el = document.createElement(tag);
    el.textContent = text;
    if (className) { el.className = className; }
    parent.appendChild(el);
    return el;
  }

  go.addEventListener("click", function () {
    result.textContent = "Testing…";
    var query = new URLSearchParams({
      run: run.value, expression: expression.value, policy_type: policyType.value, enforcement: enforcement.value
    });
    fetch("/policies/test?" + query.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        result.textContent = "";
        if (!body.valid) {
          line(result, "p", errorText(body), "field-error");
          return;
        }
        if (body.note) {
          line(result, "p", body.note, "muted");
          return;
        }
        var matched = body.calls.filter(function (c) { return c.matched; }).length;
        line(result, "p", body.calls.length
          ? "Matches " + matched + " of the " + body.calls.length + " tool calls of run #" + body.run.id + "."
          : "Run #" + body.run.id + " made no tool calls.", "test-summary");
        var list = document.createElement("ol");
        list.className = "test-calls";
        body.calls.forEach(function (call) {
          var item = document.createElement("li");
          item.className = call.matched ? "matched" : "";
          line(item, "strong", "Step " + call.step + ": " + call.tool + " ");
          line(item, "span", call.matched ? "matched, would be " + call.decision.toLowerCase().replace(/_/g, " ")
                                         : "not matched (" + call.decision.toLowerCase().replace(/_/g, " ") + ")",
               call.matched ? "badge badge-danger" : "badge");
          line(item, "p", call.reason, "muted");
          list.appendChild(item);
        });
        result.appendChild(list);
      })
      .catch(function () {
        result.textContent = "The test could not run just now.";
      });
  });
})();
