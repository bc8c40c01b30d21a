"""Quorum: a paused call that needs N distinct approvers (issue 29 §3).

How many: the largest of the agent version's matching ``approval_rules.quorum`` rules
(``{"when": <policy expression>, "approvals": N}``) and the ``required_approvals`` of the
require_approval policies that paused the call (the engine carries it in the request's
payload). One is the default and changes nothing: no votes are recorded and a single
decision resolves the request, as before.

With N > 1 every decision is a vote (``ApprovalVote``), recorded under the request's row
lock that ``approval_decide`` holds:

- an approval counts once per person and round; the same person approving again gets
  409 ``already_approved`` (nothing is recorded twice);
- one rejection ends the request (rejected), whatever was approved before;
- an edit (edit-and-approve) replaces the arguments under vote and starts a new round:
  the earlier approvals were given to other arguments, so they no longer count. The
  edit counts as its author's approval of the new arguments;
- the N-th distinct approval of the current round decides: approved, or approved with
  edits when the arguments under vote were edited. Only then does the run resume.

The requester never votes (``approval_authorize`` refuses them before this runs).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Case, Exists, OuterRef, Q, QuerySet, When
from django.db.models.fields.json import KT
from django.utils import timezone

from governance import expressions
from governance.audit import audit_record
from governance.checker import policy_arguments
from governance.models import ApprovalRequest, ApprovalVote, Notification
from rivercore.errors import Conflict, InvalidInput
from rivercore.types.agents import MAX_REQUIRED_APPROVALS, ApprovalRules
from rivercore.types.governance import ResolutionStatus

# The facts a quorum rule's ``when`` sees: the paused call, as auto-approve conditions do,
# and the rows it concerns when known.
QUORUM_NAMES: dict[str, frozenset[str] | None] = {
    "confidence_score": frozenset(),
    "tool": frozenset({"name"}),
    "args": None,
    "rows": frozenset(),
}

APPROVALS_COUNTED = (ApprovalVote.Decision.APPROVED, ApprovalVote.Decision.EDITED_APPROVED)


# --- configuration -----------------------------------------------------------------


def approval_rules_quorum_problems(rules: ApprovalRules, *, known_roles: Iterable[str]) -> dict:
    """What is wrong with the quorum and escalation rules, by field (the agent version's
    other rules are checked in agents.services)."""
    problems: dict = {}
    for index, rule in enumerate(rules.quorum):
        if rule.when is None:
            continue
        try:
            expressions.expression_validate(rule.when, known_names=True, names=QUORUM_NAMES)
        except expressions.ExpressionError as exc:
            problems[f"quorum.{index}.when"] = [str(exc)]
    known = set(known_roles)
    previous = 0
    for index, step in enumerate(rules.escalation):
        field = f"escalation.{index}"
        if step.after_minutes <= previous:
            problems[f"{field}.after_minutes"] = [
                f"must be later than the step before it ({previous} minutes): the chain moves forward in time."]
        elif step.after_minutes >= rules.escalation_timeout_minutes:
            problems[f"{field}.after_minutes"] = [
                f"must be less than escalation_timeout_minutes ({rules.escalation_timeout_minutes}): "
                "the request expires then."]
        previous = max(previous, step.after_minutes)
        unknown = sorted(set(step.approver_roles) - known)
        if unknown:
            allowed = ", ".join(sorted(known))
            problems[f"{field}.approver_roles"] = [f"Unknown role: {name} (one of: {allowed})." for name in unknown]
    return problems


def quorum_facts(payload: dict) -> dict:
    """The facts a quorum rule is evaluated on, from the approval payload the engine sent."""
    args = payload.get("proposed_payload") or {}
    rows = payload.get("rows")
    data = args.get("data") if isinstance(args, dict) else None
    if rows is None and isinstance(data, list):
        rows = len(data)  # a write of several rows: as many as it carries
    return {"tool": {"name": payload.get("tool_name")}, "args": policy_arguments(args),
            "confidence_score": payload.get("confidence_score"), "rows": rows}


def required_approvals_for(*, rules: ApprovalRules | None, payload: dict) -> int:
    """How many distinct approvers the paused call needs. A rule whose condition cannot
    be evaluated counts as matching: doubt asks for more people, never fewer."""
    wanted = max(1, int(payload.get("required_approvals") or 1))
    facts = quorum_facts(payload)
    for rule in rules.quorum if rules is not None else []:
        if rule.approvals <= wanted:
            continue
        try:
            holds = rule.when is None or expressions.matches(
                expressions.expression_validate(rule.when, names=QUORUM_NAMES), facts)
        except expressions.ExpressionError:
            holds = True
        if holds:
            wanted = rule.approvals
    return min(wanted, MAX_REQUIRED_APPROVALS)


def approval_quorum_fields(*, rules: ApprovalRules | None, payload: dict, now) -> dict:
    """The quorum and escalation fields of a request opening now."""
    from governance.escalation import escalation_fields

    return {"required_approvals": required_approvals_for(rules=rules, payload=payload),
            **escalation_fields(rules=rules, opened_at=now)}


# --- voting ------------------------------------------------------------------------


def current_fingerprint(approval: ApprovalRequest) -> str:
    """The fingerprint of the preview now under vote: the edit's in an edited round."""
    shown = approval.preview_edit if approval.quorum_args is not None else approval.preview
    return str((shown or {}).get("fingerprint") or "")


