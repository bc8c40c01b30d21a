"""A GIN index on the audit entries' search vector (action, actor, details;
common/search.py), built concurrently on PostgreSQL and skipped on SQLite."""

from django.db import migrations

from common.search import AddVectorIndex, vector_index
from governance.models import AUDIT_SEARCHED_FIELDS


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("governance", "0007_notifications_follow_the_work"),
    ]

    operations = [
        AddVectorIndex(model_name="auditlogentry", index=vector_index(*AUDIT_SEARCHED_FIELDS, name="audit_search_idx")),
    ]
