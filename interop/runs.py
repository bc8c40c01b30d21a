"""Runs for an MCP or A2A caller: the agents it may run, a run started as it, a run read
back, and the report both protocols answer with.

Everything goes through the selectors and services the REST API uses
(``agent_get_with_permissions``, ``execution_start``, ``execution_get_for_user``), plus the
credential's scope (``Caller.reaches``): another workspace's agent or run is "not
found", never a hint that it exists. A run is started as the caller's user and answered
for by them (``PersonOrigin`` with ``requester_id`` the user), so the requester rule holds:
they may not approve its actions. The start and an audit entry naming the credential are
one transaction.
"""

from __future__ import annotations

import asyncio
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, transaction

from agents.models import Agent
from agents.selectors import agent_get_with_permissions, agents_for_user
from executions.models import Execution, ExecutionEvent
from executions.selectors import (
    execution_events_after,
    execution_get_for_user,
    execution_query_results,
    execution_question_open,
    executions_for_user,
)
from executions.services import execution_start
from executions.types import PersonOrigin, RunRequest
from governance.approvals import approvals_of_execution
from governance.audit import audit_record
from governance.models import ApprovalRequest
from interop.callers import Caller
from rivercore import limits
from rivercore.errors import InvalidInput, NotFound
from tenancy.permissions import AGENT_EXECUTE
from tenancy.selectors import require_granted, workspace_permissions

# The most agents one caller is offered as tools or cards.
AGENTS_MAX = 200
# The most runs list_runs / tasks/list return.
RUNS_MAX = 50
# Rows of a query result carried in a report (the run page has all of them).
REPORT_ROWS_MAX = 100
# An MCP tool name: letters, digits, _ and -, at most 64 characters (what clients accept).
TOOL_NAME_MAX = 64
# How often a caller waiting for its run reads the run's status and new events.
FOLLOW_POLL_SECONDS = 0.25
WAITING = frozenset({Execution.Status.QUEUED, Execution.Status.RUNNING})
RUN_NOT_FOUND = "Run not found."
AGENT_NOT_FOUND = "Agent not found."
T = TypeVar("T")


def agents_runnable(*, caller: Caller) -> list[Agent]:
    """The active agents the caller may run: in a workspace the credential reaches and
    where the user holds ``agent:execute``; by workspace, then name."""
    agents = [
        a
        for a in agents_for_user(user=caller.user, status=Agent.Status.ACTIVE)
        .select_related("workspace")
        .order_by("workspace_id", "name", "id")[:AGENTS_MAX]
        if caller.reaches(workspace=a.workspace)
    ]
    granted: dict[int, bool] = {}
    runnable = []
    for agent in agents:
        if agent.workspace_id not in granted:
            granted[agent.workspace_id] = AGENT_EXECUTE in workspace_permissions(
                user=caller.user, workspace=agent.workspace
            )
        if granted[agent.workspace_id] and agent.current_version_id is not None:
            runnable.append(agent)
    return runnable


def agent_get_runnable(*, caller: Caller, agent_id) -> Agent:
    """The agent if the caller may see it (404 otherwise, also outside the credential's
    scope) and run it (403 without ``agent:execute``)."""
    agent, granted = agent_get_with_permissions(user=caller.user, agent_id=agent_id)
    if not caller.reaches(workspace=agent.workspace):
        raise NotFound(AGENT_NOT_FOUND)
    require_granted(granted=granted, permission=AGENT_EXECUTE)
    return agent


def prompt_clean(value) -> str:
    """The prompt a caller sent: text, without NUL, at most ``limits.PROMPT`` characters;
    InvalidInput naming ``prompt`` otherwise."""
    if not isinstance(value, str):
        raise InvalidInput("prompt must be text.", details={"prompt": ["Give the question as text."]})
    if "\x00" in value:
        raise InvalidInput("prompt holds a NUL character.", details={"prompt": ["NUL characters are not allowed."]})
    if not value.strip():
        raise InvalidInput("prompt is empty.", details={"prompt": ["Ask something."]})
    if len(value) > limits.PROMPT:
        raise InvalidInput("prompt is too long.", details={"prompt": [f"At most {limits.PROMPT} characters."]})
    return value


