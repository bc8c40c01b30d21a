"""Long-term memory that helps: only answered runs write it, the same answer is one
memory (refreshed), and a run's prompt gets the few most relevant within a token cap,
so asking the same question again and again does not grow the prompt."""

from __future__ import annotations

import json

import pytest

from agents.models import AgentMemory
from executions import services, tasks
from executions.services.load import memories_relevant
from governance.services import policy_create
from rivercore.outcome import NO_ANSWER_NOTE
from rivercore.types.agents import MemoryEntry
from tests.executions import durable_support  # noqa: F401 - registers the durable test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db
QUESTION = "How many open tickets are there in the billing queue?"


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def ask(agent, owner, script, prompt=QUESTION) -> tuple[int, ScriptedLLM]:
    """One run to its end and its post-processing; the prompt the model was sent."""
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt=prompt))
    llm = ScriptedLLM(list(script))
    services.execution_run_segment(execution_id=execution.pk, llm=llm)
    assert services.execution_post_process(execution_id=execution.pk) is True
    return execution.pk, llm


def prompt_chars(llm: ScriptedLLM) -> int:
    """What the model is sent for the first turn: the messages and the tool schemas."""
    return len(json.dumps(llm.requests[0]["messages"])) + len(json.dumps(llm.requests[0]["tools"]))


# A working agent's tools: their schemas are most of a real prompt (the was 23,108 tokens).
DATA_TOOLS = ["classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results",
              "recommend_visualization", "write_back", "ask_user", "search_memory"]


def test_the_same_question_asked_20_times_keeps_the_prompt_within_5_percent_of_the_first(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=DATA_TOOLS)
    sizes = []
    for _ in range(20):
        _, llm = ask(agent, owner, [text_reply("There are 42 open tickets in the billing queue.")])
        sizes.append(prompt_chars(llm))

    assert AgentMemory.objects.filter(agent=agent).count() == 1  # one answer, one memory
    assert max(sizes) <= sizes[0] * 1.05, sizes
    assert sizes[1] > sizes[0]  # the memory is in the prompt: the test measures something
    assert max(sizes[1:]) - sizes[1] <= 4  # and it does not grow run after run (ids gain a digit)


def test_blocked_and_unanswered_runs_write_no_memory(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"])
    ask(agent, owner, [text_reply(f"{NO_ANSWER_NOTE} Rephrase it.")])
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="No writes",
                  conditions={"tool": "durable_write"}, enforcement="block")
    ask(agent, owner, [tool_reply("durable_write", {"marker": "w1"}, call_id="c1"), text_reply("Blocked.")])
    assert AgentMemory.objects.filter(agent=agent).count() == 0
    answered, _ = ask(agent, owner, [text_reply("Nothing to write; 3 tickets are open.")])
    assert list(AgentMemory.objects.filter(agent=agent).values_list("execution_id", flat=True)) == [answered]


def test_the_same_summary_differently_spaced_refreshes_one_memory(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner)
    ask(agent, owner, [text_reply("There are 42 open tickets.")])
    latest, _ = ask(agent, owner, [text_reply("there are  42 OPEN tickets.")])
    [memory] = AgentMemory.objects.filter(agent=agent)
    assert memory.execution_id == latest


def _memory(n: int, summary: str, learnings=()) -> MemoryEntry:
    return MemoryEntry(execution_id=n, completed_at=f"2026-01-{n:02d}T00:00:00+00:00", summary=summary,
                       learnings=list(learnings), flagged_items=[])


def test_the_prompt_gets_the_most_relevant_memories_oldest_first_within_the_cap():
    memories = [_memory(1, "Billing queue had 40 open tickets."), _memory(2, "Shipping delays in March."),
                _memory(3, "Refund policy changed for enterprise customers."),
                _memory(4, "Billing queue had 42 open tickets."), _memory(5, "Shipping delays in April.")]
    chosen = memories_relevant(question="open tickets in the billing queue?", memories=memories, limit=2,
                               token_cap=1000)
    assert [m.execution_id for m in chosen] == [1, 4]


def test_the_token_cap_and_the_limit_bound_what_the_prompt_gets():
    memories = [_memory(n, f"Billing fact {n}: " + "x" * 400) for n in range(1, 11)]
    assert memories_relevant(question="billing", memories=memories, limit=10, token_cap=0) == []
    capped = memories_relevant(question="billing", memories=memories, limit=10, token_cap=250)
    assert 1 <= len(capped) <= 2 and sum(len(m.summary) for m in capped) // 4 <= 250
    assert len(memories_relevant(question="billing", memories=memories, limit=3, token_cap=10_000)) == 3


def test_duplicate_stored_memories_reach_the_prompt_once():
    memories = [_memory(1, "Billing queue had 42 open tickets."), _memory(2, "billing queue had 42 open  tickets.")]
    assert [m.execution_id for m in memories_relevant(question="billing", memories=memories, limit=5,
                                                      token_cap=1000)] == [2]
