"""rivercore, the reasoning loop and its values, is plain Python: importing every
module of it loads neither Django nor any River app (the import-linter contract says
the same statically; this checks what really gets imported at run time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIVER_APPS = ("riverapp", "triggers", "executions", "agents", "governance", "datasources", "tenancy", "telemetry",
              "common")


def test_every_core_module_imports_without_django_or_a_river_app():
    code = (
        "import importlib, pkgutil, sys\n"
        "import rivercore\n"
        "names = [m.name for m in pkgutil.walk_packages(rivercore.__path__, 'rivercore.')]\n"
        "for name in names: importlib.import_module(name)\n"
        f"apps = {RIVER_APPS!r}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in apps + ('django', 'rest_framework', 'celery'))\n"
        "print(len(names)); print(' '.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, loaded = done.stdout.splitlines()[:2] + [""] * (2 - len(done.stdout.splitlines()[:2]))
    assert int(count) >= 20  # every module was walked, not an empty package
    assert loaded == ""


def test_the_policy_port_fails_closed_when_nothing_is_installed():
    code = (
        "from rivercore import gate\n"
        "try:\n    gate.policy_checker()\nexcept RuntimeError as exc:\n    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: No policy checker is installed")
