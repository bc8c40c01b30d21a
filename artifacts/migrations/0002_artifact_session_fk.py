"""Artifact.session_id: the plain integer becomes a foreign key to executions.Session.

Ids that name no session (the integer was not checked before) are cleared first; the
column's values move to the new foreign key, so uploads keep their session."""

import django.db.models.deletion
from django.db import migrations, models


def _clear_dangling(apps, schema_editor):
    Artifact = apps.get_model("artifacts", "Artifact")
    Session = apps.get_model("executions", "Session")
    Artifact.objects.exclude(session_ref=None).exclude(
        session_ref__in=Session.objects.values("pk")).update(session_ref=None)


def _copy(apps, schema_editor):
    Artifact = apps.get_model("artifacts", "Artifact")
    Artifact.objects.exclude(session_ref=None).update(session_id=models.F("session_ref"))


class Migration(migrations.Migration):

    dependencies = [
        ("artifacts", "0001_initial"),
        ("executions", "0010_sessions"),
    ]

    operations = [
        migrations.RenameField("artifact", "session_id", "session_ref"),
        migrations.RunPython(_clear_dangling, migrations.RunPython.noop),
        migrations.AddField(
            model_name="artifact",
            name="session",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="artifacts", to="executions.session"),
        ),
        migrations.RunPython(_copy, migrations.RunPython.noop),
        migrations.RemoveField("artifact", "session_ref"),
    ]
