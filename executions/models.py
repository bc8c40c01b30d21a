from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models.fields.json import KT
from django.utils import timezone

from common.fields import PydanticJSONField
from rivercore.contracts import StepStatus, TriggerType
from rivercore.outcome import Outcome
from rivercore.types.runs import RunStatus

# A run's outcome as choices (rivercore.outcome.Outcome with labels); the API names it RunOutcomeEnum.
OUTCOME_CHOICES = [(o.value, o.value.replace("_", " ").capitalize()) for o in Outcome]


# What a text search of runs reads (executions.selectors.executions_search): the prompt
# and the answer (the result's summary); the same lookups serve SQLite's LIKE.
SEARCHED_FIELDS = ("input_prompt", KT("result__summary"))
SEARCHED_LOOKUPS = ("input_prompt", "result__summary")


class Execution(models.Model):
    class Status(models.TextChoices):
        # The core's RunStatus, with labels; the stored values are the same strings.
        QUEUED = RunStatus.QUEUED.value, "Queued"
        RUNNING = RunStatus.RUNNING.value, "Running"
        AWAITING_APPROVAL = RunStatus.AWAITING_APPROVAL.value, "Awaiting approval"
        AWAITING_INTERACTION = RunStatus.AWAITING_INTERACTION.value, "Awaiting interaction"
        AWAITING_CHILD = RunStatus.AWAITING_CHILD.value, "Awaiting delegated run"
        COMPLETED = RunStatus.COMPLETED.value, "Completed"
        FAILED = RunStatus.FAILED.value, "Failed"
        MAX_TURNS_EXCEEDED = RunStatus.MAX_TURNS_EXCEEDED.value, "Max turns exceeded"
        BUDGET_EXCEEDED = RunStatus.BUDGET_EXCEEDED.value, "Budget exceeded"
        TIMEOUT = RunStatus.TIMEOUT.value, "Timeout"
        CANCELLED = RunStatus.CANCELLED.value, "Cancelled"
        APPROVAL_EXPIRED = RunStatus.APPROVAL_EXPIRED.value, "Approval expired"

    TERMINAL = frozenset(
        {
            Status.COMPLETED,
            Status.FAILED,
            Status.MAX_TURNS_EXCEEDED,
            Status.BUDGET_EXCEEDED,
            Status.TIMEOUT,
            Status.CANCELLED,
            Status.APPROVAL_EXPIRED,
        }
    )

    # Paused: no worker holds the run until an answer, a decision or its child run's end.
    PAUSED = frozenset({Status.AWAITING_APPROVAL, Status.AWAITING_INTERACTION, Status.AWAITING_CHILD})

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="executions")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="executions")
    agent_version = models.ForeignKey("agents.AgentVersion", on_delete=models.PROTECT, related_name="executions")
    # The canary trial the run was started under (docs/changing-safely.md) and whether it
    # drew the canary's version; chosen once, at creation, and never changed.
    canary = models.ForeignKey("agents.AgentCanary", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="executions")
    canary_arm = models.BooleanField(default=False, db_default=False)
    trigger_type = models.CharField(max_length=20, choices=[(t.value, t.value.capitalize()) for t in TriggerType],
                                    default=TriggerType.MANUAL.value)
    trigger_source = models.CharField(max_length=200, default="ui")
    trigger_payload = models.JSONField(default=dict, blank=True)
    trigger_id = models.UUIDField(null=True, blank=True)
    # The run that started this one through delegate_to_agent (docs/delegation.md), and
    # that call's id: a parent's call starts at most one child (uniq_delegation_call).
    parent_execution_id = models.BigIntegerField(null=True, blank=True)
    parent_call_id = models.CharField(max_length=100, blank=True)
    # Who the run acts as (its roles are read live from this user): the person who started
    # it, or a trigger's service identity.
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # The person responsible for the run (docs/security.md): the person who clicked, a key's
    # owner, a trigger's responsible person, the parent or upstream run's requester, a
    # session's owner. Never the approver of the run's own actions.
    requester = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    # The conversation this run answers in (docs/sessions.md), or null.
    session = models.ForeignKey("executions.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="executions")
    input_prompt = models.TextField(blank=True)
    # Indexed together with workspace and with lease_expires_at (Meta.indexes), not alone.
    status = models.CharField(max_length=30, choices=Status.choices, default=Status.QUEUED)
    # Whether the run did the job (rivercore.outcome, docs/engine.md): null until the run
    # ends, set in the same write as its terminal status.
    outcome = models.CharField(max_length=20, choices=OUTCOME_CHOICES, null=True, blank=True)
    turn_count = models.PositiveIntegerField(default=0)
    tokens_input = models.PositiveBigIntegerField(default=0)
    tokens_output = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    cost_unknown = models.BooleanField(default=False)
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Lease: the worker holding lease_token may run the loop until lease_expires_at.
    lease_token = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Claims of the current segment (reset when the run pauses); bounded by
    # RIVER_MAX_SEGMENT_ATTEMPTS so infrastructure faults cannot re-queue it forever.
    attempts = models.PositiveIntegerField(default=0)
    # When a run_segment message was last sent for this run: the watchdog sends it
    # again when a queued run's message is older than its grace (lost or never sent).
    published_at = models.DateTimeField(null=True, blank=True)
    # Class of the last infrastructure error that interrupted a segment (no message).
    infra_error = models.CharField(max_length=200, blank=True)
    # W3C traceparent of the run's root span (its first traced segment): every later
    # segment's spans join that trace. Empty while tracing is off.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    # Built once per execution by the context builder: system prompt, tools, request.
    context = models.JSONField(default=dict, blank=True)
    # Written once when the run pauses for approval or interaction.
    context_snapshot = models.JSONField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    error = models.JSONField(null=True, blank=True)
    post_processed_at = models.DateTimeField(null=True, blank=True)
    # search_vector(*SEARCHED_FIELDS), stored (common/search.py): written by a PostgreSQL
    # trigger on insert and on every update of the prompt or the result (migration 0017),
    # whatever wrote the row; always null on SQLite, which searches with LIKE.
    search_vector = SearchVectorField(null=True, editable=False)

    class Meta:
        ordering = ["-queued_at"]
        indexes = [
            models.Index(fields=["workspace", "status"]),
            models.Index(fields=["workspace", "outcome"], name="execution_ws_outcome_idx"),
            models.Index(fields=["status", "lease_expires_at"]),
            models.Index(fields=["agent", "-queued_at"]),
            models.Index(fields=["parent_execution_id"], name="execution_parent_idx"),
            # The search box and the runs list's text filter (common/search.py): prompt and answer.
            GinIndex(fields=["search_vector"], name="execution_search_vector_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["parent_execution_id", "parent_call_id"], condition=~models.Q(parent_call_id=""),
                name="uniq_delegation_call",
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.agent_id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def total_tokens(self) -> int:
        return self.tokens_input + self.tokens_output


class ExecutionStep(models.Model):
    """One entry of the run's trace (the spec's steps entry). Appended, never rewritten."""

    class StepType(models.TextChoices):
        REASONING = "reasoning", "Reasoning"
        TOOL_CALL = "tool_call", "Tool call"
        OBSERVATION = "observation", "Observation"
        INTERACTION = "interaction", "Interaction"
        GOVERNANCE_CHECK = "governance_check", "Governance check"
        ERROR = "error", "Error"
        FINAL_ANSWER = "final_answer", "Final answer"

    # No index of its own: uniq_step_number (execution, step_number) serves lookups by run.
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="steps", db_index=False)
    step_number = models.PositiveIntegerField()
    turn = models.PositiveIntegerField(default=0)
    step_type = models.CharField(max_length=30, choices=StepType.choices)
    tool_name = models.CharField(max_length=100, blank=True)
    tool_category = models.CharField(max_length=20, blank=True)
    call_id = models.CharField(max_length=100, blank=True)
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    model_used = models.CharField(max_length=200, blank=True)
    model_tier = models.CharField(max_length=20, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    tokens = models.JSONField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=20, default=StepStatus.COMPLETED.value)  # the engine's StepStatus
    governance_decision = models.CharField(max_length=30, blank=True)
    error = models.TextField(blank=True)
    # Chat messages this step adds to the conversation (rebuilds history on resume).
    messages = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["execution", "step_number"]
        constraints = [models.UniqueConstraint(fields=["execution", "step_number"], name="uniq_step_number")]

    def __str__(self) -> str:
        return f"{self.execution_id}#{self.step_number} {self.step_type}"


class ExecutionSegment(models.Model):
    """One stretch of a run held by a worker: appended by the claim that starts it, its
    end written once by the segment's end (a pause, the run's end, or a release after an
    infrastructure error). The time between one segment's end and the next one's start is
    a wait (for approval, a person's answer, a delegated run, a retry); run time figures
    add up segments only (``executions.selectors.execution_run_time``)."""

    class EndedAs(models.TextChoices):
        # A pause: the run status it paused in.
        AWAITING_APPROVAL = RunStatus.AWAITING_APPROVAL.value, "Paused for approval"
        AWAITING_INTERACTION = RunStatus.AWAITING_INTERACTION.value, "Paused for a person's answer"
        AWAITING_CHILD = RunStatus.AWAITING_CHILD.value, "Paused for a delegated run"
        # The run ended in this segment (its terminal status is on the run).
        ENDED = "ended", "Run ended"
        # An infrastructure error handed the run back to the queue, or its lease ran out.
        INTERRUPTED = "interrupted", "Interrupted"

    # No index of its own: uniq_segment_number (execution, number) serves lookups by run.
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="segments", db_index=False)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_as = models.CharField(max_length=30, choices=EndedAs.choices, blank=True)

    class Meta:
        ordering = ["execution", "number"]
        constraints = [models.UniqueConstraint(fields=["execution", "number"], name="uniq_segment_number")]

    def __str__(self) -> str:
        return f"{self.execution_id} segment {self.number}"


class ExecutionEvent(models.Model):
    """The live feed, sequence-numbered per run so a client can resume from a seq."""

    # No index of its own: uniq_event_seq (execution, seq) serves lookups by run.
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    event_type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["execution", "seq"]
        constraints = [models.UniqueConstraint(fields=["execution", "seq"], name="uniq_event_seq")]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.seq} {self.event_type}"


