"""Writes for governance: policies (every change audited).

The same validation serves the API, the ``apply_governance_policy`` tool and the
Django admin: ``policy_validate`` normalises conditions to ``{"expression": ...}``
and refuses anything the expression language cannot parse, with the position and
the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from governance import expressions
from governance.audit import audit_record
from governance.checker import QUERY_NAMES, conditions_expression, infer_policy_type
from governance.models import Policy, WorkspaceSettings
from governance.selectors import policy_get_for_user
from rivercore.errors import InvalidInput, NotFound, PermissionDenied
from rivercore.types.agents import MAX_REQUIRED_APPROVALS
from rivercore.types.governance import Enforcement, PolicyScope, PolicyType
from tenancy.models import Workspace
from tenancy.permissions import ORG_ADMIN_ROLE, POLICY_CREATE, Role
from tenancy.selectors import (
    is_org_admin,
    require_permission,
    workspace_get_for_user,
    workspace_roles,
    workspaces_for_user,
)

POLICY_CREATED = "policy_created"
POLICY_UPDATED = "policy_updated"
POLICY_DELETED = "policy_deleted"


@dataclass(frozen=True)
class ValidPolicyShape:
    conditions: dict  # {"expression": "..."}
    policy_type: PolicyType


def _choice(value, enum, field: str):
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise InvalidInput(f"Invalid {field}.", details={field: [f"must be one of: {allowed}"]}) from None


def policy_validate(*, conditions, policy_type: str | None = None) -> ValidPolicyShape:
    """Normalise and check conditions; infer the policy type when not given."""
    try:
        source = conditions_expression(conditions)
    except ValueError as exc:
        raise InvalidInput("Invalid policy conditions.", details={"conditions": [str(exc)]}) from None
    try:
        tree = expressions.expression_validate(source, known_names=True)
    except expressions.ExpressionError as exc:
        raise InvalidInput(
            f"Invalid policy condition at position {exc.position}: {exc.reason}",
            details={"conditions": [str(exc)], "position": exc.position, "reason": exc.reason},
        ) from None
    kind = _choice(policy_type, PolicyType, "policy_type") if policy_type else infer_policy_type(tree)
    if kind != PolicyType.DATA_EXPORT_LIMIT:
        for name in expressions.names_in(tree):
            if name.path.split(".")[0] in QUERY_NAMES:
                reason = f"{name.path!r} is only known after a query; use policy_type data_export_limit"
                raise InvalidInput(
                    f"Invalid policy condition at position {name.pos}: {reason}",
                    details={"conditions": [f"position {name.pos}: {reason}"], "position": name.pos, "reason": reason},
                )
    return ValidPolicyShape(conditions={"expression": source}, policy_type=kind)


def _authorize(*, actor, scope: PolicyScope, organization_id: int, workspace: Workspace | None) -> None:
    if scope == PolicyScope.WORKSPACE:
        require_permission(user=actor, workspace=workspace, permission=POLICY_CREATE)
        return
    if is_org_admin(user=actor, organization_id=organization_id):
        return
    if workspaces_for_user(user=actor).filter(organization_id=organization_id).exists():
        raise PermissionDenied("Only organization admins manage organization-wide policies.")
    raise NotFound("Organization not found.")


def _snapshot(policy: Policy) -> dict:
    return {
        "name": policy.name,
        "description": policy.description,
        "scope": policy.scope,
        "policy_type": policy.policy_type,
        "conditions": policy.conditions,
        "enforcement": policy.enforcement,
        "required_approvals": policy.required_approvals,
        "enabled": policy.enabled,
    }


def _audit(*, policy: Policy, actor, event_type: str, details: dict) -> None:
    audit_record(
        organization_id=policy.organization_id,
        workspace_id=policy.workspace_id,
        event_type=event_type,
        actor=actor,
        policy_id=policy.pk,
        details=details,
    )


def _clean_name(name) -> str:
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise InvalidInput("A policy needs a name.", details={"name": ["This field may not be blank."]})
    if len(name) > 200:
        raise InvalidInput("Name too long.", details={"name": ["Ensure this field has no more than 200 characters."]})
    return name


def policy_create(
    *,
    actor,
    scope: str,
    name: str,
    conditions: dict | str,
    enforcement: str,
    description: str = "",
    policy_type: str | None = None,
    workspace_id: int | None = None,
    organization_id: int | None = None,
    enabled: bool = True,
    require_preview: bool = False,
    required_approvals: int = 1,
) -> Policy:
    """Create a policy. Workspace scope needs ``policy:create`` there; organization
    scope needs an organization admin. A workspace id alone identifies the
    organization for an organization-scoped policy."""
    scope = _choice(scope, PolicyScope, "scope")
    workspace = None
    if scope == PolicyScope.WORKSPACE:
        if workspace_id is None:
            raise InvalidInput("Workspace policies need a workspace.", details={"workspace_id": ["required"]})
        workspace = workspace_get_for_user(user=actor, workspace_id=workspace_id)
        organization_id = workspace.organization_id
    elif organization_id is None:
        if workspace_id is None:
            raise InvalidInput(
                "Organization policies need an organization.", details={"organization_id": ["required"]}
            )
        organization_id = workspace_get_for_user(user=actor, workspace_id=workspace_id).organization_id
    _authorize(actor=actor, scope=scope, organization_id=organization_id, workspace=workspace)
    name = _clean_name(name)
    enforcement = _choice(enforcement, Enforcement, "enforcement")
    required_approvals = policy_required_approvals_validate(required_approvals, enforcement=enforcement)
    shape = policy_validate(conditions=conditions, policy_type=policy_type)
    with transaction.atomic():
        policy = Policy.objects.create(
            organization_id=organization_id,
            workspace=workspace,
            scope=scope,
            name=name,
            description=description or "",
            policy_type=shape.policy_type,
            conditions=shape.conditions,
            enforcement=enforcement,
            required_approvals=required_approvals,
            enabled=bool(enabled),
            require_preview=bool(require_preview),  # issue 29 §1 (docs/approvals.md "Effect preview")
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        _audit(policy=policy, actor=actor, event_type=POLICY_CREATED, details=_snapshot(policy))
    return policy


_UNSET = object()


def policy_required_approvals_validate(value, *, enforcement) -> int:
    """Quorum of a policy (governance.quorum): a whole number from 1 to 10, above 1 only
    for a require_approval policy (nothing else asks anyone)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUIRED_APPROVALS:
        raise InvalidInput("required_approvals is invalid.", details={"required_approvals": [
            f"Must be a whole number from 1 to {MAX_REQUIRED_APPROVALS}."]})
    if value > 1 and enforcement != Enforcement.REQUIRE_APPROVAL:
        raise InvalidInput("required_approvals is invalid.", details={"required_approvals": [
            "Only a require_approval policy can ask for more than one approver."]})
    return value


