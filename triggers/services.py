"""Writes for triggers: managing them, and ``trigger_fire``, the one way any of them
starts a run.

Everything type-specific (verifying a webhook, checking an API key and a JSON Schema,
matching a cron slot, a threshold or an upstream run) happens before ``trigger_fire``
and decides the payload, the source and the dedupe key. From ``trigger_fire`` on every
type is the same: the same checks, the same rendered prompt, the same
``execution_start`` and so the same ExecutionRequest, and one firing row per attempt.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, cast

import pydantic
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from executions.services import execution_start
from executions.types import RunRequest, TriggerOrigin
from governance.audit import audit_record
from governance.notifications import TRIGGER_OWNER_REMOVED, workspace_admins_notify
from rivercore.contracts import TriggerType
from rivercore.errors import InvalidInput, PermissionDenied, pydantic_details
from telemetry.metrics import trigger_firing_record
from tenancy.models import Membership, Workspace
from tenancy.permissions import AGENT_EXECUTE, role_rank
from tenancy.selectors import role_highest, roles_permissions
from tenancy.services import (
    run_as_role_check,
    service_principal_create,
    service_principal_label_set,
    service_principal_rebind,
    service_principal_retire,
    service_principal_role_set,
)
from triggers.models import Trigger, TriggerFiring, WebhookEndpoint
from triggers.pipelines import pipeline_cycle_check
from triggers.prompt import PromptTemplateError, prompt_render, prompt_validate
from triggers.schedule import schedule_remove, schedule_slots_next, schedule_sync
from triggers.types import EventConfig, ScheduledConfig, WorkflowConfig, config_public, trigger_config_parse

logger = logging.getLogger("river.triggers")

NAME_MAX = 80
PAYLOAD_MAX_BYTES = 262_144  # a firing's payload, as compact JSON
DETAIL_MAX = 500
DEFAULT_RUN_AS_ROLE = "analyst"  # may run agents and query; may not create, approve or administer
TRIGGER_UPDATED = "trigger_updated"  # the audit entry of a change (trigger_update)

Reason = TriggerFiring.Reason


# --- managing triggers -------------------------------------------------------------------------


def _name_check(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > NAME_MAX or any(ord(ch) < 32 for ch in name):
        raise InvalidInput("Invalid name.", details={"name": [f"1 to {NAME_MAX} printable characters."]})
    return name


def _prompt_check(prompt: str) -> str:
    try:
        return prompt_validate(prompt or "")
    except PromptTemplateError as exc:
        raise InvalidInput("The prompt template is invalid.", details={"prompt": [str(exc)]}) from None


def trigger_config_check(*, trigger_type: TriggerType, config, workspace: Workspace, agent: Agent):
    """The typed config, with the checks that need the database (the webhook endpoint
    exists in the workspace; an upstream agent of the same workspace that is not the
    trigger's own agent) or the clock (a schedule that ever runs: croniter accepts
    ``0 0 30 2 *``, which no date matches). Here, not in ScheduledConfig, so a stored
    row of that kind still loads and can be disabled or edited."""
    if TriggerType(trigger_type) == TriggerType.SCHEDULED:
        return schedule_config_check(config=config)
    parsed = trigger_config_parse(trigger_type=trigger_type, config=config)
    if isinstance(parsed, EventConfig):
        if not WebhookEndpoint.objects.filter(workspace=workspace, slug=parsed.endpoint).exists():
            raise InvalidInput("Unknown webhook endpoint.", details={"config.endpoint": [
                "No webhook endpoint with this slug in the workspace; create it first."]})
    if isinstance(parsed, WorkflowConfig):
        if parsed.upstream_agent == agent.pk:
            raise InvalidInput("A pipeline stage cannot follow itself.",
                               details={"config.upstream_agent": ["Choose another agent than the trigger's own."]})
        if not Agent.objects.filter(pk=parsed.upstream_agent, workspace=workspace).exists():
            raise InvalidInput("Unknown upstream agent.",
                               details={"config.upstream_agent": ["No agent with this id in the workspace."]})
        pipeline_cycle_check(workspace=workspace, agent=agent, config=parsed)
    return parsed


def schedule_config_check(*, config) -> ScheduledConfig:
    """A schedule's typed config, refused as a trigger's save refuses it (400 naming
    ``config.cron`` or ``config.timezone``): the edit page's preview of the next run
    times calls it as the user types, so its errors are the API's."""
    parsed = cast(ScheduledConfig, trigger_config_parse(trigger_type=TriggerType.SCHEDULED, config=config))
    if not schedule_slots_next(config=parsed, now=timezone.now(), count=1):
        raise InvalidInput("The trigger's configuration is invalid.", details={"config.cron": [
            f"'{parsed.cron}' never runs: no date matches it (such as the 30th of February)."]})
    return parsed


