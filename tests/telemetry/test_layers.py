"""River's Redis channel layer: a batch for several groups asks Redis about all of them in
one pipelined round trip, and sends only to the groups that have members."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings

from telemetry.layers import RiverChannelLayer

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL)")


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def layer():
    prefix = f"river-test-{uuid.uuid4().hex[:8]}"
    made = RiverChannelLayer(hosts=[settings.REDIS_URL], prefix=prefix)
    yield made
    run(made.flush())


def test_members_of_a_group_get_the_message_and_idle_groups_cost_no_send(layer, monkeypatch):
    sent_to: list[str] = []
    real_group_send = RiverChannelLayer.group_send

    async def counting(self, group, message):
        sent_to.append(group)
        await real_group_send(self, group, message)

    monkeypatch.setattr(RiverChannelLayer, "group_send", counting)

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("execution.7", channel)
        await layer.group_send_many(["execution.7", "workspace.3", "workspace.4"], {"type": "river.events",
                                                                                     "events": [{"seq": 1}]})
        received = await asyncio.wait_for(layer.receive(channel), 5)
        await layer.group_discard("execution.7", channel)
        return received

    received = run(scenario())

    assert received == {"type": "river.events", "events": [{"seq": 1}]}
    assert sent_to == ["execution.7"]  # the two groups nobody watches cost the pipeline only


def test_expired_members_are_dropped_and_not_sent_to(layer, monkeypatch):
    sent_to: list[str] = []
    monkeypatch.setattr(RiverChannelLayer, "group_send", lambda self, group, message: sent_to.append(group))
    layer.group_expiry = 1

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("execution.8", channel)
        connection = layer.connection(layer.consistent_hash("execution.8"))
        await connection.zadd(layer._group_key("execution.8"), {channel: 0})  # joined long ago
        await layer.group_send_many(["execution.8"], {"type": "river.events", "events": []})
        return await connection.zcard(layer._group_key("execution.8"))

    assert run(scenario()) == 0
    assert sent_to == []
