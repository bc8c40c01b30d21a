"""The stateless driver: the spec's /api/v1/execute and /continue contract.

The whole loop runs inside the request. A paused run comes back with a
``serialized_state`` signed with SECRET_KEY, so a client can carry it but cannot
alter the history or forge a pending approval. Each state resumes once: its use is
recorded (ContinuationUse, keyed by the digest of the signed content) and committed
before the run goes on, so a replay gets 409 and runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta

from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone

from executions.journal import governance_decisions_audit
from executions.models import ContinuationUse
from governance import checker
from rivercore.contracts import (
    ContinuationRequest,
    ContinuationType,
    ExecutionRequest,
    ExecutionResponse,
    ResponseStatus,
    Step,
)
from rivercore.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from rivercore.runner import Engine, MemoryJournal, new_state, response_build
from rivercore.state import RunState
from rivercore.steps import answer_check, answer_step, edited_arguments, resolution_step
from rivercore.types.governance import ResolutionStatus
from tenancy.models import AccessToken, Workspace
from tenancy.selectors import is_org_admin, workspace_permissions

SALT = "river.execute.continue"
STATE_MAX_AGE_SECONDS = 7 * 24 * 3600
PRUNE_BATCH = 100


def _authorize(*, user, auth, request: ExecutionRequest) -> ExecutionRequest:
    """Org admins of the request's organization, or service tokens of its members.
    The run never gets more permissions than the caller holds in that workspace."""
    ctx = request.user_context
    workspace = Workspace.objects.filter(pk=ctx.workspace_id, organization_id=ctx.org_id).first()
    if workspace is None:
        raise NotFound("Workspace not found in that organization.")
    is_service = isinstance(auth, AccessToken) and auth.kind == AccessToken.Kind.SERVICE
    granted = workspace_permissions(user=user, workspace=workspace)
    if not granted:
        raise NotFound("Workspace not found in that organization.")  # never confirm it exists
    if not (is_org_admin(user=user, organization_id=ctx.org_id) or is_service):
        raise PermissionDenied("Only organization admins and service tokens may call the execute API.")
    narrowed = request.model_copy(deep=True)
    narrowed.user_context.permissions = sorted(set(ctx.permissions) & set(granted))
    return narrowed


def _refuse_self_approval(*, request: ExecutionRequest, resolved_by: str) -> None:
    """Segregation of duties on the stateless contract: the run's user or trigger
    identity may not be named as its approver. The caller (an org admin or a service
    token, see ``_authorize``) relays the approver's decision and is trusted to name
    them, as it is trusted with the whole agent configuration."""
    ctx = request.user_context
    workspace = Workspace.objects.filter(pk=ctx.workspace_id, organization_id=ctx.org_id).first()
    if workspace is None or workspace.allow_self_approval:
        return
    started_by = {str(ctx.user_id)}
    if request.trigger_context.triggered_by:
        started_by.add(str(request.trigger_context.triggered_by))
    if str(resolved_by).strip() in started_by:
        raise PermissionDenied(
            "The run's own user may not resolve its approvals (segregation of duties); "
            "a workspace admin can allow self-approval.",
            code="self_approval_forbidden",
        )


def _sign(state: RunState) -> str:
    steps = [s.model_dump(mode="json") | {"messages": s.messages} for s in state.steps]
    body = {
        "request": state.request.model_dump(mode="json", by_alias=True),
        "base_messages": state.base_messages,
        "tool_schemas": state.tool_schemas,
        "steps": steps,
        "started_at_ms": state.started_at_ms,
        # How long the run has run so far: the time limit resumes from here, so the
        # wait for the approval or the answer does not count against it.
        "active_ms": state.run_ms(time.time()),
    }
    return signing.dumps(body, salt=SALT, compress=True)


def _unsign(token: str) -> tuple[RunState, str]:
    """The state and the digest of its signed content (the continuation's identity)."""
    try:
        body = signing.loads(token, salt=SALT, max_age=STATE_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise InvalidInput("serialized_state has expired.", details={"serialized_state": ["expired"]}) from None
    except signing.BadSignature:
        raise InvalidInput(
            "serialized_state was altered or not issued by this River.",
            details={"serialized_state": ["invalid signature"]},
        ) from None
    digest = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    ).hexdigest()
    state = RunState.replay(
        request=ExecutionRequest.model_validate(body["request"]), base_messages=body["base_messages"],
        tool_schemas=body["tool_schemas"], steps=[Step.model_validate(s) for s in body["steps"]],
        # A state signed before ``active_ms`` was recorded counts from its first start.
        started_at_ms=int(time.time() * 1000) if "active_ms" in body else body["started_at_ms"],
        active_before_ms=int(body.get("active_ms") or 0),
    )
    return state, digest


def continuation_consume(*, state_digest: str, execution_id: int, organization_id: int, user) -> None:
    """Mark a paused state as used, committed before the run goes on; a second use
    (a replay, or a concurrent duplicate waiting on the same key) gets 409 and runs
    nothing. Rows older than a state's lifetime are pruned as new ones arrive."""
    try:
        with transaction.atomic():
            ContinuationUse.objects.create(
                state_digest=state_digest, execution_id=execution_id, organization_id=organization_id,
                used_by=user if getattr(user, "pk", None) else None,
            )
    except IntegrityError:
        raise Conflict(
            "This continuation was already used; a paused state resumes once. Continue from the "
            "serialized_state of the latest response instead.", code="continuation_used",
        ) from None
    cutoff = timezone.now() - timedelta(seconds=STATE_MAX_AGE_SECONDS)
    stale = ContinuationUse.objects.filter(used_at__lt=cutoff).values("pk")[:PRUNE_BATCH]
    ContinuationUse.objects.filter(pk__in=stale).delete()


def _run(state: RunState, llm) -> ExecutionResponse:
    already = len(state.steps)
    outcome = Engine(llm=llm, journal=MemoryJournal(), policy=checker).run(state)
    ctx = state.request.user_context
    governance_decisions_audit(
        organization_id=ctx.org_id, workspace_id=ctx.workspace_id, execution_id=state.request.execution_id,
        agent_id=state.request.agent_config.agent_id, steps=state.steps[already:],
    )
    response = response_build(state, outcome)
    if outcome.status in (ResponseStatus.AWAITING_APPROVAL, ResponseStatus.AWAITING_INTERACTION):
        response.serialized_state = _sign(state)
    return response


def _llm_for(org_id: int):
    from executions.routing import router_for_organization

    return router_for_organization(organization_id=org_id)


def execute(*, user, auth, request: ExecutionRequest, llm=None) -> ExecutionResponse:
    request = _authorize(user=user, auth=auth, request=request)
    state, _detections = new_state(request)
    return _run(state, llm or _llm_for(request.user_context.org_id))


def execute_continue(*, user, auth, continuation: ContinuationRequest, llm=None) -> ExecutionResponse:
    """Resume a paused state once: the checks come first (a 400 uses nothing up),
    then the state is consumed, then the run goes on."""
    state, digest = _unsign(continuation.serialized_state)
    if state.request.execution_id != continuation.execution_id:
        raise InvalidInput("execution_id does not match serialized_state.", details={"execution_id": ["mismatch"]})
    _authorize(user=user, auth=auth, request=state.request)
    pending = state.pending
    if pending is None:
        raise InvalidInput("This state is not paused.", details={"serialized_state": ["not paused"]})
    if continuation.continuation_type == ContinuationType.APPROVAL_RESOLVED:
        if pending.kind != "approval":
            raise InvalidInput("The run is waiting for an answer, not an approval.",
                               details={"continuation_type": ["expected interaction_response"]})
        resolution = continuation.approval_resolution.model_dump(mode="json")
        _refuse_self_approval(request=state.request, resolved_by=resolution["resolved_by"])
        if resolution["status"] == ResolutionStatus.EDITED_APPROVED:
            resolution["modified_args"] = edited_arguments(pending.tool_name, resolution["modified_args"],
                                                           field="approval_resolution.modified_args")
        state.apply(resolution_step(step_number=state.next_step_number, turn=state.turn, call_id=pending.call_id,
                                    tool_name=pending.tool_name, resolution=resolution))
    else:
        if pending.kind != "interaction":
            raise InvalidInput("The run is waiting for an approval, not an answer.",
                               details={"continuation_type": ["expected approval_resolved"]})
        answer = continuation.interaction_response.user_response
        answer_check(pending.interaction, answer)
        state.apply(answer_step(step_number=state.next_step_number, turn=state.turn, call_id=pending.call_id,
                                arguments=pending.arguments, answer=answer))
    continuation_consume(state_digest=digest, execution_id=state.request.execution_id,
                         organization_id=state.request.user_context.org_id, user=user)
    return _run(state, llm or _llm_for(state.request.user_context.org_id))
