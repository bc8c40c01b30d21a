"""Approve at the right scope: ``once``, ``run``, ``session`` or a standing grant.

An approver resolves a request with a scope (docs/approvals.md, "Scopes and standing
grants"):

- ``once``: this call only (the default; what River always did).
- ``run``: identical calls (same tool, same arguments as approved) for the rest of this
  run pass without asking.
- ``session``: the same, for every run of this run's conversation.
- ``grant``: a standing grant: this agent may make this kind of call (the same tool,
  the same target table in the same data source, a condition on the arguments, at most
  ``max_rows`` rows) without asking, for at most ``RIVER_APPROVAL_GRANT_MAX_DAYS`` days,
  until it expires or someone revokes it.

The engine asks ``standing_approval_find`` (through the durable run's hook, one hook)
only where the gate answered APPROVAL_REQUIRED, never where a policy blocks: a block is
never overridden. The requester rule holds: an approval or a grant never lets a call
through in a run whose requester made it (unless the workspace allows self-approval),
and a grant stops working when its grantor may no longer approve such requests. Every
call let through is audited (``approval_scope_used``) with the approval or grant that
allowed it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from enum import StrEnum
from typing import Any

import pydantic
from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from common.people import person_label
from datasources.identifiers import policy_name_key
from governance import expressions
from governance.approvals import resolver_roles, roles_allow
from governance.audit import audit_record
from governance.checker import policy_arguments
from governance.models import ApprovalGrant, ApprovalRequest, AuditLogEntry
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from rivercore.types.governance import ResolutionStatus
from tenancy.selectors import workspaces_for_user

GRANT_MAX_ROWS = 1_000_000
CONDITION_MAX_CHARS = 2000
# What a grant's condition may look at: the proposed call only.
CONDITION_NAMES: dict[str, frozenset[str] | None] = {"args": None, "tool": frozenset({"name"})}
SCOPE_USED = "approval_scope_used"


class ApprovalScope(StrEnum):
    ONCE = "once"
    RUN = "run"
    SESSION = "session"
    GRANT = "grant"


class GrantTerms(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    expires_in_days: int
    max_rows: int
    condition: str = ""


class ScopeChoice(pydantic.BaseModel):
    """An approver's choice of scope, validated at the edge (``approval_scope_parse``)."""

    model_config = pydantic.ConfigDict(frozen=True)

    scope: ApprovalScope = ApprovalScope.ONCE
    grant: GrantTerms | None = None


ONCE = ScopeChoice()


