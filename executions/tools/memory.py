"""search_memory: the workspace's memory, as the run's requester may read it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.selectors import memory_search
from rivercore.tools import Tool, ToolCategory, ToolContext, register


class SearchMemoryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=500, description="Words to look for in what earlier runs learned.")
    top_k: int = Field(default=5, ge=1, le=20, description="Number of memories to return.")


class MemoryHit(BaseModel):
    memory_id: int
    content: str
    score: float
    personal: bool
    agent_id: str | None
    source_execution_id: int | None
    created_at: str


class SearchMemoryOutput(BaseModel):
    matches: list[MemoryHit]
    total_results: int


def search_memory(ctx: ToolContext, args: SearchMemoryInput) -> SearchMemoryOutput:
    """Memories of the run's workspace only; personal ones only those of the user the
    run acts for (``ctx.user``), never another member's."""
    found = memory_search(workspace_id=ctx.user.workspace_id, user_id=ctx.user.user_id, query=args.query,
                          top_k=args.top_k)
    return SearchMemoryOutput(total_results=len(found), matches=[
        MemoryHit(memory_id=hit.memory.pk, content=hit.memory.content, score=round(hit.score, 3),
                  personal=hit.memory.personal, agent_id=str(hit.memory.agent_id) if hit.memory.agent_id else None,
                  source_execution_id=hit.memory.source_execution_id, created_at=hit.memory.created_at.isoformat())
        for hit in found
    ])


SEARCH_MEMORY = register(
    Tool(
        name="search_memory",
        description="Search what earlier runs in this workspace learned (questions asked, answers given, queries "
                    "that answered them); personal memories only of the user this run acts for.",
        category=ToolCategory.REASONING,
        input_model=SearchMemoryInput,
        output_model=SearchMemoryOutput,
        handler=search_memory,
        permission=None,
        idempotent=True,
    )
)
