"""The offline planner as a litellm custom provider (``river-offline/planner``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from rivercore.planner.brain import plan_next
from rivercore.planner.rules import MODEL, PROVIDER
from rivercore.planner.tasks import TASKS
from rivercore.view import VIEW_KEY

# --- the litellm provider -------------------------------------------------------------------


def _estimate_tokens(value: object) -> int:
    return max(1, len(json.dumps(value, default=str)) // 4)


NO_VIEW = ("River's offline planner reads the run's structured view, which this request did not carry; "
           "it does not read chat text.")


def respond(view: dict[str, Any] | None, tools: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) for one completion request, from its structured view: a
    tool's sub-request (``task`` and ``payload``) or a turn of the loop (``run``)."""
    if not isinstance(view, dict):
        return NO_VIEW, []
    if "task" in view:
        handler = TASKS.get(str(view.get("task")))
        if handler is None:
            return json.dumps({"error": f"unknown task {view.get('task')!r}"}), []
        payload = view.get("payload")
        if not isinstance(payload, dict):
            return json.dumps({"error": "the task payload is not a JSON object"}), []
        return json.dumps(handler(payload), default=str), []
    run = view.get("run")
    if not isinstance(run, dict):
        return NO_VIEW, []
    offered = [t.get("function", {}).get("name") for t in tools or [] if t.get("type") == "function"]
    offered = [name for name in offered if name and name != "finalize"]
    plan = plan_next(run, offered)
    if plan.tool is None:
        return plan.answer, []
    turn = len(run.get("called") or []) + 1
    call = {"id": f"offline-{turn}-{plan.tool}-{uuid.uuid4().hex[:6]}", "type": "function",
            "function": {"name": plan.tool, "arguments": json.dumps(plan.arguments, default=str)}}
    return plan.thought, [call]


# The streamed answer comes in pieces of about this many characters, cut after a space.
STREAM_PIECE_CHARS = 24


def text_pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    """``text`` in consecutive pieces of about ``size`` characters, each ending after a
    space where there is one, so joined they give ``text`` back exactly."""
    pieces, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            space = text.find(" ", end)
            end = len(text) if space == -1 else space + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def _chunk(text: str = "", *, tool_use: dict[str, Any] | None = None, finish: str = "",
           usage: dict[str, int] | None = None) -> GenericStreamingChunk:
    chunk: dict[str, Any] = {"text": text, "tool_use": tool_use, "is_finished": bool(finish),
                             "finish_reason": finish, "usage": usage, "index": 0}
    return chunk  # type: ignore[return-value]  # litellm's TypedDicts; the shape is its custom-provider chunk


class OfflinePlanner(CustomLLM):
    def _answer(self, messages: list[dict[str, Any]], optional_params: dict[str, Any],
                litellm_params: dict[str, Any] | None) -> tuple[str | None, list[dict[str, Any]], dict[str, int]]:
        tools = optional_params.get("tools") or []
        metadata = (litellm_params or {}).get("metadata") or {}
        content, calls = respond(metadata.get(VIEW_KEY), tools)
        prompt_tokens = _estimate_tokens(messages) + (_estimate_tokens(tools) if tools else 0)
        completion_tokens = _estimate_tokens(content or calls)
        return content, calls, {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens}

    def completion(self, model: str, messages: list[dict[str, Any]], api_base: str | None,
                   custom_prompt_dict: dict[str, Any], model_response: ModelResponse, print_verbose: Any,
                   encoding: Any, api_key: str | None, logging_obj: Any, optional_params: dict[str, Any],
                   acompletion: Any = None, litellm_params: dict[str, Any] | None = None, logger_fn: Any = None,
                   headers: dict[str, Any] | None = None, timeout: Any = None, client: Any = None) -> ModelResponse:
        content, calls, usage = self._answer(messages, optional_params, litellm_params)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return ModelResponse(
            model=MODEL, created=int(time.time()),
            choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            usage=usage,
        )

    def streaming(self, model: str, messages: list[dict[str, Any]], api_base: str | None,
                  custom_prompt_dict: dict[str, Any], model_response: ModelResponse, print_verbose: Any,
                  encoding: Any, api_key: str | None, logging_obj: Any, optional_params: dict[str, Any],
                  acompletion: Any = None, litellm_params: dict[str, Any] | None = None, logger_fn: Any = None,
                  headers: dict[str, Any] | None = None, timeout: Any = None,
                  client: Any = None) -> Iterator[GenericStreamingChunk]:
        """The same answer as ``completion``, streamed: the text in pieces, then each tool
        call with its arguments in two pieces (as real models send them), then the end."""
        content, calls, usage = self._answer(messages, optional_params, litellm_params)
        for piece in text_pieces(content or ""):
            yield _chunk(piece)
        for index, call in enumerate(calls):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            yield _chunk(tool_use={"id": call["id"], "type": "function", "index": index,
                                   "function": {"name": call["function"]["name"], "arguments": arguments[:half]}})
            yield _chunk(tool_use={"id": None, "type": "function", "index": index,
                                   "function": {"name": None, "arguments": arguments[half:]}})
        yield _chunk(finish="tool_calls" if calls else "stop", usage=usage)

    async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[GenericStreamingChunk]:  # type: ignore[override]
        for chunk in self.streaming(*args, **kwargs):
            yield chunk


    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """The same answer for ``litellm.acompletion``: planning is plain computation."""
        return self.completion(*args, **kwargs)


_planner = OfflinePlanner()


def ensure_registered() -> None:
    """Register the planner with litellm (idempotent), with a price of zero."""
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": _planner})
        litellm.register_model({MODEL: {
            "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "cache_creation_input_token_cost": 0.0,
            "cache_read_input_token_cost": 0.0, "litellm_provider": PROVIDER, "mode": "chat",
        }})
    from litellm.utils import custom_llm_setup

    custom_llm_setup()  # type: ignore[no-untyped-call]  # litellm leaves it unannotated
