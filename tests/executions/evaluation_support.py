"""A hand-built history for the evaluation tests: real runs of a scripted model, each
pause decided by a person as ``DECISIONS`` says, and versions whose instructions change
what the model proposes.

History (version 1), the labels people gave:

| run          | calls                              | decisions            |
|--------------|------------------------------------|----------------------|
| Record alpha | read n1, write alpha               | approved             |
| Record beta  | write beta                         | edited to beta-fixed |
| Record gamma | write gamma                        | rejected             |
| Record twice | write twice, write twice           | approved, rejected   |
"""

from __future__ import annotations

import itertools

from agents.models import Agent, AgentVersion
from executions import services
from executions.models import Execution
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from tests.executions import durable_support
from tests.rivercore.scripted import text_reply, tool_reply

WRITE = durable_support.WRITE.name
UNREVIEWED_WRITE = durable_support.IDEMPOTENT_WRITE.name  # needs no approval here
READ = durable_support.READ.name

PLANS = {
    "Record alpha": [(READ, {"marker": "n1"}), (WRITE, {"marker": "alpha"})],
    "Record beta": [(WRITE, {"marker": "beta"})],
    "Record gamma": [(WRITE, {"marker": "gamma"})],
    "Record twice": [(WRITE, {"marker": "twice"}), (WRITE, {"marker": "twice"})],
}
DECISIONS = {
    "Record alpha": [("approved", None)],
    "Record beta": [("edited_approved", {"marker": "beta-fixed"})],
    "Record gamma": [("rejected", None)],
    "Record twice": [("approved", None), ("rejected", None)],
}

# Words in a version's instructions that change what the model proposes.
LEARNED = "LEARNED-FROM-REVIEWS"  # drops the rejected writes, proposes the edited form
CURIOUS = "READS-SOMETHING-ELSE"  # reads n2 instead of n1 (a different read)
EXTRA = "WRITES-A-LOG-TOO"  # also writes an unreviewed log line before answering


class ScriptedModel:
    """Answers from the conversation alone (so a replay asks the same), a fresh call id
    on every call as a live model does."""

    ids = itertools.count(1)

    def complete(self, *, messages, tools, tier, timeout_seconds):
        said = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "user"))
        prompt = next(p for p in PLANS if p in said)
        plan = list(PLANS[prompt])
        if LEARNED in said:
            plan = {
                "Record alpha": plan,
                "Record beta": [(WRITE, {"marker": "beta-fixed"})],
                "Record gamma": [],
                "Record twice": plan[:1],
            }[prompt]
        if CURIOUS in said and prompt == "Record alpha":
            plan = [(READ, {"marker": "n2"}), *plan[1:]]
        if EXTRA in said and prompt == "Record alpha":
            plan = [*plan, (UNREVIEWED_WRITE, {"marker": "log"})]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(plan):
            return text_reply(f"Done: {prompt}")
        tool, arguments = plan[turn]
        return tool_reply(tool, arguments, call_id=f"call-{next(self.ids)}")


def agent_for_history(*, workspace, owner) -> Agent:
    agent = Agent.objects.create(
        workspace=workspace,
        name="Recorder",
        business_function="customer_support",
        domain="Support",
        owner=owner,
        status=Agent.Status.ACTIVE,
    )
    version = AgentVersion.objects.create(
        agent=agent,
        version=1,
        goal="Record markers.",
        instructions="Record what you are asked to.",
        action_level="act_with_approval",
        tools=[WRITE, UNREVIEWED_WRITE, READ],
        approval_rules={"require_approval_for": [WRITE], "approver_roles": ["admin", "editor"]},
    )
    agent.current_version = version
    agent.save(update_fields=["current_version"])
    return agent


def recorded_run(*, agent, owner, approver, prompt: str) -> Execution:
    model = ScriptedModel()
    execution = services.execution_start(
        agent=agent, request=services.person_run_request(agent=agent, user=owner, prompt=prompt)
    )
    status = services.execution_run_segment(execution_id=execution.pk, llm=model)
    for decision, edited in DECISIONS[prompt]:
        assert status == "awaiting_approval", (prompt, status)
        approval = ApprovalRequest.objects.get(execution_id=execution.pk, status="pending")
        approval_resolve(
            user=approver,
            approval_id=approval.pk,
            status=decision,
            modified_args=edited,
            comment="no" if decision == "rejected" else "",
        )
        status = services.execution_run_segment(execution_id=execution.pk, llm=model)
    assert status == "success", (prompt, status)
    execution.refresh_from_db()
    return execution


def history(*, agent, owner, approver) -> dict[str, Execution]:
    made = {prompt: recorded_run(agent=agent, owner=owner, approver=approver, prompt=prompt) for prompt in PLANS}
    durable_support.CALLS.clear()
    return made


def version_with(agent: Agent, instructions: str) -> AgentVersion:
    first = agent.versions.get(version=1)
    number = agent.versions.count() + 1
    return AgentVersion.objects.create(
        agent=agent,
        version=number,
        goal=first.goal,
        instructions=f"{first.instructions} {instructions}",
        action_level=first.action_level,
        tools=first.tools,
        approval_rules=first.approval_rules,
    )
