"""A three-message session on the demo's support data, answered by the offline planner
through the whole loop: the second and third messages are follow-ups ("and in the last
7 days?", "and last month?") that only make sense against the first one's query, and are
answered with the same query under a changed date filter (docs/sessions.md)."""

from __future__ import annotations

import sqlite3

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from demo.seed import demo_database_path, demo_seed
from executions import services
from executions.models import Execution
from executions.services import sessions
from executions.services.load import request_build

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in worker threads

FIRST = "How many open high-priority tickets were created in the last 24 hours?"


@pytest.fixture
def demo(settings, tmp_path):
    settings.RIVER_SQLITE_DATA_DIR = tmp_path / "datasources"
    settings.RIVER_ADMIN_PASSWORD = "demo-password-for-tests"
    demo_seed()
    return Agent.objects.get(name="Support Analyst"), get_user_model().objects.get(username="admin")


def expected(window: str) -> int:
    with sqlite3.connect(demo_database_path()) as db:
        return db.execute(
            "SELECT COUNT(*) FROM tickets WHERE priority = 'high' AND status = 'open' "
            f"AND datetime(created_at) >= datetime('now', '{window}')").fetchone()[0]


def ask(session, user, content: str) -> Execution:
    _message, execution = sessions.session_message_send(session=session, user=user, content=content)
    assert execution is not None
    assert services.execution_run_segment(execution_id=execution.pk) == "success"
    assert services.execution_post_process(execution_id=execution.pk) is True
    execution.refresh_from_db()
    return execution


def query_of(execution: Execution) -> str:
    return execution.steps.get(step_type="observation", tool_name="execute_query").input["query"]


def test_follow_ups_reuse_the_first_query_with_a_new_date_filter(demo):
    agent, admin = demo
    counts = {window: expected(window) for window in ("-24 hours", "-7 days", "-1 months")}
    assert counts["-24 hours"] < counts["-7 days"] <= counts["-1 months"]
    session = sessions.session_create(workspace=agent.workspace, agent=agent, user=admin)

    first = ask(session, admin, FIRST)
    assert first.result["summary"].startswith(f"Answer: {counts['-24 hours']}.")
    sql = query_of(first)
    assert "'-24 hours'" in sql

    second = ask(session, admin, "and in the last 7 days?")
    assert request_build(second).session.previous_question.startswith("How many open high-priority tickets")
    assert query_of(second) == sql.replace("'-24 hours'", "'-7 days'")
    assert second.result["summary"].startswith(f"Answer: {counts['-7 days']}.")

    third = ask(session, admin, "and last month?")
    assert query_of(third) == sql.replace("'-24 hours'", "'-1 months'")
    assert third.result["summary"].startswith(f"Answer: {counts['-1 months']}.")
    # The third run read both earlier turns, with the queries behind their answers.
    history = request_build(third).session
    assert [turn.question for turn in history.turns] == [FIRST, "and in the last 7 days?"]
    assert history.turns[1].queries[-1].query == query_of(second)
    assert history.turns[1].answer.startswith(f"Answer: {counts['-7 days']}.")


def test_a_question_of_its_own_is_not_read_as_a_follow_up(demo):
    agent, admin = demo
    session = sessions.session_create(workspace=agent.workspace, agent=agent, user=admin)
    ask(session, admin, FIRST)
    own = ask(session, admin, "How many customers are there?")
    assert query_of(own) == 'SELECT COUNT(*) AS "count" FROM "customers" t0'
    assert own.result["summary"].startswith("Answer: 120.")


def test_the_offline_planner_answers_about_an_attached_csv_and_a_follow_up_on_it(demo, api_client_for, settings,
                                                                                 tmp_path):
    """A CSV sent with the first message is answered over its own table (the note naming
    the file is not read as a value to filter on), and the follow-up, which carries no
    file, queries the same table with the new filter."""
    from tests.artifacts.conftest import upload

    settings.STORAGES = {**settings.STORAGES, "artifacts": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "store")}}}
    agent, admin = demo
    session = sessions.session_create(workspace=agent.workspace, agent=agent, user=admin)
    sales = upload(api_client_for(admin), agent.workspace, "sales.csv",
                   b"region,amount\nNorth,120\nSouth,80\nNorth,100\n", session=session.pk).json()
    _message, first = sessions.session_message_send(session=session, user=admin, attachments=[sales["id"]],
                                                    content="What is the total amount per region in this file?")
    assert "[Attached file 'sales.csv'" in first.input_prompt
    assert services.execution_run_segment(execution_id=first.pk) == "success"
    assert services.execution_post_process(execution_id=first.pk) is True
    first.refresh_from_db()
    step = first.steps.get(step_type="observation", tool_name="execute_query")
    assert step.input["data_source_id"] == sales["data_source_id"]
    assert step.output["result"]["rows"] == [["North", 220], ["South", 80]]
    assert first.result["summary"].startswith("sum_amount per region: North: 220, South: 80.")

    follow = ask(session, admin, "and only for North?")
    assert "WHERE" in query_of(follow) and "'North'" in query_of(follow)
    assert follow.steps.get(step_type="observation", tool_name="execute_query").output["result"]["rows"] == [
        ["North", 220]]
