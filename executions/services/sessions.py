"""Sessions: conversations answered one run at a time, and teams of agents that hand a
conversation to each other (docs/sessions.md).

- ``session_create`` / ``session_update``: open, rename, archive.
- ``session_message_send``: append a user's message; start its run when the session is
  idle, else leave it queued. Caller gets the message and the run (None when queued).
- ``session_run_ended``: the run-end handler. The active run ended (whatever the end):
  record its answer, carry out the hand-off it asked for, or start the next queued
  message. Inside the run's post-processing transaction, under the session's row lock.
- ``transfer_check``: ``transfer_to_agent``'s rules (team, flags, depth, authority).

Concurrency: every change of a session's queue or active run holds its row lock
(``select_for_update``), so a message sent while the active run ends is either started
by the sender or by the handler, never by both and never by neither.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from agents.services import TEAM_MAX_DEPTH
from artifacts.selectors import artifact_placeholder, artifacts_attachable
from executions.journal import event_rows_publish
from executions.models import Execution, ExecutionEvent, ExecutionStep, Session, SessionMessage
from executions.runend import RunEnded
from executions.services.start import MAX_ATTACHMENTS, execution_start
from executions.types import HandOffOrigin, RunRequest, SessionOrigin
from governance.audit import audit_record
from rivercore import limits
from rivercore.contracts import StepStatus, StepType
from rivercore.errors import Conflict, InvalidInput, NotFound
from rivercore.events import RunEvent, agent_transferred_event, message_queued_notice, user_message_event
from rivercore.types.agents import ACTION_LEVEL_ORDER, ActionLevel
from rivercore.types.sessions import (
    TRANSFER_TOOL,
    HandOff,
    SessionContext,
    SessionQuery,
    SessionTurn,
    TeamMember,
    TeamRelation,
)
from telemetry.events import session_event_publish

logger = logging.getLogger("river.executions")

Role, State = SessionMessage.Role, SessionMessage.State
ATTACHMENTS_MAX = MAX_ATTACHMENTS  # the files one message (and so its run) may carry
HISTORY_TURNS_MAX = 10  # the latest turns a run reads as they were (fewer when the token share is spent)
QUERIES_PER_TURN = 3
ROUTING_LOOKBACK = 50  # answers walked back when choosing the agent for the next message
_TEXT_IN_TURN = 2_000  # characters of a question or an answer a turn carries


# --- teams ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TeamAgent:
    id: uuid.UUID
    name: str
    description: str
    parent_id: uuid.UUID | None
    disallow_transfer_to_parent: bool
    disallow_transfer_to_peers: bool
    status: str
    has_version: bool
    action_level: str | None

    @property
    def available(self) -> bool:
        return self.status == Agent.Status.ACTIVE and self.has_version


@dataclass(frozen=True, slots=True)
class Team:
    """A session's team: its root agent and every agent below it."""

    root_id: uuid.UUID
    agents: dict[uuid.UUID, TeamAgent]

    @property
    def root(self) -> TeamAgent:
        return self.agents[self.root_id]

    def relation(self, source_id: uuid.UUID, target_id: uuid.UUID) -> TeamRelation | None:
        source, target = self.agents[source_id], self.agents[target_id]
        if target.parent_id == source.id:
            return TeamRelation.CHILD
        if source.id == self.root_id:
            return None  # the root's parent, if it has one, is outside this session's team
        if source.parent_id == target.id:
            return TeamRelation.PARENT
        if target.id != self.root_id and source.parent_id == target.parent_id:
            return TeamRelation.PEER
        return None

    def refusal(self, source_id: uuid.UUID, target_id: uuid.UUID) -> str | None:
        """Why the agent ``source_id`` may not hand over to ``target_id``, or None."""
        source, target = self.agents[source_id], self.agents.get(target_id)
        if target is None:
            return "that agent is not a member of this session's team"
        if target.id == source.id:
            return f"{source.name} is already the active agent"
        relation = self.relation(source_id, target_id)
        if relation is None:
            return f"{target.name} is not a sub-agent, the parent or a sibling of {source.name}"
        if relation == TeamRelation.PARENT and source.disallow_transfer_to_parent:
            return f"{source.name} may not hand the conversation back to its parent (disallow_transfer_to_parent)"
        if relation == TeamRelation.PEER and source.disallow_transfer_to_peers:
            return f"{source.name} may not hand the conversation to its siblings (disallow_transfer_to_peers)"
        if not target.available:
            return f"{target.name} is {target.status}" + ("" if target.has_version else " with no deployed version")
        return None

    def level(self, agent_id: uuid.UUID) -> ActionLevel:
        """The agent's own action level (its deployed version's); the lowest without one."""
        agent = self.agents.get(agent_id)
        return ActionLevel(agent.action_level) if agent is not None and agent.action_level else ACTION_LEVEL_ORDER[0]

    def raises_authority(self, target_id: uuid.UUID, level: ActionLevel) -> str | None:
        """Why handing a message that runs at ``level`` to ``target_id`` would raise the
        authority it runs with (the target acts at a higher action level), or None."""
        target_level = self.level(target_id)
        if ACTION_LEVEL_ORDER.index(target_level) <= ACTION_LEVEL_ORDER.index(level):
            return None
        return (f"{self.agents[target_id].name} acts at {target_level.value}, above this message's {level.value}; "
                "a hand-off never raises the authority a request runs with")

    def targets(self, source_id: uuid.UUID, level: ActionLevel | None = None) -> list[TeamMember]:
        """The agents ``source_id`` may hand over to at ``level`` (its own by default):
        children first, none acting above ``level``."""
        level = level or self.level(source_id)
        members = []
        for agent in self.agents.values():
            if (agent.id != source_id and self.refusal(source_id, agent.id) is None
                    and self.raises_authority(agent.id, level) is None):
                relation = self.relation(source_id, agent.id)
                assert relation is not None
                members.append(TeamMember(agent_id=str(agent.id), name=agent.name[:limits.NAME],
                                          description=agent.description[:limits.DESCRIPTION], relation=relation))
        order = {TeamRelation.CHILD: 0, TeamRelation.PARENT: 1, TeamRelation.PEER: 2}
        return sorted(members, key=lambda m: (order[m.relation], m.name))

    def resumable(self, agent_id: uuid.UUID) -> bool:
        """Whether a new message may go back to ``agent_id`` (spec 002): no agent on its
        way up to the root forbids handing back to its parent, so the conversation can
        always find its way back to the root."""
        current = self.agents.get(agent_id)
        while current is not None and current.id != self.root_id:
            if current.disallow_transfer_to_parent:
                return False
            current = self.agents.get(current.parent_id) if current.parent_id else None
        return current is not None


