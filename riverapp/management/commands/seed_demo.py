"""``manage.py seed_demo``: create the demo organization, workspace, admin, data and agents."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from riverapp.demo import ADMIN_USERNAME, demo_seed


class Command(BaseCommand):
    help = "Create the demo (idempotent): org, workspace, admin, support database and agents."

    def add_arguments(self, parser):
        parser.add_argument(
            "--refresh-data",
            action="store_true",
            help="rebuild the demo support database (fresh timestamps; discards changes agents made to it)",
        )

    def handle(self, *args, refresh_data, **options):
        report = demo_seed(refresh_data=refresh_data)
        if not report.changed:
            self.stdout.write("Demo already in place; nothing to do.")
            return
        for item in report.created:
            self.stdout.write(f"created {item}")
        if report.admin_password:
            self.stdout.write(
                self.style.WARNING(
                    f"Demo login: {ADMIN_USERNAME} / {report.admin_password}\n"
                    "This password is shown once and stored only as a hash; "
                    "set RIVER_ADMIN_PASSWORD before the first run to choose it."
                )
            )
