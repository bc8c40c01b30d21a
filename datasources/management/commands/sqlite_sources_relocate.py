from django.core.management.base import BaseCommand

from datasources.models import DataSource
from datasources.relocation import sqlite_sources_relocate


class Command(BaseCommand):
    help = "Move SQLite data source files into their workspace's directory (RIVER_SQLITE_DATA_DIR/<workspace id>/)."

    def handle(self, *args, **options):
        changes = sqlite_sources_relocate(data_source_model=DataSource)
        for line in changes:
            self.stdout.write(line)
        self.stdout.write(f"{len(changes)} change(s).")
