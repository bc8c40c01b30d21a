"""The README's "Try it" commands, pasted into a fresh bash against a real `runriver` on
a port other than 8000: the analyst answers, the specialist pauses for approval, the
approver approves, and after `seed_demo` (run beside the server, no restart) the same
commands pause again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runriver import runriver_running

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE_SECONDS = 90

pytestmark = pytest.mark.slow


def try_it_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Try it") : readme.index("## The manual")]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_readme_stays_a_front_page_and_names_no_fixed_port_in_its_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    blocks = try_it_blocks()
    assert len(blocks) == 3
    commands = "".join(blocks)
    assert commands.startswith('PORT=${PORT:-8000}; BASE="http://127.0.0.1:$PORT"')
    assert commands.count("8000") == 1 and "127.0.0.1" not in commands.replace('"http://127.0.0.1:$PORT"', "")


def _manage(env: dict, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _bash(env: dict, script: str) -> list[str]:
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300  # noqa: S607
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


@pytest.fixture
def server(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REDIS_", "RIVER_", "DATABASE_", "PORT", "BASE"))
        and key not in {"DJANGO_SETTINGS_MODULE", "SECRET_KEY"}
    }
    env.update(
        DEBUG="true",
        DATABASE_URL=f"sqlite:///{tmp_path / 'river.sqlite3'}",
        RIVER_VAR_DIR=str(tmp_path),
        RIVER_ADMIN_PASSWORD="readme-test-password",
        RIVER_APPROVER_PASSWORD="readme-approver-password",
        LOG_LEVEL="WARNING",
    )
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    with runriver_running(env=env, log_path=tmp_path / "server.log", deadline_seconds=START_DEADLINE_SECONDS) as port:
        yield env | {"PORT": str(port)}


def test_the_readme_commands_walk_the_approval_gate_twice(server):
    setup, close_prompt, approve = try_it_blocks()
    first = _bash(server, setup + close_prompt + approve)
    statuses = [line for line in first if line in {"completed", "awaiting_approval", "failed"}]
    assert statuses == ["completed", "awaiting_approval", "completed"], first
    assert any('"summary"' in line and "Answer: " in line for line in first), first

    # Tried again without a restart: nothing is left to close until the demo is seeded.
    _manage(server, "seed_demo")
    second = _bash(server, setup + close_prompt + approve)
    statuses = [line for line in second if line in {"completed", "awaiting_approval", "failed"}]
    assert statuses == ["completed", "awaiting_approval", "completed"], second
