"""``manage.py demo_reset``: put freshly generated tables in the demo support database.

What agents wrote to it (closed tickets, edits) is discarded; River's own records of
those runs (executions, approvals, the audit trail) stay. Whatever part of the demo is
missing is created as ``seed_demo`` would, so the command works on a fresh install too.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from demo.management.commands.seed_demo import seed_report_write
from demo.seed import demo_seed


class Command(BaseCommand):
    help = (
        "Reset the demo data: regenerate the Support desk (demo) database's customers, tickets, comments and "
        "charges with timestamps relative to now. Runs, approvals and audit records are kept."
    )

    def handle(self, *args, **options):
        seed_report_write(self, demo_seed(refresh_data=True))
