"""A GIN index on the runs' search vector (prompt and answer; common/search.py), built
concurrently on PostgreSQL and skipped on SQLite."""

from django.db import migrations

from common.search import AddVectorIndex, vector_index
from executions.models import SEARCHED_FIELDS


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("executions", "0015_execution_segments"),
    ]

    operations = [
        AddVectorIndex(model_name="execution", index=vector_index(*SEARCHED_FIELDS, name="execution_search_idx")),
    ]
