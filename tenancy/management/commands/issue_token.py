"""``manage.py issue_token USERNAME``: print a new access token for a person, once.

Every refusal (no such user, an inactive one, a trigger's service identity, a name or
lifetime out of bounds) is a CommandError: one line on stderr and exit status 1, no
traceback, and no token row written.

It runs no system checks: they import every URL module and view (a third of the
command's CPU) to check what this command never uses, and ``manage.py check`` is the
place for them. Like every command that does not run the engine, it never imports
litellm (tests/riverapp/test_cold_start.py).
"""

import argparse
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from common.ids import count_from_text
from rivercore.errors import RiverError
from tenancy.models import AccessToken
from tenancy.services import token_issue

NAME_MAX = AccessToken._meta.get_field("name").max_length
MAX_DAYS = 3650


def _days(raw: str) -> int:
    """argparse type for --expires-in-days: 1 to MAX_DAYS in ASCII digits (``int()``
    would take ``٣`` and then a timedelta of 10**12 days would overflow)."""
    value = count_from_text(raw)
    if value is None or not 1 <= value <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {MAX_DAYS} is required, not {raw!r}")
    return value


class Command(BaseCommand):
    help = "Issue an access token for a person and print it once."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--service", action="store_true", help="issue a service token")
        parser.add_argument("--expires-in-days", type=_days, default=None)

    def handle(self, *args, username, name, service, expires_in_days, **options):
        if "\x00" in username or len(username) > 150:
            raise CommandError("No such user.")
        if not name or len(name) > NAME_MAX or "\x00" in name:
            raise CommandError(f"--name must be 1 to {NAME_MAX} characters, without NUL.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if not user.is_active:
            raise CommandError(f"The user {username!r} is inactive; reactivate them before issuing a token.")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        kind = AccessToken.Kind.SERVICE if service else AccessToken.Kind.PERSONAL
        try:
            issued = token_issue(user=user, name=name, kind=kind, expires_at=expires_at)
        except RiverError as exc:  # a trigger's service identity never holds a token
            raise CommandError(f"Cannot issue a token for {username!r}: {exc.message}") from None
        self.stdout.write(issued.plaintext)
