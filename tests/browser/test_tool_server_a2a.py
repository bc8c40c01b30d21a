"""The tool server page with a remote A2A agent (an ``a2a-sdk`` agent on 127.0.0.1):
register it, discover its one ``ask`` tool (suggested write), review it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.catalog_support import check_and_capture
from tests.browser.conftest import screenshot
from tests.toolservers.a2a_remote import RemoteAgent
from toolservers.models import McpTool


@pytest.fixture
def remote(settings):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["127.0.0.1"]
    agent = RemoteAgent().start()
    yield agent
    agent.stop()


def test_register_a_remote_a2a_agent_discover_and_review_its_ask_tool(signed_in, demo, remote, page_errors):
    page = signed_in(demo["admin"])
    page.goto("/tool-servers/")
    page.get_by_label("Name", exact=True).fill("ledger")
    page.get_by_label("A remote A2A agent").check()
    page.get_by_label(re.compile(r"^URL")).fill(remote.url)
    page.get_by_label("Headers").fill("X-API-Key: page-secret-77")
    page.get_by_role("button", name="Register").click()

    expect(page.get_by_role("heading", name="ledger", level=1)).to_be_visible()
    assert "page-secret-77" not in page.content()
    page.get_by_role("button", name="Discover tools").click()
    ask = page.locator("#tool-ask")
    expect(ask).to_contain_text("mcp:ledger/ask")
    expect(ask).to_contain_text("Not reviewed")
    expect(ask).to_contain_text("Ledger Agent")
    expect(page.get_by_text("A remote A2A agent at")).to_be_visible()
    expect(ask).to_contain_text("The server suggests write")
    assert remote.headers[-1]["x-api-key"] == "page-secret-77"
    assert remote.messages == []

    ask.get_by_label(re.compile("Write: governed")).check()
    ask.get_by_role("button", name="Review").click()
    expect(page.locator("#tool-ask")).to_contain_text("Enabled")
    tool = McpTool.objects.get(name="ask", server__name="ledger")
    assert tool.usable and tool.action_class == "write"
    check_and_capture(page, "tool-server-a2a")
    page.emulate_media(color_scheme="dark")
    screenshot(page, "tool-server-a2a-dark")
    page.emulate_media(color_scheme="light")
