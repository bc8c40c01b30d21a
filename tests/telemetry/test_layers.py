"""River's Redis channel layer: a batch for several groups asks Redis about all of them in
one script call, and sends only to the groups that have members."""

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


def test_of_many_groups_exactly_those_with_a_live_member_are_watched(layer):
    """Three hundred groups asked at once (a run host asks for all its runs' groups): the
    ones with a member are named, in the order asked; a group whose only member expired is
    not, and loses that member; a group with an expired and a live member is, and keeps
    only the live one."""
    layer.group_expiry = 60
    groups = [f"execution.{number}" for number in range(300)]

    async def scenario():
        channel, other = await layer.new_channel(), await layer.new_channel()
        for number in (3, 150, 299):
            await layer.group_add(groups[number], channel)
        connection = layer.connection(0)
        await connection.zadd(layer._group_key(groups[7]), {channel: 0})  # only member, joined long ago
        await layer.group_add(groups[8], channel)
        await connection.zadd(layer._group_key(groups[8]), {other: 0})
        watched = await layer.groups_watched(list(reversed(groups)))
        left = [await connection.zcard(layer._group_key(groups[number])) for number in (7, 8)]
        return watched, left

    watched, left = run(scenario())
    assert watched == [groups[299], groups[150], groups[8], groups[3]]
    assert left == [0, 1]


def test_a_send_now_reaches_each_member_as_channels_redis_reads_it(layer):
    """The one-round-trip send from synchronous code: every member of every group gets the
    message (two channels of one process share a key and one message; a channel in two
    groups gets it once per group), groups nobody watches add nothing."""
    assert layer.sends_now
    message = {"type": "river.events", "events": [{"seq": 1, "text": "é" * 40}]}

    async def scenario():
        first, second, plain = await layer.new_channel(), await layer.new_channel(), "plain-channel"
        for group, channel in (("execution.1", first), ("execution.1", second), ("workspace.1", first),
                               ("execution.1", plain)):
            await layer.group_add(group, channel)
        added = layer.group_send_many_now(["execution.1", "workspace.1", "execution.2"], message)
        received = [await asyncio.wait_for(layer.receive(channel), 5) for channel in (first, first, second, plain)]
        return added, received

    added, received = run(scenario())

    assert added == (3, 0)  # execution.1: the process's key and the plain channel's; workspace.1: the key
    assert received == [message] * 4


def test_a_send_now_drops_expired_members_and_skips_full_channels(layer):
    layer.group_expiry, layer.capacity = 1, 1

    async def scenario():
        stale, full = await layer.new_channel(), "full-channel"
        await layer.group_add("execution.8", stale)
        await layer.group_add("execution.8", full)
        connection = layer.connection(0)
        await connection.zadd(layer._group_key("execution.8"), {stale: 0})  # joined long ago
        sent = [layer.group_send_many_now(["execution.8"], {"type": "river.events", "events": [n]}) for n in (1, 2)]
        members = await connection.zcard(layer._group_key("execution.8"))
        return sent, members, await asyncio.wait_for(layer.receive(full), 5)

    sent, members, received = run(scenario())

    assert sent == [(1, 0), (0, 1)]  # the second finds the channel full
    assert members == 1
    assert received["events"] == [1]
