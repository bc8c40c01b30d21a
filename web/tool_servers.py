"""Pages of MCP tool servers (docs/mcp.md): the list with the register form, a server's
page with its health, discovery and every tool's review (class and enabled), and the
difference between what was reviewed and what the server lists now.

Everything goes through the toolservers services, so a page refuses what the API
refuses (a command outside RIVER_MCP_STDIO_COMMANDS, a URL outside the host allow-list).
Secrets (env, headers) are written, never shown: the form never fills them back in.
Descriptions and schemas come from the server: they are escaped like any text."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from rivercore.errors import RiverError
from rivercore.types.toolservers import river_name
from tenancy.permissions import TOOL_SERVER_MANAGE, WORKSPACE_VIEW
from tenancy.selectors import workspace_permissions
from toolservers.selectors import (
    mcp_tool_diff,
    mcp_tool_get,
    tool_server_get_for_user,
    tool_server_tools,
    tool_servers_for_user,
)
from toolservers.services import mcp_tool_review, tool_server_delete, tool_server_discover, tool_server_register
from web.page_tools import (
    errors_onto_form,
    mark_invalid_fields,
    or_404,
    page_login_required,
    require,
    workspace_and_permissions,
)

TRANSPORTS = [
    ("stdio", "A local command (stdio)"),
    ("http", "A URL (streamable HTTP)"),
    ("a2a", "A remote A2A agent (its base or agent card URL)"),
]
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
CLASSES = [("read", "Read: runs within the agent's level"), ("write", "Write: governed like any write")]


def _pairs(text: str, separator: str, field: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        key, found, value = line.partition(separator)
        if not found:
            raise forms.ValidationError(f"Line {number}: write NAME{separator}value.", code=field)
        values[key.strip()] = value.strip()
    return values


class ToolServerForm(forms.Form):
    name = forms.CharField(
        max_length=40, help_text="Lower-case letters, digits and '-'; agents name its tools mcp:<name>/<tool>."
    )
    transport = forms.ChoiceField(
        choices=TRANSPORTS, widget=forms.RadioSelect, initial="stdio", label="How River reaches it"
    )
    command = forms.ChoiceField(
        required=False, help_text="Only the commands an operator allowed (RIVER_MCP_STDIO_COMMANDS)."
    )
    args = forms.CharField(
        required=False,
        max_length=15_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Arguments",
        help_text="One per line.",
    )
    env = forms.CharField(
        required=False,
        max_length=80_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Environment",
        help_text="NAME=value, one per line. Stored encrypted; never shown again.",
    )
    url = forms.CharField(
        required=False,
        max_length=500,
        label="URL",
        help_text="http(s)://…; the host must pass the data sources' host allow-list.",
    )
    headers = forms.CharField(
        required=False,
        max_length=80_000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Name: value, one per line (for example Authorization). Stored encrypted; never shown again.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["command"].choices = [("", "—")] + [(c, c) for c in settings.RIVER_MCP_STDIO_COMMANDS]

    def clean_env(self):
        return _pairs(self.cleaned_data.get("env", ""), "=", "env")

    def clean_headers(self):
        return _pairs(self.cleaned_data.get("headers", ""), ":", "headers")

    def clean_args(self):
        return [line.strip() for line in (self.cleaned_data.get("args") or "").splitlines() if line.strip()]


class ReviewForm(forms.Form):
    action_class = forms.ChoiceField(choices=CLASSES, widget=forms.RadioSelect, label="Class")
    enabled = forms.BooleanField(required=False, label="Agents may use it")


@page_login_required
@require_http_methods(["GET", "POST"])
def tool_servers_list(request):
    workspace, granted = workspace_and_permissions(request)
    may_add = TOOL_SERVER_MANAGE in granted
    form = ToolServerForm(request.POST or None) if may_add else None
    if request.method == "POST":
        require(granted, TOOL_SERVER_MANAGE)
        if workspace is not None and form.is_valid():
            values = dict(form.cleaned_data)
            try:
                server = tool_server_register(workspace=workspace, actor=request.user, **values)
            except RiverError as exc:
                errors_onto_form(form, exc, {"args": "args", "env": "env", "headers": "headers"})
            else:
                messages.success(request, f"{server.name} is registered. Discover its tools, then review each.")
                return redirect("tool-server-page", server_id=server.pk)
        mark_invalid_fields(form)
    servers = list(tool_servers_for_user(user=request.user, workspace_id=workspace.pk)) if workspace else []
    return render(
        request,
        "toolservers/list.html",
        {"workspace": workspace, "servers": servers, "form": form, "may_add": may_add},
        status=400 if form is not None and form.errors else 200,
    )


def _server_for(request, server_id, permission: str):
    server = or_404(tool_server_get_for_user, user=request.user, server_id=server_id)
    require(workspace_permissions(user=request.user, workspace=server.workspace), permission)
    return server


def _page(request, server, *, status: int = 200, review_errors: dict | None = None):
    granted = workspace_permissions(user=request.user, workspace=server.workspace)
    tools = []
    for tool in tool_server_tools(server=server):
        tools.append(
            {
                "tool": tool,
                "river_name": river_name(server.name, tool.name),
                "diff": mcp_tool_diff(tool=tool),
                "schema": json.dumps(tool.input_schema, indent=2, sort_keys=True)[:4000],
                "errors": (review_errors or {}).get(tool.name, []),
                "hints": ", ".join(
                    f"{hint} {str(tool.annotations[hint]).lower()}"
                    for hint in HINTS
                    if isinstance(tool.annotations, dict) and hint in tool.annotations
                ),
            }
        )
    return render(
        request,
        "toolservers/detail.html",
        {
            "server": server,
            "tools": tools,
            "may_manage": TOOL_SERVER_MANAGE in granted,
            "classes": CLASSES,
        },
        status=status,
    )


@page_login_required
@require_GET
def tool_server_page(request, server_id):
    return _page(request, _server_for(request, server_id, WORKSPACE_VIEW))


@page_login_required
@require_POST
def tool_server_discover_page(request, server_id):
    server = _server_for(request, server_id, TOOL_SERVER_MANAGE)
    try:
        tools = tool_server_discover(server=server, actor=request.user)
    except RiverError as exc:
        messages.error(request, exc.message)
    else:
        changed = [tool.name for tool in tools if tool.changed]
        note = f" Changed since their review, and disabled: {', '.join(changed)}." if changed else ""
        messages.success(request, f"{len(tools)} tool(s) listed.{note}")
    return redirect("tool-server-page", server_id=server.pk)


@page_login_required
@require_POST
def mcp_tool_review_page(request, server_id, tool_name):
    server = _server_for(request, server_id, TOOL_SERVER_MANAGE)
    tool = or_404(mcp_tool_get, server=server, name=tool_name)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        return _page(request, server, status=400, review_errors={tool.name: ["Choose read or write."]})
    try:
        mcp_tool_review(tool=tool, actor=request.user, **form.cleaned_data)
    except RiverError as exc:
        problems = [str(m) for messages_ in (exc.details or {}).values() for m in messages_] or [exc.message]
        return _page(request, server, status=400, review_errors={tool.name: problems})
    messages.success(request, f"{tool.name} is reviewed.")
    return redirect("tool-server-page", server_id=server.pk)


@page_login_required
@require_POST
def tool_server_delete_page(request, server_id):
    server = _server_for(request, server_id, TOOL_SERVER_MANAGE)
    name = server.name
    tool_server_delete(server=server, actor=request.user)
    messages.success(request, f"{name} is deleted.")
    return redirect("tool-servers")


urlpatterns = [
    path("tool-servers/", tool_servers_list, name="tool-servers"),
    path("tool-servers/<int:server_id>/", tool_server_page, name="tool-server-page"),
    path("tool-servers/<int:server_id>/discover", tool_server_discover_page, name="tool-server-discover-page"),
    path(
        "tool-servers/<int:server_id>/tools/<str:tool_name>/review", mcp_tool_review_page, name="mcp-tool-review-page"
    ),
    path("tool-servers/<int:server_id>/delete", tool_server_delete_page, name="tool-server-delete-page"),
]