def policy_update(
    *,
    actor,
    policy_id,
    name=_UNSET,
    description=_UNSET,
    conditions=_UNSET,
    enforcement=_UNSET,
    policy_type=_UNSET,
    enabled=_UNSET,
    require_preview=_UNSET,
    required_approvals=_UNSET,
) -> Policy:
    """Change a policy's fields; scope and workspace are fixed at creation.
    New conditions without a policy type re-infer the type from the expression."""
    found = policy_get_for_user(user=actor, policy_id=policy_id)
    _authorize(actor=actor, scope=PolicyScope(found.scope), organization_id=found.organization_id,
               workspace=found.workspace)
    updates: dict = {}
    if name is not _UNSET:
        updates["name"] = _clean_name(name)
    if description is not _UNSET:
        updates["description"] = description or ""
    if enforcement is not _UNSET:
        updates["enforcement"] = _choice(enforcement, Enforcement, "enforcement").value
    if enabled is not _UNSET:
        updates["enabled"] = bool(enabled)
    if require_preview is not _UNSET:
        updates["require_preview"] = bool(require_preview)
    enforcement_now = updates.get("enforcement", found.enforcement)
    if required_approvals is not _UNSET:
        updates["required_approvals"] = policy_required_approvals_validate(required_approvals,
                                                                           enforcement=enforcement_now)
    elif enforcement_now != Enforcement.REQUIRE_APPROVAL:
        updates["required_approvals"] = 1  # a policy that asks nobody needs no quorum
    if conditions is not _UNSET or policy_type is not _UNSET:
        shape = policy_validate(
            conditions=found.conditions if conditions is _UNSET else conditions,
            policy_type=None if policy_type is _UNSET else policy_type,
        )
        updates["conditions"] = shape.conditions
        updates["policy_type"] = shape.policy_type.value
    with transaction.atomic():
        policy = Policy.objects.select_for_update().get(pk=found.pk)
        changes = {}
        for field, value in updates.items():
            if getattr(policy, field) != value:
                changes[field] = {"from": getattr(policy, field), "to": value}
                setattr(policy, field, value)
        if changes:
            policy.save(update_fields=[*changes, "updated_at"])
            _audit(policy=policy, actor=actor, event_type=POLICY_UPDATED, details={"changes": changes})
    return policy


