"""The tool server API: register (allow-lists, secrets), discover, review, tenancy."""

from __future__ import annotations

import pytest

from governance.models import AuditLogEntry
from toolservers.models import McpTool, ToolServer

from .conftest import GIT_COMMAND, TIME_COMMAND

pytestmark = pytest.mark.django_db

URL = "/api/v1/tool-servers/"


def register(client, workspace, **body):
    return client.post(URL, {"workspace": workspace.pk, **body}, format="json")


def time_server(client, workspace, **extra):
    response = register(
        client,
        workspace,
        name="time",
        transport="stdio",
        command=TIME_COMMAND,
        args=["--local-timezone", "UTC"],
        **extra,
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_admin_registers_a_stdio_server_and_its_env_is_never_shown(api_client_for, owner, workspace):
    client = api_client_for(owner)
    body = time_server(client, workspace, env={"TIME_TOKEN": "s3cret-value-123"})
    assert body["secret_names"] == ["TIME_TOKEN"]
    assert "s3cret-value-123" not in str(body)
    stored = ToolServer.objects.get(pk=body["id"])
    assert stored.secrets_encrypted and "s3cret-value-123" not in stored.secrets_encrypted
    detail = client.get(f"{URL}{body['id']}/").json()
    assert "s3cret-value-123" not in str(detail) and "env" not in detail
    assert AuditLogEntry.objects.filter(event_type="tool_server.registered").count() == 1
    assert "s3cret-value-123" not in str(AuditLogEntry.objects.get(event_type="tool_server.registered").details)


@pytest.mark.parametrize("command", ["/bin/sh", "mcp-server-time", f"{TIME_COMMAND} --evil", ""])
def test_a_command_outside_the_allow_list_is_refused(api_client_for, owner, workspace, command):
    response = register(api_client_for(owner), workspace, name="x", transport="stdio", command=command)
    assert response.status_code == 400
    assert "command" in response.json()["error"]["details"]
    assert not ToolServer.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
        "http://[::1]:9/mcp",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1/mcp",
        "gopher://127.0.0.1/",
    ],
)
def test_an_http_url_outside_the_host_allow_list_is_refused_before_connecting(
    api_client_for, owner, workspace, url, settings
):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["127.0.0.1"]
    response = register(api_client_for(owner), workspace, name="web", transport="http", url=url)
    assert response.status_code == 400, response.content
    assert "url" in response.json()["error"]["details"]
    assert not ToolServer.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad Name", "transport": "stdio", "command": TIME_COMMAND}, "name"),
        ({"name": "a\x00b", "transport": "stdio", "command": TIME_COMMAND}, "name"),
        ({"name": "x" * 41, "transport": "stdio", "command": TIME_COMMAND}, "name"),
        ({"name": "t", "transport": "ftp", "command": TIME_COMMAND}, "transport"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "args": "--x"}, "args"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "args": ["a\x00"]}, "args.0"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "args": ["a"] * 31}, "args"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "env": {"BAD NAME": "v"}}, "env.BAD NAME"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "env": ["x"]}, "env"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "url": "http://127.0.0.1/"}, "url"),
        ({"name": "t", "transport": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Host": "x"}}, "headers.Host"),
        (
            {"name": "t", "transport": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-A": "a\r\nB: c"}},
            "headers.X-A",
        ),
        ({"name": "t", "transport": "http", "url": "http://127.0.0.1:9/" + "a" * 600}, "url"),
        ({"name": "t", "transport": "stdio", "command": TIME_COMMAND, "owner": 1}, "owner"),
    ],
)
def test_hostile_input_is_a_400_naming_the_field(api_client_for, owner, workspace, body, field):
    response = register(api_client_for(owner), workspace, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"], response.json()
    assert not ToolServer.objects.exists()


def test_a_name_is_unique_in_its_workspace(api_client_for, owner, workspace):
    client = api_client_for(owner)
    time_server(client, workspace)
    response = register(client, workspace, name="time", transport="stdio", command=TIME_COMMAND)
    assert response.status_code == 400 and "name" in response.json()["error"]["details"]


def test_a_member_without_the_admin_role_gets_403(api_client_for, owner, editor, workspace):
    server = time_server(api_client_for(owner), workspace)
    client = api_client_for(editor)
    assert register(client, workspace, name="mine", transport="stdio", command=TIME_COMMAND).status_code == 403
    assert client.post(f"{URL}{server['id']}/discover").status_code == 403
    assert client.delete(f"{URL}{server['id']}/").status_code == 403
    assert client.get(f"{URL}{server['id']}/").status_code == 200  # members may read


def test_an_outsider_gets_404_everywhere(api_client_for, owner, outsider, workspace):
    server = time_server(api_client_for(owner), workspace)
    client = api_client_for(outsider)
    assert client.get(f"{URL}{server['id']}/").status_code == 404
    assert client.post(f"{URL}{server['id']}/discover").status_code == 404
    assert (
        client.patch(
            f"{URL}{server['id']}/tools/get_current_time", {"action_class": "read", "enabled": True}, format="json"
        ).status_code
        == 404
    )
    assert client.delete(f"{URL}{server['id']}/").status_code == 404
    assert register(client, workspace, name="x", transport="stdio", command=TIME_COMMAND).status_code == 404
    listed = client.get(URL).json()
    assert (listed["results"] if isinstance(listed, dict) else listed) == []
    assert ToolServer.objects.count() == 1


def test_discover_lists_the_time_servers_tools_unreviewed(api_client_for, owner, workspace):
    client = api_client_for(owner)
    server = time_server(client, workspace)
    response = client.post(f"{URL}{server['id']}/discover")
    assert response.status_code == 200, response.content
    tools = {tool["name"]: tool for tool in response.json()["tools"]}
    assert set(tools) == {"get_current_time", "convert_time"}
    current = tools["get_current_time"]
    assert current["river_name"] == "mcp:time/get_current_time"
    assert current["state"] == "unreviewed" and current["usable"] is False
    assert current["suggested_class"] == "read"  # the server's hint, shown as a suggestion
    assert current["action_class"] == "" and current["enabled"] is False
    assert response.json()["health"] == "ok"


def test_review_sets_the_class_and_hints_never_lower_it(api_client_for, owner, workspace, git_repo):
    client = api_client_for(owner)
    response = register(
        client, workspace, name="git", transport="stdio", command=GIT_COMMAND, args=["--repository", str(git_repo)]
    )
    server = response.json()
    client.post(f"{URL}{server['id']}/discover")
    tools = {t.name: t for t in McpTool.objects.filter(server_id=server["id"])}
    assert tools["git_commit"].suggested_class == "write" and tools["git_status"].suggested_class == "read"
    refused = client.patch(
        f"{URL}{server['id']}/tools/git_commit", {"action_class": "read", "enabled": True}, format="json"
    )
    assert refused.status_code == 400 and "action_class" in refused.json()["error"]["details"]
    assert McpTool.objects.get(server_id=server["id"], name="git_commit").action_class == ""
    ok = client.patch(
        f"{URL}{server['id']}/tools/git_commit", {"action_class": "write", "enabled": True}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["state"] == "enabled" and ok.json()["usable"] is True
    # An admin may class a read-hinted tool as write (raising is always allowed).
    raised = client.patch(
        f"{URL}{server['id']}/tools/git_status", {"action_class": "write", "enabled": True}, format="json"
    )
    assert raised.status_code == 200 and raised.json()["action_class"] == "write"
    assert AuditLogEntry.objects.filter(event_type="mcp_tool.reviewed").count() == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action_class": "admin", "enabled": True}, "action_class"),
        ({"action_class": "read", "enabled": "yes please"}, "enabled"),
        ({"enabled": True}, "action_class"),
        ({"action_class": "read", "enabled": True, "digest": "x"}, "digest"),
    ],
)
def test_a_bad_review_is_a_400_naming_the_field(api_client_for, owner, workspace, body, field):
    client = api_client_for(owner)
    server = time_server(client, workspace)
    client.post(f"{URL}{server['id']}/discover")
    response = client.patch(f"{URL}{server['id']}/tools/get_current_time", body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"], response.content


def test_an_unknown_tool_is_404(api_client_for, owner, workspace):
    client = api_client_for(owner)
    server = time_server(client, workspace)
    response = client.patch(f"{URL}{server['id']}/tools/nope", {"action_class": "read", "enabled": True}, format="json")
    assert response.status_code == 404


def test_a_server_that_is_down_is_a_409_and_its_health_says_so(api_client_for, owner, workspace, tmp_path):
    client = api_client_for(owner)
    response = register(
        client,
        workspace,
        name="git",
        transport="stdio",
        command=GIT_COMMAND,
        args=["--repository", str(tmp_path / "no-such-repo")],
    )
    server = response.json()
    answer = client.post(f"{URL}{server['id']}/discover")
    assert answer.status_code == 409, answer.content
    stored = ToolServer.objects.get(pk=server["id"])
    assert stored.health == "error" and stored.health_message
    assert not McpTool.objects.exists()


def test_delete_removes_the_server_and_its_tools(api_client_for, owner, workspace):
    client = api_client_for(owner)
    server = time_server(client, workspace)
    client.post(f"{URL}{server['id']}/discover")
    assert client.delete(f"{URL}{server['id']}/").status_code == 204
    assert not ToolServer.objects.exists() and not McpTool.objects.exists()
    assert AuditLogEntry.objects.filter(event_type="tool_server.deleted").count() == 1
