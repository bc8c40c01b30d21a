"""The audit tables refuse rewriting at the database level (PostgreSQL), and entries
written before keyed MACs existed are re-sealed under the current audit key.

On ``governance_auditlogentry`` the trigger allows one kind of UPDATE only: the
sealer filling ``seq``, ``prev_hash`` and ``entry_hash`` of a pending entry, once,
with every other column unchanged. ``governance_auditanchor`` allows
no UPDATE at all. DELETE and TRUNCATE are refused on both unless the session set
``river.audit_maintenance = 'on'`` *and* its role is a member of
``river_audit_maintenance`` (docs/audit.md: River's runtime role must not be).

SQLite: the same rules as triggers without the maintenance path (anyone who can
write the file can drop them; see docs/audit.md); ``flush`` lifts them for its own
transaction only.
"""

import hashlib
import json

from django.db import migrations

PG_GUARD = """
CREATE OR REPLACE FUNCTION river_audit_maintenance_allowed() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('river.audit_maintenance', true), '') = 'on'
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'river_audit_maintenance')
       AND pg_has_role(current_user, 'river_audit_maintenance', 'MEMBER')
$$;

CREATE OR REPLACE FUNCTION governance_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.seq IS NULL AND NEW.seq IS NOT NULL
           AND (to_jsonb(NEW) - ARRAY['seq', 'prev_hash', 'entry_hash'])
             = (to_jsonb(OLD) - ARRAY['seq', 'prev_hash', 'entry_hash']) THEN
            RETURN NEW;
        END IF;
    ELSIF river_audit_maintenance_allowed() THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = TG_TABLE_NAME || ' is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE OR REPLACE FUNCTION governance_audit_anchor_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' AND river_audit_maintenance_allowed() THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NULL;
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = TG_TABLE_NAME || ' is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'insufficient_privilege';
END;
$$;

DROP TRIGGER IF EXISTS governance_audit_append_only ON governance_auditlogentry;
CREATE TRIGGER governance_audit_append_only
    BEFORE UPDATE OR DELETE ON governance_auditlogentry
    FOR EACH ROW EXECUTE FUNCTION governance_audit_append_only();
CREATE TRIGGER governance_audit_no_truncate
    BEFORE TRUNCATE ON governance_auditlogentry
    FOR EACH STATEMENT EXECUTE FUNCTION governance_audit_append_only();
CREATE TRIGGER governance_audit_anchor_append_only
    BEFORE UPDATE OR DELETE ON governance_auditanchor
    FOR EACH ROW EXECUTE FUNCTION governance_audit_anchor_append_only();
CREATE TRIGGER governance_audit_anchor_no_truncate
    BEFORE TRUNCATE ON governance_auditanchor
    FOR EACH STATEMENT EXECUTE FUNCTION governance_audit_anchor_append_only();
"""

# The maintenance role is cluster-wide. A migration owner without CREATEROLE
# cannot make it: then nobody has the maintenance path until a DBA creates it.
PG_ROLE = """
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'river_audit_maintenance') THEN
        CREATE ROLE river_audit_maintenance NOLOGIN;
    END IF;
EXCEPTION
    WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
        RAISE NOTICE 'role river_audit_maintenance not created: %', SQLERRM;
END;
$$;
"""

PG_DROP = """
DROP TRIGGER IF EXISTS governance_audit_no_truncate ON governance_auditlogentry;
DROP TRIGGER IF EXISTS governance_audit_anchor_append_only ON governance_auditanchor;
DROP TRIGGER IF EXISTS governance_audit_anchor_no_truncate ON governance_auditanchor;
DROP FUNCTION IF EXISTS governance_audit_anchor_append_only();
DROP FUNCTION IF EXISTS river_audit_maintenance_allowed() CASCADE;
"""

PG_RESTORE_0002 = """
CREATE OR REPLACE FUNCTION governance_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        MESSAGE = 'governance_auditlogentry is append-only: ' || TG_OP || ' refused',
        ERRCODE = 'insufficient_privilege';
END;
$$;
"""

_CONTENT = (
    "id", "organization_id", "workspace_id", "event_type", "actor_id", "actor_label", "execution_id", "agent_id",
    "policy_id", "approval_id", "details", "created_at", "key_id", "content_hash",
)
_CONTENT_CHANGED = " OR ".join(f"NEW.{column} IS NOT OLD.{column}" for column in _CONTENT)

