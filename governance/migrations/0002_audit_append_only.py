"""On PostgreSQL, refuse UPDATE and DELETE on the audit trail at the database level.

SQLite has no equivalent worth relying on; there the application's append-only
discipline and the hash chain (``verify_audit``) are the protection.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION governance_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        MESSAGE = 'governance_auditlogentry is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'insufficient_privilege';
END;
$$;
DROP TRIGGER IF EXISTS governance_audit_append_only ON governance_auditlogentry;
CREATE TRIGGER governance_audit_append_only
    BEFORE UPDATE OR DELETE ON governance_auditlogentry
    FOR EACH ROW EXECUTE FUNCTION governance_audit_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS governance_audit_append_only ON governance_auditlogentry;
DROP FUNCTION IF EXISTS governance_audit_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("governance", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
