"""ask_user: intercepted by the engine, which pauses the run for the answer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rivercore.contracts import InteractionType
from rivercore.tools import Tool, ToolCategory, ToolContext, register


class AskUserInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interaction_type: InteractionType = Field(description="What kind of answer is needed.")
    message: str = Field(min_length=1, description="The question or prompt for the user.")
    options: list[str] | None = Field(default=None, description="Selectable options, for multiple choice.")
    required: bool = Field(default=True, description="Whether an answer is mandatory.")


class AskUserOutput(BaseModel):
    user_response: object = None


def _never_dispatched(ctx: ToolContext, args: AskUserInput) -> AskUserOutput:
    raise RuntimeError("ask_user is handled by the engine and never dispatched")


ASK_USER = register(
    Tool(
        name="ask_user",
        description="Ask the user a question and wait for the answer before continuing.",
        category=ToolCategory.INTERACTION,
        input_model=AskUserInput,
        output_model=AskUserOutput,
        handler=_never_dispatched,
        permission=None,
    )
)
