"""Writes for agents: create and edit, versions, deployment and the lifecycle.

Callers authorize first (the API checks ``agent:create`` in the agent's workspace);
these functions enforce the business rules that hold for every caller.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.evaluations import promotion_gate_check
from agents.models import Agent, AgentMemory, AgentVersion, MemoryConsent, WorkspaceMemory
from agents.selectors import data_source_ids_outside_workspace, memory_consent_given, memory_keywords
from common.compiled import CompiledQuery
from governance.audit import audit_record
from governance.checker import auto_approve_condition_validate
from governance.expressions import ExpressionError
from governance.models import WorkspaceSettings
from governance.quorum import approval_rules_quorum_problems
from governance.selectors import approval_channels_active, workspace_memory_mode
from rivercore.errors import Conflict, InvalidInput, pydantic_details
from rivercore.types.agents import (
    TOOL_NAMES,
    ActionLevel,
    ApprovalRules,
    BusinessFunction,
    GovernanceLevel,
    ModelConfig,
    NotificationConfig,
)
from rivercore.types.toolservers import river_name_split
from tenancy.models import Workspace
from tenancy.permissions import ORG_ADMIN_ROLE, Role
from toolservers.selectors import mcp_tool_names_unusable

# Roles an approval request may name: the workspace roles and organization admins.
APPROVER_ROLES = frozenset(Role.values) | {ORG_ADMIN_ROLE}

_EDITABLE_FIELDS = ("name", "description", "domain", "business_function")


def _check_choice(value: str, enum, field: str) -> str:
    allowed = [member.value for member in enum]
    if value not in allowed:
        raise InvalidInput(
            f"{field} must be one of {', '.join(allowed)}.", details={field: [f'"{value}" is not a valid choice.']}
        )
    return value


def _refuse_if_archived(agent: Agent) -> None:
    if agent.status == Agent.Status.ARCHIVED:
        raise InvalidInput("This agent is archived and can no longer change.", code="agent_archived")


def agent_create(
    *,
    workspace: Workspace,
    owner,
    name: str,
    business_function: str,
    domain: str = "",
    description: str = "",
) -> Agent:
    if not name.strip():
        raise InvalidInput("An agent needs a name.", details={"name": ["This field may not be blank."]})
    _check_choice(business_function, BusinessFunction, "business_function")
    return Agent.objects.create(
        workspace=workspace,
        owner=owner,
        name=name.strip(),
        business_function=business_function,
        domain=domain,
        description=description,
    )


def agent_update(
    *,
    agent: Agent,
    name: str | None = None,
    description: str | None = None,
    domain: str | None = None,
    business_function: str | None = None,
) -> Agent:
    """Change descriptive fields; ``None`` leaves a field as it is. Status has its own service."""
    _refuse_if_archived(agent)
    changes = {"name": name, "description": description, "domain": domain, "business_function": business_function}
    changes = {field: value for field, value in changes.items() if value is not None}
    if "name" in changes:
        if not changes["name"].strip():
            raise InvalidInput("An agent needs a name.", details={"name": ["This field may not be blank."]})
        changes["name"] = changes["name"].strip()
    if "business_function" in changes:
        _check_choice(changes["business_function"], BusinessFunction, "business_function")
    if not changes:
        return agent
    for field, value in changes.items():
        setattr(agent, field, value)
    agent.save(update_fields=[*changes, "updated_at"])
    return agent


TEAM_MAX_DEPTH = 10  # levels below a team's root; deeper trees are refused when configured
_UNSET = object()


def team_parent_problem(*, agent: Agent, parent: Agent | None) -> str | None:
    """Why ``parent`` cannot be ``agent``'s parent, or None. Reads the parent's
    ancestors (at most ``TEAM_MAX_DEPTH`` rows, one query each)."""
    if parent is None:
        return None
    if parent.workspace_id != agent.workspace_id:
        return "must be an agent of the same workspace"
    if parent.pk == agent.pk:
        return "an agent cannot be its own parent"
    seen = {agent.pk}
    current: Agent | None = parent
    depth = 1
    while current is not None:
        if current.pk in seen:
            return f"would make a cycle: {current.name} is already below {agent.name} in the team"
        seen.add(current.pk)
        if current.parent_agent_id is None:
            break
        depth += 1
        if depth > TEAM_MAX_DEPTH:
            return f"the team would be more than {TEAM_MAX_DEPTH} levels deep"
        current = Agent.objects.only("pk", "name", "parent_agent_id", "workspace_id").filter(
            pk=current.parent_agent_id).first()
    below = _team_height(agent)
    if depth + below > TEAM_MAX_DEPTH:
        return f"the team would be more than {TEAM_MAX_DEPTH} levels deep"
    return None


def _team_height(agent: Agent) -> int:
    """How many levels of sub-agents hang below ``agent`` (one query per level)."""
    height, level = 0, [agent.pk]
    while level and height <= TEAM_MAX_DEPTH:
        level = list(Agent.objects.filter(parent_agent_id__in=level).values_list("pk", flat=True))
        if level:
            height += 1
    return height


def agent_team_update(*, agent: Agent, actor, parent_agent_id=_UNSET, disallow_transfer_to_parent: bool | None = None,
                      disallow_transfer_to_peers: bool | None = None) -> Agent:
    """Place ``agent`` in a team (``parent_agent_id``: an agent id of its workspace, or
    None for a root) and set its transfer flags; ``_UNSET``/None leave a value as it is.

    The workspace's row is locked while the tree is checked and changed, so two
    concurrent changes cannot build a cycle between them. A parent that is not in the
    agent's workspace, the agent itself or one of its sub-agents is refused with a 400
    naming ``parent_agent``; the change is audited (``agent_team_changed``)."""
    _refuse_if_archived(agent)
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=agent.workspace_id).first()
        locked = Agent.objects.select_for_update(of=("self",)).select_related("workspace").get(pk=agent.pk)
        before = {"parent_agent": str(locked.parent_agent_id) if locked.parent_agent_id else None,
                  "disallow_transfer_to_parent": locked.disallow_transfer_to_parent,
                  "disallow_transfer_to_peers": locked.disallow_transfer_to_peers}
        fields: list[str] = []
        if parent_agent_id is not _UNSET:
            parent = None
            if parent_agent_id is not None:
                parent = Agent.objects.filter(pk=parent_agent_id, workspace_id=locked.workspace_id).first()
                if parent is None:
                    raise InvalidInput("No agent with that id in this agent's workspace.",
                                       details={"parent_agent": ["no agent with this id in the agent's workspace"]})
            problem = team_parent_problem(agent=locked, parent=parent)
            if problem:
                raise InvalidInput(f"parent_agent: {problem}.", code="invalid_team",
                                   details={"parent_agent": [problem]})
            locked.parent_agent = parent
            fields.append("parent_agent")
        if disallow_transfer_to_parent is not None:
            locked.disallow_transfer_to_parent = disallow_transfer_to_parent
            fields.append("disallow_transfer_to_parent")
        if disallow_transfer_to_peers is not None:
            locked.disallow_transfer_to_peers = disallow_transfer_to_peers
            fields.append("disallow_transfer_to_peers")
        if not fields:
            return locked
        locked.save(update_fields=[*fields, "updated_at"])
        after = {"parent_agent": str(locked.parent_agent_id) if locked.parent_agent_id else None,
                 "disallow_transfer_to_parent": locked.disallow_transfer_to_parent,
                 "disallow_transfer_to_peers": locked.disallow_transfer_to_peers}
        if after != before:
            audit_record(organization_id=locked.workspace.organization_id, workspace_id=locked.workspace_id,
                         event_type="agent_team_changed", actor=actor, agent_id=locked.pk,
                         details={"before": before, "after": after})
    return locked


@dataclass(frozen=True)
class VersionSpec:
    """A checked agent version configuration, ready to store."""

    goal: str
    instructions: str
    system_prompt: str
    action_level: str
    governance_level: str
    model_config: ModelConfig
    tools: list[str]
    approval_rules: ApprovalRules
    notification_config: NotificationConfig
    data_source_ids: list[int]


def _parse(schema, value, field: str):
    if value is None:
        return schema()
    if isinstance(value, schema):
        return value
    try:
        return schema.model_validate(value)
    except pydantic.ValidationError as exc:
        raise InvalidInput(f"{field} is invalid.", details={field: pydantic_details(exc)}) from None


def _approval_rules_problems(rules: ApprovalRules, tool_list: list[str]) -> dict:
    """What is wrong with approval rules beyond their shape, by field.

    Auto-approve conditions are checked like policies (grammar, known facts) and must
    look at the call: a constant condition would let every write through unseen."""
    problems: dict = {}
    not_allowed = sorted(set(rules.require_approval_for) - set(tool_list))
    if not_allowed:
        problems["require_approval_for"] = [f"{name} is not among the version's tools." for name in not_allowed]
    for index, rule in enumerate(rules.auto_approve_conditions):
        field = f"auto_approve_conditions.{index}"
        if rule.tool not in tool_list:
            problems[f"{field}.tool"] = [f"{rule.tool} is not among the version's tools."]
        try:
            auto_approve_condition_validate(rule.condition)
        except ExpressionError as exc:
            problems[f"{field}.condition"] = [str(exc)]
    unknown_roles = sorted(set(rules.approver_roles) - APPROVER_ROLES)
    if unknown_roles:
        allowed = ", ".join(sorted(APPROVER_ROLES))
        problems["approver_roles"] = [f"Unknown role: {name} (one of: {allowed})." for name in unknown_roles]
    problems.update(approval_rules_quorum_problems(rules, known_roles=APPROVER_ROLES))  # quorum, escalation
    return problems


def agent_version_spec(
    *,
    agent: Agent,
    goal: str,
    instructions: str,
    action_level: str,
    governance_level: str = GovernanceLevel.STANDARD,
    system_prompt: str = "",
    model_config: ModelConfig | dict | None = None,
    tools: Sequence[str] = (),
    approval_rules: ApprovalRules | dict | None = None,
    notification_config: NotificationConfig | dict | None = None,
    data_source_ids: Sequence[int] = (),
) -> VersionSpec:
    """Check a version configuration against the rules of River and the agent's workspace.

    Raises InvalidInput whose details name the offending field. Shared by the API
    and the admin so both refuse the same configurations.
    """
    _refuse_if_archived(agent)
    errors: dict = {}
    if not (goal or "").strip():
        errors["goal"] = ["This field may not be blank."]
    if not (instructions or "").strip():
        errors["instructions"] = ["This field may not be blank."]
    for value, enum, field in (
        (action_level, ActionLevel, "action_level"),
        (governance_level, GovernanceLevel, "governance_level"),
    ):
        try:
            _check_choice(value, enum, field)
        except InvalidInput as exc:
            errors.update(exc.details)
    parsed = {}
    for value, schema, field in (
        (model_config, ModelConfig, "model_config"),
        (approval_rules, ApprovalRules, "approval_rules"),
        (notification_config, NotificationConfig, "notification_config"),
    ):
        try:
            parsed[field] = _parse(schema, value, field)
        except InvalidInput as exc:
            errors.update(exc.details)
    tool_list = list(dict.fromkeys(tools))
    mcp_names = [name for name in tool_list if river_name_split(name) is not None]
    unknown_tools = sorted(set(tool_list) - TOOL_NAMES - set(mcp_names))
    tool_errors = [f"Unknown tool: {name}." for name in unknown_tools]
    # An MCP tool (docs/mcp.md) must be a reviewed, enabled tool of this workspace's servers.
    tool_errors += [f"{name} is not a reviewed, enabled tool of this workspace's tool servers."
                    for name in mcp_tool_names_unusable(workspace_id=agent.workspace_id, names=mcp_names)]
    if tool_errors:
        errors["tools"] = tool_errors
    rules = parsed.get("approval_rules")
    if rules is not None:
        rule_errors = _approval_rules_problems(rules, tool_list)
        if rule_errors:
            errors["approval_rules"] = rule_errors
    ds_ids = list(dict.fromkeys(data_source_ids))
    foreign = data_source_ids_outside_workspace(workspace_id=agent.workspace_id, data_source_ids=ds_ids)
    if foreign:
        errors["data_sources"] = [f"Data source {pk} is not in this agent's workspace." for pk in foreign]
    if errors:
        raise InvalidInput("The agent version is invalid.", details=errors)
    return VersionSpec(
        goal=goal.strip(),
        instructions=instructions.strip(),
        system_prompt=system_prompt or "",
        action_level=action_level,
        governance_level=governance_level,
        model_config=parsed["model_config"],
        tools=tool_list,
        approval_rules=parsed["approval_rules"],
        notification_config=parsed["notification_config"],
        data_source_ids=ds_ids,
    )


def agent_version_create(*, agent: Agent, actor, **config) -> AgentVersion:
    """Store a new immutable version numbered one above the agent's latest.

    ``config`` takes the keyword arguments of ``agent_version_spec``. The agent row
    is locked while numbering so concurrent creates get consecutive numbers.
    """
    spec = agent_version_spec(agent=agent, **config)
    with transaction.atomic():
        Agent.objects.select_for_update().only("pk").get(pk=agent.pk)
        latest = AgentVersion.objects.filter(agent=agent).aggregate(latest=Max("version"))["latest"] or 0
        try:
            with transaction.atomic():
                version = AgentVersion.objects.create(
                    agent=agent,
                    version=latest + 1,
                    goal=spec.goal,
                    instructions=spec.instructions,
                    system_prompt=spec.system_prompt,
                    action_level=spec.action_level,
                    governance_level=spec.governance_level,
                    model_config=spec.model_config.model_dump(mode="json"),
                    tools=spec.tools,
                    approval_rules=spec.approval_rules.model_dump(mode="json"),
                    notification_config=spec.notification_config.model_dump(mode="json"),
                    created_by=actor if getattr(actor, "pk", None) else None,
                )
        except IntegrityError:
            raise Conflict("Another version was created at the same time; retry.") from None
        if spec.data_source_ids:
            version.data_sources.set(spec.data_source_ids)
    return version


def _require_approval_channel(*, agent: Agent, version: AgentVersion) -> None:
    if version.action_level == ActionLevel.ACT_WITH_APPROVAL and not approval_channels_active(
        workspace_id=agent.workspace_id
    ):
        raise InvalidInput(
            "This agent acts with approval, but the workspace has no active approval notification channel.",
            code="no_approval_channel",
            details={"action_level": [ActionLevel.ACT_WITH_APPROVAL.value]},
        )


def agent_version_deploy(*, agent: Agent, version: AgentVersion, actor, override_reason: str | None = None) -> Agent:
    """Make ``version`` the one new runs use. Refused (409) while a canary runs: promote
    or stop it first (agents.canary; a promotion ends the canary, then deploys).

    An active agent may only switch to an act_with_approval version while the
    workspace has an approval channel, the same rule as activation. The workspace's
    promotion gate applies (``agents.evaluations.promotion_gate_check``: an admin's
    ``override_reason`` lets a version below it through, audited).
    """
    if version.agent_id != agent.pk:
        raise InvalidInput("That version belongs to another agent.", details={"version": ["Not this agent's."]})
    with transaction.atomic():
        locked = Agent.objects.select_for_update(of=("self",)).select_related("workspace").get(pk=agent.pk)
        _refuse_if_archived(locked)
        if locked.canary_id is not None:
            raise Conflict("A canary is running on this agent: promote or stop it before deploying.",
                           code="canary_running")
        if locked.status == Agent.Status.ACTIVE:
            _require_approval_channel(agent=locked, version=version)
        promotion_gate_check(agent=locked, version=version, actor=actor, override_reason=override_reason)
        previous = locked.current_version.version if locked.current_version_id else None
        locked.current_version = version
        locked.save(update_fields=["current_version", "updated_at"])
        audit_record(
            organization_id=locked.workspace.organization_id,
            workspace_id=locked.workspace_id,
            event_type="agent_version_deployed",
            actor=actor,
            agent_id=locked.pk,
            details={"version": version.version, "previous_version": previous},
        )
    return locked


def agent_transition(*, agent: Agent, target: str, actor) -> Agent:
    """Move the agent along its lifecycle (Agent.TRANSITIONS) and audit the move.

    Activation needs a deployed version, and for act_with_approval versions an
    active approval channel in the workspace: otherwise runs would wait for an
    approval nobody is told about.
    """
    _check_choice(target, Agent.Status, "status")
    with transaction.atomic():
        locked = (
            Agent.objects.select_for_update(of=("self",))
            .select_related("workspace", "current_version")
            .get(pk=agent.pk)
        )
        source = locked.status
        if not locked.can_transition_to(target):
            raise InvalidInput(
                f"An agent cannot go from {source} to {target}.",
                code="invalid_transition",
                details={"from": source, "to": target},
            )
        if target == Agent.Status.ACTIVE:
            if locked.current_version is None:
                raise InvalidInput(
                    "Deploy a version before activating the agent.",
                    code="no_deployed_version",
                    details={"current_version": ["No version is deployed."]},
                )
            _require_approval_channel(agent=locked, version=locked.current_version)
        locked.status = target
        locked.save(update_fields=["status", "updated_at"])
        audit_record(
            organization_id=locked.workspace.organization_id,
            workspace_id=locked.workspace_id,
            event_type="agent_lifecycle_changed",
            actor=actor,
            agent_id=locked.pk,
            details={"from": source, "to": target},
        )
    return locked


# --- health and memory, written after each run (executions' post-processing) ------------

HEALTH_DEGRADED_AFTER = 3
HEALTH_CRITICAL_AFTER = 5


BLOCKED_ATTENTION_AFTER = 3


def agent_health_record(*, agent_id: int, succeeded: bool, execution_id: int,
                        blocked_by: str | None = None) -> Agent | None:
    """Count a run's outcome into the agent's health: a success resets the streaks;
    3 failures in a row make it degraded, 5 critical. A run blocked by a policy
    (``blocked_by`` names it) is neither: 3 in a row make the agent ``needs_attention``
    with a note naming the policy, unless failures already say worse. A change of health
    is audited.

    A success of an agent already healthy with no streak changes nothing, and is only
    read: the agent's row is locked only when something changes, so the runs of a busy
    agent do not queue behind one another's post-processing on its row."""
    if succeeded and blocked_by is None and Agent.objects.filter(
            pk=agent_id, consecutive_failures=0, consecutive_blocked=0, health=Agent.Health.HEALTHY).exists():
        return None
    with transaction.atomic():
        agent = Agent.objects.select_for_update().select_related("workspace").get(pk=agent_id)
        before = agent.health
        if blocked_by is not None:
            agent.consecutive_blocked += 1
        else:
            agent.consecutive_blocked = 0
            agent.consecutive_failures = 0 if succeeded else agent.consecutive_failures + 1
        failures, blocked = agent.consecutive_failures, agent.consecutive_blocked
        agent.health_note = ""
        if failures >= HEALTH_CRITICAL_AFTER:
            agent.health = Agent.Health.CRITICAL
        elif failures >= HEALTH_DEGRADED_AFTER:
            agent.health = Agent.Health.DEGRADED
        elif blocked >= BLOCKED_ATTENTION_AFTER:
            agent.health = Agent.Health.NEEDS_ATTENTION
            agent.health_note = f"{blocked} runs in a row were blocked by the policy {blocked_by!r}"[:300]
        else:
            agent.health = Agent.Health.HEALTHY
        agent.save(update_fields=["consecutive_failures", "consecutive_blocked", "health", "health_note",
                                  "updated_at"])
        if agent.health != before:
            audit_record(
                organization_id=agent.workspace.organization_id, workspace_id=agent.workspace_id,
                event_type="agent_health_changed", agent_id=agent.pk, execution_id=execution_id,
                details={"from": before, "to": agent.health, "consecutive_failures": failures,
                         "consecutive_blocked": blocked, "note": agent.health_note},
            )
    return agent