def policy_delete(*, actor, policy_id) -> None:
    found = policy_get_for_user(user=actor, policy_id=policy_id)
    _authorize(actor=actor, scope=PolicyScope(found.scope), organization_id=found.organization_id,
               workspace=found.workspace)
    with transaction.atomic():
        _audit(policy=found, actor=actor, event_type=POLICY_DELETED, details=_snapshot(found))
        found.delete()


def policy_admin_saved(*, policy: Policy, actor, created: bool, changed: dict | None = None) -> None:
    """Audit a save made through the Django admin (which already validated it)."""
    if created:
        _audit(policy=policy, actor=actor, event_type=POLICY_CREATED, details={**_snapshot(policy), "via": "admin"})
    elif changed:
        _audit(policy=policy, actor=actor, event_type=POLICY_UPDATED, details={"changes": changed, "via": "admin"})


def policy_admin_delete(*, policy: Policy, actor) -> None:
    with transaction.atomic():
        _audit(policy=policy, actor=actor, event_type=POLICY_DELETED, details={**_snapshot(policy), "via": "admin"})
        policy.delete()


# --- workspace approval settings -----------------------------------------------------

WORKSPACE_APPROVAL_SETTINGS_CHANGED = "workspace_approval_settings_changed"


def workspace_approval_settings_update(*, actor, workspace_id, allow_self_approval) -> Workspace:
    """Turn self-approval on or off for a workspace (segregation of duties).

    Workspace admins and organization admins only; the change is audited. Only a
    real boolean is accepted: "yes", 1 or "false" are refused, not guessed."""
    workspace = workspace_get_for_user(user=actor, workspace_id=workspace_id)
    roles = set(workspace_roles(user=actor, workspace=workspace))
    if not roles & {Role.ADMIN, ORG_ADMIN_ROLE}:
        raise PermissionDenied("Only workspace admins change approval settings.")
    if not isinstance(allow_self_approval, bool):
        raise InvalidInput(
            "allow_self_approval must be true or false.", details={"allow_self_approval": ["Must be a boolean."]}
        )
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        previous = locked.allow_self_approval
        if previous != allow_self_approval:
            locked.allow_self_approval = allow_self_approval
            locked.save(update_fields=["allow_self_approval"])
            audit_record(
                organization_id=locked.organization_id,
                workspace_id=locked.pk,
                event_type=WORKSPACE_APPROVAL_SETTINGS_CHANGED,
                actor=actor,
                details={"allow_self_approval": {"from": previous, "to": allow_self_approval}},
            )
    return locked


def workspace_memory_mode_set(*, workspace: Workspace, mode: str, actor) -> str:
    """Change what runs of the workspace remember (caller checked the actor administers
    it); audited."""
    if mode not in WorkspaceSettings.MemoryMode.values:
        raise InvalidInput("Unknown memory mode.", details={"mode": [f'"{mode}" is not a valid choice.']})
    with transaction.atomic():
        row, _ = WorkspaceSettings.objects.select_for_update().get_or_create(workspace=workspace)
        previous = row.memory_mode
        if previous != mode:
            row.memory_mode = mode
            row.save(update_fields=["memory_mode", "updated_at"])
            audit_record(organization_id=workspace.organization_id, workspace_id=workspace.pk,
                         event_type="memory_mode_changed", actor=actor,
                         details={"mode": mode, "previous_mode": previous})
    return mode


# --- the checks a policy backtest shares with policy_create (governance.backtests) ------


def policy_write_authorize(*, actor, scope: PolicyScope, organization_id: int, workspace: Workspace | None) -> None:
    """Whether ``actor`` may write a policy of this scope: ``policy:create`` in the
    workspace, an organization admin for an organization-wide one (403, or 404 outside)."""
    _authorize(actor=actor, scope=scope, organization_id=organization_id, workspace=workspace)


def policy_fields_validate(*, name, enforcement, conditions, policy_type=None, required_approvals=1) -> dict:
    """The fields of a policy checked as ``policy_create`` checks them, normalised:
    ``{name, enforcement, conditions, policy_type, required_approvals}``. Errors name the field."""
    enforcement = _choice(enforcement, Enforcement, "enforcement")
    shape = policy_validate(conditions=conditions, policy_type=policy_type)
    return {
        "name": _clean_name(name),
        "enforcement": enforcement,
        "conditions": shape.conditions,
        "policy_type": shape.policy_type,
        "required_approvals": policy_required_approvals_validate(required_approvals, enforcement=enforcement),
    }
