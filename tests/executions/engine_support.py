"""Test tools and request builders shared by the engine tests."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from rivercore.contracts import ExecutionRequest
from rivercore.tools import Tool, ToolCategory, ToolError, ToolErrorKind, get_tool, register

EXAMPLE = json.loads((Path(__file__).parent / "example_execution_request.json").read_text())

CALLS: list[tuple[str, dict]] = []
_lock = threading.Lock()
FLAKY_FAILURES = {"left": 0}


class TextIn(BaseModel):
    text: str = Field(min_length=1)


class TextOut(BaseModel):
    echoed: str
    confidence: float | None = None


class SleepIn(BaseModel):
    seconds: float


def _echo(ctx, args: TextIn) -> TextOut:
    with _lock:
        CALLS.append(("test_echo", args.model_dump()))
    return TextOut(echoed=args.text)


def _write(ctx, args: TextIn) -> TextOut:
    with _lock:
        CALLS.append(("test_write", args.model_dump()))
    return TextOut(echoed=args.text)


def _sleep(ctx, args: SleepIn) -> TextOut:
    time.sleep(args.seconds)
    return TextOut(echoed="slept")


def _flaky(ctx, args: TextIn) -> TextOut:
    with _lock:
        CALLS.append(("test_flaky", args.model_dump()))
        if FLAKY_FAILURES["left"] > 0:
            FLAKY_FAILURES["left"] -= 1
            raise ToolError(ToolErrorKind.TRANSIENT, "upstream 503")
    return TextOut(echoed=args.text)


def _missing(ctx, args: TextIn) -> TextOut:
    with _lock:
        CALLS.append(("test_missing", args.model_dump()))
    raise ToolError(ToolErrorKind.NOT_FOUND, "no such ticket")


def _register_once(tool: Tool) -> None:
    if get_tool(tool.name) is None:
        register(tool)


for _tool in (
    Tool(name="test_echo", description="Echo text.", category=ToolCategory.EXECUTION, input_model=TextIn,
         output_model=TextOut, handler=_echo, permission="data_source:view", idempotent=True),
    Tool(name="test_write", description="Write text.", category=ToolCategory.EXECUTION, input_model=TextIn,
         output_model=TextOut, handler=_write, permission="data_source:update", writes=True),
    Tool(name="test_sleep", description="Sleep.", category=ToolCategory.EXECUTION, input_model=SleepIn,
         output_model=TextOut, handler=_sleep, idempotent=True),
    Tool(name="test_flaky", description="Fails transiently.", category=ToolCategory.EXECUTION, input_model=TextIn,
         output_model=TextOut, handler=_flaky, idempotent=True),
    Tool(name="test_missing", description="Always 404.", category=ToolCategory.EXECUTION, input_model=TextIn,
         output_model=TextOut, handler=_missing, idempotent=True),
):
    _register_once(_tool)


def request_for(
    *, tools: list[str], action_level: str = "automated", permissions: list[str] | None = None,
    model_config: dict | None = None, policies: list[dict] | None = None, payload=None,
    require_approval_for: list[str] | None = None, prompt: str = "Do the task.",
) -> ExecutionRequest:
    body = json.loads(json.dumps(EXAMPLE))
    cfg = body["agent_config"]
    cfg["agent_id"] = str(uuid.uuid4())
    cfg["tools"] = tools
    cfg["action_level"] = action_level
    cfg["governance_policies"] = policies or []
    cfg["model_config"] = {**{"max_turns": 15, "token_budget": 100000, "timeout_seconds": 30},
                           **(model_config or {})}
    cfg["approval_rules"]["require_approval_for"] = require_approval_for or []
    cfg["approval_rules"]["auto_approve_conditions"] = []
    body["user_context"]["permissions"] = permissions if permissions is not None else [
        "data_source:view", "data_source:query", "data_source:update", "agent:execute"]
    body["trigger_context"]["trigger_payload"] = payload
    body["input_prompt"] = prompt
    return ExecutionRequest.model_validate(body)
