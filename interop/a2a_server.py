"""River's agents as Agent2Agent (A2A 1.0) agents, with the ``a2a-sdk`` (docs/a2a.md).

Every path sits under ``/a2a/`` and passes ``interop.edge`` first (the same credentials,
scope and rate as ``/mcp/``); nothing, the cards included, is served to an anonymous
caller, so one workspace's list of agents never shows in another's:

- ``GET /a2a/agents/``: the cards of the agents the caller may run;
- ``GET /a2a/agents/<agent id>/.well-known/agent-card.json``: one agent's card, at the
  SDK's well-known path below the agent's URL (404 for an agent the caller cannot see);
- ``POST /a2a/agents/<agent id>/``: the A2A JSON-RPC binding, served by the SDK's
  dispatcher with ``RiverRequestHandler``.

A task is a River run: its id is the run's id, its state read from the run's row every
time (no task store of the SDK's: a run is durable, the row is the record). SendMessage
starts a run as the caller and waits for it (at most ``RIVER_INTEROP_WAIT_SECONDS``, not
at all when ``returnImmediately``); a run paused for approval is ``input-required``, its
status message naming the approval page, which someone other than the caller decides.
GetTask, ListTasks and CancelTask read and cancel the caller's runs of that agent.
Streaming and push notifications are not offered.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_CURRENT, TransportProtocol
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.conf import settings
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct, Value
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from executions.models import Execution
from executions.services import execution_cancel
from interop.callers import Caller
from interop.edge import CALLER, LINKS, edge_admit, error_response
from interop.runs import (
    RUNS_MAX,
    Links,
    agent_get_runnable,
    agents_runnable,
    db,
    report_text,
    run_follow,
    run_get,
    run_report,
    run_start,
    runs_recent,
)
from rivercore.errors import NotFound, RiverError

AGENTS_PATH = "/a2a/agents/"
TEXT = "text/plain"
JSON = "application/json"

STATES = {
    Execution.Status.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    Execution.Status.RUNNING: TaskState.TASK_STATE_WORKING,
    Execution.Status.AWAITING_CHILD: TaskState.TASK_STATE_WORKING,
    Execution.Status.AWAITING_APPROVAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    Execution.Status.AWAITING_INTERACTION: TaskState.TASK_STATE_INPUT_REQUIRED,
    Execution.Status.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    Execution.Status.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
FINISHED = frozenset(
    {
        Execution.Status.COMPLETED,
        Execution.Status.FAILED,
        Execution.Status.MAX_TURNS_EXCEEDED,
        Execution.Status.BUDGET_EXCEEDED,
        Execution.Status.TIMEOUT,
        Execution.Status.CANCELLED,
        Execution.Status.APPROVAL_EXPIRED,
    }
)


def agent_url(links: Links, agent_id) -> str:
    return f"{links.base}{AGENTS_PATH}{agent_id}/"


def agent_card(agent, *, links: Links) -> AgentCard:
    version = agent.current_version
    goal = (version.goal if version else "") or f"River agent {agent.name}."
    return AgentCard(
        name=agent.name,
        description=f"{goal} (River agent of the {agent.workspace.name} workspace; governed: a step its "
        "policies hold waits for someone else's approval.)",
        supported_interfaces=[
            AgentInterface(
                url=agent_url(links, agent.pk),
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
        ],
        provider=AgentProvider(organization="River", url=links.base),
        version=str(version.version if version else 0),
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="A River personal access token (rvr_...) or API key (rtk_...)."
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
        default_input_modes=[TEXT],
        default_output_modes=[TEXT, JSON],
        skills=[
            AgentSkill(
                id="ask",
                name=f"Ask the {agent.name}",
                description=goal,
                tags=[agent.business_function or "agent"],
                input_modes=[TEXT],
                output_modes=[TEXT, JSON],
            )
        ],
    )


def _struct(data: dict) -> Struct:
    struct = Struct()
    struct.update(data)
    return struct


def task_of(report: dict, *, request: Message | None = None) -> Task:
    """The run's report as an A2A task."""
    status = report["status"]
    state = STATES.get(status, TaskState.TASK_STATE_FAILED)
    task_id = str(report["execution_id"])
    said = Message(
        message_id=f"river-{task_id}-{status}",
        task_id=task_id,
        context_id=task_id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=report_text(report))],
    )
    artifacts = []
    if status in FINISHED:
        parts = [Part(text=report.get("answer") or report_text(report), media_type=TEXT)]
        if "query" in report:
            parts.append(Part(data=ParseDict(report["query"], Value()), media_type=JSON))
        artifacts.append(Artifact(artifact_id=f"river-{task_id}-answer", name="answer", parts=parts))
    history = [request] if request is not None else []
    return Task(
        id=task_id,
        context_id=task_id,
        status=TaskStatus(state=state, message=said),
        artifacts=artifacts,
        history=history,
        metadata=_struct({"river": report}),
    )


def _caller_agent(context: ServerCallContext):
    return CALLER.get(), LINKS.get(), context.state["agent_id"]


def _run_of_agent(*, caller: Caller, task_id: str, agent_id) -> Execution:
    try:
        execution = run_get(caller=caller, execution_id=task_id)
    except NotFound:
        raise TaskNotFoundError() from None
    if str(execution.agent_id) != str(agent_id):
        raise TaskNotFoundError()
    return execution