_TEAM_FIELDS = ("pk", "name", "description", "parent_agent_id", "disallow_transfer_to_parent",
                "disallow_transfer_to_peers", "status", "current_version_id", "current_version__action_level")


def team_load(*, root_id: uuid.UUID) -> Team:
    """The root and everything below it: one query per level, at most the team depth
    limit deep (a cycle cannot be configured; ``seen`` guards against one anyway)."""
    agents: dict[uuid.UUID, TeamAgent] = {}
    level = list(Agent.objects.filter(pk=root_id).values_list(*_TEAM_FIELDS))
    depth = 0
    while level and depth <= TEAM_MAX_DEPTH:
        ids = []
        for pk, name, description, parent_id, no_parent, no_peers, status, version_id, action_level in level:
            if pk in agents:
                continue
            agents[pk] = TeamAgent(id=pk, name=name, description=description,
                                   parent_id=None if pk == root_id else parent_id,
                                   disallow_transfer_to_parent=no_parent, disallow_transfer_to_peers=no_peers,
                                   status=status, has_version=version_id is not None, action_level=action_level)
            ids.append(pk)
        depth += 1
        level = list(Agent.objects.filter(parent_agent_id__in=ids).values_list(*_TEAM_FIELDS)) if ids else []
    if root_id not in agents:
        raise NotFound("The session's agent no longer exists.")
    return Team(root_id=root_id, agents=agents)


