"""Starting a durable run: one INSERT. Every way of starting a run builds one
``RunRequest`` (``executions.types``) and calls ``execution_start``; nothing else
creates an ``Execution``. The run's context is stored by reference (its agent version,
requester, prompt and origin); the request the engine reads is built from them when a
segment loads the run (``executions.services.load``), so a run costs no copy of its
agent's configuration."""

from __future__ import annotations

import contextlib
import logging
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from agents.canary import canary_arm_draw, canary_running_arms
from agents.models import Agent
from artifacts.selectors import artifact_placeholder, artifacts_attachable, artifacts_in_workspace
from executions.models import Execution
from executions.services.queue import segment_queue_on_commit
from executions.types import (
    DelegationOrigin,
    HandOffOrigin,
    PersonOrigin,
    RunRequest,
    SessionOrigin,
    TriggerOrigin,
)
from governance.audit import audit_record
from rivercore import context as ctxmod
from rivercore import limits
from rivercore.contracts import TriggerContext
from rivercore.errors import InvalidInput
from tenancy.selectors import service_principal_of

logger = logging.getLogger("river.executions")

MAX_ATTACHMENTS = 10  # artifacts one run may be started with


def requester_default(*, user):
    """The person answerable for a run that acts as ``user``: a trigger's service identity
    answers to its responsible person; anyone else to themselves."""
    if user is None:
        return None
    principal = service_principal_of(user=user)
    return principal.responsible if principal is not None else user


def _requester_id(user_id: int | None) -> int | None:
    if user_id is None:
        return None
    requester = requester_default(user=get_user_model()(pk=user_id))
    return requester.pk if requester is not None else None


def _agent_for(request: RunRequest, agent: Agent | None) -> Agent:
    if agent is None:
        found = Agent.objects.select_related("workspace").filter(pk=request.agent_id).first()
        if found is None:
            raise InvalidInput("Agent not found.", code="agent_not_found", details={"agent": ["does not exist"]})
        return found
    if agent.pk != request.agent_id:
        raise ValueError(f"agent {agent.pk} is not the request's agent {request.agent_id}")
    return agent


def _origin_columns(request: RunRequest) -> tuple[dict, dict]:
    """The origin as the run's columns, and what its stored context keeps of it (the keys
    ``executions.services.load`` reads)."""
    origin = request.origin
    columns: dict = {}
    stored: dict = {}
    if isinstance(origin, TriggerOrigin):
        columns["trigger_id"] = origin.trigger_id
    elif isinstance(origin, DelegationOrigin):
        columns.update(parent_execution_id=origin.parent_execution_id, parent_call_id=origin.parent_call_id)
        stored["delegation"] = {"depth": origin.depth, "action_level_cap": origin.action_level_cap.value}
        if origin.parent_traceparent:
            stored["delegation"]["parent_traceparent"] = origin.parent_traceparent
    elif isinstance(origin, SessionOrigin | HandOffOrigin):
        columns["session_id"] = origin.session_id
        stored["session"] = origin.context.model_dump(mode="json")
        if isinstance(origin, HandOffOrigin):
            stored["handoff"] = {"depth": origin.depth, "action_level_cap": origin.action_level_cap.value,
                                 "from_execution_id": origin.from_execution_id,
                                 "from_agent_id": origin.from_agent_id}
    return columns, stored


