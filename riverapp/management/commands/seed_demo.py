"""``manage.py seed_demo``: create the demo organization, workspace, admin, approver, data and agents."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from riverapp.demo import ADMIN_USERNAME, APPROVER_USERNAME, demo_seed


class Command(BaseCommand):
    help = "Create the demo (idempotent): org, workspace, admin, approver, support database and agents."

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
        if report.approver_password:
            self.stdout.write(
                self.style.WARNING(
                    f"Demo approver login: {APPROVER_USERNAME} / {report.approver_password}\n"
                    "Sign in as the approver to approve what the admin's runs ask for (whoever starts a run "
                    "may not approve it). Shown once; set RIVER_APPROVER_PASSWORD before the first run to choose it."
                )
            )
