"""River as an MCP server, driven by the official SDK's own client (``mcp.Client`` over
``mcp.client.streamable_http``) against ``runriver`` on 127.0.0.1 (conftest.live_river)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.slow

ANALYST, SPECIALIST = "ask_support_analyst", "ask_l1_support_specialist"
QUESTION = "How many open high-priority tickets were created in the last 24 hours?"
CLOSE = "Close the open high-priority tickets created in the last 24 hours"


@asynccontextmanager
async def mcp_client(live_river, headers: dict, mode: str = "auto"):
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(f"{live_river.url}/mcp/", http_client=http), mode=mode) as client:
            yield client


def run(coroutine_function, *args):
    return anyio.run(coroutine_function, *args)


# "legacy": the initialize handshake of the 2025 protocol versions, which clients such as
# Claude Desktop's bridge speak; "auto" probes the 2026 server/discover first.
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_member_lists_one_tool_per_agent_they_may_run_and_the_run_tools(live_river, mode):
    async def listed():
        async with mcp_client(live_river, live_river.bearer("admin"), mode) as client:
            assert client.server_info.name == "river"
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run(listed)}
    assert set(tools) == {ANALYST, SPECIALIST, "get_run", "list_runs"}
    assert tools[ANALYST].description.startswith("Ask the Support Analyst")
    assert tools[ANALYST].input_schema["required"] == ["prompt"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_asking_an_agent_streams_progress_and_returns_the_answer_with_the_query_result(live_river, mode):
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value, total, message):
        progress.append((value, message))

    async def asked():
        async with mcp_client(live_river, live_river.bearer("admin"), mode) as client:
            result = await client.call_tool(ANALYST, {"prompt": QUESTION}, progress_callback=on_progress)
            again = await client.call_tool("get_run", {"execution_id": result.structured_content["execution_id"]})
            listed = await client.call_tool("list_runs", {"limit": 5})
            return result, again, listed

    result, again, listed = run(asked)
    report = result.structured_content
    assert not result.is_error, result
    assert report["status"] == "completed" and report["outcome"] == "answered"
    assert report["answer"] and report["answer"] in result.content[0].text
    assert report["query"]["sql"].lower().startswith("select")
    assert report["query"]["columns"] and report["query"]["rows"]
    assert report["run_url"].endswith(f"/runs/{report['execution_id']}/")
    # One notification per stored event, in order: the run started, called tools, ended.
    assert [value for value, _ in progress] == list(range(1, len(progress) + 1))
    messages = [message for _, message in progress]
    assert messages[0] == "run started" and "tool called: execute_query" in messages
    assert messages[-1] == "run completed"
    assert again.structured_content == report
    # Audited as started over MCP, naming the credential by its public prefix only.
    audit = httpx2.get(
        f"{live_river.url}/api/v1/audit/",
        headers=live_river.bearer("admin"),
        params={"event_type": "mcp_run_started", "execution_id": report["execution_id"]},
    ).json()
    [entry] = audit["results"]
    assert entry["details"]["credential"] == f"token {live_river.credentials['admin'].split('_')[1]}"
    assert live_river.credentials["admin"] not in json.dumps(audit)
    assert listed.structured_content["runs"][0]["execution_id"] == report["execution_id"]


def test_a_run_that_pauses_for_approval_returns_at_once_with_the_approval_link(live_river):
    live_river.tickets_topped_up()

    async def asked():
        async with mcp_client(live_river, live_river.bearer("admin")) as client:
            return await client.call_tool(SPECIALIST, {"prompt": CLOSE})

    result = run(asked)
    report = result.structured_content
    assert report["status"] == "awaiting_approval" and not result.is_error
    [approval] = report["approvals"]
    assert approval["tool"] == "write_back"
    assert approval["url"] == f"{live_river.url}/approvals/{approval['id']}/"
    assert approval["url"] in result.content[0].text

    # The requester rule holds: the caller who started it may not approve it over the API.
    refused = httpx2.post(
        f"{live_river.url}/api/v1/approvals/{approval['id']}/resolve",
        json={"status": "approved"},
        headers=live_river.bearer("admin"),
    )
    assert refused.status_code == 403, refused.text
    approved = httpx2.post(
        f"{live_river.url}/api/v1/approvals/{approval['id']}/resolve",
        json={"status": "approved"},
        headers=live_river.bearer("approver"),
    )
    assert approved.status_code == 200, approved.text

    async def settled():
        async with mcp_client(live_river, live_river.bearer("admin")) as client:
            for _ in range(240):
                got = await client.call_tool("get_run", {"execution_id": report["execution_id"]})
                if got.structured_content["status"] not in {"queued", "running"}:
                    return got
                await anyio.sleep(0.25)
            return got

    assert run(settled).structured_content["status"] == "completed"


def test_an_outsider_sees_no_tool_and_no_run_of_another_workspace(live_river):
    async def asked():
        async with mcp_client(live_river, live_river.bearer("admin")) as client:
            own = await client.call_tool(ANALYST, {"prompt": QUESTION})
        async with mcp_client(live_river, live_river.bearer("stranger")) as client:
            tools = (await client.list_tools()).tools
            ask = await client.call_tool(ANALYST, {"prompt": QUESTION})
            got = await client.call_tool("get_run", {"execution_id": own.structured_content["execution_id"]})
            listed = await client.call_tool("list_runs", {})
        return tools, ask, got, listed

    tools, ask, got, listed = run(asked)
    assert {tool.name for tool in tools} == {"ask_secret_ledger_agent", "get_run", "list_runs"}
    assert ask.is_error and "Unknown tool" in ask.content[0].text
    assert got.is_error and got.structured_content["error"]["message"] == "Run not found."
    assert listed.structured_content["runs"] == []


def test_a_viewer_without_agent_execute_is_offered_no_agent(live_river):
    async def listed():
        async with mcp_client(live_river, live_river.bearer("viewer")) as client:
            tools = (await client.list_tools()).tools
            ask = await client.call_tool(ANALYST, {"prompt": QUESTION})
            return tools, ask

    tools, ask = run(listed)
    assert {tool.name for tool in tools} == {"get_run", "list_runs"}
    assert ask.is_error


def test_an_api_key_acts_as_its_owner_within_its_workspace(live_river):
    async def listed():
        async with mcp_client(live_river, {"X-API-Key": live_river.credentials["admin_key"]}) as client:
            return (await client.list_tools()).tools

    assert {tool.name for tool in run(listed)} == {ANALYST, SPECIALIST, "get_run", "list_runs"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer rvr_nope_nope"},
        {"Authorization": "Bearer rtk_nope_nope"},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
        {"X-API-Key": "x" * 5000},
    ],
)
def test_a_missing_or_bad_credential_is_a_401(live_river, headers):
    response = httpx2.post(
        f"{live_river.url}/mcp/",
        headers=headers | {"Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "authentication_failed"


def test_the_key_rate_limit_answers_429_with_retry_after(live_river):
    headers = {"X-API-Key": live_river.credentials["tight_key"], "Accept": "application/json, text/event-stream"}
    responses = [
        httpx2.post(f"{live_river.url}/mcp/", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        for _ in range(7)
    ]
    codes = [response.status_code for response in responses]
    # 3 a minute: seven quick requests span at most two windows, so at most six pass.
    assert set(codes) <= {200, 429} and 429 in codes, codes
    refused = next(response for response in responses if response.status_code == 429)
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limited"


def test_hostile_arguments_are_tool_errors_naming_the_argument(live_river):
    async def asked():
        async with mcp_client(live_river, live_river.bearer("admin")) as client:
            return [
                await client.call_tool(ANALYST, {"prompt": "a\x00b"}),
                await client.call_tool(ANALYST, {"prompt": "x" * 200_000}),
                await client.call_tool(ANALYST, {"prompt": 12}),
                await client.call_tool(ANALYST, {"prompt": "hi", "admin": True}),
                await client.call_tool("get_run", {"execution_id": "1; drop table"}),
                await client.call_tool("get_run", {"execution_id": 2**70}),
                await client.call_tool("list_runs", {"limit": 10_000}),
            ]

    results = run(asked)
    assert all(r.is_error for r in results), [r.content[0].text for r in results]
    details = [json.dumps(r.structured_content) for r in results]
    assert "prompt" in details[0] and "prompt" in details[1] and "prompt" in details[2]
    assert "admin" in details[3] and "execution_id" in details[4] and "limit" in details[6]
