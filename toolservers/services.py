"""Writes of tool servers: register, delete, discover, review (docs/mcp.md).

A server's secrets (the env of a stdio command, the headers of an HTTP endpoint) are
encrypted at rest and never decrypted for output. Network and process work (discovery)
happens outside any transaction; only its result is written under a lock."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.crypto import decrypt_json, encrypt_json
from common.jsonschema_safe import schema_check
from datasources.network import HostNotAllowed, host_check
from governance.audit import audit_record
from rivercore.errors import Conflict, InvalidInput
from rivercore.types.toolservers import SERVER_NAME_RE, TOOL_NAME_MAX
from toolservers.models import McpTool, ToolServer
from toolservers.transport import Endpoint, McpUnavailable

ARGS_MAX = 30
ARG_MAX = 500
SECRETS_MAX = 20
SECRET_VALUE_MAX = 4000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_HEADERS_REFUSED = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "mcp-session-id",
    "mcp-protocol-version",
    "a2a-version",
}


def tool_digest(*, description: str, input_schema: Any) -> str:
    """What a review is pinned to: the tool's description and input schema."""
    body = json.dumps(
        {"description": description or "", "inputSchema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _clean(text: Any) -> bool:
    return isinstance(text, str) and "\x00" not in text


def _secrets_check(values: Any, *, field: str, name_re: re.Pattern, refused: set[str] = frozenset()) -> dict:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise InvalidInput(f"{field} must be an object.", details={field: ["Must be a JSON object."]})
    if len(values) > SECRETS_MAX:
        raise InvalidInput(f"{field} has too many entries.", details={field: [f"At most {SECRETS_MAX} entries."]})
    problems: dict[str, list[str]] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not name_re.match(key) or key.lower() in refused:
            problems[f"{field}.{str(key)[:40]}"] = ["Not an allowed name."]
        elif not _clean(value) or len(value) > SECRET_VALUE_MAX or "\r" in value or "\n" in value:
            problems[f"{field}.{key}"] = [f"A string of at most {SECRET_VALUE_MAX} characters, one line, no NUL."]
    if problems:
        raise InvalidInput(f"{field} is invalid.", details=problems)
    return dict(values)


def _args_check(args: Any) -> list[str]:
    if args is None:
        return []
    if not isinstance(args, list) or len(args) > ARGS_MAX:
        raise InvalidInput("args is invalid.", details={"args": [f"A list of at most {ARGS_MAX} strings."]})
    for index, arg in enumerate(args):
        if not _clean(arg) or len(arg) > ARG_MAX:
            raise InvalidInput(
                "args is invalid.", details={f"args.{index}": [f"A string of at most {ARG_MAX} characters, no NUL."]}
            )
    return list(args)


def url_check(url: Any, *, field: str = "url") -> str:
    """An http(s) URL whose host passes the data sources' host allow-list
    (datasources.network), checked before any connection is made."""
    if not _clean(url) or not url or len(url) > 500:
        raise InvalidInput("url is invalid.", details={field: ["An http or https URL of at most 500 characters."]})
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput("url is invalid.", details={field: ["Not a valid URL."]}) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise InvalidInput(
            "url is invalid.", details={field: ["An http or https URL, without credentials in it (use headers)."]}
        )
    try:
        host_check(host=parts.hostname, port=port)
    except HostNotAllowed as exc:
        raise InvalidInput(str(exc), details={field: [str(exc)]}) from None
    return url


def tool_server_register(
    *,
    workspace,
    actor,
    name: str,
    transport: str,
    command: str = "",
    args: Any = None,
    env: Any = None,
    url: str = "",
    headers: Any = None,
) -> ToolServer:
    """Check and store a server. A stdio command must be one of RIVER_MCP_STDIO_COMMANDS
    (running any other command would be remote code execution); an HTTP URL must pass
    the host allow-list. Nothing is started or connected here."""
    if not _clean(name) or not SERVER_NAME_RE.match(name or ""):
        raise InvalidInput(
            "name is invalid.",
            details={
                "name": ["1 to 40 characters: lower-case letters, digits and '-', starting with a letter or digit."]
            },
        )
    values: dict[str, Any] = {"command": "", "args": [], "url": ""}
    if transport == ToolServer.Transport.STDIO:
        if url or headers:
            field = "url" if url else "headers"
            raise InvalidInput(f"{field} is for http servers.", details={field: ["Not used with transport stdio."]})
        if command not in settings.RIVER_MCP_STDIO_COMMANDS:
            raise InvalidInput(
                "command is not allowed.",
                details={"command": ["Not one of the commands an operator allowed (RIVER_MCP_STDIO_COMMANDS)."]},
            )
        values["command"] = command
        values["args"] = _args_check(args)
        secrets = _secrets_check(env, field="env", name_re=_ENV_NAME)
    elif transport in (ToolServer.Transport.HTTP, ToolServer.Transport.A2A):
        if command or args or env:
            field = "command" if command else "args" if args else "env"
            raise InvalidInput(
                f"{field} is for stdio servers.", details={field: [f"Not used with transport {transport}."]}
            )
        values["url"] = url_check(url)
        secrets = _secrets_check(headers, field="headers", name_re=_HEADER_NAME, refused=_HEADERS_REFUSED)
    else:
        raise InvalidInput("transport is invalid.", details={"transport": ['One of "stdio", "http", "a2a".']})
    try:
        with transaction.atomic():
            server = ToolServer.objects.create(
                workspace=workspace,
                name=name,
                transport=transport,
                secrets_encrypted=encrypt_json(secrets),
                secret_names=sorted(secrets),
                created_by=actor if getattr(actor, "pk", None) else None,
                **values,
            )
            audit_record(
                organization_id=workspace.organization_id,
                workspace_id=workspace.pk,
                actor=actor,
                event_type="tool_server.registered",
                details={
                    "tool_server_id": server.pk,
                    "name": name,
                    "transport": transport,
                    "command": values["command"],
                    "url": values["url"],
                    "secret_names": sorted(secrets),
                },
            )
    except IntegrityError:
        raise InvalidInput(
            "name is taken.", details={"name": ["A tool server of this workspace has this name."]}
        ) from None
    return server


def tool_server_delete(*, server: ToolServer, actor) -> None:
    """Delete a server and its tools; agent versions naming them can no longer use them
    (a run loads only usable tools)."""
    with transaction.atomic():
        audit_record(
            organization_id=server.workspace.organization_id,
            workspace_id=server.workspace_id,
            actor=actor,
            event_type="tool_server.deleted",
            details={"tool_server_id": server.pk, "name": server.name},
        )
        server.delete()


def tool_server_endpoint(*, server: ToolServer) -> Endpoint:
    """How to reach the server now: the command must still be allowed and the URL's host
    still pass the allow-list (settings may have changed since it was registered)."""
    secrets = decrypt_json(server.secrets_encrypted) if server.secrets_encrypted else {}
    if server.transport == ToolServer.Transport.STDIO:
        if server.command not in settings.RIVER_MCP_STDIO_COMMANDS:
            raise McpUnavailable("The server's command is no longer allowed (RIVER_MCP_STDIO_COMMANDS).")
        return Endpoint(transport="stdio", command=server.command, args=list(server.args or []), env=secrets)
    try:
        url_check(server.url)
    except InvalidInput as exc:
        raise McpUnavailable(exc.message if hasattr(exc, "message") else str(exc)) from None
    return Endpoint(transport=server.transport, url=server.url, headers=secrets)


def tool_server_health_record(*, server_id: int, error: str | None) -> None:
    ToolServer.objects.filter(pk=server_id).update(
        health=ToolServer.Health.ERROR if error else ToolServer.Health.OK,
        health_message=(error or "")[:500],
        health_checked_at=timezone.now(),
    )


def _schema_problem(schema: Any) -> str:
    try:
        schema_check(schema, field="inputSchema")
    except InvalidInput as exc:
        return "; ".join(f"{k}: {', '.join(v)}" for k, v in (exc.details or {}).items())[:500] or str(exc)
    return ""


def tool_server_discover(*, server: ToolServer, actor) -> list[McpTool]:
    """List the server's tools and store each with the digest of its description and
    input schema. New tools start unreviewed (unusable). A reviewed tool whose digest
    changed is disabled until an admin reviews it again; the reviewed description and
    schema stay, so the page shows the difference."""
    from toolservers import a2a_client, mcp_client  # the SDKs, loaded when a server is first reached

    try:
        # A remote A2A agent lists one tool, ``ask``, read from its agent card.
        lister = a2a_client.tools_list if server.transport == ToolServer.Transport.A2A else mcp_client.tools_list
        listed = lister(endpoint=tool_server_endpoint(server=server), timeout=settings.RIVER_MCP_TIMEOUT_SECONDS)
    except McpUnavailable as exc:
        tool_server_health_record(server_id=server.pk, error=exc.message)
        raise Conflict(f"Discovery failed: {exc.message}", code="tool_server_unavailable") from None
    now = timezone.now()
    seen: dict[str, dict] = {}
    skipped: list[str] = []
    for item in listed:
        name = item.get("name")
        if not _clean(name) or not name or len(name) > TOOL_NAME_MAX or "/" in name:
            skipped.append(str(name)[:80])
            continue
        seen[name] = item
    changed: list[str] = []
    with transaction.atomic():
        locked = ToolServer.objects.select_for_update().get(pk=server.pk)
        existing = {tool.name: tool for tool in locked.tools.all()}
        for name, item in seen.items():
            description = str(item.get("description") or "").replace("\x00", "")[:20_000]
            schema = item.get("inputSchema") if isinstance(item.get("inputSchema"), dict) else {}
            problem = _schema_problem(schema)
            annotations = item.get("annotations") if isinstance(item.get("annotations"), dict) else {}
            if problem:
                annotations = {**annotations, "riverSchemaProblem": problem}
            digest = tool_digest(description=description, input_schema=schema)
            tool = existing.get(name)
            if tool is None:
                McpTool.objects.create(
                    server=locked,
                    name=name,
                    description=description,
                    input_schema=schema,
                    annotations=annotations,
                    digest=digest,
                    discovered_at=now,
                )
                continue
            update = {
                "description": description,
                "input_schema": schema,
                "annotations": annotations,
                "digest": digest,
                "present": True,
                "discovered_at": now,
            }
            if tool.reviewed_digest and tool.reviewed_digest != digest and tool.digest != digest:
                update.update(enabled=False, changed_at=now)
                changed.append(name)
            McpTool.objects.filter(pk=tool.pk).update(**update)
        gone = [name for name in existing if name not in seen]
        McpTool.objects.filter(server=locked, name__in=gone).update(present=False, enabled=False)
        ToolServer.objects.filter(pk=locked.pk).update(
            discovered_at=now, health=ToolServer.Health.OK, health_message="", health_checked_at=now
        )
        audit_record(
            organization_id=server.workspace.organization_id,
            workspace_id=server.workspace_id,
            actor=actor,
            event_type="tool_server.discovered",
            details={
                "tool_server_id": server.pk,
                "name": server.name,
                "tools": sorted(seen),
                "changed": changed,
                "gone": gone,
                "skipped": skipped,
            },
        )
    server.refresh_from_db()
    return list(server.tools.order_by("name", "id"))


def mcp_tool_review(*, tool: McpTool, actor, action_class: str, enabled: bool) -> McpTool:
    """An admin's decision on a tool as it is now. The server's hints never lower the
    class: a tool the server calls destructive cannot be classed ``read``. A tool whose
    input schema River will not evaluate cannot be enabled."""
    if action_class not in McpTool.ActionClass.values:
        raise InvalidInput("action_class is invalid.", details={"action_class": ['One of "read", "write".']})
    if not isinstance(enabled, bool):
        raise InvalidInput("enabled is invalid.", details={"enabled": ["Must be true or false."]})
    hints = tool.annotations or {}
    if action_class == McpTool.ActionClass.READ and (
        hints.get("destructiveHint") is True or hints.get("readOnlyHint") is False
    ):
        raise InvalidInput(
            "The server says this tool changes things; it cannot be classed read.",
            details={"action_class": ["The server's hints say this tool writes; class it write."]},
        )
    if enabled and not tool.present:
        raise InvalidInput("The server no longer lists this tool.", details={"enabled": ["The tool is gone."]})
    if enabled and hints.get("riverSchemaProblem"):
        raise InvalidInput(
            "River will not evaluate this tool's input schema.", details={"enabled": [str(hints["riverSchemaProblem"])]}
        )
    server = tool.server
    with transaction.atomic():
        locked = McpTool.objects.select_for_update().get(pk=tool.pk)
        before = {"action_class": locked.action_class, "enabled": locked.enabled, "was_changed": locked.changed}
        locked.action_class = action_class
        locked.enabled = enabled
        locked.reviewed_digest = locked.digest
        locked.reviewed_description = locked.description
        locked.reviewed_schema = locked.input_schema
        locked.reviewed_by = actor if getattr(actor, "pk", None) else None
        locked.reviewed_at = timezone.now()
        locked.changed_at = None
        locked.save(
            update_fields=[
                "action_class",
                "enabled",
                "reviewed_digest",
                "reviewed_description",
                "reviewed_schema",
                "reviewed_by",
                "reviewed_at",
                "changed_at",
            ]
        )
        audit_record(
            organization_id=server.workspace.organization_id,
            workspace_id=server.workspace_id,
            actor=actor,
            event_type="mcp_tool.reviewed",
            details={
                "tool_server_id": server.pk,
                "tool": f"mcp:{server.name}/{locked.name}",
                "action_class": action_class,
                "enabled": enabled,
                "digest": locked.digest,
                "suggested_class": locked.suggested_class,
                "before": before,
            },
        )
    return locked