def _whole(value, field: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            value = int(value.strip())
        else:
            raise InvalidInput(f"{field} must be a whole number.", details={field: ["a whole number is required"]})
    if not low <= value <= high:
        raise InvalidInput(f"{field} must be between {low} and {high}.", details={field: [f"{low}..{high}"]})
    return value


def approval_scope_parse(*, scope: object = None, grant: object = None) -> ScopeChoice:
    """The scope an API body or a card form asked for. Errors name the field
    (``scope``, ``grant``, ``grant.expires_in_days``, ``grant.max_rows``, ``grant.condition``)."""
    if scope in (None, ""):
        scope = ApprovalScope.ONCE.value
    if not isinstance(scope, str) or scope not in ApprovalScope.__members__.values():
        raise InvalidInput("Unknown scope.", details={"scope": [f"one of {', '.join(s.value for s in ApprovalScope)}"]})
    chosen = ApprovalScope(scope)
    if chosen != ApprovalScope.GRANT:
        if grant not in (None, {}):
            raise InvalidInput("grant is only given with scope 'grant'.", details={"grant": ["only with scope grant"]})
        return ScopeChoice(scope=chosen)
    if not isinstance(grant, dict):
        raise InvalidInput("A grant needs its terms.", details={"grant": ["an object with expires_in_days, max_rows"]})
    unknown = sorted(set(grant) - {"expires_in_days", "max_rows", "condition"})
    if unknown:
        raise InvalidInput("Unknown grant terms.", details={f"grant.{k}": ["unknown field"] for k in unknown})
    for name in ("expires_in_days", "max_rows"):
        if grant.get(name) in (None, ""):
            raise InvalidInput(f"grant.{name} is required.", details={f"grant.{name}": ["required"]})
    condition = grant.get("condition") or ""
    if not isinstance(condition, str) or len(condition) > CONDITION_MAX_CHARS:
        raise InvalidInput("grant.condition must be text.",
                           details={"grant.condition": [f"text of at most {CONDITION_MAX_CHARS} characters"]})
    terms = GrantTerms(
        expires_in_days=_whole(grant["expires_in_days"], "grant.expires_in_days", low=1,
                               high=settings.RIVER_APPROVAL_GRANT_MAX_DAYS),
        max_rows=_whole(grant["max_rows"], "grant.max_rows", low=1, high=GRANT_MAX_ROWS),
        condition=condition.strip(),
    )
    return ScopeChoice(scope=chosen, grant=terms)


# --- what a call is --------------------------------------------------------------------


def canonical_arguments(arguments: dict) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def call_target(arguments: dict) -> tuple[int | None, str]:
    """(data source id, table key) a call aims at; (None, "") for a tool without them."""
    source = arguments.get("data_source_id")
    source = source if isinstance(source, int) and not isinstance(source, bool) else None
    table = arguments.get("table_name")
    return source, policy_name_key(table) if isinstance(table, str) else ""


def call_rows(arguments: dict, preview: dict | None = None) -> int | None:
    """How many rows a call touches: an insert its listed rows, a call that is not a data
    write one. An update or a delete changes the rows its conditions match, known only
    from its effect preview (computed just now, rolled back): its row count, or None
    (a grant then asks) when there is no preview."""
    if "sql" in arguments or "query" in arguments:
        return None  # a query's rows are known only once it ran
    operation = arguments.get("operation")
    if operation is None:
        return 1
    if operation == "insert":
        data = arguments.get("data")
        return len(data) if isinstance(data, list) else 1
    if preview and preview.get("available") and preview.get("kind") == "rows" \
            and preview.get("operation") == operation:
        return int(preview.get("rows_affected") or 0)
    return None


def _condition_holds(tree, tool_name: str, arguments: dict) -> bool:
    facts = {"args": policy_arguments(arguments), "tool": {"name": tool_name}}
    try:
        return expressions.matches(tree, facts)
    except expressions.ExpressionError:
        return False  # any doubt means ask


def _condition_tree(condition: str):
    return expressions.expression_validate(condition, known_names=True, names=CONDITION_NAMES)


def approved_arguments(approval: ApprovalRequest) -> dict:
    resolution = approval.resolution or {}
    if resolution.get("modified_args"):
        return resolution["modified_args"]
    return approval.proposed_payload or {}


# --- resolving with a scope ------------------------------------------------------------


def approval_scope_check(*, approval: ApprovalRequest, choice: ScopeChoice, status: str,
                         arguments: dict) -> None:
    """Before the decision: a scope wider than ``once`` only with an approval, and a
    grant whose condition parses and holds for the call being approved."""
    if choice.scope == ApprovalScope.ONCE:
        return
    if status == ResolutionStatus.REJECTED:
        raise InvalidInput("Only an approval can have a wider scope than this call.",
                           details={"scope": ["only 'once' with a rejection"]})
    if (approval.required_approvals or 1) > 1:  # quorum (governance.quorum): one person never widens it
        raise InvalidInput(f"This request needs {approval.required_approvals} approvers, so it is decided for this "
                           "call only: a wider scope would let one person stand in for the others.",
                           details={"scope": ["only 'once' when several approvers are required"]})
    if choice.scope == ApprovalScope.GRANT:
        if approval.agent_id is None:
            raise InvalidInput("This request names no agent, so no grant can be made.", details={"scope": ["no agent"]})
        terms = choice.grant
        if terms and terms.condition:
            try:
                tree = _condition_tree(terms.condition)
            except expressions.ExpressionError as exc:
                raise InvalidInput(f"grant.condition: {exc}", details={"grant.condition": [str(exc)]}) from None
            if not _condition_holds(tree, approval.tool_name, arguments):
                raise InvalidInput("The grant's condition does not hold for the call you are approving.",
                                   details={"grant.condition": ["does not hold for this call"]})


def approval_scope_record(*, approval: ApprovalRequest, user, choice: ScopeChoice) -> ApprovalGrant | None:
    """Record the scope of a decision just made (caller holds the transaction and the
    request's lock, after ``approval_decide``): the request's scope and, for a grant,
    the grant, audited as ``approval_grant_created``."""
    if choice.scope == ApprovalScope.ONCE:
        return None
    approval.scope = choice.scope.value
    approval.resolution = {**(approval.resolution or {}), "scope": choice.scope.value}
    approval.save(update_fields=["scope", "resolution"])
    if choice.scope != ApprovalScope.GRANT or choice.grant is None:
        return None
    source, target = call_target(approved_arguments(approval))
    terms = choice.grant
    grant = ApprovalGrant.objects.create(
        workspace_id=approval.workspace_id, agent_id=approval.agent_id, tool_name=approval.tool_name,
        data_source_id=source, target=target, condition=terms.condition, max_rows=terms.max_rows,
        approver_roles=list(approval.approver_roles or []), approval=approval, granted_by=user,
        expires_at=timezone.now() + timedelta(days=terms.expires_in_days),
    )
    approval.resolution["grant_id"] = grant.pk
    approval.save(update_fields=["resolution"])
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approval_grant_created", actor=user, execution_id=approval.execution_id,
        agent_id=approval.agent_id, approval_id=approval.pk,
        details={"grant_id": grant.pk, "tool_name": grant.tool_name, "data_source_id": source, "target": target,
                 "condition": grant.condition, "max_rows": grant.max_rows, "expires_at": grant.expires_at.isoformat()},
    )
    return grant