def session_agent_next(*, session: Session, team: Team) -> TeamAgent:
    """The agent the next message goes to (spec 002): walking the session's answers from
    the newest, the first agent still in the team, available and resumable; else the root."""
    authors = (SessionMessage.objects.filter(session=session, role=Role.AGENT, agent__isnull=False)
               .order_by("-sequence").values_list("agent_id", flat=True)[:ROUTING_LOOKBACK])
    for agent_id in authors:
        member = team.agents.get(agent_id)
        if member is not None and member.available and team.resumable(agent_id):
            return member
    return team.root


# --- sessions -------------------------------------------------------------------------------


def session_create(*, workspace, agent: Agent, user, title: str = "") -> Session:
    """Open a session with ``agent`` as its entry point (the root of its team, if it has
    one). The caller checked that ``user`` may run agents in ``workspace``."""
    if agent.workspace_id != workspace.pk:
        raise InvalidInput("No agent with that id in this workspace.",
                           details={"agent": ["no agent with this id in the workspace"]})
    if agent.status != Agent.Status.ACTIVE or agent.current_version_id is None:
        raise InvalidInput(f"Agent {agent.name!r} is {agent.status}; a session needs an active agent with a "
                           "deployed version.", code="agent_not_active",
                           details={"agent": [f"status is {agent.status}"]})
    now = timezone.now()
    return Session.objects.create(workspace=workspace, agent=agent, title=title.strip()[:limits.NAME],
                                  created_by=user, created_at=now, updated_at=now)


def session_update(*, session: Session, title: str | None = None, archived: bool | None = None) -> Session:
    """Rename and archive or unarchive. An archived session refuses new messages; a run
    already under way, and messages already queued, still go on."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        fields = []
        if title is not None:
            locked.title = title.strip()[:limits.NAME]
            fields.append("title")
        if archived is not None and archived != locked.archived:
            locked.archived_at = timezone.now() if archived else None
            fields.append("archived_at")
        if fields:
            locked.updated_at = timezone.now()
            locked.save(update_fields=[*fields, "updated_at"])
    return locked


def session_message_send(*, session: Session, user, content: str,
                         attachments: list[int] | None = None) -> tuple[SessionMessage, Execution | None]:
    """Append a user's message. When no run of the session is active it starts now, with
    the agent chosen by ``session_agent_next``, and the run is returned; otherwise it
    waits, queued in order, and the active run's end starts it (``session_run_ended``).

    Refused with nothing written: an archived session (409), an empty or oversized
    message, too many attachments, or an agent that can no longer run (400)."""
    text = content.strip()
    if not text:
        raise InvalidInput("A message needs some text.", details={"content": ["This field may not be blank."]})
    if len(text) > limits.PROMPT:
        raise InvalidInput("The message is too long.", details={"content": [f"at most {limits.PROMPT} characters"]})
    attachments = list(attachments or [])
    if len(attachments) > ATTACHMENTS_MAX or any(isinstance(a, bool) or not isinstance(a, int) or a < 1
                                                 for a in attachments):
        raise InvalidInput("Attachments are a list of artifact ids.",
                           details={"attachments": [f"at most {ATTACHMENTS_MAX} positive artifact ids"]})
    # Files of the session's workspace only (its members may read them all); another
    # workspace's id reads like one that does not exist.
    attached = artifacts_attachable(workspace_id=session.workspace_id, artifact_ids=attachments,
                                    field="attachments") if attachments else []
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        if locked.archived:
            raise Conflict("This session is archived: unarchive it (PATCH archived=false) to send a message.",
                           code="session_archived", details={"session": ["archived"]})
        message = SessionMessage.objects.create(
            session=locked, sequence=locked.next_sequence, role=Role.USER, state=State.QUEUED, content=text,
            attachments=[a.pk for a in attached], created_by=user,
            references={"attachments": [_attachment_ref(a) for a in attached]} if attached else {},
        )
        locked.next_sequence += 1
        if not locked.title:
            locked.title = text.splitlines()[0][:80]
        execution = None
        if locked.active_execution_id is None:
            execution = _message_start(locked, message)  # an agent that cannot run: 400, nothing written
        elif _active_run_settled(locked):
            execution = _advance(locked)  # its end was missed: the oldest queued message goes first
            message.refresh_from_db(fields=["state"])
            if message.state != State.STARTED:
                execution = None
        locked.updated_at = timezone.now()
        locked.save(update_fields=["next_sequence", "title", "active_execution", "summary", "summary_through",
                                   "updated_at"])
        if execution is None:
            session_event_publish(session_id=locked.pk, event=message_queued_notice(
                session_id=locked.pk, message_id=message.pk, sequence=message.sequence, content=message.content,
                attachments=list(message.attachments or [])))
    return message, execution


def _attachment_ref(artifact) -> dict:
    """How a message names a file it carried: its placeholder (spec 002: the part that
    held the file becomes text naming the artifact) and its name, for the history."""
    return {"artifact_id": artifact.pk, "name": artifact.name, "placeholder": artifact_placeholder(artifact)}


def message_text_with_attachments(message: SessionMessage) -> str:
    """A user's message as later turns read it: its text, then a placeholder per file."""
    notes = [str(ref.get("placeholder") or "") for ref in (message.references or {}).get("attachments") or []]
    return "\n".join([message.content, *[note for note in notes if note]])


