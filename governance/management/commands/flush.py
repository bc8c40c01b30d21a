"""Django's ``flush``, able to empty the append-only audit tables.

The audit triggers refuse TRUNCATE and DELETE (governance migration 0004), which
is what Django's flush sends, including between the test suite's transactional
tests. This command runs the same flush inside ``audit_maintenance``: on
PostgreSQL that path works only for members of ``river_audit_maintenance``, so a
runtime role that is not one (docs/audit.md) still cannot flush the audit trail.

A flush while River's processes still read the database (the browser tests' live
server and worker) can deadlock with one of them: TRUNCATE takes its tables one by
one while a reader holds one and waits for another. PostgreSQL then aborts one side;
when that is the flush, it is tried again, a few times, after a short pause.
"""

import time

from django.core.management.base import CommandError
from django.core.management.commands import flush

from governance.audit import audit_maintenance

DEADLOCK_ATTEMPTS = 5
DEADLOCK_SQLSTATE = "40P01"


def _deadlocked(error: BaseException) -> bool:
    """Whether ``error`` was caused by PostgreSQL aborting the flush in a deadlock."""
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "sqlstate", None) == DEADLOCK_SQLSTATE:
            return True
        seen = seen.__cause__
    return False


class Command(flush.Command):
    def handle(self, **options):
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                with audit_maintenance(using=options["database"]):
                    return super().handle(**options)
            except CommandError as error:
                if attempt == DEADLOCK_ATTEMPTS or not _deadlocked(error):
                    raise
                time.sleep(0.2 * attempt)
        return None
