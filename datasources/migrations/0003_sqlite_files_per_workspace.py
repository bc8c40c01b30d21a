from django.db import migrations


def relocate(apps, schema_editor):
    from datasources.relocation import sqlite_sources_relocate

    sqlite_sources_relocate(data_source_model=apps.get_model("datasources", "DataSource"))


class Migration(migrations.Migration):
    dependencies = [("datasources", "0002_source_limits")]

    operations = [migrations.RunPython(relocate, migrations.RunPython.noop)]