def _active_run_settled(session: Session) -> bool:
    """The active run ended and was post-processed, yet is still marked active: its
    run-end handler failed (logged and rolled back). The session must not stall on it."""
    return Execution.objects.filter(pk=session.active_execution_id, post_processed_at__isnull=False,
                                    status__in=Execution.TERMINAL).exists()


def session_run_ended(ended: RunEnded) -> None:
    """Run-end handler: a session's run ended (completed, failed, cancelled, expired...).
    Runs inside its post-processing transaction. Only the session's active run moves
    the session on; anything else (a run already handled) changes nothing."""
    if ended.session_id is None:
        return
    with transaction.atomic():
        _session_run_ended(ended)


def _session_run_ended(ended: RunEnded) -> None:
    session = Session.objects.select_for_update().filter(pk=ended.session_id).first()
    if session is None or session.active_execution_id != ended.execution_id:
        return
    execution = Execution.objects.select_related("agent", "workspace").get(pk=ended.execution_id)
    message_id = (execution.context.get("session") or {}).get("message_id")
    message = SessionMessage.objects.filter(pk=message_id, session=session).first()
    if message is not None:
        transfer = _transfer_requested(execution)
        _answer_record(session, message, execution, transfer=transfer)
        if transfer is not None and _handoff_start(session, message, execution, transfer):
            session.updated_at = timezone.now()
            session.save(update_fields=["next_sequence", "active_execution", "summary", "summary_through",
                                        "updated_at"])
            return
        message.state = State.ANSWERED
        message.save(update_fields=["state"])
    _advance(session)
    session.updated_at = timezone.now()
    session.save(update_fields=["next_sequence", "active_execution", "summary", "summary_through", "updated_at"])


def _advance(session: Session) -> Execution | None:
    """Caller holds the session's lock; no run of it is active any more. Start the oldest
    queued message; one whose agent can no longer run is marked failed, with an answer
    saying why, and the next one is tried."""
    session.active_execution = None
    while True:
        message = (SessionMessage.objects.filter(session=session, role=Role.USER, state=State.QUEUED)
                   .select_related("created_by").order_by("sequence").first())
        if message is None:
            return None
        try:
            with transaction.atomic():
                return _message_start(session, message)
        except (InvalidInput, NotFound) as exc:
            logger.warning("session %s: message %s not started: %s", session.pk, message.pk, exc.message)
            message.state = State.FAILED
            message.save(update_fields=["state"])
            _append(session, role=Role.AGENT, state=State.ANSWERED, reply_to=message, agent_id=session.agent_id,
                    content=f"This message could not be answered: {exc.message}")


