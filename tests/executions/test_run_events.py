"""The eight WebSocket events of the spec (000) are built in one place, rivercore.events.

Each builder gives the spec's key payload fields; no other module writes an event's
name as a literal; and a real run, paused for approval, resumed and cancelled,
stores exactly the builders' shapes for every event it emits."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from executions import services, tasks
from executions.models import ExecutionEvent, ExecutionStep
from governance.models import ApprovalRequest
from governance.resolution import approval_resolve
from rivercore import events as run_events
from rivercore.events import RunEventType, event_message
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

# The spec's WebSocket event reference: event -> key payload fields.
SPEC_EVENTS = {
    "run_started": {"execution_id", "agent_id", "trigger_type", "started_at"},
    "turn_reasoning": {"turn", "thought_summary", "model_used"},
    "tool_called": {"turn", "tool_name", "args_summary"},
    "observation_received": {"turn", "tool_name", "result_summary", "duration_ms"},
    "turn_complete": {"turn", "duration_ms"},
    "approval_required": {"approval_id", "tool_name", "pending_since"},
    "approval_resolved": {"approval_id", "resolution", "resolved_by"},
    "run_completed": {"status", "duration_ms", "turns_used", "final_output_summary"},
}
# River's additions: the step each event is about (for "why") and the call it belongs to.
RIVER_FIELDS = {
    "turn_reasoning": {"step_number"},
    "tool_called": {"call_id", "step_number"},
    "observation_received": {"call_id", "step_number", "status"},
    "run_completed": {"outcome"},  # whether the run did the job (rivercore.outcome)
}


def fields(name: str) -> set[str]:
    return SPEC_EVENTS[name] | RIVER_FIELDS.get(name, set())

SAMPLES = {
    "run_started": {"execution_id": 7, "agent_id": "a-1", "trigger_type": "manual", "started_at": NOW},
    "turn_reasoning": {"turn": 1, "thought_summary": "look up tickets", "model_used": "m"},
    "tool_called": {"turn": 1, "tool_name": "execute_query", "args_summary": "{}"},
    "observation_received": {"turn": 1, "tool_name": "execute_query", "result_summary": "3 rows", "duration_ms": 12},
    "turn_complete": {"turn": 1, "duration_ms": 40},
    "approval_required": {"approval_id": "b-2", "tool_name": "write_back", "pending_since": NOW},
    "approval_resolved": {"approval_id": "b-2", "resolution": "approved", "resolved_by": 3},
    "run_completed": {"status": "completed", "duration_ms": 900, "turns_used": 2, "final_output_summary": "done"},
}


def builder(name: str):
    return getattr(run_events, f"{name}_event")


@pytest.mark.parametrize("name", sorted(SPEC_EVENTS))
def test_each_spec_event_has_one_builder_giving_the_spec_fields(name):
    kind, payload = builder(name)(**SAMPLES[name])
    assert kind == RunEventType(name) and kind == name
    assert set(payload) == fields(name)
    message = event_message(event_type=kind, seq=5, execution_id=7, created_at=NOW, payload=payload)
    assert message == {"type": name, "seq": 5, "execution_id": 7, "created_at": "2026-01-02T03:04:05+00:00",
                       **payload}


def test_timestamps_are_iso_text_and_ids_are_text():
    _, started = run_events.run_started_event(**SAMPLES["run_started"])
    assert started["started_at"] == "2026-01-02T03:04:05+00:00" and started["agent_id"] == "a-1"
    _, required = run_events.approval_required_event(**SAMPLES["approval_required"])
    assert required["pending_since"] == "2026-01-02T03:04:05+00:00"


def test_no_other_module_spells_an_event_name():
    """A literal event name anywhere else would be a second place that builds it."""
    names = "|".join(SPEC_EVENTS)
    literal = re.compile(rf"""["']({names})["']""")
    offenders = []
    for app in ("rivercore", "executions", "governance", "agents", "triggers", "telemetry", "datasources", "tenancy",
                "common", "riverapp"):
        for path in (ROOT / app).rglob("*.py"):
            if path == ROOT / "rivercore" / "events.py" or "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                # The continuation type of /execute/continue shares a word, not an event, and so
                # does the per-turn log line's field of spec 001 (telemetry/logs.py).
                if literal.search(line) and "ContinuationType" not in line and "APPROVAL_RESOLVED =" not in line \
                        and "TOOL_CALLED_FIELD =" not in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# --- a real run ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_tool_records(durable_tool_records):
    """Every test here starts and ends with no recorded tool calls or hooks."""


@pytest.fixture
def sent(monkeypatch):
    for task in (tasks.run_segment, tasks.post_process):
        monkeypatch.setattr(task, "delay", lambda *args: None)


def _approver(workspace):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    user = get_user_model().objects.create_user(username="approver", password="pw-approver")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


def _stored(execution_id: int) -> list[tuple[str, dict]]:
    rows = ExecutionEvent.objects.filter(execution_id=execution_id).order_by("seq")
    return [(row.event_type, row.payload) for row in rows]


@pytest.mark.django_db
def test_a_run_stores_every_spec_event_in_the_builders_shape(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner, tools=["durable_write"],
                       action_level="act_with_approval", require_approval_for=["durable_write"])
    approver = _approver(workspace)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="write once"))
    llm = ScriptedLLM([tool_reply("durable_write", {"marker": "w1"}, call_id="call_w1"), text_reply("wrote it")])

    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "awaiting_approval"
    approval = ApprovalRequest.objects.get(execution_id=execution.pk, status=ApprovalRequest.Status.PENDING)
    approval_resolve(user=approver, approval_id=approval.pk, status="approved")
    assert services.execution_run_segment(execution_id=execution.pk, llm=llm) == "success"

    stored = _stored(execution.pk)
    assert {kind for kind, _ in stored} == set(SPEC_EVENTS)
    for kind, payload in stored:
        assert set(payload) == fields(kind), kind
    steps = {s.step_number: s for s in ExecutionStep.objects.filter(execution_id=execution.pk)}
    for kind, payload in stored:
        if "step_number" in payload:  # names a step of the run, of the event's turn (and call)
            step = steps[payload["step_number"]]
            assert step.turn == payload["turn"], kind
            assert payload.get("call_id") in (None, step.call_id), kind
    resolved = next(payload for kind, payload in stored if kind == "approval_resolved")
    assert resolved["approval_id"] == str(approval.pk) and resolved["resolution"] == "approved"
    completed = [payload for kind, payload in stored if kind == "run_completed"]
    assert len(completed) == 1 and completed[0]["status"] == "completed" and completed[0]["outcome"] == "answered"
    assert all(isinstance(p["duration_ms"], int) for k, p in stored if k == "turn_complete")


@pytest.mark.django_db
def test_a_cancelled_run_ends_with_the_same_run_completed_shape(workspace, owner, sent):
    agent = make_agent(workspace=workspace, owner=owner)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="never mind"))
    services.execution_cancel(execution=execution, user=owner)
    stored = _stored(execution.pk)
    assert [kind for kind, _ in stored] == ["run_completed"]
    assert set(stored[0][1]) == fields("run_completed") and stored[0][1]["status"] == "cancelled"
    assert stored[0][1]["outcome"] == "cancelled"
