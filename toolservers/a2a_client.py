"""River's door to remote Agent2Agent agents, through the ``a2a-sdk`` client (docs/a2a.md,
"Calling a remote A2A agent").

A remote agent is registered as a tool server with ``transport: "a2a"``; it offers one
tool, ``ask`` (a message in, the agent's answer out), described from its agent card.
Discovery reads the card; a call sends one message and waits for the task to end.

Nothing here trusts the card: the JSON-RPC endpoint it names must be on the registered
URL's origin (scheme, host and port), so a card cannot send River's headers, or the
agent's question, to another host; the card's skills and capabilities are shown to the
admin who reviews the tool, never used to lower its class. Every step is bounded by one
timeout and every failure comes back as ``McpUnavailable`` with a message fit to show
(the headers never appear in it)."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from google.protobuf.json_format import MessageToDict

from toolservers.transport import Endpoint, McpUnavailable

ASK = "ask"
MESSAGE_MAX = 20_000
ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string",
            "minLength": 1,
            "maxLength": MESSAGE_MAX,
            "description": "What to ask or tell the remote agent, in plain text.",
        }
    },
    "required": ["message"],
    "additionalProperties": False,
}
SKILLS_SHOWN = 20
POLL_SECONDS = 0.5

_ENDED = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "canceled",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
    TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
}


def base_url(url: str) -> str:
    """The agent's base URL: ``url`` itself, or without the well-known card path when
    the card's own URL was registered."""
    if url.endswith(AGENT_CARD_WELL_KNOWN_PATH):
        return url[: -len(AGENT_CARD_WELL_KNOWN_PATH)] or "/"
    return url


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def _short(text: Any, limit: int) -> str:
    return str(text or "").replace("\x00", "")[:limit]


def _endpoint_of(card: AgentCard, registered: str) -> str:
    """The card's JSON-RPC endpoint, refused unless it is on the registered origin."""
    urls = [i.url for i in card.supported_interfaces if i.protocol_binding == TransportProtocol.JSONRPC]
    if not urls:
        raise McpUnavailable("The agent card offers no JSON-RPC interface.")
    url = urls[0]
    if _origin(url) != _origin(registered):
        raise McpUnavailable(
            "The agent card's JSON-RPC endpoint is not on the registered URL's host and port; "
            "River will not send to it."
        )
    return url


def tool_of(card: AgentCard, registered: str) -> dict[str, Any]:
    """The one ``ask`` tool, in the shape an MCP server lists its tools. Its description
    holds what a reviewer needs and what a changed card changes: the name, description,
    skills and endpoint (so a new card disables the reviewed tool, docs/mcp.md)."""
    endpoint = _endpoint_of(card, registered)
    lines = [f"Ask the remote A2A agent {_short(card.name, 200)!r}: {_short(card.description, 4000)}"]
    for skill in list(card.skills)[:SKILLS_SHOWN]:
        lines.append(f"- skill {_short(skill.id, 100)} ({_short(skill.name, 200)}): {_short(skill.description, 1000)}")
    lines.append(f"Endpoint: {_short(endpoint, 500)}")
    return {
        "name": ASK,
        "description": "\n".join(lines),
        "inputSchema": ASK_SCHEMA,
        # Shown to the reviewer only: none of these is a hint River acts on.
        "annotations": {
            "a2aAgent": _short(card.name, 200),
            "a2aVersion": _short(card.version, 100),
            "a2aSkills": [_short(skill.id, 100) for skill in list(card.skills)[:SKILLS_SHOWN]],
        },
    }


