"""Processes that do not call a model start without litellm and its tokenizer, and
without the MCP and A2A SDKs.

Importing litellm costs seconds of CPU, the two SDKs about one more (docs/benchmarks.md,
the cold section). A Celery worker loads litellm at its first model call and an SDK when
it first reaches a tool server, and ``manage.py`` commands that never run the engine
load none of them. Each probe runs in a fresh interpreter and reports which of these
modules it ended up holding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
MODEL_CLIENT = ("litellm", "tiktoken", "tokenizers", "openai", "mcp", "a2a", "twisted")

_REPORT = (
    "import json, sys\n"
    f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {MODEL_CLIENT!r})))\n"
)


def _probe(code: str, env: dict | None = None) -> list[str]:
    environment = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    environment.update({"DJANGO_SETTINGS_MODULE": "riverapp.settings", "DEBUG": "true", **(env or {})})
    done = subprocess.run([sys.executable, "-c", code + _REPORT], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_celery_worker_starts_without_the_model_client(tmp_path):
    # What `celery -A riverapp worker` loads before it takes a task: Django, the app, every
    # task module (autodiscovery), and its start-up hooks in the parent and in a pool child.
    loaded = _probe(
        "import django\n"
        "django.setup()\n"
        "from riverapp.celery import app\n"
        "app.loader.import_default_modules()\n"
        "from celery.signals import worker_init, worker_process_init\n"
        "worker_init.send(sender=None)\n"
        "worker_process_init.send(sender=None)\n"
        "from executions import tasks\n"
        "assert tasks.run_segment.name == 'executions.run_segment'\n",
        env={"RIVER_VAR_DIR": str(tmp_path)},
    )
    assert loaded == []


def test_the_model_client_is_loaded_by_the_first_model_call_path():
    # The probe above would pass if it could not see litellm at all: building the router,
    # which every model call does first, does load it.
    loaded = _probe("import django\ndjango.setup()\nimport executions.routing\n")
    assert "litellm" in loaded


def test_the_sdks_are_loaded_by_the_tool_server_clients():
    # Likewise for the SDKs: River's clients for MCP servers and A2A agents load them.
    loaded = _probe("import django\ndjango.setup()\nimport toolservers.mcp_client, toolservers.a2a_client\n")
    assert "mcp" in loaded and "a2a" in loaded


def test_runserver_is_daphnes_and_loads_its_server():
    # Twisted (Daphne's server) is not loaded by setting Django up (the probes above), yet
    # `manage.py runserver` is still Daphne's ASGI server, which does load it.
    loaded = _probe("import django\ndjango.setup()\n"
                    "from django.core.management import get_commands, load_command_class\n"
                    "assert get_commands()['runserver'] == 'daphne', get_commands()['runserver']\n"
                    "command = load_command_class('daphne', 'runserver')\n"
                    "assert command.server_cls.__module__ == 'daphne.server', command.server_cls\n")
    assert "twisted" in loaded


def test_admin_modules_load_with_the_urlconf_or_the_admin_checks():
    # Setting Django up imports no app's admin module; the admin's system checks do (so
    # `manage.py check` still checks every ModelAdmin), and so does the URLconf.
    loaded = _probe("import sys, django\ndjango.setup()\n"
                    "from django.contrib import admin\nfrom django.core import checks\n"
                    "assert 'agents.admin' not in sys.modules and not admin.site._registry\n"
                    "assert checks.run_checks(tags=[checks.Tags.admin]) == []\n"
                    "from agents.models import Agent\nassert Agent in admin.site._registry\n")
    assert loaded == []


def test_each_app_has_the_config_river_means():
    # Django takes an app's config from its apps module only while that module offers one:
    # riverapp's own (whose ready() zeroes the known metric series) must still be it.
    from django.apps import apps

    from riverapp.apps import RiverappConfig
    from riverapp.startup_apps import AdminConfig, DaphneRunserverConfig

    assert type(apps.get_app_config("riverapp")) is RiverappConfig
    assert type(apps.get_app_config("admin")) is AdminConfig
    assert type(apps.get_app_config("daphne")) is DaphneRunserverConfig


def test_manage_py_check_runs_without_the_model_client():
    loaded = _probe("import django\ndjango.setup()\nfrom django.core.management import call_command\n"
                    "call_command('check')\n")
    assert loaded == []


@pytest.mark.django_db
def test_issue_token_runs_without_the_model_client():
    if connection.vendor != "postgresql":
        pytest.skip("the probe reaches the test database from another process")
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    url = f"postgres://{quote(db['USER'], safe='')}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/" \
          f"{db['NAME']}"
    loaded = _probe(
        "import django\ndjango.setup()\n"
        "from django.core.management import call_command\n"
        "from django.core.management.base import CommandError\n"
        "try:\n    call_command('issue_token', 'nobody-by-this-name')\n"
        "except CommandError as exc:\n    assert 'No user named' in str(exc), exc\n"
        "else:\n    raise AssertionError('a token for nobody')\n",
        env={"DATABASE_URL": url},
    )
    assert loaded == []