def _of_current_preview(approval: ApprovalRequest) -> Q:
    """Votes of the preview under vote now. A vote of an older preview (the data moved
    since, and the request shows a fresh one) approved another effect: it does not
    count. A vote without a fingerprint (a call without a preview) counts."""
    return Q(preview_fingerprint="") | Q(preview_fingerprint=current_fingerprint(approval))


def _current_approvals(approval: ApprovalRequest) -> int:
    return ApprovalVote.objects.filter(_of_current_preview(approval), approval=approval, round=approval.quorum_round,
                                       decision__in=APPROVALS_COUNTED).count()


def quorum_vote(*, approval: ApprovalRequest, user, status: str, modified_args: dict | None,
                comment: str, fingerprint: str | None = None) -> tuple[str, dict | None] | None:
    """Record ``user``'s vote on a pending ``approval`` that needs several approvers.

    Caller (``approval_decide``) holds the request's row lock and has authorized the
    user. Returns the decision to apply, ``(status, modified_args)``, when this vote
    decides the request, or None when it stays pending for more approvals. A request
    needing one approver records nothing and returns the decision unchanged."""
    if approval.required_approvals <= 1:
        return status, modified_args
    if status == ResolutionStatus.REJECTED:
        # One rejection ends it; someone who approved in this round may still reject.
        ApprovalVote.objects.update_or_create(approval=approval, user=user, round=approval.quorum_round,
                                              defaults={"decision": ApprovalVote.Decision.REJECTED,
                                                        "comment": comment or "", "modified_args": None})
        return status, None
    if status != ResolutionStatus.EDITED_APPROVED and ApprovalVote.objects.filter(
            _of_current_preview(approval), approval=approval, user=user, round=approval.quorum_round).exists():
        raise Conflict("You have already approved this request; it needs another approver.",
                       code="already_approved")
    if status == ResolutionStatus.EDITED_APPROVED:
        # New arguments: a new round. Earlier approvals were of other arguments.
        approval.quorum_round += 1
        approval.quorum_args = modified_args
        approval.save(update_fields=["quorum_round", "quorum_args"])
    # One vote per person and round: approving the fresh preview replaces the same
    # person's vote of an older one.
    ApprovalVote.objects.update_or_create(
        approval=approval, user=user, round=approval.quorum_round,
        defaults={"decision": status, "comment": comment or "", "modified_args": modified_args,
                  "preview_fingerprint": fingerprint or "", "created_at": timezone.now()})
    given = _current_approvals(approval)
    if given >= approval.required_approvals:
        if approval.quorum_args is not None:
            return ResolutionStatus.EDITED_APPROVED.value, approval.quorum_args
        return ResolutionStatus.APPROVED.value, None
    _vote_recorded(approval=approval, user=user, status=status, given=given, modified_args=modified_args,
                   comment=comment)
    return None


