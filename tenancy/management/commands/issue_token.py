from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tenancy.models import AccessToken
from tenancy.services import token_issue


class Command(BaseCommand):
    help = "Issue an access token for a user and print it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--service", action="store_true", help="issue a service token")
        parser.add_argument("--expires-in-days", type=int, default=None)

    def handle(self, *args, username, name, service, expires_in_days, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        kind = AccessToken.Kind.SERVICE if service else AccessToken.Kind.PERSONAL
        issued = token_issue(user=user, name=name, kind=kind, expires_at=expires_at)
        self.stdout.write(issued.plaintext)
