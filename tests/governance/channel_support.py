"""Shared pieces of the e-mail and Slack approval tests: a run paused at the gate, a
fake Slack (a local HTTP server that records what River posts to it), and requests
signed the way Slack signs them (HMAC-SHA256 over ``v0:{timestamp}:{body}``)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

from executions import services
from governance.models import ApprovalRequest
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance import approval_tools
from tests.governance.approval_tools import WRITE_TOOL

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documentation's example secret
PROPOSED = {"ticket_id": 7, "amount": 40.0}


def pause_run(*, workspace, owner, prompt: str = "Refund ticket 7") -> ApprovalRequest:
    """A real run of an act_with_approval agent, paused at its write (approvers: admins)."""
    agent = make_agent(workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL],
                       action_level="act_with_approval", require_approval_for=[WRITE_TOOL], approver_roles=["admin"])
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=approval_tools.requester_in(workspace), prompt=prompt))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, PROPOSED, call_id="call_refund")]))
    return ApprovalRequest.objects.get(execution_id=execution.pk)


def slack_signed(body: bytes, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with ``body``: computed as Slack documents its signing."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def interaction_body(*, approval_id, action_id: str, response_url: str, team: str = "T0001",
                     user: str = "U0001") -> bytes:
    payload = {"type": "block_actions", "team": {"id": team, "domain": "acme"},
               "user": {"id": user, "username": "dana", "team_id": team},
               "actions": [{"action_id": action_id, "block_id": f"river_approval_{approval_id}",
                            "value": str(approval_id), "type": "button"}],
               "response_url": response_url, "trigger_id": "1.2.3"}
    return urlencode({"payload": json.dumps(payload)}).encode()


def command_body(*, text: str, team: str = "T0001", user: str = "U0001") -> bytes:
    return urlencode({"command": "/river", "text": text, "team_id": team, "user_id": user,
                      "user_name": "dana", "response_url": "https://hooks.slack.com/commands/x"}).encode()


class FakeSlack:
    """What River posted, per path, as parsed JSON."""

    def __init__(self, url: str):
        self.url = url
        self.posts: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def received(self, path_prefix: str = "/") -> list[dict]:
        with self.lock:
            return [body for path, body in self.posts if path.startswith(path_prefix)]


@contextmanager
def fake_slack():
    """A local HTTP server standing in for Slack's webhooks and response URLs."""
    state: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state["fake"].lock:
                state["fake"].posts.append((self.path, json.loads(body or b"{}")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["fake"] = FakeSlack(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["fake"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def requester_as_approver(workspace):
    """The run's requester, made a workspace admin: only the requester rule stops them."""
    from tenancy.models import Membership
    from tenancy.permissions import Role

    requester = approval_tools.requester_in(workspace)
    Membership.objects.filter(workspace=workspace, user=requester).update(role=Role.ADMIN)
    return requester