class LLMProvider(models.Model):
    """One configured model provider (the spec's provider configuration table)."""

    organization = models.ForeignKey("tenancy.Organization", on_delete=models.CASCADE, related_name="llm_providers")
    provider_name = models.CharField(max_length=50)
    api_key_encrypted = models.TextField(blank=True, default="")
    base_url = models.URLField(max_length=500, blank=True)
    # The spec calls this "models": tier -> model id, e.g. {"fast": "openai/gpt-4o-mini", "balanced": "openai/gpt-4o"}
    tier_models = PydanticJSONField(schema=dict[str, str], default=dict)
    priority = models.PositiveIntegerField(default=1)
    max_retries = models.PositiveIntegerField(default=2)
    timeout_seconds = models.PositiveIntegerField(default=30)
    rate_limit_rpm = models.PositiveIntegerField(default=60)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name, verbose_name_plural = "LLM provider", "LLM providers"  # not Django's "Llm providers"
        ordering = ["organization", "priority"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "provider_name"], name="uniq_provider_name")
        ]

    def __str__(self) -> str:
        return f"{self.provider_name} (priority {self.priority})"


class ProviderCallWindow(models.Model):
    """Requests sent to one provider in one clock minute: the counter behind
    ``rate_limit_rpm``, shared by every web and Celery process. One row per provider
    and minute, bumped by a single conditional upsert (executions.providers)."""

    provider_key = models.CharField(max_length=200)  # the router's health key, organization-scoped
    window_start = models.BigIntegerField()  # epoch seconds of the minute's start
    calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider_key", "window_start"], name="uniq_provider_call_window")
        ]

    def __str__(self) -> str:
        return f"{self.provider_key}@{self.window_start}: {self.calls}"


