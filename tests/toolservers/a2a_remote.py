"""A remote A2A agent for the tests, built with the ``a2a-sdk``'s own server classes and
served by uvicorn on 127.0.0.1. What it does depends on the message:

- ``more ...``: the task asks for input (``input-required``, "Which ticket?");
- ``fail ...``: the task fails ("The ledger is closed.");
- ``slow ...``: it works for ``slow_seconds`` before answering;
- anything else: it completes with an artifact of one text part (``answer: <message>``)
  and one data part (``{"count": 3}``).

``card`` may be changed while it runs (the next card request sees it); ``headers`` and
``messages`` record what it received."""

from __future__ import annotations

import socket
import threading
import time

import anyio
import uvicorn
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    TaskState,
)
from google.protobuf.struct_pb2 import Value
from starlette.applications import Starlette


class _Executor(AgentExecutor):
    def __init__(self, remote: RemoteAgent):
        self.remote = remote

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        self.remote.messages.append(text)
        await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)

        def said(words: str) -> Message:
            return updater.new_agent_message(parts=[Part(text=words)])

        if text.startswith("more"):
            await updater.requires_input(said("Which ticket?"))
        elif text.startswith("fail"):
            await updater.failed(said("The ledger is closed."))
        else:
            if text.startswith("slow"):
                await updater.start_work()
                await anyio.sleep(self.remote.slow_seconds)
            data = Value()
            data.struct_value.update({"count": 3})
            await updater.add_artifact([Part(text=f"answer: {text}"), Part(data=data)], name="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class RemoteAgent:
    def __init__(self, *, interface_host: str = "127.0.0.1"):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.headers: list[dict[str, str]] = []
        self.messages: list[str] = []
        self.slow_seconds = 0.0
        self.card = AgentCard(
            name="Ledger Agent",
            description="Answers questions about the ledger.",
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(
                    url=f"http://{interface_host}:{self.port}/", protocol_binding="JSONRPC", protocol_version="1.0"
                )
            ],
            capabilities=AgentCapabilities(streaming=False, push_notifications=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain", "application/json"],
            skills=[AgentSkill(id="ledger", name="Ledger", description="Reads the ledger.", tags=["ledger"])],
        )
        handler = DefaultRequestHandler(
            agent_executor=_Executor(self), task_store=InMemoryTaskStore(), agent_card=self.card
        )

        async def current(_card: AgentCard) -> AgentCard:
            return self.card

        app = Starlette(
            routes=[*create_agent_card_routes(self.card, card_modifier=current), *create_jsonrpc_routes(handler, "/")]
        )

        async def recording(scope, receive, send):
            if scope["type"] == "http":
                self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        config = uvicorn.Config(
            recording, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> RemoteAgent:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test A2A agent did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
