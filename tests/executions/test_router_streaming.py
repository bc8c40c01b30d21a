"""Streamed model calls: litellm's real streaming HTTP path against the local fake
OpenAI server (server-sent events), and the offline planner's own stream. The reply
put together from the pieces equals the one a plain call gets; a stream cut mid-way
is a failed attempt, retried or failed over like any other."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from executions.routing import router_build
from rivercore.llm import DeltaKind, LLMError, LLMErrorKind
from rivercore.planner import rules as offline_rules
from rivercore.planner.provider import text_pieces
from rivercore.router import ProviderConfig, Router, offline_provider
from rivercore.types.agents import Tier

MESSAGES = [{"role": "system", "content": "You are a test agent."}, {"role": "user", "content": "How many?"}]
TOOLS = [{"type": "function", "function": {
    "name": "execute_query", "description": "Run SQL.",
    "parameters": {"type": "object", "properties": {"sql": {"type": "string"}, "data_source_id": {"type": "integer"}},
                   "required": ["sql"]},
}}]


def provider(server, *, priority=1, max_retries=2) -> ProviderConfig:
    return ProviderConfig(name=f"p-{uuid.uuid4().hex[:8]}", models={Tier.BALANCED: "openai/river-test-model"},
                          base_url=server.base_url, api_key="sk-test", priority=priority, max_retries=max_retries)


def router(*providers) -> Router:
    return router_build(list(providers), sleep=lambda _s: None, rand=lambda: 1.0)


class Pieces(list):
    def __call__(self, kind: DeltaKind, text: str) -> None:
        self.append((kind, text))

    def answer(self) -> str:
        """The text a client shows: a restart throws away what came before it."""
        shown: list[str] = []
        for kind, text in self:
            if kind == DeltaKind.RESTART:
                shown.clear()
            elif kind == DeltaKind.ANSWER:
                shown.append(text)
        return "".join(shown)


def ask(r: Router, pieces: Pieces | None, tools=TOOLS):
    return r.complete(messages=MESSAGES, tools=tools, tier=Tier.BALANCED, timeout_seconds=10, on_delta=pieces)


def test_text_is_streamed_in_pieces_and_the_reply_is_whole(fake_openai):
    server = fake_openai()
    server.text("There are 42 open tickets right now.", usage={"prompt_tokens": 30, "completion_tokens": 9,
                                                              "total_tokens": 39})
    pieces = Pieces()

    reply = ask(router(provider(server)), pieces)

    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert reply.content == "There are 42 open tickets right now."
    assert len(pieces) > 3 and all(kind == DeltaKind.ANSWER for kind, _ in pieces)
    assert pieces.answer() == reply.content
    assert (reply.input_tokens, reply.output_tokens) == (30, 9)  # the usage chunk at the end


def test_tool_call_arguments_are_put_together_from_their_pieces(fake_openai):
    server = fake_openai()
    calls = [("execute_query", {"sql": "SELECT count(*) FROM tickets WHERE status = 'open'", "data_source_id": 7},
              "call_a"),
             ("execute_query", {"sql": "SELECT 1", "data_source_id": 8}, "call_b")]
    server.tool_calls(calls, content="Counting.")
    server.tool_calls(calls, content="Counting.")
    pieces = Pieces()

    streamed = ask(router(provider(server)), pieces)
    plain = ask(router(provider(server)), None)

    assert "stream" not in server.requests[1]
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in streamed.tool_calls] == [
        ("call_a", "execute_query", calls[0][1], ""), ("call_b", "execute_query", calls[1][1], "")]
    assert streamed.tool_calls == plain.tool_calls
    assert streamed.content == plain.content == "Counting."
    assert pieces.answer() == "Counting."


def test_invalid_streamed_arguments_are_kept_raw(fake_openai):
    server = fake_openai()
    server.tool_call("execute_query", '{"sql": "SELECT unterminated')
    call = ask(router(provider(server)), Pieces()).tool_calls[0]
    assert call.arguments == {}
    assert call.raw_arguments == '{"sql": "SELECT unterminated'


def test_a_stream_cut_mid_way_is_retried_and_the_client_told_to_start_over(fake_openai):
    server = fake_openai()
    server.text("The first attempt breaks off here", cut_after=3).text("The second attempt is whole.")
    pieces = Pieces()

    reply = ask(router(provider(server, max_retries=2)), pieces)

    assert server.calls == 2
    assert reply.content == "The second attempt is whole."
    kinds = [kind for kind, _ in pieces]
    assert DeltaKind.RESTART in kinds
    before = "".join(text for kind, text in pieces[:kinds.index(DeltaKind.RESTART)])
    assert before and "The first attempt breaks off here".startswith(before) and before != reply.content
    assert pieces.answer() == reply.content


def test_a_stream_cut_on_every_attempt_fails_over_then_fails(fake_openai):
    broken, also_broken = fake_openai(), fake_openai()
    broken.always("text", "never finished", cut_after=2)
    also_broken.always("text", "never finished either", cut_after=2)

    with pytest.raises(LLMError) as failed:
        ask(router(provider(broken, max_retries=1), provider(also_broken, priority=2, max_retries=0)), Pieces())

    assert failed.value.kind == LLMErrorKind.PROVIDER_UNAVAILABLE
    assert (broken.calls, also_broken.calls) == (2, 1)
    assert all(a["error"] == "server_error" for a in failed.value.details["attempts"])


def test_a_stream_cut_fails_over_to_the_next_provider(fake_openai):
    broken, healthy = fake_openai(), fake_openai()
    broken.text("half an ans", cut_after=2)
    healthy.text("The healthy provider's answer.")
    pieces = Pieces()

    reply = ask(router(provider(broken, max_retries=0), provider(healthy, priority=2)), pieces)

    assert reply.content == "The healthy provider's answer."
    assert pieces.answer() == reply.content


def test_the_async_client_streams_the_same_way(fake_openai):
    server = fake_openai()
    server.tool_call("execute_query", {"sql": "SELECT 2", "data_source_id": 1}, content="Let me look.")
    pieces = Pieces()

    reply = asyncio.run(router(provider(server)).acomplete(
        messages=MESSAGES, tools=TOOLS, tier=Tier.BALANCED, timeout_seconds=10, on_delta=pieces))

    assert reply.tool_calls[0].arguments == {"sql": "SELECT 2", "data_source_id": 1}
    assert pieces.answer() == "Let me look."


def test_the_offline_planner_streams_its_answer_in_pieces():
    r = router_build([offline_provider()])
    view = {"run": {"prompt": "Hello there", "called": []}}
    tools = [{"type": "function", "function": {"name": "classify_intent", "parameters": {}}}]
    pieces = Pieces()

    streamed = r.complete(messages=MESSAGES, tools=tools, tier=Tier.FAST, timeout_seconds=5, view=view,
                          on_delta=pieces)
    plain = r.complete(messages=MESSAGES, tools=tools, tier=Tier.FAST, timeout_seconds=5, view=view)

    assert streamed.model == offline_rules.MODEL
    assert streamed.content == plain.content and pieces.answer() == plain.content
    assert len(pieces) == len(text_pieces(plain.content)) > 1
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [(c.name, c.arguments) for c in plain.tool_calls]


def test_text_pieces_join_back_exactly():
    text = "Seven tickets are open; the oldest was opened on Monday morning by a customer in Oslo."
    pieces = text_pieces(text, size=10)
    assert "".join(pieces) == text
    assert all(piece.endswith(" ") for piece in pieces[:-1])
    assert text_pieces("") == []


class Sink:
    """A partial-event sink: whether it says someone watches, and what it was sent."""

    def __init__(self, watched: bool):
        self.is_watched = watched
        self.asked = 0
        self.events: list[dict] = []

    def watched(self) -> bool:
        self.asked += 1
        return self.is_watched

    def send(self, event: dict) -> None:
        self.events.append(event)


@pytest.mark.parametrize("hosted", [False, True], ids=["driven inline", "on an event loop"])
def test_the_engine_streams_each_turn_to_a_watched_sink_and_stores_the_whole_reply(fake_openai, hosted):
    from rivercore.runner import Engine, new_state, response_build
    from tests.executions import engine_support as support

    server = fake_openai()
    server.tool_call("test_echo", {"text": "a"}, content="Echoing first.").text("Echoed a, as asked.")
    state, _ = new_state(support.request_for(tools=["test_echo"]))
    sink = Sink(watched=True)
    engine = Engine(llm=router(provider(server)), partials=sink)

    outcome = asyncio.run(engine.arun(state)) if hosted else engine.run(state)

    assert response_build(state, outcome).result.summary == "Echoed a, as asked."
    assert all(request["stream"] is True for request in server.requests)
    by_turn: dict[int, str] = {}
    for event in sink.events:
        assert event["type"] == "answer_delta" and event["partial"] is True
        assert event["execution_id"] == state.request.execution_id
        by_turn[event["turn"]] = by_turn.get(event["turn"], "") + event["text"]
    assert by_turn == {1: "Echoing first.", 2: "Echoed a, as asked."}
    assert sink.asked == 2  # once per model call


def test_the_engine_takes_the_plain_call_when_nobody_watches(fake_openai):
    from rivercore.runner import Engine, new_state
    from tests.executions import engine_support as support

    server = fake_openai()
    server.text("Nobody is watching.")
    state, _ = new_state(support.request_for(tools=["test_echo"]))
    sink = Sink(watched=False)

    Engine(llm=router(provider(server)), partials=sink).run(state)

    assert "stream" not in server.requests[0] and sink.events == [] and sink.asked == 1
    assert state.final_answer == "Nobody is watching."
