"""Security headers on every response, and pages that need no inline script or style."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from datasources.models import DataSource
from executions import services
from governance.models import ApprovalRequest
from tests.factories import ScriptedLLM, make_agent, tool_reply
from tests.governance.approval_tools import WRITE_TOOL

pytestmark = pytest.mark.django_db


def _csp(response) -> dict[str, list[str]]:
    policy = {}
    for directive in response["Content-Security-Policy"].split(";"):
        name, *values = directive.split()
        policy[name] = values
    return policy


@pytest.fixture
def paused(workspace, owner):
    agent = make_agent(
        workspace=workspace, owner=owner, name="Refunder", tools=[WRITE_TOOL], action_level="act_with_approval",
        require_approval_for=[WRITE_TOOL], approver_roles=["admin"],
    )
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Refund ticket 7"))
    services.execution_run_segment(
        execution_id=execution.pk, llm=ScriptedLLM([tool_reply(WRITE_TOOL, {"ticket_id": 7, "amount": 40.0})])
    )
    return ApprovalRequest.objects.get(execution_id=execution.pk)


@pytest.fixture
def staff_browser(owner):
    owner.is_staff = owner.is_superuser = True
    owner.save(update_fields=["is_staff", "is_superuser"])
    client = Client()
    client.force_login(owner)
    return client


@pytest.mark.parametrize("path", ["/accounts/login/", "/api/v1/agents/", "/api/v1/nothing", "/api/docs/", "/health"])
def test_every_response_carries_the_security_headers(path):
    response = Client().get(path)
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert "camera=()" in response["Permissions-Policy"] and "microphone=()" in response["Permissions-Policy"]
    assert "geolocation=()" in response["Permissions-Policy"]
    policy = _csp(response)
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'self'"]
    assert policy["connect-src"] == ["'self'", "ws://testserver", "wss://testserver"]
    assert not any("unsafe" in value for values in policy.values() for value in values)


class _InlineFinder(HTMLParser):
    """Collects everything a `script-src 'self'; style-src 'self'` policy would block."""

    def __init__(self):
        super().__init__()
        self.problems: list[str] = []
        self._script_without_src = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            if name == "style":
                self.problems.append(f"<{tag} style=...>")
            if name in {"href", "src", "action", "formaction"} and (value or "").strip().lower().startswith(
                "javascript:"
            ):
                self.problems.append(f"<{tag} {name}=javascript:...>")
            if name in {"href", "src"} and re.match(r"^(https?:)?//", value or "") and tag in {"script", "link"}:
                self.problems.append(f"<{tag} {name}={value}> from another host")
        if tag == "style":
            self.problems.append("<style> block")
        if tag == "script":
            executable = attributes.get("type", "text/javascript") in {"text/javascript", "module", ""}
            self._script_without_src = executable and not attributes.get("src")

    def handle_data(self, data):
        if self._script_without_src and data.strip():
            self.problems.append(f"inline <script>: {data.strip()[:60]}")

    def handle_endtag(self, tag):
        if tag == "script":
            self._script_without_src = False


def _inline_problems(html: str) -> list[str]:
    finder = _InlineFinder()
    finder.feed(html)
    return finder.problems


def test_the_finder_spots_each_kind_of_inline_code():
    html = (
        '<script>alert(1)</script><style>p{}</style><p style="x" onclick="y">'
        '<a href="javascript:z">a</a><script src="https://cdn.example/x.js"></script>'
        '<script type="application/json">{"data": 1}</script>'
    )
    assert len(_inline_problems(html)) == 6


def test_pages_have_no_inline_script_style_or_handler(paused, staff_browser, workspace):
    source = DataSource.objects.create(workspace=workspace, name="S", type="sqlite", connection_config={"path": "x.db"})
    pages = [
        "/", "/approvals/", f"/approvals/{paused.pk}/", f"/runs/{paused.execution_id}/", "/api/docs/",
        "/admin/", "/admin/agents/agent/", "/admin/executions/execution/", "/admin/governance/approvalrequest/",
        f"/admin/datasources/datasource/{source.pk}/change/", "/admin/tenancy/accesstoken/",
    ]
    for path in pages:
        response = staff_browser.get(path)
        assert response.status_code == 200, path
        assert _inline_problems(response.content.decode()) == [], path
    assert _inline_problems(Client().get("/accounts/login/").content.decode()) == []


def test_htmx_is_told_not_to_inject_styles_or_evaluate_code(paused, staff_browser):
    html = staff_browser.get("/approvals/").content.decode()
    assert '"includeIndicatorStyles": false' in html and '"allowEval": false' in html


def test_swagger_ui_is_served_from_the_sidecar_package_not_a_cdn():
    client = Client()
    page = client.get("/api/docs/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and not [url for url in assets if "//" in url]
    assert any("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in url for url in assets)
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200, url
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert body, url
    script = client.get("/api/docs/?script=")
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle(" in script.content and b"/api/schema/" in script.content

