"""A query's statement timeout ends before the engine's deadline for the tool, so a slow
query is reported once as a timeout instead of being abandoned and started again."""

from __future__ import annotations

import dataclasses

from datasources.services import data_source_discover
from rivercore.tools import ToolErrorKind
from tests.datasources.fixtures import *  # noqa: F403
from tests.executions.test_data_tools import ctx_for, error_of

SLOW = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000000) SELECT count(*) FROM n"


def test_the_statement_times_out_before_the_tool_does(owner, workspace, pg_source):
    data_source_discover(data_source=pg_source)
    ctx = ctx_for(owner, workspace, sources=[pg_source])
    settings_ = ctx.agent.model_settings.model_copy(update={"timeout_seconds": 13})  # leaves a 1 s statement
    ctx = dataclasses.replace(ctx, agent=ctx.agent.model_copy(update={"model_settings": settings_}))
    error = error_of("execute_query", ctx, data_source_id=pg_source.pk, query=SLOW)
    assert error.kind == ToolErrorKind.FAILED  # not TIMEOUT: the engine does not retry it
    assert error.details == {"code": "query_timeout"}