class ContinuationUse(models.Model):
    """A stateless continuation (/api/v1/execute/continue) that was used. The key is
    the SHA-256 of the signed state's content, so a replayed state, however it is
    re-encoded, finds its row and is refused (409) before anything runs."""

    state_digest = models.CharField(max_length=64, primary_key=True)
    execution_id = models.BigIntegerField()
    organization_id = models.BigIntegerField()
    used_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    used_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"continuation of {self.execution_id} used at {self.used_at:%Y-%m-%d %H:%M:%S}"


class ExecutionReplay(models.Model):
    """A replay of finished runs: its own kind of run, never an ``Execution`` row, so no
    production count (health, memory, notifications, run-end handlers, metrics, run lists)
    can ever include it. ``execution`` is the replayed run (null for a batch)."""

    class Kind(models.TextChoices):
        REPLAY = "replay", "Replay"
        WHAT_IF = "what_if", "What-if replay"
        BATCH = "batch", "Batch what-if replay"

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="replays")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="replays")
    replay_of = models.ForeignKey(Execution, null=True, blank=True, on_delete=models.CASCADE, related_name="replays")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    agent_version = models.PositiveIntegerField(null=True, blank=True)  # the version number replayed against
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    summary = models.CharField(max_length=300, blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["agent", "kind", "-created_at"], name="replay_agent_kind_idx")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"


