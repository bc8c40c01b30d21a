/* An agent version's auto-approve conditions (templates/agents/_auto_approve.html): each
   row gets the condition builder (static/condition_builder.js) with what such a
   condition can look at (the call: the model's confidence, the tool, its arguments),
   and its condition is validated as it is typed by the check a saved version gets. */
(function () {
  "use strict";

  var section = document.getElementById("auto-approve");
  var dataNode = document.getElementById("auto-approve-builder-data");
  if (!section || !dataNode || !window.River || !River.conditions) {
    return;
  }
  var data = JSON.parse(dataNode.textContent);
  var conditions = River.conditions;
  var options = conditions.subjectOptions;
  var tables = data.tables.map(function (t) { return t.name; });
  var subjects = [
    { label: "Model's confidence (0 to 1)", path: "confidence_score", ops: conditions.ORDER, number: true },
    { label: "Tool", path: "tool.name", ops: conditions.EQUALITY, values: options(data.tools) },
    { label: "Table a write changes", path: "args.table_name", ops: conditions.EQUALITY, values: options(tables) },
    { label: "Column a write sets", column: true, ops: ["is set", "is not set"],
      values: options(conditions.catalogColumns(data.tables)) }
  ];
  var url = section.getAttribute("data-validate-url");

  section.querySelectorAll("[data-auto-approve-row]").forEach(function (row) {
    var expression = row.querySelector("[data-auto-approve-condition]");
    var fieldset = row.querySelector("[data-condition-builder]");
    var status = row.querySelector(".expression-status");
    conditions.builder(fieldset, expression, subjects);
    conditions.validateAsYouType(expression, status, {
      url: url,
      okText: function () { return "Valid: approves the call without asking when it holds."; }
    });
  });
})();