def _earlier_attachments(session: Session, message: SessionMessage) -> list[int]:
    """The files of the session's earlier messages, newest first (at most
    ``ATTACHMENTS_MAX``): a follow-up may query a table sent before ("and by region?")."""
    found: list[int] = []
    earlier = (SessionMessage.objects.filter(session=session, role=Role.USER, sequence__lt=message.sequence)
               .exclude(attachments=[]).order_by("-sequence").values_list("attachments", flat=True)[:ATTACHMENTS_MAX])
    for ids in earlier:
        for pk in ids or []:
            if isinstance(pk, int) and pk not in found and pk not in (message.attachments or []):
                found.append(pk)
    return found[:ATTACHMENTS_MAX]


def _message_start(session: Session, message: SessionMessage) -> Execution:
    """Start the run for ``message`` (caller holds the session's lock): the agent that
    answered last if it may still take the conversation, else the team's root."""
    team = team_load(root_id=session.agent_id)
    member = session_agent_next(session=session, team=team)
    agent = Agent.objects.select_related("workspace").get(pk=member.id)
    origin = SessionOrigin(
        user_id=message.created_by_id, requester_id=message.created_by_id, session_id=session.pk,
        context=_session_context(session, team, agent.pk, message.pk, handoff=None),
        earlier_artifact_ids=_earlier_attachments(session, message),
    )
    execution = execution_start(agent=agent, request=RunRequest(
        agent_id=agent.pk, origin=origin, prompt=message.content, attachments=list(message.attachments or [])))
    _first_event(execution, user_message_event(
        session_id=session.pk, message_id=message.pk, sequence=message.sequence, content=message.content,
        attachments=list(message.attachments or []), author_id=message.created_by_id, agent_id=agent.pk,
    ))
    message.state, message.execution, message.started_at = State.STARTED, execution, timezone.now()
    message.save(update_fields=["state", "execution", "started_at"])
    session.active_execution = execution
    return execution


def _first_event(execution: Execution, event: RunEvent) -> None:
    """The run's first event (seq 1), written with the run; ``run_started`` follows it."""
    row = ExecutionEvent.objects.create(execution=execution, seq=1, event_type=event.type.value,
                                        payload=event.payload)
    event_rows_publish(execution, [row])


def _append(session: Session, **fields) -> SessionMessage:
    """Append an entry (caller holds the session's lock and saves ``next_sequence``)."""
    entry = SessionMessage.objects.create(session=session, sequence=session.next_sequence, **fields)
    session.next_sequence += 1
    return entry


# --- answers and hand-offs ------------------------------------------------------------------


def _answer_record(session: Session, message: SessionMessage, execution: Execution, *,
                   transfer: dict | None = None) -> SessionMessage:
    """The ended run's answer as the agent's entry in the session, with the queries it ran
    and, when it handed the conversation over, to whom and why (the page shows it)."""
    result = execution.result or {}
    content = str(result.get("summary") or "")
    if not content:
        error = execution.error or {}
        content = str(error.get("message") or f"The run ended {execution.status}.")
    return _append(session, role=Role.AGENT, state=State.ANSWERED, reply_to=message, execution=execution,
                   agent_id=execution.agent_id, content=content[:limits.PROMPT],
                   references={"status": execution.status, "outcome": execution.outcome,
                               "queries": _queries_of(execution),
                               **({"handoff": {"to_agent_name": str(transfer.get("agent_name") or "")[:limits.NAME],
                                               "reason": str(transfer.get("reason") or "")[:limits.DESCRIPTION]}}
                                  if transfer else {})})


def _queries_of(execution: Execution) -> list[dict]:
    """The queries a run ran (its last ``QUERIES_PER_TURN``): the question each was
    planned from (``generate_query``'s prompt), the SQL, the source and the result's size."""
    rows = (ExecutionStep.objects.filter(execution=execution, tool_name__in=["generate_query", "execute_query"],
                                         step_type__in=[StepType.TOOL_CALL, StepType.OBSERVATION])
            .order_by("step_number").only("step_type", "tool_name", "status", "input", "output"))
    queries: list[dict] = []
    question = ""
    for row in rows:
        arguments = row.input if isinstance(row.input, dict) else {}
        if row.tool_name == "generate_query" and row.step_type == StepType.TOOL_CALL:
            question = str(arguments.get("user_prompt") or "")[:_TEXT_IN_TURN]
        elif (row.tool_name == "execute_query" and row.step_type == StepType.OBSERVATION
              and row.status == StepStatus.COMPLETED and arguments.get("query")):
            result = (row.output or {}).get("result") if isinstance(row.output, dict) else None
            result = result if isinstance(result, dict) else {}
            source = arguments.get("data_source_id")
            total = result.get("total_rows")
            queries.append(SessionQuery(
                question=question, query=str(arguments["query"])[:limits.PROMPT],
                data_source_id=source if isinstance(source, int) else None,
                total_rows=total if isinstance(total, int) else None,
                columns=[str(c)[:limits.NAME] for c in (result.get("columns") or [])][:limits.LIST_ITEMS],
            ).model_dump(mode="json"))
    return queries[-QUERIES_PER_TURN:]


