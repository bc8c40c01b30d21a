"""The offline planner as a litellm custom provider (``river-offline/planner``)."""

from __future__ import annotations

import json
import time
import uuid

import litellm
from litellm import CustomLLM, ModelResponse

from rivercore.planner.brain import plan_next
from rivercore.planner.rules import MODEL, PROVIDER, TASK_MARKER
from rivercore.planner.tasks import TASKS

# --- the litellm provider -------------------------------------------------------------------


def _estimate_tokens(value) -> int:
    return max(1, len(json.dumps(value, default=str)) // 4)


def respond(messages: list[dict], tools: list[dict]) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) for one completion request."""
    first = str(messages[0].get("content") or "") if messages else ""
    if first.startswith(TASK_MARKER):
        task = first[len(TASK_MARKER):].strip().split()[0] if first[len(TASK_MARKER):].strip() else ""
        handler = TASKS.get(task)
        if handler is None:
            return json.dumps({"error": f"unknown task {task!r}"}), []
        payload_text = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "{}")
        try:
            payload = json.loads(payload_text)
        except json.JSONDecodeError:
            return json.dumps({"error": "the task payload is not JSON"}), []
        return json.dumps(handler(payload), default=str), []
    offered = [t.get("function", {}).get("name") for t in tools or [] if t.get("type") == "function"]
    offered = [name for name in offered if name and name != "finalize"]
    plan = plan_next(messages, offered)
    if plan.tool is None:
        return plan.answer, []
    turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
    call = {"id": f"offline-{turn}-{plan.tool}-{uuid.uuid4().hex[:6]}", "type": "function",
            "function": {"name": plan.tool, "arguments": json.dumps(plan.arguments, default=str)}}
    return plan.thought, [call]


class OfflinePlanner(CustomLLM):
    def completion(self, model, messages, api_base, custom_prompt_dict, model_response, print_verbose, encoding,
                   api_key, logging_obj, optional_params, acompletion=None, litellm_params=None, logger_fn=None,
                   headers=None, timeout=None, client=None) -> ModelResponse:
        tools = optional_params.get("tools") or []
        content, calls = respond(messages, tools)
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        prompt_tokens = _estimate_tokens(messages) + (_estimate_tokens(tools) if tools else 0)
        completion_tokens = _estimate_tokens(content or calls)
        return ModelResponse(
            model=MODEL, created=int(time.time()),
            choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                   "total_tokens": prompt_tokens + completion_tokens},
        )


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

    custom_llm_setup()