def memory_summary_key(summary: str) -> str:
    """The key two memories are the same by: the summary case-folded with its whitespace
    collapsed, hashed (a summary may be long)."""
    normal = " ".join(summary.casefold().split())
    return hashlib.sha256(normal.encode()).hexdigest()


# The agent's newest memory of the same summary from another run, locked; compiled once
# per process (common.compiled): every answered run's post-processing asks it.
_SAME_MEMORY = CompiledQuery(
    lambda agent_id, summary_key, execution_id: AgentMemory.objects.select_for_update()
    .filter(agent_id=agent_id, summary_key=summary_key).exclude(execution_id=execution_id)
    .order_by("-created_at", "-pk")[:1],
    agent_id=uuid.UUID("00000000-0000-4000-8000-00000000a3e1"), summary_key="\x00summary-key",
    execution_id=-(2**62) + 513,
)


def agent_memory_record(*, agent_id: uuid.UUID | str, execution_id: int, summary: str, learnings: Sequence[str],
                        flagged_items: Sequence[str]) -> AgentMemory:
    """The agent's long-term memory of one answered run. Deduplicated: when the agent
    already remembers the same summary (``memory_summary_key``), that memory is
    refreshed (its run, time and learnings become this run's) instead of a second one
    being written; writing the same run again replaces its entry. Texts are cut to the
    stored limits. The caller holds a transaction (post-processing's)."""
    summary = summary[:1000]
    key = memory_summary_key(summary)
    fields = {"summary": summary, "learnings": list(learnings)[:10], "flagged_items": list(flagged_items)[:10]}
    agent_uuid = agent_id if isinstance(agent_id, uuid.UUID) else uuid.UUID(str(agent_id))
    same = _SAME_MEMORY.first(agent_id=agent_uuid, summary_key=key, execution_id=execution_id)
    if same is not None and not AgentMemory.objects.filter(execution_id=execution_id).exists():
        for name, value in {**fields, "execution_id": execution_id, "created_at": timezone.now()}.items():
            setattr(same, name, value)
        same.save(update_fields=[*fields, "execution_id", "created_at"])
        return same
    memory = AgentMemory(agent_id=agent_id, execution_id=execution_id, summary_key=key, **fields)
    AgentMemory.objects.bulk_create([memory], update_conflicts=True, unique_fields=["execution_id"],
                                    update_fields=["agent", "summary", "summary_key", "learnings", "flagged_items"])
    return memory