def run_start(*, caller: Caller, agent: Agent, prompt: str, channel: str) -> Execution:
    """Start a durable run of ``agent`` as the caller (``channel``: ``mcp`` or ``a2a``,
    stored as the run's source) and audit which credential asked, in one transaction."""
    prompt = prompt_clean(prompt)
    with transaction.atomic():
        execution = execution_start(
            agent=agent,
            request=RunRequest(
                agent_id=agent.pk,
                prompt=prompt,
                origin=PersonOrigin(user_id=caller.user.pk, requester_id=caller.user.pk, source=channel),
            ),
        )
        audit_record(
            organization_id=agent.workspace.organization_id,
            workspace_id=agent.workspace_id,
            event_type=f"{channel}_run_started",
            actor=caller.user,
            execution_id=execution.pk,
            agent_id=agent.pk,
            details={"credential": caller.label, "channel": channel},
        )
    return execution


def run_get(*, caller: Caller, execution_id) -> Execution:
    """The run if the caller's user may see it and the credential reaches its
    workspace; NotFound otherwise (an id that is not a number included)."""
    if isinstance(execution_id, bool) or not isinstance(execution_id, int | str):
        raise NotFound(RUN_NOT_FOUND)
    if isinstance(execution_id, str) and not execution_id.isdigit():
        raise NotFound(RUN_NOT_FOUND)
    if int(execution_id) > 2**63 - 1:
        raise NotFound(RUN_NOT_FOUND)
    try:
        execution = execution_get_for_user(user=caller.user, execution_id=execution_id)
    except NotFound:
        raise NotFound(RUN_NOT_FOUND) from None
    if not caller.reaches(workspace=execution.workspace):
        raise NotFound(RUN_NOT_FOUND)
    return execution


def runs_recent(
    *, caller: Caller, limit: int = 20, agent: Agent | None = None, status: str | None = None
) -> list[Execution]:
    """The caller's most recent runs (those of the workspaces it reaches), newest first."""
    if status is not None and status not in Execution.Status.values:
        raise InvalidInput(
            "Unknown run status.", details={"status": [f"must be one of {', '.join(Execution.Status.values)}"]}
        )
    runs = executions_for_user(user=caller.user).select_related("agent", "workspace").order_by("-id")
    if caller.workspace_id is not None:
        runs = runs.filter(workspace_id=caller.workspace_id)
    elif caller.organization_id is not None:
        runs = runs.filter(workspace__organization_id=caller.organization_id)
    if agent is not None:
        runs = runs.filter(agent_id=agent.pk)
    if status is not None:
        runs = runs.filter(status=status)
    return list(runs[: max(1, min(int(limit), RUNS_MAX))])


