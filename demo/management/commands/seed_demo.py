"""``manage.py seed_demo``: create the demo organization, workspace, admin, approver, data and agents,
and top up the open high-priority tickets the README's walk-through closes."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from demo.seed import ADMIN_USERNAME, APPROVER_USERNAME, SeedReport, demo_seed


def seed_report_write(command: BaseCommand, report: SeedReport) -> None:
    """Print what a seed did: each thing created, warnings on stderr, and the
    generated passwords (shown this once)."""
    for warning in report.warnings:
        command.stderr.write(command.style.WARNING(warning))
    if not report.changed:
        command.stdout.write("Demo already in place; nothing to do.")
        return
    for item in report.created:
        command.stdout.write(f"created {item}")
    if report.admin_password:
        command.stdout.write(
            command.style.WARNING(
                f"Demo login: {ADMIN_USERNAME} / {report.admin_password}\n"
                "This password is shown once and stored only as a hash; "
                "set RIVER_ADMIN_PASSWORD before the first run to choose it."
            )
        )
    if report.approver_password:
        command.stdout.write(
            command.style.WARNING(
                f"Demo approver login: {APPROVER_USERNAME} / {report.approver_password}\n"
                "Sign in as the approver to approve what the admin's runs ask for (whoever starts a run "
                "may not approve it). Shown once; set RIVER_APPROVER_PASSWORD before the first run to choose it."
            )
        )


class Command(BaseCommand):
    help = (
        "Create the demo (idempotent): org, workspace, admin, approver, support database and agents; "
        "top up the open high-priority tickets of the last hours when too few are left."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--refresh-data",
            action="store_true",
            help="regenerate the demo support database's tables (as demo_reset does; discards changes agents made)",
        )

    def handle(self, *args, refresh_data, **options):
        seed_report_write(self, demo_seed(refresh_data=refresh_data))
