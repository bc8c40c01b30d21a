"""The client snippet of docs/mcp.md, run as a reader would run it, against River served
for real (conftest.live_river)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_python_snippet_of_docs_mcp_lists_the_tools_and_gets_an_answer(live_river):
    [snippet] = re.findall(r"```python\n(.*?)```", (ROOT / "docs/mcp.md").read_text(), flags=re.S)
    env = dict(os.environ, RIVER_MCP_URL=f"{live_river.url}/mcp/", RIVER_TOKEN=live_river.credentials["admin"])
    result = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "'ask_support_analyst'" in lines[0] and "'get_run'" in lines[0]
    assert "  … tool called: execute_query" in lines
    # The last print: the status, then the answer (several lines: the planner's note ends it).
    answer = result.stdout[result.stdout.index("\ncompleted ") + 1 :]
    assert "Answer" in answer and answer.rstrip().endswith("sampled values.)")
