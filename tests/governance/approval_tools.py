"""Small tools for the approval tests, registered once, recording their calls.

Handlers run in the engine's worker thread, so they only append to a list (no
database access) and the tests stay on the ordinary per-test transaction.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict, Field

from rivercore.tools import Tool, ToolCategory, get_tool, register

WRITE_TOOL = "approval_test_write"
SCORE_TOOL = "approval_test_score"

CALLS: list[tuple[str, dict]] = []
_lock = threading.Lock()


class RefundIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ticket_id: int = Field(ge=1, description="The ticket to refund.")
    amount: float = Field(gt=0, le=500, description="Refund in EUR.")
    note: str = Field(default="", max_length=200)


class RefundOut(BaseModel):
    refunded: bool
    ticket_id: int
    amount: float


class ScoreIn(BaseModel):
    ticket_id: int


class ScoreOut(BaseModel):
    ticket_id: int
    confidence: float


SCORES: dict[int, float] = {}


def _refund(ctx, args: RefundIn) -> RefundOut:
    with _lock:
        CALLS.append((WRITE_TOOL, args.model_dump()))
    return RefundOut(refunded=True, ticket_id=args.ticket_id, amount=args.amount)


def _score(ctx, args: ScoreIn) -> ScoreOut:
    with _lock:
        CALLS.append((SCORE_TOOL, args.model_dump()))
    return ScoreOut(ticket_id=args.ticket_id, confidence=SCORES.get(args.ticket_id, 0.5))


def calls_of(name: str) -> list[dict]:
    with _lock:
        return [args for tool, args in CALLS if tool == name]


def reset() -> None:
    with _lock:
        CALLS.clear()
    SCORES.clear()


for _tool in (
    Tool(name=WRITE_TOOL, description="Refund a ticket (writes).", category=ToolCategory.EXECUTION,
         input_model=RefundIn, output_model=RefundOut, handler=_refund, writes=True),
    Tool(name=SCORE_TOOL, description="Score how sure we are about a ticket.", category=ToolCategory.EXECUTION,
         input_model=ScoreIn, output_model=ScoreOut, handler=_score, idempotent=True),
):
    if get_tool(_tool.name) is None:
        register(_tool)


def requester_in(workspace):
    """An analyst who starts the runs in approval tests. Segregation of duties keeps
    a run's starter from approving it, so the approvers in these tests (owner,
    editor, org admin) must not be the ones who started the run."""
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user, _ = get_user_model().objects.get_or_create(username=f"requester-{workspace.pk}")
    Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.ANALYST})
    return user