def _vote_recorded(*, approval: ApprovalRequest, user, status: str, given: int, modified_args: dict | None,
                   comment: str) -> None:
    """Audit a vote that did not decide yet, and take the request off the voter's unread list."""
    from governance.approvals import args_diff

    details = {"tool_name": approval.tool_name, "decision": status, "approvals": given,
               "required_approvals": approval.required_approvals, "round": approval.quorum_round,
               "comment": comment or ""}
    if status == ResolutionStatus.EDITED_APPROVED:
        details["diff"] = args_diff(approval.proposed_payload, modified_args or {})
    audit_record(
        organization_id=approval.workspace.organization_id, workspace_id=approval.workspace_id,
        event_type="approval_vote_recorded", actor=user, execution_id=approval.execution_id,
        agent_id=approval.agent_id, approval_id=approval.pk, details=details,
    )
    Notification.objects.filter(approval_id=approval.pk, user=user, read_at__isnull=True).update(
        read_at=timezone.now())


def quorum_outcome_details(approval: ApprovalRequest) -> dict:
    """For the deciding audit entry: who approved, in the deciding round."""
    if approval.required_approvals <= 1:
        return {}
    voters = list(ApprovalVote.objects.filter(_of_current_preview(approval), approval=approval,
                                              round=approval.quorum_round,
                                              decision__in=APPROVALS_COUNTED).values_list("user_id", flat=True))
    return {"required_approvals": approval.required_approvals, "approved_by": voters,
            "round": approval.quorum_round}


# --- reading -----------------------------------------------------------------------


def quorum_not_yet_approved_by(pending: QuerySet, *, user) -> QuerySet:
    """``pending`` without the requests ``user`` already approved in their current round
    (for the frame's badge: those wait on other people now). One subquery, no statement."""
    if getattr(user, "pk", None) is None:
        return pending
    # A vote of an older preview (the data moved since) no longer counts: the request waits
    # on its voter again.
    under_vote = Case(When(quorum_args__isnull=True, then=KT("preview__fingerprint")),
                      default=KT("preview_edit__fingerprint"))
    given = ApprovalVote.objects.filter(
        Q(preview_fingerprint="") | Q(preview_fingerprint=OuterRef("fingerprint_under_vote")),
        approval=OuterRef("pk"), user_id=user.pk, round=OuterRef("quorum_round"), decision__in=APPROVALS_COUNTED)
    return pending.annotate(fingerprint_under_vote=under_vote).exclude(Exists(given))


def quorum_state(approval: ApprovalRequest, *, user=None) -> dict | None:
    """What the card and the API show of a quorum: the count, who approved (this round),
    the approvals an edit made void, and whether ``user`` already approved. None for a
    request that needs one approver (no extra query then)."""
    if approval.required_approvals <= 1:
        return None
    prefetched = "votes" in getattr(approval, "_prefetched_objects_cache", {})  # list views prefetch them
    votes = list(approval.votes.all() if prefetched else approval.votes.select_related("user"))
    fingerprint = current_fingerprint(approval)
    this_round = [v for v in votes if v.round == approval.quorum_round and v.decision in APPROVALS_COUNTED]
    current = [v for v in this_round if v.preview_fingerprint in ("", fingerprint)]
    older_preview = [v for v in this_round if v.preview_fingerprint not in ("", fingerprint)]
    superseded = [v for v in votes if v.round < approval.quorum_round and v.decision in APPROVALS_COUNTED]
    user_id = getattr(user, "pk", None)
    return {
        "required": approval.required_approvals,
        "given": len(current),
        "approvals": current,
        "superseded": superseded,
        "older_preview": older_preview,  # approvals of a preview the data has moved away from
        "rejections": [v for v in votes if v.decision == ApprovalVote.Decision.REJECTED],
        "round": approval.quorum_round,
        "edited_args": approval.quorum_args,
        "you_approved": user_id is not None and any(v.user_id == user_id for v in current),
    }


def quorum_round_check(*, approval: ApprovalRequest, arguments_round: int | None) -> None:
    """An approver who saw an older round (before someone's edit) must look again:
    409 ``arguments_changed``. Caller holds the row lock."""
    if arguments_round is not None and approval.required_approvals > 1 and arguments_round != approval.quorum_round:
        raise Conflict("Someone edited the arguments since you loaded this request; review the new arguments "
                       "and decide again.", code="arguments_changed")


def arguments_round_parse(value) -> int | None:
    """The optional ``arguments_round`` of a resolve request: a whole number or absent."""
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if isinstance(value, bool) or number < 0:
        raise InvalidInput("arguments_round must be a whole number.",
                           details={"arguments_round": ["Must be a whole number (0 or more)."]})
    return number
