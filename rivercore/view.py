"""A structured account of a run for a model that reads values rather than chat text.

River's offline planner is such a model: it gets this view (through the router, as
litellm request metadata) next to the chat messages a real model reads, so it never
has to parse the prompt, the tool results or the compressed history back out of
text. The view is built from the run's request and steps, in one place."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rivercore.context import trigger_text, user_prompt
from rivercore.contracts import StepType
from rivercore.state import RunState
from rivercore.steps import observation_seen

VIEW_KEY = "river_view"  # the key of the view in a model request's metadata


class ToolObservation(BaseModel):
    call_id: str
    name: str
    ok: bool
    body: Any = None
    arguments: dict[str, Any] = Field(default_factory=dict)


class RunView(BaseModel):
    prompt: str
    goal: str = ""
    instructions: str = ""
    trigger_type: str = "manual"
    trigger: str = ""  # what started the run, as the prompt says it
    data_sources: list[dict[str, Any]] = Field(default_factory=list)
    called: list[str] = Field(default_factory=list)  # every tool the model called, in order
    observations: list[ToolObservation] = Field(default_factory=list)  # in order
    notice: str | None = None  # the runner's notice, when it is the last thing the model was told
    # In a session: the question the previous turn's answer was planned from (a follow-up
    # such as "and last month?" is read against it; docs/sessions.md).
    previous_question: str = ""


def run_view(state: RunState) -> RunView:
    request = state.request
    cfg = request.agent_config
    view = RunView(
        prompt=user_prompt(request), goal=cfg.goal, instructions=cfg.instructions,
        trigger_type=request.trigger_context.trigger_type.value, trigger=trigger_text(request),
        data_sources=[source.model_dump(mode="json") for source in request.data_source_metadata],
        previous_question=request.session.previous_question if request.session is not None else "",
    )
    for past in state.steps:
        output = past.output if isinstance(past.output, dict) else {}
        if past.step_type == StepType.REASONING:
            view.called += [str(call.get("name")) for call in output.get("tool_calls") or [] if call.get("name")]
        elif past.step_type == StepType.OBSERVATION and past.tool_name and past.call_id:
            ok, body = observation_seen(past)
            view.observations.append(ToolObservation(call_id=past.call_id, name=past.tool_name, ok=ok, body=body,
                                                     arguments=past.input if isinstance(past.input, dict) else {}))
    last = state.steps[-1] if state.steps else None
    if last is not None and last.step_type == StepType.REASONING and isinstance(last.input, dict) \
            and isinstance(last.input.get("notice"), str):
        view.notice = last.input["notice"]
    return view