class ModelCallBlob(models.Model):
    """One message (or one tool list) a run's model calls sent, stored once per run:
    content-addressed by the SHA-256 of its redacted JSON, the body zlib-compressed.
    Consecutive calls share most of their history, so a run stores each message once
    and its calls grow by the new messages only (docs/observability.md)."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="+", db_index=False)
    digest = models.CharField(max_length=64)
    body = models.BinaryField()

    class Meta:
        db_table = "executions_model_call_blob"
        constraints = [models.UniqueConstraint(fields=["execution", "digest"], name="model_call_blob_unique")]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.digest[:12]}"


class ModelCallRecord(models.Model):
    """One model call: its input as references (the leading ``shared_prefix`` messages of
    the previous call of the run, then ``digests``) and its output, zlib-compressed."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="+", db_index=False)
    turn = models.PositiveIntegerField()
    tier = models.CharField(max_length=20, blank=True)
    model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    timeout_seconds = models.FloatField(default=0)
    shared_prefix = models.PositiveIntegerField(default=0)
    digests = models.JSONField(default=list)
    tools_digest = models.CharField(max_length=64, blank=True)
    output = models.BinaryField()
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "executions_model_call"
        indexes = [models.Index(fields=["execution", "turn"], name="model_call_run_turn"),
                   models.Index(fields=["created_at"], name="model_call_created")]

    def __str__(self) -> str:
        return f"model call of execution {self.execution_id}, turn {self.turn}"


class Session(models.Model):
    """A conversation between a user and an agent, or a team whose root is ``agent``
    (docs/sessions.md). Each message is answered by an ordinary run; at most one of
    them is active at a time (``active_execution``), the others wait as queued
    messages. Older turns are folded into ``summary`` (up to message ``summary_through``)."""

    workspace = models.ForeignKey("tenancy.Workspace", on_delete=models.CASCADE, related_name="sessions")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="sessions")
    title = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                   related_name="river_sessions")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    archived_at = models.DateTimeField(null=True, blank=True)
    active_execution = models.ForeignKey(Execution, null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="+")
    next_sequence = models.PositiveIntegerField(default=1)
    summary = models.TextField(blank=True)
    summary_through = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["created_by", "workspace", "-updated_at"], name="session_owner_idx"),
                   models.Index(fields=["agent", "-updated_at"], name="session_agent_idx")]

    def __str__(self) -> str:
        return self.title or f"session {self.pk}"

    @property
    def archived(self) -> bool:
        return self.archived_at is not None


class SessionMessage(models.Model):
    """One entry of a session, appended in ``sequence`` order: a user's message (queued
    until its run starts) or an agent's answer (the summary of the run that answered)."""

    class Role(models.TextChoices):
        USER = "user", "User"
        AGENT = "agent", "Agent"

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"  # waits for the session's active run to end
        STARTED = "started", "Started"  # its run was started
        ANSWERED = "answered", "Answered"  # the run (and the hand-offs after it) ended
        FAILED = "failed", "Failed"  # its run could not be started (the agent was no longer active)

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages", db_index=False)
    sequence = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    state = models.CharField(max_length=10, choices=State.choices)
    content = models.TextField()
    # Artifact ids attached to a user's message (validated as a list of ids; artifacts
    # themselves are another module's).
    attachments = PydanticJSONField(schema=list[int], default=list)
    # A user's message: the first run started for it. An agent's answer: the run that gave it.
    execution = models.ForeignKey(Execution, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    agent = models.ForeignKey("agents.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reply_to = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="replies")
    # An agent's answer: the queries behind it (SQL, data source, row count), for the history.
    references = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "sequence"]
        constraints = [models.UniqueConstraint(fields=["session", "sequence"], name="uniq_session_sequence")]
        indexes = [models.Index(fields=["session", "state"], name="session_message_state_idx")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.sequence} {self.role}"