# --- the gate's question ---------------------------------------------------------------


def _requester_rule_allows(*, approver_id, requester_id, workspace) -> bool:
    return approver_id is None or approver_id != requester_id or workspace.allow_self_approval


def _when(value) -> str:
    return timezone.localtime(value, timezone.get_fixed_timezone(0)).strftime("%-d %b %Y, %H:%M UTC")


def _scoped_approval(*, execution_id: int, session_execution_ids, requester_id, tool_name: str,
                     arguments: dict) -> ApprovalRequest | None:
    wanted = canonical_arguments(arguments)
    here = Q(execution_id=execution_id, scope__in=[ApprovalScope.RUN, ApprovalScope.SESSION])
    if session_execution_ids is not None:
        here |= Q(execution_id__in=session_execution_ids, scope=ApprovalScope.SESSION)
    candidates = (ApprovalRequest.objects.filter(here, tool_name=tool_name,
                                                 status__in=[ApprovalRequest.Status.APPROVED,
                                                             ApprovalRequest.Status.EDITED])
                  .select_related("workspace", "resolved_by").order_by("resolved_at"))
    for approval in candidates:
        if canonical_arguments(approved_arguments(approval)) != wanted:
            continue
        if _requester_rule_allows(approver_id=approval.resolved_by_id, requester_id=requester_id,
                                  workspace=approval.workspace):
            return approval
    return None


def _grant_refusal(grant: ApprovalGrant, *, requester_id, tool_name: str, arguments: dict,
                   preview: dict | None) -> str | None:
    """Why ``grant`` does not cover this call, or None when it does."""
    if not _requester_rule_allows(approver_id=grant.granted_by_id, requester_id=requester_id,
                                  workspace=grant.workspace):
        return "it was granted by this run's requester"  # never the grantor's own run by proxy
    if grant.granted_by is None or not roles_allow(
            resolver_roles(user=grant.granted_by, workspace=grant.workspace), grant):
        return "its grantor may no longer approve such requests"
    rows = call_rows(arguments, preview)
    if rows is None:
        return "the rows this call would change are unknown (no preview)"
    if rows > grant.max_rows:
        return (f"the preview shows {rows} row{'s' if rows != 1 else ''}, more than its ceiling of "
                f"{grant.max_rows}")
    if not grant.condition:
        return None
    try:
        tree = _condition_tree(grant.condition)
    except expressions.ExpressionError:
        return "its condition cannot be read"
    return None if _condition_holds(tree, tool_name, arguments) else "its condition does not hold for this call"


def _grant_claim(grant: ApprovalGrant) -> bool:
    """Count a use, if the grant still holds now (compare-and-set: a revoke or the
    expiry that lands meanwhile wins)."""
    now = timezone.now()
    return ApprovalGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True, expires_at__gt=now).update(
        uses=F("uses") + 1, last_used_at=now) == 1


