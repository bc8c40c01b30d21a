from django.core.management.base import BaseCommand, CommandError

from governance.audit import audit_verify


class Command(BaseCommand):
    help = "Verify the audit trail's hash chains; exit 1 and print the first broken link if any is broken."

    def add_arguments(self, parser):
        parser.add_argument("--organization", type=int, default=None, help="only this organization id")

    def handle(self, *args, organization, **options):
        result = audit_verify(organization_id=organization)
        for report in result.organizations:
            if report.ok:
                self.stdout.write(f"organization {report.organization_id}: ok ({report.entries_checked} entries)")
            else:
                link = report.first_broken
                self.stdout.write(
                    f"organization {report.organization_id}: BROKEN at seq {link.seq}: {link.reason} ({link.detail})"
                )
        if not result.organizations:
            self.stdout.write("no audit entries")
        if not result.ok:
            broken = [r for r in result.organizations if not r.ok]
            first = broken[0]
            raise CommandError(
                f"audit chain broken in {len(broken)} organization(s); first: organization {first.organization_id} "
                f"seq {first.first_broken.seq} ({first.first_broken.reason})"
            )