def _name_free(*, workspace: Workspace, name: str, exclude=None) -> None:
    rows = Trigger.objects.filter(workspace=workspace, name=name)
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    if rows.exists():
        raise InvalidInput("Name taken.", details={"name": ["A trigger with this name exists in the workspace."]})


def trigger_name_check(*, workspace: Workspace, name: str, exclude=None) -> str:
    """The trimmed name, if valid and free in the workspace (400 naming ``name``)."""
    name = _name_check(name)
    _name_free(workspace=workspace, name=name, exclude=exclude)
    return name


def trigger_create(
    *, actor, workspace: Workspace, agent: Agent, name: str, trigger_type: TriggerType, prompt: str = "",
    config: dict | None = None, enabled: bool = True, run_as_role: str = DEFAULT_RUN_AS_ROLE,
) -> Trigger:
    """A trigger with its own run-as identity (a service principal whose role may not
    exceed ``actor``'s). The caller checked that ``actor`` may manage agents here."""
    if agent.workspace_id != workspace.pk:
        raise InvalidInput("The agent is not in this workspace.", details={"agent": ["Not an agent of the workspace."]})
    name = _name_check(name)
    prompt = _prompt_check(prompt)
    parsed = trigger_config_check(trigger_type=trigger_type, config=config, workspace=workspace, agent=agent)
    _name_free(workspace=workspace, name=name)
    with transaction.atomic():
        principal = service_principal_create(workspace=workspace, created_by=actor, label=f"Trigger {name}",
                                             role=run_as_role)
        if isinstance(parsed, WorkflowConfig):  # again, under the workspace lock it takes
            pipeline_cycle_check(workspace=workspace, agent=agent, config=parsed)
        try:
            with transaction.atomic():
                trigger = Trigger.objects.create(
                    workspace=workspace, agent=agent, name=name, type=trigger_type, prompt=prompt, config=parsed,
                    enabled=enabled, run_as=principal, created_by=actor,
                )
        except IntegrityError:  # a concurrent create took the name
            raise InvalidInput("Name taken.", details={
                "name": ["A trigger with this name exists in the workspace."]}) from None
        schedule_sync(trigger=trigger)  # its beat entry, for a scheduled trigger
        return trigger


def trigger_authority_check(*, actor, trigger: Trigger, run_as_role: str | None = None) -> None:
    """403 naming ``run_as_role`` unless ``actor`` currently holds at least the role the
    trigger's runs would act with: ``run_as_role`` when the change sets one, else the
    role they act with now (capped at the responsible person's, see
    tenancy.selectors.workspace_roles). Nobody edits, enables or re-points a trigger to
    borrow an authority they do not hold."""
    held = role_highest(user=actor, workspace=trigger.workspace)
    acting = run_as_role or role_highest(user=trigger.run_as.user, workspace=trigger.workspace)
    if held is None or (acting is not None and role_rank(acting) > role_rank(held)):
        raise PermissionDenied(
            "This trigger's runs act with a role above yours; ask someone who holds it.",
            code="run_as_role_above_yours",
            details={"run_as_role": [f"The trigger runs as {acting}; you hold {held or 'no role'} here."]},
        )


def webhook_endpoint_authority_check(*, actor, workspace: Workspace, slug: str) -> None:
    """403 naming ``run_as_role`` when an event trigger listening on endpoint ``slug``
    acts with a role above ``actor``'s: whoever creates, rotates or deletes (to re-create)
    an endpoint holds its secret, and so chooses what its triggers receive."""
    events = Trigger.objects.filter(workspace=workspace, type=TriggerType.EVENT).select_related(
        "workspace", "run_as__user")
    for trigger in events:
        if config_public(trigger.config).get("endpoint") == slug:
            trigger_authority_check(actor=actor, trigger=trigger)


