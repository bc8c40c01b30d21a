"""A question on a schema River does not ship, through the whole reasoning loop: the
analyst agent, the offline planner as its model, the tools, the SQL guard and the
answer the user reads."""

from __future__ import annotations

import sqlite3

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent
from datasources.services import data_source_create, data_source_discover
from demo.seed import demo_seed
from executions.services import execution_run_segment, execution_start, person_run_request
from tests.executions.test_planner_questions import CHINOOK, needs_chinook

pytestmark = [pytest.mark.django_db(transaction=True), needs_chinook]  # tools run in worker threads


@pytest.fixture
def analyst(settings, tmp_path):
    """The demo's read-only analyst, pointed at a Chinook database instead of the demo data."""
    settings.RIVER_SQLITE_DATA_DIR = tmp_path / "datasources"
    settings.RIVER_ADMIN_PASSWORD = "demo-password-for-tests"
    demo_seed()
    agent = Agent.objects.get(name="Support Analyst")
    path = settings.RIVER_SQLITE_DATA_DIR / str(agent.workspace_id) / "chinook.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript((CHINOOK / "Chinook_Sqlite.sql").read_text(encoding="utf-8-sig"))
    source = data_source_create(workspace=agent.workspace, name="Chinook", type="sqlite",
                                connection_config={"path": path.name}, credentials={})
    data_source_discover(data_source=source)
    agent.current_version.data_sources.set([source])
    return agent, get_user_model().objects.get(username="admin"), path


def run(agent, user, question: str):
    execution = execution_start(agent=agent, request=person_run_request(agent=agent, user=user, prompt=question))
    assert execution_run_segment(execution_id=execution.pk) == "success"
    execution.refresh_from_db()
    return execution


def test_a_filtered_count_is_answered_with_the_number_in_the_data(analyst):
    agent, user, path = analyst
    with sqlite3.connect(path) as conn:
        expected = conn.execute("SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'").fetchone()[0]
    execution = run(agent, user, "How many customers are from Brazil?")
    assert execution.result["summary"].startswith(f"Answer: {expected}.")
    # The SQL is in the run's steps (the pages show it behind "Show query"), not in the answer.
    [query] = execution.steps.filter(tool_name="execute_query", step_type="tool_call").values_list(
        "input", flat=True)
    assert "\"Country\" = 'Brazil'" in query["query"]
    assert "SELECT" not in execution.result["summary"]


def test_a_two_hop_question_names_the_winner_and_its_count(analyst):
    agent, user, path = analyst
    with sqlite3.connect(path) as conn:
        name, count = conn.execute(
            "SELECT ar.Name, COUNT(*) AS n FROM Track t JOIN Album al ON t.AlbumId = al.AlbumId "
            "JOIN Artist ar ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId ORDER BY n DESC LIMIT 1").fetchone()
    execution = run(agent, user, "Which artist has the most tracks?")
    observed = execution.steps.get(step_type="observation", tool_name="execute_query").output["result"]["rows"]
    assert observed == [[name, count]]
    summary = execution.result["summary"]
    assert name in summary and str(count) in summary


def test_a_question_it_cannot_answer_is_said_plainly(analyst):
    agent, user, _path = analyst
    execution = run(agent, user, "What is the average age of employees?")
    summary = execution.result["summary"]
    assert summary.startswith("I could not answer that.")
    assert "I matched table 'employees' -> Employee" in summary and "average" in summary
    assert not execution.steps.filter(step_type="tool_call", tool_name="execute_query").exists()