def _report_of(*, caller: Caller, task_id: str, agent_id, links: Links) -> dict:
    return run_report(
        caller=caller, execution=_run_of_agent(caller=caller, task_id=task_id, agent_id=agent_id), links=links
    )


def _cancelled(*, caller: Caller, task_id: str, agent_id, links: Links) -> dict:
    execution = _run_of_agent(caller=caller, task_id=task_id, agent_id=agent_id)
    if execution.status in FINISHED:
        raise TaskNotCancelableError(message=f"The run is {execution.status}.")
    try:
        execution_cancel(execution=execution, user=caller.user)
    except RiverError as error:
        raise TaskNotCancelableError(message=error.message) from None
    return _report_of(caller=caller, task_id=task_id, agent_id=agent_id, links=links)


def _listed(*, caller: Caller, agent_id, limit: int, links: Links) -> list[dict]:
    agent = agent_get_runnable(caller=caller, agent_id=agent_id)
    return [
        run_report(caller=caller, execution=run, links=links)
        for run in runs_recent(caller=caller, agent=agent, limit=limit)
    ]


def _text_of(message: Message) -> str:
    return "\n".join(part.text for part in message.parts if part.WhichOneof("content") == "text")


class RiverRequestHandler(RequestHandler):
    """A2A methods over River runs (see the module docstring)."""

    async def on_message_send(self, params, context: ServerCallContext) -> Task:
        caller, links, agent_id = _caller_agent(context)
        message = params.message
        if message.task_id:
            raise InvalidParamsError(
                message="A River task takes no follow-up message: an approval is decided on its "
                "approval page by someone other than the requester."
            )
        try:
            agent = await db(agent_get_runnable, caller=caller, agent_id=agent_id)
            execution = await db(run_start, caller=caller, agent=agent, prompt=_text_of(message), channel="a2a")
        except RiverError as error:
            raise InvalidParamsError(
                message=error.message, data={"code": error.code, "details": error.details}
            ) from None
        if not params.configuration.return_immediately:
            await run_follow(
                execution_id=execution.pk, wait_seconds=settings.RIVER_INTEROP_WAIT_SECONDS, on_event=_ignore
            )
        report = await db(_report_of, caller=caller, task_id=str(execution.pk), agent_id=agent_id, links=links)
        return task_of(report, request=message)

    async def on_get_task(self, params, context: ServerCallContext) -> Task:
        caller, links, agent_id = _caller_agent(context)
        return task_of(await db(_report_of, caller=caller, task_id=params.id, agent_id=agent_id, links=links))

    async def on_list_tasks(self, params, context: ServerCallContext) -> ListTasksResponse:
        caller, links, agent_id = _caller_agent(context)
        limit = params.page_size if 0 < params.page_size <= RUNS_MAX else 20
        try:
            reports = await db(_listed, caller=caller, agent_id=agent_id, limit=limit, links=links)
        except RiverError as error:
            raise InvalidParamsError(message=error.message) from None
        return ListTasksResponse(tasks=[task_of(r) for r in reports], page_size=limit, total_size=len(reports))

    async def on_cancel_task(self, params, context: ServerCallContext) -> Task:
        caller, links, agent_id = _caller_agent(context)
        return task_of(await db(_cancelled, caller=caller, task_id=params.id, agent_id=agent_id, links=links))

    async def on_message_send_stream(self, params, context: ServerCallContext):
        raise UnsupportedOperationError(message="Streaming is not offered; send a message and get the task.")
        yield  # an async generator, as the interface declares

    async def on_subscribe_to_task(self, params, context: ServerCallContext):
        raise UnsupportedOperationError(message="Streaming is not offered; get the task.")
        yield

    async def on_create_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params, context):
        raise UnsupportedOperationError(message="No extended card: the card is already served to callers only.")


async def _ignore(_event) -> None:
    return None


class RiverContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the agent the URL names."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["agent_id"] = request.path_params["agent_id"]
        return context


def _cards(*, caller: Caller, links: Links) -> list[dict]:
    return [agent_card_to_dict(agent_card(agent, links=links)) for agent in agents_runnable(caller=caller)]


def _card(*, caller: Caller, agent_id, links: Links) -> dict:
    return agent_card_to_dict(agent_card(agent_get_runnable(caller=caller, agent_id=agent_id), links=links))


async def cards_list(request: Request) -> JSONResponse:
    return JSONResponse({"agents": await db(_cards, caller=CALLER.get(), links=LINKS.get())})


async def card_get(request: Request) -> JSONResponse:
    try:
        card = await db(_card, caller=CALLER.get(), agent_id=request.path_params["agent_id"], links=LINKS.get())
    except RiverError as error:
        return error_response(error)
    return JSONResponse(card)


_routes = [
    Route(AGENTS_PATH, cards_list, methods=["GET"]),
    Route(f"{AGENTS_PATH}{{agent_id:uuid}}{AGENT_CARD_WELL_KNOWN_PATH}", card_get, methods=["GET"]),
    *create_jsonrpc_routes(
        RiverRequestHandler(), rpc_url=f"{AGENTS_PATH}{{agent_id:uuid}}/", context_builder=RiverContextBuilder()
    ),
]
_starlette = Starlette(routes=_routes)


async def a2a_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application behind ``/a2a/``."""
    if not await edge_admit(scope, receive, send):
        return
    await _starlette(scope, receive, send)