def trigger_change_authority_check(*, actor, trigger: Trigger, changes: dict) -> bool:
    """The checks ``trigger_update`` makes before applying ``changes``; True when the
    change re-binds the trigger to ``actor`` (anything but disabling alone, which grants
    nothing and is open to whoever manages triggers). Raises 400/403 naming
    ``run_as_role``. Forms call it to show the refusal next to their fields."""
    if set(changes) == {"enabled"} and not changes["enabled"]:
        return False
    if "run_as_role" in changes:  # a known role no higher than the actor's, or 400/403
        run_as_role_check(actor=actor, workspace=trigger.workspace, role=changes["run_as_role"])
    trigger_authority_check(actor=actor, trigger=trigger, run_as_role=changes.get("run_as_role"))
    return True


def trigger_update(*, actor, trigger: Trigger, **changes: Any) -> Trigger:
    """Change name, prompt, config (replaced whole), enabled or run_as_role.

    A change by a person re-binds the trigger to them (``service_principal_rebind``:
    they become its responsible person, its role is capped at theirs), after
    ``trigger_authority_check``. Only disabling, which grants nothing, is open to
    anyone who manages triggers and leaves the trigger's binding as it was."""
    fields: list[str] = []
    with transaction.atomic():
        trigger = Trigger.objects.select_for_update(of=("self",)).select_related(
            "agent", "workspace", "run_as__workspace", "run_as__user").get(pk=trigger.pk)
        rebind = trigger_change_authority_check(actor=actor, trigger=trigger, changes=changes)
        before = _trigger_snapshot(trigger)
        if "name" in changes:
            trigger.name = _name_check(changes["name"])
            _name_free(workspace=trigger.workspace, name=trigger.name, exclude=trigger.pk)
            service_principal_label_set(principal=trigger.run_as, label=f"Trigger {trigger.name}")
            fields.append("name")
        if "prompt" in changes:
            trigger.prompt = _prompt_check(changes["prompt"])
            fields.append("prompt")
        if "config" in changes:
            trigger.config = trigger_config_check(trigger_type=TriggerType(trigger.type), config=changes["config"],
                                           workspace=trigger.workspace, agent=trigger.agent)
            fields.append("config")
        if "enabled" in changes:
            trigger.enabled = bool(changes["enabled"])
            fields.append("enabled")
        if "run_as_role" in changes:
            service_principal_role_set(principal=trigger.run_as, actor=actor, role=changes["run_as_role"])
        if rebind:
            service_principal_rebind(principal=trigger.run_as, actor=actor)
        trigger.updated_at = timezone.now()
        try:
            with transaction.atomic():
                trigger.save(update_fields=[*fields, "updated_at"])
        except IntegrityError:  # a concurrent create or rename took the name
            raise InvalidInput("Name taken.", details={
                "name": ["A trigger with this name exists in the workspace."]}) from None
        schedule_sync(trigger=trigger)
        _trigger_update_audit(trigger=trigger, actor=actor, before=before)
    return trigger


def _trigger_snapshot(trigger: Trigger) -> dict:
    """What a change may alter, as the API shows it (the audit entry's from/to)."""
    return {
        "name": trigger.name,
        "prompt": trigger.prompt,
        "config": config_public(trigger.config),
        "enabled": trigger.enabled,
        "run_as_role": Membership.objects.filter(user_id=trigger.run_as.user_id, workspace_id=trigger.workspace_id)
                                         .values_list("role", flat=True).first(),
        "responsible": trigger.run_as.responsible_id,
    }


def _trigger_update_audit(*, trigger: Trigger, actor, before: dict) -> None:
    """One ``trigger_updated`` entry with a from/to per field that changed, in the
    caller's transaction; none when nothing did (a PATCH repeating the current values)."""
    after = _trigger_snapshot(trigger)
    changes = {key: {"from": before[key], "to": after[key]} for key in after if after[key] != before[key]}
    if not changes:
        return
    audit_record(organization_id=trigger.workspace.organization_id, workspace_id=trigger.workspace_id,
                 event_type=TRIGGER_UPDATED, actor=actor, agent_id=trigger.agent_id,
                 details={"trigger": str(trigger.pk), "name": trigger.name, "type": trigger.api_type,
                          "changes": changes})


def trigger_delete(*, trigger: Trigger) -> None:
    """The trigger and its firings go; its identity is retired (kept, so the runs it
    started still name who started them)."""
    with transaction.atomic():
        principal = trigger.run_as
        schedule_remove(trigger_id=trigger.pk)
        trigger.delete()
        service_principal_retire(principal=principal)


