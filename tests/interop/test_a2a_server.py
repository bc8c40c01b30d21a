"""River's agents as A2A agents, driven by the ``a2a-sdk`` client (card resolution, then
the JSON-RPC binding) against ``runriver`` on 127.0.0.1 (conftest.live_river)."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

pytestmark = pytest.mark.slow

QUESTION = "How many open high-priority tickets were created in the last 24 hours?"
CLOSE = "Close the open high-priority tickets created in the last 24 hours"


def cards(live_river, who: str) -> httpx.Response:
    return httpx.get(f"{live_river.url}/a2a/agents/", headers=live_river.bearer(who))


def agent_id(live_river, name: str) -> str:
    [card] = [c for c in cards(live_river, "admin").json()["agents"] if c["name"] == name]
    return card["supportedInterfaces"][0]["url"].rstrip("/").rsplit("/", 1)[1]


@asynccontextmanager
async def a2a_client(live_river, who: str, agent: str):
    async with httpx.AsyncClient(headers=live_river.bearer(who), timeout=120) as http:
        client = await create_client(
            f"{live_river.url}/a2a/agents/{agent}/", client_config=ClientConfig(httpx_client=http, streaming=False)
        )
        try:
            yield client
        finally:
            await client.close()


def ask(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    )


async def sent(client, text: str):
    return [response async for response in client.send_message(ask(text))][-1].task


def test_each_agent_card_is_served_to_callers_who_may_run_it_only(live_river):
    mine = {card["name"] for card in cards(live_river, "admin").json()["agents"]}
    theirs = {card["name"] for card in cards(live_river, "stranger").json()["agents"]}
    assert mine == {"Support Analyst", "L1 Support Specialist"}
    assert theirs == {"Secret Ledger Agent"}
    assert cards(live_river, "viewer").json()["agents"] == []
    assert httpx.get(f"{live_river.url}/a2a/agents/").status_code == 401

    analyst = agent_id(live_river, "Support Analyst")
    card_url = f"{live_river.url}/a2a/agents/{analyst}/.well-known/agent-card.json"
    card = httpx.get(card_url, headers=live_river.bearer("admin")).json()
    assert card["name"] == "Support Analyst" and card["skills"][0]["id"] == "ask"
    assert card["supportedInterfaces"][0] == {
        "url": f"{live_river.url}/a2a/agents/{analyst}/",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    # Another workspace's card is a 404, the same as an agent that does not exist.
    assert httpx.get(card_url, headers=live_river.bearer("stranger")).status_code == 404
    their_card = f"{live_river.url}/a2a/agents/{live_river.credentials['their_agent']}/.well-known/agent-card.json"
    assert httpx.get(their_card, headers=live_river.bearer("admin")).status_code == 404
    assert httpx.get(card_url, headers=live_river.bearer("viewer")).status_code == 403


def test_a_message_becomes_a_run_whose_task_completes_with_the_answer(live_river):
    analyst = agent_id(live_river, "Support Analyst")

    async def asked():
        async with a2a_client(live_river, "admin", analyst) as client:
            task = await sent(client, QUESTION)
            again = await client.get_task(GetTaskRequest(id=task.id))
            return task, again

    task, again = anyio.run(asked)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    report = MessageToDict(task.metadata)["river"]
    assert str(int(report["execution_id"])) == task.id and report["outcome"] == "answered"
    [artifact] = task.artifacts
    assert artifact.parts[0].text == report["answer"] != ""
    query = MessageToDict(artifact.parts[1].data)
    assert query["sql"].lower().startswith("select") and query["rows"]
    assert again.id == task.id and again.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_paused_run_is_input_required_with_the_approval_link(live_river):
    live_river.tickets_topped_up()
    specialist = agent_id(live_river, "L1 Support Specialist")

    async def asked():
        async with a2a_client(live_river, "admin", specialist) as client:
            return await sent(client, CLOSE)

    task = anyio.run(asked)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    [approval] = MessageToDict(task.metadata)["river"]["approvals"]
    assert approval["url"] == f"{live_river.url}/approvals/{approval['id']}/"
    assert approval["url"] in task.status.message.parts[0].text
    # Someone other than the requester approves it; the task then completes.
    response = httpx.post(
        f"{live_river.url}/api/v1/approvals/{approval['id']}/resolve",
        json={"status": "approved"},
        headers=live_river.bearer("approver"),
    )
    assert response.status_code == 200, response.text

    async def settled():
        async with a2a_client(live_river, "admin", specialist) as client:
            for _ in range(240):
                got = await client.get_task(GetTaskRequest(id=task.id))
                if got.status.state not in {
                    TaskState.TASK_STATE_SUBMITTED,
                    TaskState.TASK_STATE_WORKING,
                    TaskState.TASK_STATE_INPUT_REQUIRED,
                }:
                    return got
                await anyio.sleep(0.25)
            return got

    assert anyio.run(settled).status.state == TaskState.TASK_STATE_COMPLETED


def test_an_outsider_cannot_send_to_or_read_another_workspaces_agent(live_river):
    analyst = agent_id(live_river, "Support Analyst")

    async def asked():
        async with a2a_client(live_river, "admin", analyst) as client:
            task = await sent(client, QUESTION)
        async with httpx.AsyncClient(headers=live_river.bearer("stranger"), timeout=60) as http:
            rpc = f"{live_river.url}/a2a/agents/{analyst}/"
            send = await http.post(
                rpc,
                headers={"A2A-Version": "1.0"},
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": QUESTION}]}},
                },
            )
            get = await http.post(
                rpc,
                headers={"A2A-Version": "1.0"},
                json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task.id}},
            )
        return send.json(), get.json()

    send, get = anyio.run(asked)
    assert send["error"]["message"] == "Agent not found."
    assert "result" not in get and get["error"]["code"] == -32001  # TaskNotFound


def test_a_task_id_of_another_agent_or_garbage_is_not_found(live_river):
    analyst = agent_id(live_river, "Support Analyst")
    specialist = agent_id(live_river, "L1 Support Specialist")

    async def asked():
        async with a2a_client(live_river, "admin", analyst) as client:
            task = await sent(client, QUESTION)
        errors = []
        async with a2a_client(live_river, "admin", specialist) as client:
            for task_id in (task.id, "1; drop table", "9" * 40, "\x00"):
                try:
                    await client.get_task(GetTaskRequest(id=task_id))
                except A2AError as error:
                    errors.append(type(error).__name__)
        return errors

    assert anyio.run(asked) == ["TaskNotFoundError"] * 4


def test_a_bad_token_is_401_and_a_follow_up_message_is_refused(live_river):
    analyst = agent_id(live_river, "Support Analyst")
    rpc = f"{live_river.url}/a2a/agents/{analyst}/"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m1", "taskId": "1", "role": "ROLE_USER", "parts": [{"text": "approve it"}]}
        },
    }
    assert httpx.post(rpc, json=body, headers={"Authorization": "Bearer rvr_x_y"}).status_code == 401
    refused = httpx.post(rpc, json=body, headers=live_river.bearer("admin") | {"A2A-Version": "1.0"}).json()
    assert refused["error"]["code"] == -32602 and "approval page" in refused["error"]["message"]
