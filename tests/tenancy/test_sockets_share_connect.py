"""Every WebSocket consumer opens through ``tenancy.sockets.AuthorizedSocketConsumer``:
one place refuses anonymous sockets, joins the authorized groups and echoes the bearer
subprotocol, so the run feeds and the page frame's socket cannot drift apart."""

from __future__ import annotations

import pytest

from executions.consumers import ExecutionConsumer, SessionConsumer, WorkspaceConsumer
from tenancy.sockets import AuthorizedSocketConsumer, query_param
from web.consumers import FrameConsumer


@pytest.mark.parametrize("consumer", [ExecutionConsumer, WorkspaceConsumer, SessionConsumer, FrameConsumer])
def test_each_consumer_authorizes_through_the_shared_connect(consumer):
    assert issubclass(consumer, AuthorizedSocketConsumer)
    overridden = {name for klass in consumer.__mro__[:consumer.__mro__.index(AuthorizedSocketConsumer)]
                  for name in ("connect", "disconnect", "receive") if name in vars(klass)}
    assert overridden == set()
    assert "authorized_groups" in {name for klass in consumer.__mro__ if klass is not AuthorizedSocketConsumer
                                   for name in vars(klass)}


def test_query_param_reads_the_last_value_and_none_when_absent():
    scope = {"query_string": b"workspace=3&after=7&workspace=5"}
    assert query_param(scope, "workspace") == "5"
    assert query_param(scope, "after") == "7"
    assert query_param(scope, "missing") is None
    assert query_param({}, "workspace") is None