def _transfer_requested(execution: Execution) -> dict | None:
    """The hand-off a completed run ended with (its ``transfer_to_agent`` call's result)."""
    if execution.status != Execution.Status.COMPLETED:
        return None
    step = (ExecutionStep.objects.filter(execution=execution, step_type=StepType.OBSERVATION,
                                         tool_name=TRANSFER_TOOL, status=StepStatus.COMPLETED)
            .order_by("-step_number").only("output").first())
    result = (step.output or {}).get("result") if step is not None and isinstance(step.output, dict) else None
    return result if isinstance(result, dict) and result.get("agent_id") else None


def _session_owner_id(session: Session, message: SessionMessage) -> int | None:
    """The person answerable for a hand-off's run: the session's owner (its sender when
    the owner's account is gone). An agent handing over never launders who asked."""
    return session.created_by_id if session.created_by_id is not None else message.created_by_id


def _handoff_start(session: Session, message: SessionMessage, sender: Execution, transfer: dict) -> bool:
    """Start the receiving agent's run for the same message (caller holds the session's
    lock). The rules are checked again (the team may have changed since the call); a
    hand-off that cannot happen is recorded as an answer saying why, and False returned."""
    depth = int((sender.context.get("handoff") or {}).get("depth", 0)) + 1
    team = team_load(root_id=session.agent_id)
    try:
        target_id = uuid.UUID(str(transfer["agent_id"]))
    except ValueError:
        target_id = None
    problem = None
    if target_id is None or sender.agent_id not in team.agents:
        problem = "the agents are no longer in this session's team"
    elif depth > settings.RIVER_MAX_HANDOFFS_PER_MESSAGE:
        problem = f"the hand-off limit per message ({settings.RIVER_MAX_HANDOFFS_PER_MESSAGE}) was reached"
    else:
        problem = team.refusal(sender.agent_id, target_id)
    level = ActionLevel(str(transfer.get("action_level") or ACTION_LEVEL_ORDER[0].value))
    if problem is None and target_id is not None:
        problem = team.raises_authority(target_id, level)  # the target's level may have been raised since the call
    target = Agent.objects.select_related("workspace").filter(pk=target_id, workspace_id=session.workspace_id).first()
    if problem is None and target is None:
        problem = "that agent no longer exists"
    if problem is None:
        assert target is not None and target_id is not None
        handoff = HandOff(from_agent_id=str(sender.agent_id), from_agent_name=sender.agent.name[:limits.NAME],
                          reason=str(transfer.get("reason") or "")[:limits.DESCRIPTION], depth=depth)
        try:
            with transaction.atomic():
                origin = HandOffOrigin(
                    user_id=message.created_by_id, requester_id=_session_owner_id(session, message),
                    session_id=session.pk, from_execution_id=sender.pk, from_agent_id=str(sender.agent_id),
                    depth=depth, action_level_cap=level,
                    context=_session_context(session, team, target.pk, message.pk, handoff=handoff, level=level),
                    earlier_artifact_ids=_earlier_attachments(session, message),
                )
                receiver = execution_start(agent=target, request=RunRequest(
                    agent_id=target.pk, origin=origin, prompt=message.content,
                    attachments=list(message.attachments or [])))  # the receiver gets the message's files too
        except InvalidInput as exc:
            problem = exc.message
    if problem is not None:
        logger.warning("session %s: hand-off of run %s not carried out: %s", session.pk, sender.pk, problem)
        _append(session, role=Role.AGENT, state=State.ANSWERED, reply_to=message, agent_id=sender.agent_id,
                content=f"The hand-off to {transfer.get('agent_name') or 'another agent'} did not happen: {problem}.")
        return False
    assert target is not None
    _first_event(receiver, agent_transferred_event(
        session_id=session.pk, message_id=message.pk, from_execution_id=sender.pk, from_agent_id=sender.agent_id,
        from_agent_name=sender.agent.name, to_agent_id=target.pk, to_agent_name=target.name,
        reason=handoff.reason, depth=depth, action_level=level.value,
    ))
    audit_record(
        organization_id=sender.workspace.organization_id, workspace_id=session.workspace_id,
        event_type="agent_transferred", execution_id=sender.pk, agent_id=sender.agent_id,
        details={"session_id": session.pk, "message_id": message.pk, "to_agent_id": str(target.pk),
                 "to_execution_id": receiver.pk, "depth": depth, "action_level_cap": level.value,
                 "reason": handoff.reason},
    )
    session.active_execution = receiver
    return True