def tool_name_for(agent: Agent) -> str:
    """``ask_<agent name>`` in lowercase ASCII letters, digits and underscores."""
    ascii_name = unicodedata.normalize("NFKD", agent.name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_") or "agent"
    return f"ask_{slug}"[:TOOL_NAME_MAX]


def agent_tool_names(agents: list[Agent]) -> dict[str, Agent]:
    """One tool name per agent. Two agents whose names give the same tool name (in two
    workspaces, say) both get their id's first 8 characters appended, so a name never
    changes meaning with the order of a list."""
    by_name: dict[str, list[Agent]] = {}
    for agent in agents:
        by_name.setdefault(tool_name_for(agent), []).append(agent)
    named: dict[str, Agent] = {}
    for name, same in by_name.items():
        if len(same) == 1:
            named[name] = same[0]
            continue
        for agent in same:
            named[f"{name[: TOOL_NAME_MAX - 9]}_{agent.pk.hex[:8]}"] = agent
    return named


@dataclass(frozen=True, kw_only=True)
class Links:
    """Absolute links into River's pages for a report; ``base`` is the server's origin."""

    base: str

    def run(self, execution_id: int) -> str:
        return f"{self.base}/runs/{execution_id}/"

    def approval(self, approval_id) -> str:
        return f"{self.base}/approvals/{approval_id}/"


def run_report(*, caller: Caller, execution: Execution, links: Links) -> dict:
    """The run as both protocols report it: status and outcome, the answer, the last
    query's SQL and rows (at most ``REPORT_ROWS_MAX``), the pending approvals with the
    link to each approval page, an open question, and the run page's link."""
    result = execution.result if isinstance(execution.result, dict) else {}
    report: dict = {
        "execution_id": execution.pk,
        "agent": {"id": str(execution.agent_id), "name": execution.agent.name},
        "workspace": execution.workspace.slug,
        "status": execution.status,
        "outcome": execution.outcome,
        "answer": str(result.get("summary") or ""),
        "run_url": links.run(execution.pk),
    }
    if execution.error:
        error = execution.error if isinstance(execution.error, dict) else {}
        report["error"] = {"code": str(error.get("code") or ""), "message": str(error.get("message") or "")[:500]}
    found = execution_query_results(execution_ids=[execution.pk]).get(execution.pk)
    if found is not None:
        stored = found["result"]
        columns = [str(c) for c in stored.get("columns") or []] if isinstance(stored.get("columns"), list) else []
        rows = stored.get("rows") if isinstance(stored.get("rows"), list) else []
        report["query"] = {
            "sql": found["query"],
            "columns": columns,
            "rows": rows[:REPORT_ROWS_MAX],
            "row_count": stored.get("row_count", len(rows)),
            "rows_shown": min(len(rows), REPORT_ROWS_MAX),
        }
    if execution.status == Execution.Status.AWAITING_APPROVAL:
        pending = approvals_of_execution(user=caller.user, execution_id=execution.pk).filter(
            status=ApprovalRequest.Status.PENDING
        )
        report["approvals"] = [{"id": str(a.pk), "tool": a.tool_name, "url": links.approval(a.pk)} for a in pending]
    if execution.status == Execution.Status.AWAITING_INTERACTION:
        question = execution_question_open(execution_id=execution.pk)
        if question is not None:
            report["question"] = question["input"]
    return report


def report_text(report: dict) -> str:
    """The report as a few lines for a person or a model reading the tool's text."""
    lines = [
        f"Run {report['execution_id']} of {report['agent']['name']}: {report['status']}"
        + (f" ({report['outcome']})" if report.get("outcome") else "")
        + "."
    ]
    if report.get("answer"):
        lines.append(report["answer"])
    for approval in report.get("approvals", []):
        lines.append(
            f"Paused for approval of {approval['tool']}: someone other than you approves it at "
            f"{approval['url']}. Ask get_run for the rest."
        )
    if report.get("question"):
        lines.append("The agent asks a question; answer it on the run page.")
    if report["status"] in WAITING:
        lines.append("Still running; ask get_run with this execution_id for the rest.")
    if report.get("error", {}).get("message"):
        lines.append(f"Error: {report['error']['message']}")
    lines.append(f"Run page: {report['run_url']}")
    return "\n".join(lines)


def event_line(event: ExecutionEvent) -> str:
    """One progress line for a stored run event."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    tool = payload.get("tool_name") or payload.get("tool")
    text = event.event_type.replace("_", " ")
    return f"{text}: {tool}" if tool else text


def run_status_and_events(*, execution_id: int, after: int) -> tuple[str, list[ExecutionEvent]]:
    """The run's status now and its events after ``after`` (one poll of ``run_follow``)."""
    status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).first()
    return str(status or ""), list(execution_events_after(execution_id=execution_id, after=after))


async def db(function: Callable[..., T], /, **kwargs) -> T:
    """Run ``function(**kwargs)`` (ORM work) in a worker thread, from the MCP or A2A
    request's event loop. These requests do not pass through Django's handler, so the
    thread's connection is checked before and released after, as Django does around
    a request (back to the pool when one is configured)."""

    def call() -> T:
        close_old_connections()
        try:
            return function(**kwargs)
        finally:
            close_old_connections()

    return await sync_to_async(call, thread_sensitive=False)()


async def run_follow(
    *, execution_id: int, wait_seconds: float, on_event: Callable[[ExecutionEvent], Awaitable[None]]
) -> str:
    """Wait while the run is queued or running, at most ``wait_seconds``, handing each new
    stored event to ``on_event`` in order; the status it was left in. The run goes on
    in a worker whatever happens here: a caller that leaves loses nothing."""
    seen = 0
    deadline = time.monotonic() + wait_seconds
    while True:
        status, events = await db(run_status_and_events, execution_id=execution_id, after=seen)
        for event in events:
            seen = event.seq
            await on_event(event)
        if status not in WAITING or time.monotonic() >= deadline:
            return status
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
