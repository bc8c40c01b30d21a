from django.core.management.base import BaseCommand, CommandError

from governance.audit import audit_verify


class Command(BaseCommand):
    help = (
        "Verify the audit trail: one verdict per organization (ok, broken at entry N, truncated after anchor K, "
        "empty but anchored); exits 1 unless every verdict is ok."
    )

    def add_arguments(self, parser):
        parser.add_argument("--organization", type=int, default=None, help="only this organization id")

    def handle(self, *args, organization, **options):
        result = audit_verify(organization_id=organization)
        for report in result.organizations:
            line = f"organization {report.organization_id}: {report.verdict} ({report.entries_checked} entries, " \
                   f"{report.anchors_checked} anchors)"
            if report.first_broken is not None:
                line += f": {report.first_broken.reason} ({report.first_broken.detail})"
            elif report.detail:
                line += f": {report.detail}"
            self.stdout.write(line)
            if report.rejected_anchors:
                self.stderr.write(
                    f"organization {report.organization_id}: ignored anchor(s) {report.rejected_anchors} "
                    "whose MAC does not verify (not written by River)"
                )
        if not result.organizations:
            self.stdout.write("no audit entries")
        if not result.ok:
            failing = [report for report in result.organizations if not report.ok]
            raise CommandError(
                f"audit trail not ok in {len(failing)} organization(s); first: organization "
                f"{failing[0].organization_id}: {failing[0].verdict}"
            )
