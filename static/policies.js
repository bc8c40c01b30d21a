/* The policy form: the condition builder (static/condition_builder.js) with what a
   policy can look at, the expression validated as it is typed (the server's validator,
   the API's errors), and the "Test this policy" panel. River's CSP allows no inline
   script; without these files the form still works and is checked on save. */
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
  var conditions = River.conditions;
  var options = conditions.subjectOptions;

  // --- the builder: what a policy can look at ------------------------------------------

  var tables = data.tables.map(function (t) { return t.name; });
  var EQUALITY = conditions.EQUALITY;
  var ORDER = conditions.ORDER;
  conditions.builder(document.getElementById("policy-builder"), expression, [
    { label: "Tool", path: "tool.name", ops: EQUALITY, values: options(data.tools) },
    { label: "Tool writes data", path: "tool.writes", ops: ["=="], literal: true,
      values: options([{ value: "true", label: "yes" }, { value: "false", label: "no" }]) },
    { label: "Table a write changes", path: "args.table_name", ops: EQUALITY, values: options(tables) },
    { label: "Column a write sets", column: true, ops: ["is set", "is not set"],
      values: options(conditions.catalogColumns(data.tables)) },
    { label: "Agent", path: "agent.id", ops: EQUALITY,
      values: data.agents.map(function (a) { return { value: a.id, label: a.name }; }) },
    { label: "Action level", path: "agent.action_level", ops: EQUALITY, values: options(data.action_levels) },
    { label: "Rows a query returned", path: "rows", ops: ORDER, number: true },
    { label: "Table a query read", path: "table.name", ops: EQUALITY, values: options(tables) },
    { label: "Hour of the day (0-23)", path: "time.hour", ops: ORDER, number: true },
    { label: "Day of the week", path: "time.day", ops: EQUALITY, values: options(data.days) },
    { label: "Tool calls this hour", path: "agent.tool_calls_this_hour", ops: ORDER, number: true }
  ]);

  // --- validation as you type --------------------------------------------------------

  var again = conditions.validateAsYouType(expression, document.getElementById("expression-status"), {
    url: form.getAttribute("data-validate-url") || "/policies/validate",
    extra: function () { return { policy_type: policyType.value }; },
    okText: function (body) {
      return "Valid. Checked as a " + body.policy_type.replace(/_/g, " ") + " policy.";
    }
  });
  policyType.addEventListener("change", again);

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
          line(result, "p", conditions.errorText(body), "field-error");
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
