"""Django's ``flush``, able to empty the append-only audit tables.

The audit triggers refuse TRUNCATE and DELETE (governance migration 0004), which
is what Django's flush sends, including between the test suite's transactional
tests. This command runs the same flush inside ``audit_maintenance``: on
PostgreSQL that path works only for members of ``river_audit_maintenance``, so a
runtime role that is not one (docs/audit.md) still cannot flush the audit trail.
"""

from django.core.management.commands import flush

from governance.audit import audit_maintenance


class Command(flush.Command):
    def handle(self, **options):
        with audit_maintenance(using=options["database"]):
            return super().handle(**options)