# --- workspace memory ---------------------------------------------------------------------

MemoryMode = WorkspaceSettings.MemoryMode
MEMORY_QUESTION_CHARS = 1000
MEMORY_ANSWER_CHARS = 2000


def workspace_memory_owner(*, workspace_id: int, user_id: int | None) -> tuple[bool, int | None]:
    """Whether a run of ``user_id`` leaves a workspace memory, and whose it is: the
    workspace's (None) when the mode is ``shared``, the user's when it is ``personal`` and
    the user consented; ``(False, None)`` otherwise. Ask it before reading what a memory
    would hold."""
    mode = workspace_memory_mode(workspace_id=workspace_id)
    if mode == MemoryMode.SHARED:
        return True, None
    if mode == MemoryMode.PERSONAL and memory_consent_given(workspace_id=workspace_id, user_id=user_id):
        return True, user_id
    return False, None


def workspace_memory_from_run(*, workspace_id: int, agent_id, user_id: int | None, execution_id: int,
                              question: str, answer: str, facts: Sequence[str] = (),
                              owner: tuple[bool, int | None] | None = None) -> WorkspaceMemory | None:
    """What a completed run leaves in the workspace's memory, as the workspace's
    ``memory_mode`` allows: nothing (``off``); a personal memory of the user who started
    it, if that user consented (``personal``); a memory shared with the workspace
    (``shared``). The content is the question, the answer and the facts the run
    established, never its raw log. One per run: calling it again writes nothing.
    ``owner``: ``workspace_memory_owner``'s answer, when the caller asked already."""
    question, answer = question.strip(), answer.strip()
    if not question or not answer:
        return None
    kept, owner_id = owner if owner is not None else workspace_memory_owner(workspace_id=workspace_id,
                                                                            user_id=user_id)
    if not kept:
        return None
    lines = [f"Question: {question[:MEMORY_QUESTION_CHARS]}", f"Answer: {answer[:MEMORY_ANSWER_CHARS]}"]
    lines += [f"Fact: {fact[:300]}" for fact in list(facts)[:10]]
    content = "\n".join(lines)
    memory = WorkspaceMemory(workspace_id=workspace_id, user_id=owner_id, agent_id=agent_id, content=content,
                             keywords=" " + " ".join(memory_keywords(content)) + " ",
                             source_execution_id=execution_id)
    try:
        with transaction.atomic():
            memory.save()
    except IntegrityError:  # this run's memory is already written
        return None
    _workspace_memory_trim(workspace_id=workspace_id)
    return memory


