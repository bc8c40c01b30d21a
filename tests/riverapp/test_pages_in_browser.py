"""The pages and /api/docs/ in headless Chromium under River's real CSP: they work, and
the browser reports no Content-Security-Policy violation. Skipped where Chromium is not
installed (tests/riverapp/test_security_headers.py checks the served HTML everywhere)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
from django.test import Client

from executions import services
from governance.models import ApprovalRequest
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance.approval_tools import WRITE_TOOL

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    # CI installs Debian's chromium and sets RIVER_REQUIRE_BROWSER=1, so there a missing
    # browser fails the run instead of skipping the test.
    pytest.mark.skipif(CHROMIUM is None and os.environ.get("RIVER_REQUIRE_BROWSER") != "1",
                       reason="Chromium is not installed (apt-get install chromium)"),
    pytest.mark.django_db(transaction=True),
]
DEADLINE_SECONDS = 30


class Browser:
    """Just enough of the Chrome DevTools Protocol: navigate, evaluate, collect console."""

    def __init__(self, profile_dir):
        from websockets.sync.client import connect

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile_dir}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline, "Chromium did not start"
            assert self.process.poll() is None, "Chromium exited"
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as answer:
            page = next(target for target in json.load(answer) if target["type"] == "page")
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=None, legacy=True)
        self.ids = itertools.count(1)
        self.console: list[str] = []
        self.loaded = False
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(method)

    def _note(self, message: dict) -> None:
        method = message.get("method")
        if method == "Log.entryAdded":
            self.console.append(message["params"]["entry"]["text"])
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(arg.get("value", "")) for arg in message["params"]["args"]))
        elif method == "Runtime.exceptionThrown":
            self.console.append(message["params"]["exceptionDetails"].get("text", "exception"))
        elif method == "Page.loadEventFired":
            self.loaded = True

    def call(self, method: str, **params):
        call_id = next(self.ids)
        self.socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=DEADLINE_SECONDS))
            if message.get("id") == call_id:
                assert "error" not in message, message
                return message.get("result", {})
            self._note(message)

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str) -> None:
        self.console.clear()
        self.loaded = False
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self.loaded:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{url} did not finish loading"
            self._note(json.loads(self.socket.recv(timeout=remaining)))

    def wait_for(self, expression: str) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self.evaluate(expression):
            assert time.monotonic() < deadline, f"never true: {expression}"
            time.sleep(0.1)

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=DEADLINE_SECONDS)


@pytest.fixture
def browser(tmp_path):
    opened = Browser(tmp_path)
    yield opened
    opened.close()


def _violations(console: list[str]) -> list[str]:
    """Console lines for a CSP violation or a resource the page asked for and did not get
    (a missing script, stylesheet or icon)."""
    return [line for line in console if "Content Security Policy" in line or "Failed to load resource" in line]


def test_pages_work_in_chromium_without_a_csp_violation_or_a_missing_resource(live_server, browser, workspace, owner):
    agent = make_agent(
        workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL], action_level="act_with_approval",
        require_approval_for=[WRITE_TOOL], approver_roles=["admin"],
    )
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Refund ticket 7"))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0})])
    )
    approval = ApprovalRequest.objects.get(execution_id=execution.pk)
    owner.is_staff = owner.is_superuser = True
    owner.save(update_fields=["is_staff", "is_superuser"])
    signed_in = Client()
    signed_in.force_login(owner)
    browser.call("Network.setCookie", name="sessionid", value=signed_in.cookies["sessionid"].value,
                 url=live_server.url)

    browser.open(live_server.url + "/api/docs/")
    browser.wait_for("document.querySelectorAll('.opblock').length > 40")
    assert _violations(browser.console) == []

    for path in ("/", "/approvals/", f"/approvals/{approval.pk}/", f"/runs/{execution.pk}/"):
        browser.open(live_server.url + path)
        assert browser.evaluate("typeof htmx") == "object", path
        assert _violations(browser.console) == [], path
    # approvals.js ran: it rewrote the server-rendered countdown in its own format.
    browser.wait_for("/^in \\d+h \\d+m \\d+s$/.test(document.querySelector('[data-expires-at]').textContent)")

    for path in ("/admin/", "/admin/agents/agent/", "/admin/executions/execution/"):
        browser.open(live_server.url + path)
        assert browser.evaluate("document.title").endswith("Django site admin"), path
        assert _violations(browser.console) == [], path