def _described(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "The remote agent did not answer in time."
    if isinstance(exc, BaseExceptionGroup):
        return _described(exc.exceptions[0] if exc.exceptions else exc)
    if isinstance(exc, httpx.HTTPError):
        return f"The remote agent could not be reached ({exc.__class__.__name__})."
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"The remote agent failed: {exc.__class__.__name__}{': ' + text[:300] if text else ''}"


def _run(endpoint: Endpoint, timeout: float, work) -> Any:
    async def main():
        with anyio.fail_after(timeout):
            async with httpx.AsyncClient(
                headers=dict(endpoint.headers), timeout=httpx.Timeout(timeout), follow_redirects=False
            ) as http:
                resolver = A2ACardResolver(httpx_client=http, base_url=base_url(endpoint.url))
                card = await resolver.get_agent_card()
                return await work(http, card)

    try:
        return anyio.run(main)
    except McpUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - the SDK, the transport and the remote fail in many ways
        raise McpUnavailable(_described(exc)) from None


def tools_list(*, endpoint: Endpoint, timeout: float) -> list[dict[str, Any]]:
    async def work(_http, card: AgentCard) -> list[dict[str, Any]]:
        return [tool_of(card, endpoint.url)]

    return _run(endpoint, timeout, work)


def _parts(parts) -> tuple[list[str], list[Any]]:
    texts: list[str] = []
    data: list[Any] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data.append(MessageToDict(part.data))
        elif kind:
            texts.append(f"[{kind} part omitted]")
    return texts, data


def result_of(task: Task) -> dict[str, Any]:
    """A task that ended as an MCP-shaped result: the artifacts' text and data parts
    when it completed, else an error naming the state (and the agent's status message)."""
    state = _ENDED.get(task.status.state)
    status_texts, _ = _parts(task.status.message.parts) if task.status.HasField("message") else ([], [])
    if state != "completed":
        said = " ".join(status_texts)[:1000]
        named = state or TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
        text = f"The remote agent's task {_short(task.id, 100)} ended in state {named}" + (f": {said}" if said else ".")
        return {"content": [{"type": "text", "text": text}], "isError": True, "state": named}
    texts: list[str] = []
    data: list[Any] = []
    for artifact in task.artifacts:
        t, d = _parts(artifact.parts)
        texts.extend(t)
        data.extend(d)
    if not texts and not data:
        texts = status_texts
    result: dict[str, Any] = {"content": [{"type": "text", "text": text} for text in texts], "state": state}
    if data:
        result["structuredContent"] = {"data": data}
    return result


def ask(*, endpoint: Endpoint, message: str, timeout: float) -> dict[str, Any]:
    """Send ``message`` and wait (within ``timeout``, polling GetTask when the agent
    answered before the task ended) for the task to end."""

    async def work(http, card: AgentCard) -> dict[str, Any]:
        card_endpoint = _endpoint_of(card, endpoint.url)
        pinned = AgentCard()
        pinned.CopyFrom(card)
        del pinned.supported_interfaces[:]
        interface = pinned.supported_interfaces.add()
        interface.CopyFrom(next(i for i in card.supported_interfaces if i.url == card_endpoint))
        client = ClientFactory(
            ClientConfig(httpx_client=http, streaming=False, supported_protocol_bindings=[TransportProtocol.JSONRPC])
        ).create(pinned)
        try:
            request = SendMessageRequest(
                message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=message)])
            )
            last = None
            async for response in client.send_message(request):
                last = response
            if last is None:
                raise McpUnavailable("The remote agent sent no answer.")
            if last.HasField("message"):
                texts, data = _parts(last.message.parts)
                out: dict[str, Any] = {"content": [{"type": "text", "text": t} for t in texts], "state": "message"}
                if data:
                    out["structuredContent"] = {"data": data}
                return out
            if not last.HasField("task"):
                raise McpUnavailable("The remote agent answered with neither a task nor a message.")
            task = last.task
            while task.status.state not in _ENDED:
                await anyio.sleep(POLL_SECONDS)
                task = await client.get_task(GetTaskRequest(id=task.id))
            return result_of(task)
        finally:
            await client.close()

    result = _run(endpoint, timeout, work)
    json.dumps(result)  # only plain JSON leaves this module
    return result