def _covering_grant(*, workspace_id: int, agent_id, requester_id, tool_name: str, arguments: dict,
                    preview: dict | None) -> tuple[ApprovalGrant | None, str]:
    """The grant that covers this call (its use claimed), or None and why the first grant
    for this tool and table did not ("" when there is none)."""
    source, target = call_target(arguments)
    grants = (ApprovalGrant.objects.filter(workspace_id=workspace_id, agent_id=agent_id, tool_name=tool_name,
                                           data_source_id=source, target=target, revoked_at__isnull=True,
                                           expires_at__gt=timezone.now())
              .select_related("workspace", "granted_by").order_by("pk"))
    declined = ""
    for grant in grants:
        refusal = _grant_refusal(grant, requester_id=requester_id, tool_name=tool_name, arguments=arguments,
                                 preview=preview)
        if refusal is None and _grant_claim(grant):
            return grant, ""
        if refusal and not declined:
            declined = f"Grant #{grant.pk} did not apply: {refusal}."
    return None, declined


def standing_approval_find(*, workspace_id: int, agent_id, execution_id: int, session_execution_ids,
                           requester_id, call_id: str, tool_name: str, arguments: dict,
                           preview: dict | None = None) -> dict | None:
    """The resolution that lets this call through without asking, None to ask, or
    ``{"declined": why}`` to ask and tell the approver why a grant did not apply.

    Asked by the engine (through the durable run's hook) only for a call the gate
    answered APPROVAL_REQUIRED. ``session_execution_ids`` are the runs of this run's
    conversation (None outside one). ``preview`` is the call's effect, computed by the
    engine just now (rolled back): a grant's row ceiling is held to its row count, and
    the resolution's ``effect_terms`` bind the write to it (the write commits only if
    its effect is still that one, datasources.effects). The use is audited here, one
    entry per call."""
    approval = _scoped_approval(execution_id=execution_id, session_execution_ids=session_execution_ids,
                                requester_id=requester_id, tool_name=tool_name, arguments=arguments)
    grant, declined = None, ""
    if approval is None and agent_id is not None:
        grant, declined = _covering_grant(workspace_id=workspace_id, agent_id=agent_id, requester_id=requester_id,
                                          tool_name=tool_name, arguments=arguments, preview=preview)
    if approval is None and grant is None:
        return {"declined": declined} if declined else None
    if grant is not None:
        who = grant.granted_by
        text = f"allowed by grant #{grant.pk} from {person_label(who)}, expires {_when(grant.expires_at)}"
        resolution = {"scope": ApprovalScope.GRANT.value, "grant_id": grant.pk,
                      "approval_id": str(grant.approval_id) if grant.approval_id else None}
        workspace = grant.workspace
    else:
        who = approval.resolved_by
        span = "run" if approval.scope == ApprovalScope.RUN else "conversation"
        text = f"allowed by {person_label(who) if who else 'an approver'}'s approval for the rest of this {span}"
        resolution = {"scope": approval.scope, "approval_id": str(approval.pk)}
        workspace = approval.workspace
    resolution.update({"status": ResolutionStatus.APPROVED.value, "resolved_by": str(who.pk) if who else None,
                       "standing": True, "text": text})
    terms = _standing_terms(resolution, grant=grant, preview=preview)
    if terms is not None:
        resolution["effect_terms"] = terms
    audit_record(
        organization_id=workspace.organization_id, workspace_id=workspace_id, event_type=SCOPE_USED,
        execution_id=execution_id, agent_id=agent_id, approval_id=resolution.get("approval_id"),
        details={"tool_name": tool_name, "call_id": call_id, "arguments": arguments, "scope": resolution["scope"],
                 "grant_id": resolution.get("grant_id"), "approved_by": resolution["resolved_by"], "text": text,
                 "preview_fingerprint": (terms or {}).get("fingerprint"),
                 "rows_affected": (preview or {}).get("rows_affected") if preview else None},
    )
    return resolution


def _standing_terms(resolution: dict, *, grant: ApprovalGrant | None, preview: dict | None) -> dict | None:
    """What the write let through must hold to: the fresh preview's fingerprint and, for
    a grant, its row ceiling (both checked in the write's own transaction)."""
    fingerprint = preview.get("fingerprint") if preview and preview.get("available") else None
    max_rows = grant.max_rows if grant is not None else None
    if not fingerprint and max_rows is None:
        return None
    return {"fingerprint": fingerprint or None, "max_rows": max_rows, "allowed_by": resolution["text"],
            "scope": resolution["scope"], "grant_id": resolution.get("grant_id"),
            "approval_id": resolution.get("approval_id")}


