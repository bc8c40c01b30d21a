"""No product module imports another module's private name (``from x import _name``):
what one module offers another is public, named without the underscore, and documented."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["agents", "artifacts", "common", "datasources", "demo", "executions", "governance",
           "riverapp", "rivercore", "telemetry", "tenancy", "triggers", "web"]


def _private_imports() -> list[str]:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}")
    return found


def test_no_product_module_imports_a_private_name():
    assert _private_imports() == []


def test_the_check_sees_a_private_import(tmp_path, monkeypatch):
    package = tmp_path / "agents"
    package.mkdir()
    (package / "leak.py").write_text("from executions.services.resume import _append\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PRODUCT", ["agents"])
    assert _private_imports() == ["agents/leak.py:1 executions.services.resume._append"]
