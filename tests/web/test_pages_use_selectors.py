"""The pages (``web/``) read through the domain apps' selectors, never their managers.

A check over the source of every module under ``web/``: no ``.objects``, no
``get_user_model()``, no refining of a selector's queryset (``.filter()``,
``.order_by()``, ``.select_related()`` …: the selector returns the rows the page shows),
and a model class imported from a domain app's ``models`` is used
only for what it declares (``Execution.Status.choices``, ``Agent.TERMINAL``) or as a type
annotation: never called, never asked for rows. Queries belong in the owning app's
``selectors.py``, where the API uses the same ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "web"
# QuerySet methods that build a query: a page asks a selector for the rows it shows
# instead of refining the selector's queryset (``dict.values()`` and ``.update`` are
# everyday Python, so they are not listed).
QUERY_METHODS = {"filter", "exclude", "order_by", "values_list", "select_related", "prefetch_related", "only",
                 "defer", "annotate", "aggregate", "in_bulk", "distinct", "extra", "raw", "alias"}
DOMAIN_APPS = {"agents", "artifacts", "datasources", "executions", "governance", "telemetry", "tenancy", "triggers"}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _annotation_nodes(tree: ast.AST) -> set[ast.AST]:
    """Every node inside an annotation (a parameter's, a return's or a variable's)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {inner for root in roots for inner in ast.walk(root)}


def violations(source: str, filename: str = "<web>") -> list[str]:
    """What ``source`` does that a page module may not, one line per finding."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    model_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "objects":
            found.append(f"{filename}:{node.lineno}: .objects (query through a selector)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QUERY_METHODS:
            found.append(f"{filename}:{node.lineno}: .{node.func.attr}() (ask a selector for these rows)")
        elif isinstance(node, ast.Name | ast.Attribute) and getattr(node, "id", getattr(node, "attr", "")) in (
                "get_user_model",):
            found.append(f"{filename}:{node.lineno}: get_user_model (users are read in tenancy.selectors)")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in DOMAIN_APPS and "models" in parts[1:]:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] in DOMAIN_APPS and parts[-1] == "models":
                for alias in node.names:
                    if alias.name == "*":
                        found.append(f"{filename}:{node.lineno}: from {node.module} import *")
                    model_names.add(alias.asname or alias.name)
            elif parts[0] in DOMAIN_APPS and len(parts) == 1 and any(a.name == "models" for a in node.names):
                found.append(f"{filename}:{node.lineno}: from {node.module} import models")
    parents = _parents(tree)
    in_annotations = _annotation_nodes(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in model_names) or node in in_annotations:
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr != "objects":
            continue  # Model.Status, Model.TERMINAL: what the model declares, no query
        found.append(f"{filename}:{node.lineno}: {node.id} used as more than its declarations")
    return found


def _web_modules() -> list[Path]:
    return sorted(path for path in WEB.rglob("*.py") if "migrations" not in path.parts)


def test_no_page_module_queries_another_apps_models():
    modules = _web_modules()
    assert len(modules) > 10, "the web app's modules were not found"
    found = [line for path in modules for line in violations(path.read_text(), str(path.relative_to(WEB.parent)))]
    assert found == []


@pytest.mark.parametrize("source", [
    "from agents.models import Agent\nrows = Agent.objects.filter(workspace=w)\n",
    "from executions import models\n",
    "import executions.models\n",
    "from governance.models import ApprovalRequest\nrow = ApprovalRequest(pk=1)\n",
    "from triggers.models import Trigger\nfound = some_lookup(Trigger)\n",
    "from django.contrib.auth import get_user_model\nusers = get_user_model()\n",
    "rows = workspace.memberships.model.objects.all()\n",
    "rows = agents_for_user(user=user).filter(status='active')\n",
    "rows = trigger_firings(trigger=t).select_related(None)\n",
    "endpoint = workspace.webhook_endpoints.order_by('slug')\n",
])
def test_the_check_catches_a_query_written_in_a_page(source):
    assert violations(source) != []


def test_the_check_lets_a_page_use_a_models_choices_and_annotations():
    source = (
        "from executions.models import Execution\n"
        "CHOICES = Execution.Status.choices\n"
        "def head(execution: Execution) -> Execution | None:\n"
        "    return execution if execution.status in Execution.TERMINAL else None\n"
    )
    assert violations(source) == []
