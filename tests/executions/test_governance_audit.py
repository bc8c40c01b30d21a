"""Every governance decision the engine takes lands in the audit trail."""

from executions.services import execution_run_segment, execution_start, person_run_request
from governance.models import AuditLogEntry
from tests.executions import engine_support  # noqa: F401 - registers the test tools
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply


def test_durable_run_audits_each_decision(workspace, owner):
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo", "test_write"], action_level="read_only")
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=owner, prompt="go"))
    llm = ScriptedLLM([
        tool_reply("test_echo", {"text": "read"}, "r1"),
        tool_reply("test_write", {"text": "write"}, "w1"),
        text_reply("done"),
    ])
    assert execution_run_segment(execution_id=execution.pk, llm=llm) == "success"
    entries = AuditLogEntry.objects.filter(event_type="governance_decision", execution_id=execution.pk).order_by("id")
    assert [(e.details["tool_name"], e.details["decision"]) for e in entries] == [
        ("test_echo", "PROCEED"), ("test_write", "BLOCKED"),
    ]
    assert entries[1].agent_id == agent.pk
