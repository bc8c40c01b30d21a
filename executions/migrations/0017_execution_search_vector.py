"""Runs keep their search vector in a column (``Execution.search_vector``,
common/search.py) instead of computing it per row: a trigger writes it on every insert and
on every update of the prompt, the result or the column itself (so nothing can store a
stale or forged vector), the existing runs are backfilled in batches of ids, each its own
transaction, then the GIN index moves from the expression to the column (both built and
dropped concurrently: the table stays writable). PostgreSQL only; on SQLite the column
stays null and search uses ``LIKE``.

The text is cut at ``VECTOR_TEXT_LIMIT`` characters: a ``tsvector`` holds at most 1 MB,
and an answer of more unique words than that must not make its run's write fail."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import migrations

from common.search import AddVectorIndex, RemoveVectorIndex

VECTOR_TEXT_LIMIT = 100_000
BACKFILL_BATCH = 10_000

CREATE = f"""
CREATE OR REPLACE FUNCTION executions_execution_search_vector() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_vector := to_tsvector('simple'::regconfig, left(
        COALESCE(NEW.input_prompt, '') || ' ' || COALESCE(NEW.result ->> 'summary', ''), {VECTOR_TEXT_LIMIT}));
    RETURN NEW;
END;
$$;
DROP TRIGGER IF EXISTS execution_search_vector ON executions_execution;
CREATE TRIGGER execution_search_vector
    BEFORE INSERT OR UPDATE OF input_prompt, result, search_vector ON executions_execution
    FOR EACH ROW EXECUTE FUNCTION executions_execution_search_vector();
"""

DROP = """
DROP TRIGGER IF EXISTS execution_search_vector ON executions_execution;
DROP FUNCTION IF EXISTS executions_execution_search_vector();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(CREATE, params=None)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM executions_execution")
        (last,) = cursor.fetchone()
        for start in range(0, last, BACKFILL_BATCH):
            # Writing the column fires the trigger, which computes the vector: one definition.
            cursor.execute("UPDATE executions_execution SET search_vector = NULL WHERE id > %s AND id <= %s",
                           [start, start + BACKFILL_BATCH])


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0016_execution_search_idx"),
    ]

    operations = [
        migrations.AddField(model_name="execution", name="search_vector",
                            field=SearchVectorField(editable=False, null=True)),
        migrations.RunPython(forwards, backwards, elidable=False),
        AddVectorIndex(model_name="execution",
                       index=GinIndex(fields=["search_vector"], name="execution_search_vector_idx")),
        RemoveVectorIndex(model_name="execution", name="execution_search_idx"),
    ]
