"""The New version page offers the workspace's reviewed MCP tools beside the built-in ones
(issue 31 §1: "an agent version lists MCP tools like built-in ones"): never an unreviewed,
disabled or changed tool, never another workspace's; a version saved with one lists it."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.models import AgentVersion
from tests.factories import make_agent
from tests.web.test_version_quorum_escalation import _post
from toolservers.models import McpTool, ToolServer

pytestmark = pytest.mark.django_db


def _tool(server: ToolServer, name: str, *, reviewed: bool = True, enabled: bool = True) -> McpTool:
    digest = f"{name:0<64}"[:64]
    return McpTool.objects.create(
        server=server, name=name, description=f"{name} things.", digest=digest, action_class="write",
        enabled=enabled, reviewed_digest=digest if reviewed else "")


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner, name="Ticket fixer", tools=["write_back", "execute_query"],
                      require_approval_for=["write_back"], action_level="act_with_approval")


@pytest.fixture
def servers(workspace, other_workspace):
    ours = ToolServer.objects.create(workspace=workspace, name="notes", transport="http",
                                     url="http://127.0.0.1:9/mcp")
    theirs = ToolServer.objects.create(workspace=other_workspace, name="secret", transport="http",
                                       url="http://127.0.0.1:9/mcp")
    _tool(ours, "note")
    _tool(ours, "draft", reviewed=False)
    _tool(ours, "purge", enabled=False)
    _tool(theirs, "leak")
    return ours


def _offered(html: str) -> set[str]:
    return set(re.findall(r'name="tools" value="(mcp:[^"]+)"', html))


def test_only_the_workspaces_usable_mcp_tools_are_offered(owner, agent, servers):
    client = Client()
    client.force_login(owner)
    page = client.get(f"/agents/{agent.pk}/versions/new/").content.decode()
    assert _offered(page) == {"mcp:notes/note"}
    assert "mcp:secret/leak" not in page


def test_a_version_saved_with_an_mcp_tool_lists_it(owner, agent, servers):
    client = Client()
    client.force_login(owner)
    response = client.post(f"/agents/{agent.pk}/versions/new/",
                           _post(tools=["execute_query", "write_back", "mcp:notes/note"],
                                 require_approval_for=["write_back", "mcp:notes/note"]))
    assert response.status_code == 302, re.findall(r'class="field-error"[^>]*>([^<]*)', response.content.decode())
    version = AgentVersion.objects.get(agent=agent, version=2)
    assert "mcp:notes/note" in version.tools


@pytest.mark.parametrize("name", ["mcp:notes/draft", "mcp:notes/purge", "mcp:secret/leak", "mcp:notes/<b>x</b>"])
def test_a_tool_not_offered_is_refused_and_nothing_is_saved(owner, agent, servers, name):
    client = Client()
    client.force_login(owner)
    response = client.post(f"/agents/{agent.pk}/versions/new/", _post(tools=["execute_query", name]))
    assert response.status_code == 400  # the form again, the error at its field
    page = response.content.decode()
    assert "is not one of the available choices" in page and "<b>x</b>" not in page
    assert not AgentVersion.objects.filter(agent=agent, version=2).exists()