def transfer_check(*, execution_id: int, source_agent_id: uuid.UUID, reference: str, action_level: str,
                   reason: str = "") -> dict:
    """``transfer_to_agent``'s decision for a running session run: the target (an id or
    an exact name of a member of the session's team) and the level it will act at.

    Raises ``NotFound`` for an agent outside the team (another workspace's included) and
    ``InvalidInput`` for a refused transfer (not in a session, the depth limit, the
    relation or the flags, an inactive agent, and a target whose own action level is
    above ``action_level``, the sender's for this message: a hand-off never raises
    authority). Writes nothing: the run's end carries the hand-off out
    (``session_run_ended``)."""
    row = Execution.objects.filter(pk=execution_id).values("session_id", "session__agent_id", "context").first()
    if row is None or row["session_id"] is None:
        raise InvalidInput("refused: transfer_to_agent hands over a session's conversation, and this run is not "
                           "part of a session.", code="not_in_session")
    depth = int(((row["context"] or {}).get("handoff") or {}).get("depth", 0))
    if depth >= settings.RIVER_MAX_HANDOFFS_PER_MESSAGE:
        raise InvalidInput(f"refused: this message was already handed over {depth} time(s), the limit "
                           f"({settings.RIVER_MAX_HANDOFFS_PER_MESSAGE}). Answer it yourself.",
                           code="handoff_depth_exceeded", details={"agent": ["hand-off limit reached"]})
    team = team_load(root_id=row["session__agent_id"])
    target = _team_member(team, reference)
    if source_agent_id not in team.agents:
        raise InvalidInput("refused: this agent is no longer in the session's team.", code="transfer_refused")
    problem = team.refusal(source_agent_id, target.id)
    if problem:
        raise InvalidInput(f"refused: {problem}.", code="transfer_refused", details={"agent": [problem]})
    raised = team.raises_authority(target.id, ActionLevel(action_level))
    if raised:
        raise InvalidInput(f"refused: {raised}. Answer within your own level, or tell the user which agent to ask.",
                           code="transfer_raises_authority", details={"agent": [raised]})
    level = team.level(target.id)
    relation = team.relation(source_agent_id, target.id)
    assert relation is not None
    return {"agent_id": str(target.id), "agent_name": target.name, "relation": relation.value, "depth": depth + 1,
            "action_level": level.value, "reason": reason,
            "message": f"Handed the conversation to {target.name}" + (f": {reason}" if reason else ".")}


def _team_member(team: Team, reference: str) -> TeamAgent:
    try:
        found = team.agents.get(uuid.UUID(reference.strip()))
    except ValueError:
        found = None
    if found is None:
        named = [agent for agent in team.agents.values() if agent.name == reference]
        if len(named) > 1:
            raise InvalidInput(f"refused: more than one agent of the team is named {reference!r}; name it by its id.",
                               code="ambiguous_agent", details={"agent": ["ambiguous name"]})
        found = named[0] if named else None
    if found is None:
        raise NotFound(f"No agent {reference!r} in this session's team.", details={"agent": ["not found"]})
    return found