def execution_start(*, request: RunRequest, agent: Agent | None = None) -> Execution:
    """Create a queued run and hand it to a worker after commit (spec steps 1-3): one
    INSERT, plus an audit entry in the same transaction when the payload carried text
    that looks like a prompt injection (stored sanitised for the run to read).

    ``agent`` is the request's agent when the caller has already loaded it (with its
    workspace), which saves a query; it must be ``request.agent_id``.

    The origin's ``user_id`` is who the run acts as (its roles); ``requester_id`` the
    person answerable for it, who may never approve its actions (``requester_default``
    of the user when not given). A delegated run and a hand-off's never run above the
    action level of the run they came from (``executions.services.load``).

    ``attachments`` are files of the agent's workspace: a placeholder naming each is
    added to the prompt, and the tables of tabular ones are queryable in this run. A
    session's ``earlier_artifact_ids`` are the files of its earlier messages: queryable
    too, not named again (the history names them); one deleted since is left out."""
    agent = _agent_for(request, agent)
    origin = request.origin
    if agent.status != Agent.Status.ACTIVE:
        logger.warning("run of agent %s refused: agent is %s", agent.pk, agent.status)
        raise InvalidInput(
            f"Agent is {agent.status}; only active agents run.", code="agent_not_active",
            details={"agent": [f"status is {agent.status}"]},
        )
    if agent.current_version_id is None:
        raise InvalidInput("Agent has no deployed version.", code="no_deployed_version")
    now = timezone.now()
    triggered_at = (origin.triggered_at if isinstance(origin, TriggerOrigin) else None) or now
    payload, input_prompt = request.payload, request.prompt
    trigger_type, trigger_source = request.trigger_type.value, request.trigger_source
    # The request is built when the run loads; its trigger's fields are checked now, so a
    # bad one is refused here (400 with the field) and nothing is written.
    TriggerContext(trigger_type=trigger_type, trigger_source=trigger_source, trigger_payload=payload,
                   triggered_by=str(origin.user_id) if origin.user_id else None, triggered_at=triggered_at)
    columns, stored = _origin_columns(request)
    context: dict = {"triggered_at": triggered_at.isoformat(), **stored}
    if request.attachments:
        if len(request.attachments) > MAX_ATTACHMENTS:
            raise InvalidInput(f"A run takes at most {MAX_ATTACHMENTS} artifacts.",
                               details={"artifacts": [f"at most {MAX_ATTACHMENTS}"]})
        attached = artifacts_attachable(workspace_id=agent.workspace_id, artifact_ids=list(request.attachments))
        context["artifact_ids"] = [artifact.pk for artifact in attached]
        notes = "\n".join(artifact_placeholder(artifact) for artifact in attached)
        input_prompt = f"{input_prompt}\n\n{notes}" if input_prompt else notes
        if len(input_prompt) > limits.PROMPT:
            raise InvalidInput("input_prompt is too long once the attached files are named.",
                               details={"input_prompt": [f"at most {limits.PROMPT} characters with the attachments"]})
    earlier_ids = origin.earlier_artifact_ids if isinstance(origin, SessionOrigin | HandOffOrigin) else []
    if earlier_ids:
        present = set(artifacts_in_workspace(workspace_id=agent.workspace_id)
                      .filter(pk__in=earlier_ids[:MAX_ATTACHMENTS]).values_list("pk", flat=True))
        earlier = [pk for pk in earlier_ids[:MAX_ATTACHMENTS]
                   if pk in present and pk not in context.get("artifact_ids", [])]
        if earlier:
            context["artifact_ids"] = [*context.get("artifact_ids", []), *earlier]
    detections: list[dict] = []
    if payload is None:
        context["trigger_payload"] = None  # the column stores {}; the prompt says there was none
    elif settings.RIVER_PROMPT_INJECTION_DETECTION:
        screened = ctxmod.screen_payload(payload)
        if screened.detections:
            detections = screened.detections
            context.update(trigger_payload=screened.payload, security_events=detections)
    requester_id = origin.requester_id if origin.requester_id is not None else _requester_id(origin.user_id)
    columns.update(_version_columns(agent))
    with transaction.atomic() if detections else contextlib.nullcontext():
        execution = Execution.objects.create(
            workspace_id=agent.workspace_id, agent=agent,
            trigger_type=trigger_type, trigger_source=trigger_source,
            trigger_payload=payload if payload is not None else {},
            requested_by_id=origin.user_id, requester_id=requester_id,
            input_prompt=input_prompt or "", queued_at=now, published_at=now, context=context, **columns,
        )
        if detections:
            _security_event(execution, agent, detections)
        segment_queue_on_commit(execution.pk)
    return execution


def _version_columns(agent: Agent) -> dict:
    """The run's version, chosen once here and never again (docs/engine.md, "The run's
    version"): the deployed one, or while a canary runs, the canary's for the runs whose
    draw (``agents.canary.canary_arm_draw`` of the canary's seed and the run's id) says
    so. The id is taken from the table's sequence first so the draw can use it (one
    statement more, only while a canary runs); without a sequence (SQLite) the key is a
    random number instead."""
    columns: dict = {"agent_version_id": agent.current_version_id}
    arms = canary_running_arms(canary_id=agent.canary_id) if agent.canary_id is not None else None
    if arms is None:
        return columns
    version_id, percent, seed = arms
    run_id = _execution_id_reserve()
    canary_arm = canary_arm_draw(seed=seed, key=run_id if run_id is not None else secrets.randbits(62),
                                 percent=percent)
    columns.update(canary_id=agent.canary_id, canary_arm=canary_arm)
    if canary_arm:
        columns["agent_version_id"] = version_id
    if run_id is not None:
        columns["id"] = run_id
    return columns


def _execution_id_reserve() -> int | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [Execution._meta.db_table])
        return cursor.fetchone()[0]


def person_run_request(*, agent: Agent, user, prompt: str = "", payload=None, attachments=(),
                       source: str = "ui") -> RunRequest:
    """The request of a run someone starts by hand (a page, the API, a script): that person
    is its requester (a trigger's service identity never signs in, so never starts one)."""
    user_id = user.pk if user is not None else None
    return RunRequest(agent_id=agent.pk, prompt=prompt, payload=payload, attachments=list(attachments),
                      origin=PersonOrigin(user_id=user_id, requester_id=user_id, source=source))


def _security_event(execution: Execution, agent: Agent, detections: list[dict]) -> None:
    logger.warning(
        "security event: possible prompt injection in trigger payload of execution %s (%d span(s) sanitised)",
        execution.pk, len(detections),
    )
    audit_record(
        organization_id=agent.workspace.organization_id, workspace_id=execution.workspace_id,
        event_type="prompt_injection_detected", execution_id=execution.pk, agent_id=execution.agent_id,
        details={"detections": detections},
    )