def standing_uses_of_execution(*, execution_id: int) -> list[AuditLogEntry]:
    """The calls of a run that earlier approvals or grants let through (the run page)."""
    return list(AuditLogEntry.objects.filter(execution_id=execution_id, event_type=SCOPE_USED).order_by("pk"))


# --- grants: list, read, revoke ----------------------------------------------------------


class GrantState(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


def grant_state(grant: ApprovalGrant, *, now=None) -> GrantState:
    if grant.revoked_at is not None:
        return GrantState.REVOKED
    return GrantState.ACTIVE if grant.expires_at > (now or timezone.now()) else GrantState.EXPIRED


def grants_for_user(*, user, workspace=None, state: str | None = None) -> QuerySet:
    """Grants in the user's workspaces (or one of them), newest first; ``state`` filters
    (``active``, ``expired``, ``revoked``; anything else is a 400 naming ``state``)."""
    grants = ApprovalGrant.objects.filter(workspace__in=workspaces_for_user(user=user))
    if workspace is not None:
        grants = grants.filter(workspace=workspace)
    now = timezone.now()
    if state in (None, ""):
        pass
    elif state == GrantState.ACTIVE:
        grants = grants.filter(revoked_at__isnull=True, expires_at__gt=now)
    elif state == GrantState.EXPIRED:
        grants = grants.filter(revoked_at__isnull=True, expires_at__lte=now)
    elif state == GrantState.REVOKED:
        grants = grants.filter(revoked_at__isnull=False)
    else:
        raise InvalidInput("Unknown state.", details={"state": [f"one of {', '.join(s.value for s in GrantState)}"]})
    return grants.select_related("workspace", "granted_by", "revoked_by").order_by("-created_at", "-pk")


def grant_get_for_user(*, user, grant_id) -> ApprovalGrant:
    try:
        key = int(str(grant_id))
    except ValueError:
        raise NotFound("Grant not found.") from None
    grant = grants_for_user(user=user).filter(pk=key).first()
    if grant is None:
        raise NotFound("Grant not found.")
    return grant


def grant_may_revoke(*, user, grant: ApprovalGrant) -> bool:
    """Its grantor, and whoever could have made it (``approval:resolve`` and one of its
    approver roles, or an organization admin)."""
    if grant.granted_by_id is not None and grant.granted_by_id == getattr(user, "pk", None):
        return True
    return roles_allow(resolver_roles(user=user, workspace=grant.workspace), grant)


def grant_revoke(*, user, grant_id) -> ApprovalGrant:
    """Revoke a grant now (audited ``approval_grant_revoked``); 409 if it already ended."""
    grant = grant_get_for_user(user=user, grant_id=grant_id)
    if not grant_may_revoke(user=user, grant=grant):
        raise PermissionDenied("Only the grantor or someone who may approve such requests may revoke this grant.")
    now = timezone.now()
    if ApprovalGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(revoked_at=now,
                                                                                 revoked_by=user) != 1:
        raise Conflict("This grant is already revoked.", code="already_revoked")
    grant.refresh_from_db()
    audit_record(
        organization_id=grant.workspace.organization_id, workspace_id=grant.workspace_id,
        event_type="approval_grant_revoked", actor=user, agent_id=grant.agent_id,
        approval_id=grant.approval_id,
        details={"grant_id": grant.pk, "tool_name": grant.tool_name, "target": grant.target,
                 "was": "expired" if grant.expires_at <= now else "active"},
    )
    return grant


def grant_describe(grant: ApprovalGrant) -> dict[str, Any]:
    """A grant as the API and the page show it."""
    return {
        "id": grant.pk, "workspace_id": grant.workspace_id, "agent_id": str(grant.agent_id),
        "tool_name": grant.tool_name, "data_source_id": grant.data_source_id, "target": grant.target,
        "condition": grant.condition, "max_rows": grant.max_rows,
        "approval_id": str(grant.approval_id) if grant.approval_id else None,
        "granted_by": {"id": grant.granted_by_id, "name": person_label(grant.granted_by)} if grant.granted_by else None,
        "created_at": grant.created_at, "expires_at": grant.expires_at,
        "revoked_at": grant.revoked_at,
        "revoked_by": {"id": grant.revoked_by_id, "name": person_label(grant.revoked_by)} if grant.revoked_by else None,
        "state": grant_state(grant).value, "uses": grant.uses, "last_used_at": grant.last_used_at,
    }