# --- firing ------------------------------------------------------------------------------------


def _payload_bytes(payload) -> int:
    if payload is None:
        return 0
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def _detail(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"


def _firing_counted(firing: TriggerFiring) -> None:
    """Firings by outcome and reason (enum values), counted once the firing row commits."""
    values = {"trigger_type": str(firing.trigger.type), "outcome": str(firing.outcome), "reason": str(firing.reason)}
    transaction.on_commit(lambda: trigger_firing_record(**values))


def trigger_firing_skip(
    *, trigger: Trigger, source: str, reason: str, detail: str = "", payload=None, dedupe_key: str | None = None,
    fired_at: datetime | None = None,
) -> TriggerFiring:
    """Record an attempt that starts nothing (filtered, rate limited, schema invalid...):
    the type-specific code upstream of ``trigger_fire`` decided so."""
    firing = TriggerFiring(trigger=trigger, source=source[:100], outcome=TriggerFiring.Outcome.SKIPPED, reason=reason,
                           detail=_detail(detail), payload_bytes=_payload_bytes(payload),
                           fired_at=fired_at or timezone.now(), dedupe_key=dedupe_key)
    if dedupe_key is None:
        firing.save()
        _firing_counted(firing)
        return firing
    try:
        with transaction.atomic():
            firing.save()
    except IntegrityError:
        firing = TriggerFiring.objects.create(
            trigger=trigger, source=source[:100], outcome=TriggerFiring.Outcome.SKIPPED, reason=Reason.DUPLICATE,
            detail=_detail(f"{dedupe_key} was already handled"), payload_bytes=firing.payload_bytes,
            fired_at=firing.fired_at)
    _firing_counted(firing)
    return firing


def trigger_responsible_missing(*, trigger: Trigger) -> str | None:
    """Why the person answerable for the trigger's identity can no longer lend it the
    authority to start a run (deleted, deactivated, holding no role in the workspace, or
    only one without ``agent:execute``, as a key's owner must hold), or None."""
    responsible = trigger.run_as.responsible
    if responsible is None:
        return "its responsible person's account was deleted"
    if not responsible.is_active:
        return f"its responsible person {responsible.get_username()} is deactivated"
    held = role_highest(user=responsible, workspace=trigger.workspace)
    if held is None:
        return f"its responsible person {responsible.get_username()} holds no role in the workspace"
    if AGENT_EXECUTE not in roles_permissions([held]):
        return f"its responsible person {responsible.get_username()} is a {held} here, who may not run agents"
    return None


def _trigger_pause_owner_removed(*, trigger: Trigger, why: str, source: str, payload, dedupe_key: str | None,
                                 fired_at: datetime) -> TriggerFiring:
    """Disable the trigger, record an ``owner_removed`` firing and tell the workspace's
    admins, all or none. The compare-and-set on ``enabled`` makes one caller do it when
    several fire at once; the others record an ordinary ``disabled`` skip."""
    with transaction.atomic():
        paused = Trigger.objects.filter(pk=trigger.pk, enabled=True).update(enabled=False, updated_at=fired_at)
        if paused != 1:
            return trigger_firing_skip(trigger=trigger, source=source, reason=Reason.DISABLED,
                                       detail="the trigger is disabled", payload=payload, dedupe_key=dedupe_key,
                                       fired_at=fired_at)
        trigger.enabled = False
        schedule_sync(trigger=trigger)  # a scheduled trigger's beat entry stops too
        firing = trigger_firing_skip(trigger=trigger, source=source, reason=Reason.OWNER_REMOVED,
                                     detail=f"paused: {why}", payload=payload, dedupe_key=dedupe_key,
                                     fired_at=fired_at)
        workspace_admins_notify(
            workspace=trigger.workspace, kind=TRIGGER_OWNER_REMOVED, title=f"Trigger {trigger.name} paused",
            body=(f"Trigger {trigger.name} was paused when it fired: {why}. Its runs act only with the "
                  "authority of a person who still holds it; an editor or admin of the workspace who edits "
                  "and enables it becomes answerable for it."),
            url=f"/triggers/{trigger.pk}/?paused={firing.pk}")
    logger.warning("trigger %s paused: %s", trigger.pk, why)
    return firing


def trigger_fire(
    *, trigger: Trigger, payload=None, source: str, dedupe_key: str | None = None,
    triggered_at: datetime | None = None, user=None, requester=None,
) -> TriggerFiring:
    """Start ``trigger``'s agent once for this signal, or record why not.

    Checks, in order: the trigger is enabled, the agent is active, the payload is not
    too large, ``dedupe_key`` is new for this trigger (the unique constraint decides,
    so two schedulers or two deliveries racing start one run). The run acts as the
    trigger's service principal, or as ``user`` when a person fired it; its requester is
    ``requester`` (a key's owner, an upstream run's requester), else the trigger's
    responsible person (``execution_start``'s default). The firing row
    and the run's row are written in one transaction: both or neither."""
    now = timezone.now()
    triggered_at = triggered_at or now
    size = _payload_bytes(payload)
    # Read fresh: a trigger disabled or an agent paused a moment ago is seen.
    trigger = Trigger.objects.select_related("agent", "workspace", "run_as__user", "run_as__responsible").get(
        pk=trigger.pk)
    agent = trigger.agent
    skip: tuple[str, str] | None = None
    if not trigger.enabled:
        skip = (Reason.DISABLED, "the trigger is disabled")
    elif user is None and (why := trigger_responsible_missing(trigger=trigger)) is not None:
        return _trigger_pause_owner_removed(trigger=trigger, why=why, source=source, payload=payload,
                                            dedupe_key=dedupe_key, fired_at=now)
    elif agent.status != Agent.Status.ACTIVE or agent.current_version_id is None:
        skip = (Reason.AGENT_INACTIVE, f"agent {agent.name} is {agent.status}"
                + ("" if agent.current_version_id else " with no deployed version"))
        logger.warning("trigger %s refused: agent %s is %s", trigger.pk, agent.pk, agent.status)
    elif size > PAYLOAD_MAX_BYTES:
        skip = (Reason.ERROR, f"payload of {size} bytes is larger than {PAYLOAD_MAX_BYTES}")
    if skip is not None:
        return trigger_firing_skip(trigger=trigger, source=source, reason=skip[0], detail=skip[1], payload=payload,
                                   dedupe_key=dedupe_key, fired_at=now)
    run_as = user if user is not None else trigger.run_as.user
    if requester is None:  # a person who fired it answers for it; else the trigger's responsible person
        requester = user if user is not None else trigger.run_as.responsible
    firing = TriggerFiring(trigger=trigger, source=source[:100], outcome=TriggerFiring.Outcome.STARTED,
                           payload_bytes=size, fired_at=now, dedupe_key=dedupe_key)
    try:
        with transaction.atomic():
            firing.save()  # the dedupe key is taken here, or IntegrityError
            execution = execution_start(agent=agent, request=RunRequest(
                agent_id=agent.pk, prompt=prompt_render(trigger.prompt, payload), payload=payload,
                origin=TriggerOrigin(
                    trigger_id=trigger.pk, trigger_type=trigger.type, source=source, triggered_at=triggered_at,
                    user_id=run_as.pk if run_as is not None else None,
                    requester_id=requester.pk if requester is not None else None),
            ))
            firing.execution = execution
            firing.save(update_fields=["execution"])
            _firing_counted(firing)
            return firing
    except IntegrityError:
        if dedupe_key is None or not TriggerFiring.objects.filter(trigger=trigger, dedupe_key=dedupe_key).exists():
            raise
        return trigger_firing_skip(trigger=trigger, source=source, reason=Reason.DUPLICATE,
                                   detail=f"{dedupe_key} was already handled", payload=payload, fired_at=now)
    except InvalidInput as exc:  # the agent changed under us
        reason = Reason.AGENT_INACTIVE if exc.code in ("agent_not_active", "no_deployed_version") else Reason.ERROR
        logger.warning("trigger %s did not start a run: %s", trigger.pk, exc.message)
        return trigger_firing_skip(trigger=trigger, source=source, reason=reason, detail=exc.message,
                                   payload=payload, fired_at=now)
    except pydantic.ValidationError as exc:  # the run's trigger fields were refused
        problems = "; ".join(f"{path}: {', '.join(msgs)}" for path, msgs in pydantic_details(exc).items())
        logger.warning("trigger %s did not start a run: %s", trigger.pk, problems)
        return trigger_firing_skip(trigger=trigger, source=source, reason=Reason.ERROR, detail=problems,
                                   payload=payload, fired_at=now)

