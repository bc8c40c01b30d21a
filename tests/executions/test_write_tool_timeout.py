"""A write tool that timed out cannot write afterwards.

The engine abandons a tool at its timeout; the write the tool started must then
either be cancelled by the database (the statement timeout is cut to the tool's
deadline) or be refused at COMMIT (the engine closes the call's write fence before
it reports the timeout). Each test blocks the write on a real lock, sees the timeout
reported, releases the lock, waits for the abandoned thread to end, and checks
that nothing was written."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from django.db import connection

from datasources.services import data_source_discover
from rivercore.fence import FenceClosed, WriteFence, fence_bound
from rivercore.runner import run_tool_in_thread
from rivercore.tools import Tool, ToolCategory, ToolError, ToolErrorKind, get_tool
from tests.datasources.fixtures import *  # noqa: F403
from tests.datasources.fixtures import pg_admin_connect, pg_count, sqlite_count
from tests.executions.test_data_tools import ctx_for

TOOL_TIMEOUT = 1.0
THREAD_END_DEADLINE = 15.0


def _run_write_back(ctx, arguments, *, timeout: float):
    """Run write_back as the engine does; returns (error, event set when its thread ended)."""
    tool = get_tool("write_back")
    ended = threading.Event()

    def on_exit():
        connection.close()
        ended.set()

    started = time.monotonic()
    with pytest.raises(ToolError) as caught:
        run_tool_in_thread(tool, ctx, tool.input_model.model_validate(arguments), timeout, on_exit)
    return caught.value, ended, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_a_write_blocked_on_a_postgres_row_lock_is_not_written_after_its_timeout(owner, workspace, pg_source,
                                                                                  pg_tables):
    data_source_discover(data_source=pg_source)
    ctx = ctx_for(owner, workspace, sources=[pg_source])
    with pg_admin_connect(pg_tables) as holder:
        with holder.transaction():
            holder.execute("SELECT id FROM tickets WHERE id = 1 FOR UPDATE")  # hold the row lock
            error, ended, waited = _run_write_back(ctx, {
                "data_source_id": pg_source.pk, "table_name": "tickets", "operation": "update",
                "data": {"status": "written-late"}, "conditions": {"id": 1},
            }, timeout=TOOL_TIMEOUT)
            assert error.kind == ToolErrorKind.TIMEOUT
            assert waited < TOOL_TIMEOUT + 5
        # leaving the transaction released the lock: a write still waiting would go through now
    assert ended.wait(THREAD_END_DEADLINE), "the abandoned tool thread did not end"
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE status = 'written-late'") == 0
    assert pg_count(pg_tables, "SELECT count(*) FROM tickets WHERE id = 1") == 1


@pytest.mark.django_db(transaction=True)
def test_a_write_waiting_for_a_sqlite_lock_is_not_written_after_its_timeout(owner, workspace, sqlite_source,
                                                                            sqlite_file):
    data_source_discover(data_source=sqlite_source)
    ctx = ctx_for(owner, workspace, sources=[sqlite_source])
    holder = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock of the whole file
        error, ended, _ = _run_write_back(ctx, {
            "data_source_id": sqlite_source.pk, "table_name": "tickets", "operation": "update",
            "data": {"status": "written-late"}, "conditions": {"id": 1},
        }, timeout=TOOL_TIMEOUT)
        assert error.kind == ToolErrorKind.TIMEOUT
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert ended.wait(THREAD_END_DEADLINE), "the abandoned tool thread did not end"
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'written-late'") == 0


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_outlives_its_timeout_cannot_start_a_write(owner, workspace, sqlite_source, sqlite_file):
    """The fence alone (no lock): the handler only reaches the write after the timeout
    was reported; the write is refused and the file is unchanged."""
    data_source_discover(data_source=sqlite_source)
    ctx = ctx_for(owner, workspace, sources=[sqlite_source])
    write_back = get_tool("write_back")
    reported = threading.Event()
    outcome: list = []
    ended = threading.Event()

    def late_handler(tool_ctx, args):
        reported.wait(THREAD_END_DEADLINE)
        try:
            outcome.append(write_back.handler(tool_ctx, args))
        except ToolError as exc:
            outcome.append(exc)
            raise

    slow = Tool(name="slow_write_back", description="", category=ToolCategory.EXECUTION,
                input_model=write_back.input_model, output_model=write_back.output_model,
                handler=late_handler, writes=True)
    args = write_back.input_model.model_validate({
        "data_source_id": sqlite_source.pk, "table_name": "tickets", "operation": "update",
        "data": {"status": "written-late"}, "conditions": {"id": 1},
    })

    def on_exit():
        connection.close()
        ended.set()

    with pytest.raises(ToolError) as caught:
        run_tool_in_thread(slow, ctx, args, 0.3, on_exit)
    assert caught.value.kind == ToolErrorKind.TIMEOUT
    assert "not committed" in caught.value.message
    reported.set()
    assert ended.wait(THREAD_END_DEADLINE)
    assert isinstance(outcome[0], ToolError)
    assert sqlite_count(sqlite_file, "SELECT count(*) FROM tickets WHERE status = 'written-late'") == 0


def test_a_closed_fence_refuses_the_commit_and_an_open_one_allows_it():
    fence = WriteFence(deadline=time.monotonic() + 60)
    with fence.commit():
        committed = True
    assert committed and fence.remaining_ms() > 0
    assert fence.close() is True
    with pytest.raises(FenceClosed), fence.commit():
        pass
    with pytest.raises(FenceClosed):
        fence.remaining_ms()
    expired = WriteFence(deadline=time.monotonic() - 1)
    with pytest.raises(FenceClosed), expired.commit():
        pass


def test_close_waits_for_a_commit_in_flight():
    fence = WriteFence(deadline=time.monotonic() + 60)
    in_commit, finish = threading.Event(), threading.Event()

    def committer():
        with fence.commit():
            in_commit.set()
            finish.wait(10)

    thread = threading.Thread(target=committer)
    thread.start()
    assert in_commit.wait(10)
    assert fence.close(wait_seconds=0.05) is False  # still in flight: the outcome is unknown
    finish.set()
    thread.join(10)
    assert fence.close(wait_seconds=5) is True


def test_the_fence_is_bound_to_the_tool_thread_only():
    from rivercore.fence import current_fence

    fence = WriteFence(deadline=time.monotonic() + 60)
    with fence_bound(fence):
        assert current_fence() is fence
    assert current_fence() is None


@pytest.mark.django_db(transaction=True)
def test_a_river_row_written_before_the_timeout_is_rolled_back_when_the_handler_overruns(owner, workspace,
                                                                                        sqlite_dir):
    """create_data_source writes River's own row; its handler then overruns. The
    row was never committed: the fence refuses the commit and it is rolled back."""
    from datasources.models import DataSource
    from executions.tools.fenced import fenced_in_transaction

    create = get_tool("create_data_source")
    written, reported, ended = threading.Event(), threading.Event(), threading.Event()

    def create_then_overrun(tool_ctx, args):
        result = create.handler.__wrapped_handler__(tool_ctx, args)
        written.set()
        reported.wait(THREAD_END_DEADLINE)
        return result

    slow = Tool(name="slow_create_data_source", description="", category=ToolCategory.EXECUTION,
                input_model=create.input_model, output_model=create.output_model,
                handler=fenced_in_transaction(create_then_overrun), writes=True)
    ctx = ctx_for(owner, workspace)
    args = create.input_model.model_validate({
        "name": "late source", "type": "sqlite", "connection_config": {"path": "late.sqlite3"},
        "credentials": {}, "create_file": True,
    })

    def on_exit():
        connection.close()
        ended.set()

    with pytest.raises(ToolError) as caught:
        run_tool_in_thread(slow, ctx, args, 1.0, on_exit)
    assert caught.value.kind == ToolErrorKind.TIMEOUT
    assert written.is_set()  # the row existed (uncommitted) before the timeout was reported
    reported.set()
    assert ended.wait(THREAD_END_DEADLINE)
    assert not DataSource.objects.filter(workspace=workspace, name="late source").exists()


def test_a_fenced_handler_outside_the_engine_runs_as_is():
    from executions.tools.fenced import fenced_in_transaction

    calls = []
    assert fenced_in_transaction(lambda ctx, args: calls.append(args) or "done")(None, 1) == "done"
    assert calls == [1]