SQLITE_GUARD = [
    "CREATE TRIGGER governance_audit_no_delete BEFORE DELETE ON governance_auditlogentry "
    "BEGIN SELECT RAISE(ABORT, 'governance_auditlogentry is append-only: DELETE refused'); END",
    "CREATE TRIGGER governance_audit_no_update BEFORE UPDATE ON governance_auditlogentry "
    f"WHEN OLD.seq IS NOT NULL OR NEW.seq IS NULL OR {_CONTENT_CHANGED} "
    "BEGIN SELECT RAISE(ABORT, 'governance_auditlogentry is append-only: UPDATE refused'); END",
    "CREATE TRIGGER governance_audit_anchor_no_delete BEFORE DELETE ON governance_auditanchor "
    "BEGIN SELECT RAISE(ABORT, 'governance_auditanchor is append-only: DELETE refused'); END",
    "CREATE TRIGGER governance_audit_anchor_no_update BEFORE UPDATE ON governance_auditanchor "
    "BEGIN SELECT RAISE(ABORT, 'governance_auditanchor is append-only: UPDATE refused'); END",
]
SQLITE_TRIGGERS = [
    "governance_audit_no_delete", "governance_audit_no_update",
    "governance_audit_anchor_no_delete", "governance_audit_anchor_no_update",
]


def _legacy_hash(entry) -> str:
    """The unkeyed SHA-256 form of migration 0002's time, frozen here."""
    body = {
        "organization": entry.organization_id,
        "workspace": entry.workspace_id,
        "seq": entry.seq,
        "event_type": entry.event_type,
        "actor": entry.actor_id,
        "actor_label": entry.actor_label,
        "execution_id": entry.execution_id,
        "agent_id": str(entry.agent_id) if entry.agent_id else None,
        "policy_id": str(entry.policy_id) if entry.policy_id else None,
        "approval_id": str(entry.approval_id) if entry.approval_id else None,
        "details": entry.details,
        "created_at": entry.created_at.isoformat(),
        "prev_hash": entry.prev_hash,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _reseal_legacy(apps):
    """Re-seal unkeyed entries with the current key, as far as their old chain checks
    out. From the first bad link on they keep their empty key id, so verification
    reports that organization as ``broken at entry N`` instead of the migration
    blessing tampered (or mis-hashed) history with a valid MAC."""
    from governance.audit import GENESIS, content_mac, current_key_id, entry_mac

    entry_model = apps.get_model("governance", "AuditLogEntry")
    legacy = entry_model.objects.filter(key_id="", seq__isnull=False)
    key_id = current_key_id()
    for organization_id in sorted(set(legacy.values_list("organization_id", flat=True))):
        rows = list(entry_model.objects.filter(organization_id=organization_id, seq__isnull=False).order_by("seq"))
        expected, prev, intact = 1, GENESIS, []
        for row in rows:
            if row.seq != expected or row.prev_hash != prev or _legacy_hash(row) != row.entry_hash:
                print(f"\n  audit chain of organization {organization_id} broken at seq {expected}: "
                      "left unsealed from there (verify_audit reports it)")
                break
            intact.append(row)
            expected, prev = row.seq + 1, row.entry_hash
        prev = GENESIS
        for row in intact:
            row.key_id, row.prev_hash = key_id, prev
            row.content_hash = content_mac(row)
            row.entry_hash = entry_mac(row)
            prev = row.entry_hash
        entry_model.objects.bulk_update(intact, ["key_id", "content_hash", "prev_hash", "entry_hash"])


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("DROP TRIGGER IF EXISTS governance_audit_append_only ON governance_auditlogentry")
        _reseal_legacy(apps)
        schema_editor.execute(PG_ROLE, params=None)
        schema_editor.execute(PG_GUARD, params=None)
    elif vendor == "sqlite":
        _reseal_legacy(apps)
        for statement in SQLITE_GUARD:
            schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_DROP, params=None)
        schema_editor.execute(PG_RESTORE_0002, params=None)
        schema_editor.execute(
            "DROP TRIGGER IF EXISTS governance_audit_append_only ON governance_auditlogentry;"
            "CREATE TRIGGER governance_audit_append_only BEFORE UPDATE OR DELETE ON governance_auditlogentry "
            "FOR EACH ROW EXECUTE FUNCTION governance_audit_append_only();",
            params=None,
        )
    elif vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}", params=None)


class Migration(migrations.Migration):
    dependencies = [("governance", "0003_audit_hmac_anchors")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
