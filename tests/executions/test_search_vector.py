"""The runs' stored search vector (``Execution.search_vector``, executions migration 0017):
a PostgreSQL trigger writes it from the prompt and the answer however the row is written,
recomputes it when either changes, never keeps a vector written by anything else, and
bounds the text so an enormous answer cannot make the run's write fail. The migration
fills the column for runs that existed before it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from executions.models import Execution
from tests.factories import make_agent

pytestmark = pytest.mark.postgres(reason="the trigger and the column's vector exist on PostgreSQL only")


def _lexemes(pk: int) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(search_vector) FROM executions_execution WHERE id = %s", [pk])
        (lexemes,) = cursor.fetchone()
    return set(lexemes or [])


def _run(agent, **fields) -> Execution:
    return Execution(workspace=agent.workspace, agent=agent, agent_version=agent.versions.get(), **fields)


@pytest.fixture
def agent(workspace, owner):
    return make_agent(workspace=workspace, owner=owner)


@pytest.mark.django_db
def test_an_inserted_run_holds_the_words_of_its_prompt_and_answer(agent):
    run = _run(agent, input_prompt="Count the Quokkas", result={"summary": "Forty marmalade jars", "rows": [1]})
    run.save()
    assert {"count", "quokkas", "forty", "marmalade", "jars"} <= _lexemes(run.pk)
    assert "rows" not in _lexemes(run.pk)  # only the summary of the result is searched


@pytest.mark.django_db
def test_bulk_created_runs_get_their_vector_too(agent):
    created = Execution.objects.bulk_create([_run(agent, input_prompt=f"alpha{n}") for n in range(3)])
    assert [_lexemes(run.pk) for run in created] == [{"alpha0"}, {"alpha1"}, {"alpha2"}]


@pytest.mark.django_db
def test_a_changed_answer_or_prompt_replaces_the_vector(agent):
    run = _run(agent, input_prompt="first question")
    run.save()
    run.result = {"summary": "pelican answer"}
    run.save(update_fields=["result"])
    assert _lexemes(run.pk) == {"first", "question", "pelican", "answer"}
    Execution.objects.filter(pk=run.pk).update(input_prompt="second")
    assert _lexemes(run.pk) == {"second", "pelican", "answer"}


@pytest.mark.django_db
def test_a_vector_written_directly_is_recomputed(agent):
    run = _run(agent, input_prompt="honest words")
    run.save()
    Execution.objects.filter(pk=run.pk).update(search_vector="forged")
    assert _lexemes(run.pk) == {"honest", "words"}


@pytest.mark.django_db
def test_an_enormous_answer_is_stored_and_its_beginning_is_searchable(agent):
    # ~2 MB of distinct words: their full tsvector would pass PostgreSQL's 1 MB limit.
    answer = " ".join(f"w{n}" for n in range(250_000))
    run = _run(agent, input_prompt="big", result={"summary": answer})
    run.save()
    lexemes = _lexemes(run.pk)
    assert {"big", "w0", "w1000"} <= lexemes and "w249999" not in lexemes


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_vector_of_existing_runs(agent):
    before, after = [("executions", "0016_execution_search_idx")], [("executions", "0017_execution_search_vector")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                           "'executions_execution' AND column_name = 'search_vector'")
            assert cursor.fetchone() is None
        # The model as it was at 0016, which has no search_vector field.
        old_model = executor.loader.project_state(before).apps.get_model("executions", "Execution")
        old_id = old_model.objects.create(
            workspace_id=agent.workspace_id, agent_id=agent.pk, agent_version_id=agent.current_version_id,
            input_prompt="older run", result={"summary": "walrus"}).pk
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
    try:
        assert _lexemes(old_id) == {"older", "run", "walrus"}
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'executions_execution' "
                           "AND indexname LIKE 'execution_search%%'")
            assert [name for (name,) in cursor.fetchall()] == ["execution_search_vector_idx"]
    finally:
        # Every later migration (of any app) back in place: the tests after this one in the
        # same database need the whole schema.
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
