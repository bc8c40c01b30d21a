"""On SQLite (``make run`` without ``DATABASE_URL``) the search box and the runs list's
text filter match with ``LIKE``: the migrations skip the GIN indexes, and the same
selectors find the same rows, in the workspace's scope only. Run in a subprocess on a
fresh SQLite file whatever database the suite uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json
from django.contrib.auth import get_user_model
from django.db import connection
from agents.selectors import agents_search
from executions.models import Execution
from executions.selectors import ExecutionFilters, executions_filter, executions_search, sessions_search
from tenancy.models import Membership, Organization, Workspace
from tests.factories import make_agent

assert connection.vendor == "sqlite"
users = get_user_model().objects
mine = Workspace.objects.create(organization=Organization.objects.create(name="A", slug="a"), name="A", slug="a")
theirs = Workspace.objects.create(organization=Organization.objects.create(name="B", slug="b"), name="B", slug="b")
me, them = users.create(username="dana"), users.create(username="eve")
Membership.objects.create(workspace=mine, user=me, role="admin")
Membership.objects.create(workspace=theirs, user=them, role="admin")
agent = make_agent(workspace=mine, owner=me, name="Refund Helper")
other = make_agent(workspace=theirs, owner=them, name="Refund Helper")
def run(a, prompt, answer, requester=None):
    return Execution.objects.create(workspace=a.workspace, agent=a, agent_version=a.versions.get(),
                                    input_prompt=prompt, result={"summary": answer}, requester=requester).pk
by_answer = run(agent, "How many?", "Forty Marmalade tickets")
by_prompt = run(agent, "Quokka report please", "Done", requester=me)
their_run = run(other, "marmalade", "marmalade")
found = lambda text: sorted(r.pk for r in executions_search(user=me, workspace=mine, text=text, limit=10))
print("RESULT " + json.dumps({
    "answer": found("marmalade"), "prefix": found("QUOK"), "both": found("quokka marmalade"),
    "requester": found("dana"), "id": found(f"#{their_run}"),
    "agents": [a.name for a in agents_search(user=me, workspace=mine, text="refund", limit=10)],
    "filter": sorted(executions_filter(user=me, workspace=mine, filters=ExecutionFilters(text="marmalade"))
                     .values_list("pk", flat=True)),
    "expected": {"by_answer": by_answer, "by_prompt": by_prompt},
}))
"""


@pytest.mark.slow
def test_search_falls_back_to_like_on_sqlite(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("REDIS_", "RIVER_", "DATABASE_")) and key not in {"DJANGO_SETTINGS_MODULE"}}
    env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{tmp_path / 'river.sqlite3'}", RIVER_VAR_DIR=str(tmp_path),
               LOG_LEVEL="WARNING")

    def manage(*args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,  # noqa: S603
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    manage("migrate", "--no-input", "-v", "0")
    out = manage("shell", "-c", SCRIPT)
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    ids = result["expected"]
    assert result["answer"] == [ids["by_answer"]]
    assert result["prefix"] == [ids["by_prompt"]]
    assert result["both"] == []
    assert result["requester"] == [ids["by_prompt"]]
    assert result["id"] == []  # another workspace's run, even by its id
    assert result["agents"] == ["Refund Helper"]
    assert result["filter"] == [ids["by_answer"]]
