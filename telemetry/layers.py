"""River's channel layer: channels_redis's, with a group send for several groups at once.

Most runs have nobody watching: their groups have no members, and channels_redis's
``group_send`` still spends two round trips on each group (dropping expired members,
then listing them) before it finds nothing to send. ``group_send_many`` asks the same
two questions for every group in one pipelined round trip per Redis host, and hands
only the groups that have members to ``group_send``.

``group_send_many_now`` is the same send from synchronous code, in one round trip: a
Lua script finds the groups' members and adds the message to each member's channel as
channels_redis's ``group_send`` would (the same keys, expiry, capacity and serialized
form, so channels_redis's ``receive`` reads it). The events publisher calls it on the
thread that committed the events, so a batch does not wait for another thread to be
scheduled. It serves the common configuration (one Redis host, msgpack, no encryption,
one capacity for every channel); ``sends_now`` says whether this layer has it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import defaultdict

import msgpack
import redis
from channels_redis.core import RedisChannelLayer
from channels_redis.serializers import MsgPackSerializer

# A synchronous send waits at most this long for Redis (connect, or answer) before it
# fails; the caller (the events publisher) then sends through its own thread for a while.
SEND_NOW_TIMEOUT_SECONDS = 0.5

# KEYS: the groups' keys. ARGV: the oldest group membership still valid, the oldest message
# still valid, now, the message expiry, the channel capacity, the channel key prefix, a random
# prefix, the message's msgpack map header (one entry more than it has) and its packed entries.
# Per group, as channels_redis's group_send: members by channel key (a process-specific channel
# "specific.<client>!<id>" shares its process's key), one message per key naming its channels
# in ``__asgi_channel__``, old messages dropped, full channels skipped. Returns
# {messages added, channels over capacity}.
_GROUP_SEND_LUA = """
local added, over = 0, 0
local capacity = tonumber(ARGV[5])
for g = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[g], 0, ARGV[1])
  local by_key, order = {}, {}
  for _, channel in ipairs(redis.call('ZRANGE', KEYS[g], 0, -1)) do
    local bang = string.find(channel, '!', 1, true)
    local key = ARGV[6] .. (bang and string.sub(channel, 1, bang) or channel)
    if by_key[key] == nil then
      by_key[key] = {}
      order[#order + 1] = key
    end
    table.insert(by_key[key], channel)
  end
  for _, key in ipairs(order) do
    redis.call('ZREMRANGEBYSCORE', key, 0, ARGV[2])
    if redis.call('ZCARD', key) < capacity then
      added = added + 1
      local message = ARGV[7] .. string.format('%04x', added % 65536) .. ARGV[8] .. ARGV[9]
        .. cmsgpack.pack('__asgi_channel__') .. cmsgpack.pack(by_key[key])
      redis.call('ZADD', key, ARGV[3], message)
      redis.call('EXPIRE', key, ARGV[4])
    else
      over = over + 1
    end
  end
end
return {added, over}
"""


# Each group key's member count, after dropping the members whose last ``group_add`` is
# older than ``ARGV[1]`` (epoch seconds).
_GROUPS_WATCHED_LUA = """
local counts = {}
for index, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, 0, ARGV[1])
  counts[index] = redis.call('ZCARD', key)
end
return counts
"""


class RiverChannelLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        serializer = self._serializer
        self.sends_now = (
            len(self.hosts) == 1 and set(self.hosts[0]) == {"address"} and not self.channel_capacity
            and isinstance(serializer, MsgPackSerializer) and serializer.crypter is None
            and serializer.random_prefix_length >= 8
        )
        self._sync_lock = threading.Lock()
        self._sync: tuple[int, redis.Redis, object] | None = None  # (pid, client, script)

    def group_send_many_now(self, groups: list[str], message: dict) -> tuple[int, int]:
        """``group_send_many`` from synchronous code, in one round trip (only when
        ``sends_now``). Returns (messages added, channels skipped as full); raises
        redis-py's errors, after at most ``SEND_NOW_TIMEOUT_SECONDS`` of waiting."""
        keys = []
        for group in groups:
            assert self.require_valid_group_name(group), "Group name not valid"
            keys.append(self._group_key(group))
        now = time.time()
        header = msgpack.Packer().pack_map_header(len(message) + 1)
        body = b"".join(msgpack.packb(key) + msgpack.packb(value) for key, value in message.items())
        prefix = os.urandom(self._serializer.random_prefix_length - 4)
        added, over = self._script()(keys=keys, args=[
            int(now) - self.group_expiry, int(now) - int(self.expiry), now, self.expiry, self.capacity,
            self.prefix, prefix, header, body])
        return int(added), int(over)

    def _script(self):
        """The send script on a synchronous client of this process (a forked child makes
        its own: a connection is not shared across a fork)."""
        pid = os.getpid()
        if self._sync is None or self._sync[0] != pid:
            with self._sync_lock:
                if self._sync is None or self._sync[0] != pid:
                    client = redis.Redis.from_url(self.hosts[0]["address"], socket_timeout=SEND_NOW_TIMEOUT_SECONDS,
                                                  socket_connect_timeout=SEND_NOW_TIMEOUT_SECONDS)
                    self._sync = (pid, client, client.register_script(_GROUP_SEND_LUA))
        return self._sync[2]

    async def group_send_many(self, groups: list[str], message: dict) -> None:
        watched = await self.groups_watched(groups)
        await asyncio.gather(*(self.group_send(group, message) for group in watched))

    async def groups_watched(self, groups: list[str]) -> list[str]:
        """The groups that have members (expired members dropped first, as channels-redis
        does before a send), asked in one script call per host: a host's run host asks
        this of all its runs' groups once a second, and a pipeline of two commands per
        group cost redis-py more CPU to build and read than the script's one reply."""
        by_host: dict[int, list[str]] = defaultdict(list)
        for group in groups:
            assert self.require_valid_group_name(group), "Group name not valid"
            by_host[self.consistent_hash(group)].append(group)
        watched: list[str] = []
        for index, host_groups in by_host.items():
            script = self.connection(index).register_script(_GROUPS_WATCHED_LUA)
            answers = await script(keys=[self._group_key(group) for group in host_groups],
                                   args=[int(time.time()) - self.group_expiry])
            watched += [group for group, members in zip(host_groups, answers, strict=True) if members]
        return watched
