"""The approval storm: many paused runs, each resolved by several concurrent requests.

Shared by ``manage.py bench --approvals`` and tests/executions/test_approval_storm.py.
Every piece is River's own code path:

1. ``storm_prepare`` starts real runs of an agent whose ``write_back`` needs approval
   and runs their first segment with a scripted in-process model, so each one pauses
   at the gate with an open approval request (``execution_start`` and
   ``execution_run_segment``, nothing written by hand);
2. ``storm_resolve`` sends ``POST /api/v1/approvals/{id}/resolve`` over real HTTP, from
   ``racers`` threads that each walk the whole list, so every approval is raced by
   ``racers`` requests that disagree (approve, reject, edit-and-approve);
3. ``storm_resume`` runs the queued resume segments on a few threads (and each one a
   second time, as a duplicate delivery would), so every approved write reaches the
   target table through ``write_back``.

The caller queues nothing to Celery: ``resumes_recorded`` records each resume the
resolutions queue instead.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from unittest import mock

import httpx
from django.db import connection

from agents.types import Tier
from executions import services, tasks
from executions.engine.llm import LLMReply, LLMToolCall
from governance import tasks as governance_tasks
from governance.models import ApprovalRequest

DECISIONS = (
    {"status": "approved"},
    {"status": "rejected", "resolution_comment": "not this one"},
    {"status": "edited_approved", "modified_args": None},  # filled per approval
)
TABLE = "charges"
PROPOSED_AMOUNT = 5
EDITED_AMOUNT = 7


def marker(index: int) -> str:
    """The value of ``status`` the run for approval ``index`` writes."""
    return f"storm-refund-{index}"


def write_args(*, data_source_id: int, index: int, amount: int = PROPOSED_AMOUNT) -> dict:
    return {"data_source_id": data_source_id, "table_name": TABLE, "operation": "insert",
            "data": {"customer_id": 1, "amount": amount, "status": marker(index)}}


class ScriptedModel:
    """An in-process model: the given tool call first, then a short final answer."""

    def __init__(self, call: dict | None = None):
        self.call = call

    def complete(self, *, messages, tools, tier, timeout_seconds) -> LLMReply:
        if self.call is not None:
            call, self.call = self.call, None
            return LLMReply(tool_calls=[LLMToolCall(id="call_storm", name="write_back", arguments=call)],
                            model="storm-script", provider="storm", tier=Tier.FAST, input_tokens=40,
                            output_tokens=10, cost_usd=0.0)
        return LLMReply(content="Done.", model="storm-script", provider="storm", tier=Tier.FAST, input_tokens=40,
                        output_tokens=4, cost_usd=0.0)


@dataclass(frozen=True)
class Paused:
    index: int
    execution_id: int
    approval_id: str


@dataclass
class StormResult:
    codes: Counter = field(default_factory=Counter)
    winners: dict[str, list[dict]] = field(default_factory=dict)  # approval id -> 200 bodies
    other: list[tuple[str, int, str]] = field(default_factory=list)  # anything not 200/409
    requests: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


@contextmanager
def resumes_recorded() -> Iterator[list[int]]:
    """Resumes (and approval notifications, post-processing) are recorded, not sent
    to a broker: the storm drives the segments itself."""
    queued: list[int] = []
    lock = threading.Lock()

    def record(execution_id, *args, **kwargs):
        with lock:
            queued.append(execution_id)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(tasks.run_segment, "delay", record))
        for task in (tasks.post_process, tasks.write_memory, governance_tasks.notify_approval):
            stack.enter_context(mock.patch.object(task, "delay", lambda *a, **k: None))
        yield queued


def storm_prepare(*, agent, starter, data_source_id: int, count: int, threads: int = 4) -> list[Paused]:
    """``count`` real runs paused at the gate of their ``write_back`` (caller records
    the queued tasks, see ``resumes_recorded``)."""

    def one(index: int) -> Paused:
        try:
            execution = services.execution_start(agent=agent, user=starter, input_prompt=f"Refund #{index}")
            services.execution_run_segment(
                execution_id=execution.pk,
                llm=ScriptedModel(write_args(data_source_id=data_source_id, index=index)),
            )
            approval = ApprovalRequest.objects.get(execution_id=execution.pk)
            return Paused(index=index, execution_id=execution.pk, approval_id=str(approval.pk))
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(count)))


def decision_for(paused: Paused, racer: int, *, data_source_id: int) -> dict:
    body = dict(DECISIONS[(paused.index + racer) % len(DECISIONS)])
    if body["status"] == "edited_approved":
        body["modified_args"] = write_args(data_source_id=data_source_id, index=paused.index, amount=EDITED_AMOUNT)
    return body


def storm_resolve(*, base_url: str, tokens: list[str], paused: list[Paused], data_source_id: int,
                  timeout_seconds: float = 60.0) -> StormResult:
    """One thread per token; each resolves every approval in the same order, so the
    racers collide on each one. Returns what came back."""
    result = StormResult()
    lock = threading.Lock()
    start = threading.Barrier(len(tokens))

    def racer(number: int, token: str) -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                          timeout=timeout_seconds) as client:
            start.wait(timeout=timeout_seconds)
            for item in paused:
                response = client.post(f"/api/v1/approvals/{item.approval_id}/resolve",
                                       json=decision_for(item, number, data_source_id=data_source_id))
                with lock:
                    result.codes[response.status_code] += 1
                    if response.status_code == 200:
                        result.winners.setdefault(item.approval_id, []).append(response.json())
                    elif response.status_code != 409:
                        result.other.append((item.approval_id, response.status_code, response.text[:300]))

    started = time.perf_counter()
    threads = [threading.Thread(target=racer, args=(n, t), name=f"storm-{n}") for n, t in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_seconds * max(1, len(paused)))
    result.seconds = time.perf_counter() - started
    result.requests = sum(result.codes.values())
    return result


def storm_resume(*, execution_ids: list[int], threads: int = 4) -> dict[int, list]:
    """Run each queued resume, then deliver it a second time. Returns, per run, what
    the two segment calls returned (the second must find nothing to do)."""

    def one(execution_id: int) -> tuple[int, list]:
        try:
            first = services.execution_run_segment(execution_id=execution_id, llm=ScriptedModel())
            again = services.execution_run_segment(execution_id=execution_id, llm=ScriptedModel())
            return execution_id, [first, again]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(pool.map(one, execution_ids))
