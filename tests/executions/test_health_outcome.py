"""An agent's health follows its runs' outcomes: failures and unanswered runs count
against it, answered runs reset it, and a run of policy blocks raises "needs attention"
naming the policy instead of a failure."""

from __future__ import annotations

import pytest

from agents.models import Agent
from executions import services, tasks
from governance.models import AuditLogEntry
from governance.services import policy_create
from rivercore.outcome import NO_ANSWER_NOTE
from tests.executions import durable_support  # noqa: F401 - registers the durable test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def ask(agent, owner, *script) -> str:
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write w1"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(list(script)))
    assert services.execution_post_process(execution_id=execution.pk) is True
    execution.refresh_from_db()
    return execution.outcome


def blocked(agent, owner) -> str:
    return ask(agent, owner, tool_reply("durable_write", {"marker": "w1"}, call_id="c1"), text_reply("Blocked."))


def test_three_unanswered_runs_in_a_row_degrade_the_agent(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner)
    for _ in range(3):
        assert ask(agent, owner, text_reply(f"{NO_ANSWER_NOTE} Rephrase it.")) == "no_answer"
    agent.refresh_from_db()
    assert (agent.health, agent.consecutive_failures) == (Agent.Health.DEGRADED, 3)
    assert ask(agent, owner, text_reply("There are 3 open tickets.")) == "answered"
    agent.refresh_from_db()
    assert (agent.health, agent.consecutive_failures) == (Agent.Health.HEALTHY, 0)


def test_runs_blocked_by_a_policy_need_attention_naming_it_and_are_not_failures(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"])
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Freeze marker writes",
                  conditions={"tool": "durable_write"}, enforcement="block")
    assert [blocked(agent, owner) for _ in range(2)] == ["blocked", "blocked"]
    agent.refresh_from_db()
    assert agent.health == Agent.Health.HEALTHY  # two are not yet a pattern
    assert blocked(agent, owner) == "blocked"
    agent.refresh_from_db()
    assert agent.health == Agent.Health.NEEDS_ATTENTION and agent.consecutive_failures == 0
    assert "Freeze marker writes" in agent.health_note
    change = AuditLogEntry.objects.filter(event_type="agent_health_changed", agent_id=agent.pk).latest("id")
    assert change.details["to"] == "needs_attention" and "Freeze marker writes" in change.details["note"]
    assert ask(agent, owner, text_reply("Nothing to write.")) == "answered"
    agent.refresh_from_db()
    assert (agent.health, agent.health_note, agent.consecutive_blocked) == (Agent.Health.HEALTHY, "", 0)


def test_the_agents_list_shows_needs_attention_with_the_policy(workspace, owner, sent, client):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"], name="Writer")
    policy_create(actor=owner, scope="workspace", workspace_id=workspace.pk, name="Freeze marker writes",
                  conditions={"tool": "durable_write"}, enforcement="block")
    for _ in range(3):
        blocked(agent, owner)
    client.force_login(owner)
    page = client.get("/agents/").content.decode()
    assert "Needs attention" in page and "Freeze marker writes" in page