# --- history --------------------------------------------------------------------------------


def _session_context(session: Session, team: Team, agent_id: uuid.UUID, message_id: int, *,
                     handoff: HandOff | None, level: ActionLevel | None = None) -> SessionContext:
    summary, turns = history_build(session=session)
    return SessionContext(session_id=session.pk, message_id=message_id, summary=summary, turns=turns,
                          team=team.targets(agent_id, level), handoff=handoff)


def _tokens(turn: SessionTurn) -> int:
    return (len(turn.question) + len(turn.answer) + sum(len(q.query) + len(q.question) for q in turn.queries)) // 4 + 8


def _summary_line(turn: SessionTurn) -> str:
    def flat(text: str, limit: int) -> str:
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    line = f"Q: {flat(turn.question, 200)} A: {flat(turn.answer, 300)}"
    if turn.queries:
        line += f" (query: {flat(turn.queries[-1].query, 300)})"
    return line


def _summary_fit(summary: str, limit: int) -> str:
    """Keep the newest lines within ``limit`` characters; say that older ones were dropped."""
    if len(summary) <= limit:
        return summary
    marker = "(older turns omitted)"
    kept: list[str] = []
    size = len(marker) + 1
    for line in reversed([line for line in summary.splitlines() if line and line != marker]):
        if size + len(line) + 1 > limit:
            if not kept:  # the newest line alone is too long: keep its start
                kept.append(line[: limit - size - 1] + "…")
            break
        kept.insert(0, line)
        size += len(line) + 1
    return "\n".join([marker, *kept])


def history_build(*, session: Session) -> tuple[str, list[SessionTurn]]:
    """The conversation a new run of the session reads: the stored summary, and the latest
    answered turns as they were, newest first until ``RIVER_SESSION_HISTORY_TOKENS`` (and
    ``HISTORY_TURNS_MAX`` turns) are used. Older turns not yet summarised are folded into
    the summary now, one deterministic line each, and stored on the session (caller holds
    its lock and saves ``summary``/``summary_through``), so a long session reads a bounded
    history and the rows read here stay few: only the turns since the last fold."""
    through = session.summary_through
    rows = (SessionMessage.objects.filter(session=session)
            .filter(Q(role=Role.USER, sequence__gt=through) | Q(role=Role.AGENT, reply_to__sequence__gt=through))
            .select_related("agent").order_by("sequence"))
    asked: dict[int, tuple[SessionMessage, list[SessionMessage]]] = {}
    for row in rows:
        if row.role == Role.USER:
            if row.state in (State.ANSWERED, State.FAILED):
                asked[row.pk] = (row, [])
        elif row.reply_to_id in asked:
            asked[row.reply_to_id][1].append(row)
    turns: list[tuple[int, SessionTurn]] = []
    for user, replies in asked.values():
        final = replies[-1] if replies else None
        queries = [q for reply in replies for q in (reply.references or {}).get("queries") or []]
        turns.append((user.sequence, SessionTurn(
            question=message_text_with_attachments(user)[:_TEXT_IN_TURN],
            answer=final.content[:_TEXT_IN_TURN] if final else "",
            agent_name=(final.agent.name if final is not None and final.agent is not None else "")[:limits.NAME],
            queries=[SessionQuery.model_validate(q) for q in queries[-QUERIES_PER_TURN:]],
        )))
    budget, used, keep = settings.RIVER_SESSION_HISTORY_TOKENS, 0, 0
    for _sequence, turn in reversed(turns):
        cost = _tokens(turn)
        if keep >= HISTORY_TURNS_MAX or used + cost > budget:
            break
        used += cost
        keep += 1
    folded, kept = turns[: len(turns) - keep], turns[len(turns) - keep:]
    if folded:
        lines = "\n".join(_summary_line(turn) for _sequence, turn in folded)
        summary = f"{session.summary}\n{lines}" if session.summary else lines
        session.summary = _summary_fit(summary, settings.RIVER_SESSION_SUMMARY_CHARS)
        session.summary_through = folded[-1][0]
    return session.summary, [turn for _sequence, turn in kept]
