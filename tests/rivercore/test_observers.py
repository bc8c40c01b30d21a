"""The engine's observer port (``rivercore.observe``): every step it adds and every model
call it makes, with the exact request sent and the reply, reach the installed observers in
order; an observer that raises is logged and changes nothing about the run."""

from __future__ import annotations

import pytest

from rivercore import observe
from rivercore.contracts import ResponseStatus, StepType
from rivercore.llm import LLMError, LLMErrorKind
from rivercore.runner import Engine, new_state
from tests.executions import engine_support as support
from tests.rivercore.scripted import ScriptedLLM, text_reply, tool_reply


class Recorder:
    def __init__(self):
        self.steps = []
        self.calls = []

    def step_added(self, state, step):
        self.steps.append(step)

    def model_called(self, state, call):
        self.calls.append(call)


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(observe, "_observers", {})
    made = Recorder()
    observe.observer_install("recorder", made)
    return made


def test_every_step_and_model_call_reaches_the_observer(recorder):
    state, _ = new_state(support.request_for(tools=["test_echo"]))
    llm = ScriptedLLM([tool_reply("test_echo", {"text": "hi"}), text_reply("done")])

    outcome = Engine(llm=llm, sleep=lambda s: None).run(state)

    assert outcome.status == ResponseStatus.SUCCESS
    assert [s.step_number for s in recorder.steps] == [s.step_number for s in state.steps]
    assert StepType.OBSERVATION in {s.step_type for s in recorder.steps}
    assert [c.turn for c in recorder.calls] == [1, 2]
    first = recorder.calls[0]
    assert first.messages == llm.requests[0]["messages"] and first.tools == state.tool_schemas
    assert first.reply.tool_calls[0].name == "test_echo" and first.error is None
    assert recorder.calls[1].reply.content == "done" and recorder.calls[1].duration_ms >= 0


def test_a_failed_model_call_is_observed_with_its_error(recorder):
    state, _ = new_state(support.request_for(tools=[]))
    llm = ScriptedLLM([LLMError(LLMErrorKind.PROVIDER_UNAVAILABLE, "down")])

    Engine(llm=llm, sleep=lambda s: None).run(state)

    assert len(recorder.calls) == 1
    assert recorder.calls[0].reply is None and recorder.calls[0].error.kind == LLMErrorKind.PROVIDER_UNAVAILABLE


def test_an_observer_that_raises_changes_nothing(recorder, caplog):
    class Broken:
        def step_added(self, state, step):
            raise RuntimeError("observer bug")

        def model_called(self, state, call):
            raise RuntimeError("observer bug")

    observe.observer_install("broken", Broken())
    state, _ = new_state(support.request_for(tools=["test_echo"]))

    outcome = Engine(llm=ScriptedLLM([text_reply("fine")]), sleep=lambda s: None).run(state)

    assert outcome.status == ResponseStatus.SUCCESS
    assert recorder.calls and recorder.steps  # the others still heard everything
    assert "observer broken failed" in caplog.text