MEMORY_TRIM_BATCH = 100


def _workspace_memory_trim(*, workspace_id: int) -> None:
    """Forget the oldest memories past ``RIVER_MEMORY_MAX_PER_WORKSPACE`` (a bounded
    batch per write: each write adds one, so the memory never grows past the cap for long,
    and lowering the cap catches up over the next writes)."""
    cap = int(settings.RIVER_MEMORY_MAX_PER_WORKSPACE)
    oldest = list(WorkspaceMemory.objects.filter(workspace_id=workspace_id).order_by("-created_at", "-id")
                  .values_list("pk", flat=True)[cap:cap + MEMORY_TRIM_BATCH])
    if oldest:
        WorkspaceMemory.objects.filter(pk__in=oldest).delete()


def workspace_memory_delete(*, memory: WorkspaceMemory, actor) -> None:
    """Forget one memory (caller checked the actor may: their own personal memory, or a
    shared one with ``agent:create`` in its workspace). Audited without its content."""
    audit_record(
        organization_id=memory.workspace.organization_id, workspace_id=memory.workspace_id,
        event_type="memory_deleted", actor=actor, agent_id=memory.agent_id,
        details={"memory_id": memory.pk, "personal": memory.personal,
                 "source_execution_id": memory.source_execution_id},
    )
    memory.delete()


def memory_consent_set(*, workspace: Workspace, user, personal: bool) -> MemoryConsent:
    """The user's own consent to personal memory in the workspace. Withdrawing it stops
    new personal memories; those already written stay until deleted."""
    consent, _ = MemoryConsent.objects.update_or_create(workspace=workspace, user=user,
                                                        defaults={"personal": personal})
    return consent
