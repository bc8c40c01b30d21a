"""Typed configuration per trigger type, checked when a trigger is saved.

A trigger's ``config`` column holds one of these models with its ``trigger_type`` tag
(a discriminated union, ``TriggerConfig``). The API shows and accepts the fields
without the tag: the trigger's own ``type`` says which model applies
(``trigger_config_parse``).

Type names: the engine's contract calls the cron type ``scheduled``
(``rivercore.contracts.TriggerType``); the REST API calls it ``schedule``, as issue 14
specifies. The database and every run's ``trigger_type`` hold the contract's names;
``api_type_name`` / ``type_from_api`` translate at the API edge only.
"""

from __future__ import annotations

import re
import zoneinfo
from functools import lru_cache
from typing import Annotated, Any, Literal
from uuid import UUID

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

# The six trigger types are part of the engine's contract (trigger_context.trigger_type).
from common.jsonschema_safe import schema_check
from rivercore import limits
from rivercore.contracts import TriggerType
from rivercore.errors import InvalidInput
from rivercore.outcome import Outcome
from rivercore.types.runs import RunStatus
from triggers.threshold import ThresholdSyntaxError, threshold_parse

__all__ = ["TriggerType", "TriggerConfig", "CONFIG_MODELS", "trigger_config_parse", "api_type_name",
           "type_from_api", "API_TYPE_NAMES"]

SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?\Z")
EVENT_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}\Z")
MAX_INPUT_SCHEMA_BYTES = 32_768
MAX_CONDITION_LENGTH = 2_000
TERMINAL_STATUSES = frozenset({
    RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.MAX_TURNS_EXCEEDED, RunStatus.BUDGET_EXCEEDED,
    RunStatus.TIMEOUT, RunStatus.CANCELLED, RunStatus.APPROVAL_EXPIRED,
})

# The API's name for each type (the contract's name where they are the same).
API_TYPE_NAMES: dict[TriggerType, str] = {t: t.value for t in TriggerType} | {TriggerType.SCHEDULED: "schedule"}
_FROM_API = {name: t for t, name in API_TYPE_NAMES.items()}
API_TRIGGER_TYPES = tuple(API_TYPE_NAMES.values())  # the API's names, in the schema as TriggerTypeEnum


def api_type_name(trigger_type: str) -> str:
    return API_TYPE_NAMES[TriggerType(trigger_type)]


def type_from_api(name: str) -> TriggerType:
    try:
        return _FROM_API[name]
    except KeyError:
        raise InvalidInput("Unknown trigger type.", details={
            "type": [f"Choose one of: {', '.join(API_TYPE_NAMES.values())}."]}) from None


@lru_cache(maxsize=1)
def _time_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManualConfig(_Config):
    trigger_type: Literal["manual"] = "manual"


class ScheduledConfig(_Config):
    trigger_type: Literal["scheduled"] = "scheduled"
    cron: str = Field(max_length=200, description="Five fields: minute hour day-of-month month day-of-week.")
    timezone: str = Field(default="UTC", max_length=64, description="An IANA time zone such as Europe/Berlin.")

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter

        value = " ".join(value.split())
        if len(value.split(" ")) != 5:
            raise ValueError("a cron expression has five fields: minute hour day-of-month month day-of-week "
                             "(for example '0 8 * * 1-5')")
        if not croniter.is_valid(value):
            raise ValueError(f"'{value}' is not a valid cron expression (for example '0 8 * * 1-5')")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        if value not in _time_zones():
            raise ValueError(f"'{value}' is not an IANA time zone (for example 'Europe/Berlin' or 'UTC')")
        return value


class EventConfig(_Config):
    trigger_type: Literal["event"] = "event"
    endpoint: str = Field(max_length=80, description="Slug of a webhook endpoint of the same workspace.")
    event_type: str = Field(max_length=100, description="The event type to match, e.g. ticket.created.")
    condition: str = Field(default="", max_length=MAX_CONDITION_LENGTH,
                           description="Optional: a condition over payload, e.g. payload.priority == 'high'.")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if not SLUG.match(value):
            raise ValueError("an endpoint slug is lowercase letters, digits and hyphens (for example 'zendesk')")
        return value

    @field_validator("event_type")
    @classmethod
    def _event_type(cls, value: str) -> str:
        if not EVENT_TYPE.match(value):
            raise ValueError("an event type is letters, digits and . _ : / - (for example 'ticket.created')")
        return value

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        from governance.expressions import ExpressionError, expression_validate

        value = value.strip()
        if value:
            try:
                expression_validate(value, names=CONDITION_NAMES)
            except ExpressionError as exc:
                raise ValueError(f"not a valid condition ({exc}); for example payload.priority == 'high'") from None
        return value


# An event condition may name only fields of the event's payload.
CONDITION_NAMES: dict[str, frozenset[str] | None] = {"payload": None}


class ApiConfig(_Config):
    trigger_type: Literal["api"] = "api"
    input_schema: dict[str, Any] | None = Field(
        default=None, description="Optional JSON Schema the invoke payload must satisfy.")
    rate_limit_per_minute: int | None = Field(
        default=None, ge=1, le=limits.RATE_LIMIT_RPM,
        description="Invocations of this trigger per minute, whichever key calls; none means no cap "
                    "beyond each key's own limit.")

    @field_validator("input_schema")
    @classmethod
    def _input_schema(cls, value: dict | None) -> dict | None:
        import json

        if value is None:
            return None
        if len(json.dumps(value)) > MAX_INPUT_SCHEMA_BYTES:
            raise ValueError(f"a JSON Schema of at most {MAX_INPUT_SCHEMA_BYTES} bytes")
        try:
            schema_check(value, field="input_schema")
        except InvalidInput as exc:
            raise SchemaRefused(exc.details) from None
        return value


class SchemaRefused(ValueError):
    """A refused JSON Schema, with the path of each problem (``input_schema.<...>``);
    ``trigger_config_parse`` reports them under ``config.``."""

    def __init__(self, details: dict[str, list[str]]):
        super().__init__("; ".join(f"{path}: {messages[0]}" for path, messages in details.items()))
        self.details = details


class ThresholdConfig(_Config):
    trigger_type: Literal["threshold"] = "threshold"
    expression: str = Field(max_length=300, description="e.g. cpu_percent > 90 for 5m, or avg(latency_ms) > 500 "
                                                        "for 10m.")
    cooldown_seconds: int = Field(default=900, ge=0, le=7 * 86_400)

    @field_validator("expression")
    @classmethod
    def _expression(cls, value: str) -> str:
        try:
            return threshold_parse(value).source
        except ThresholdSyntaxError as exc:
            raise ValueError(str(exc)) from None


class WorkflowConfig(_Config):
    trigger_type: Literal["workflow"] = "workflow"
    upstream_agent: UUID = Field(description="The agent whose runs' ends fire this trigger (same workspace).")
    on_statuses: list[RunStatus] = Field(default_factory=lambda: [RunStatus.COMPLETED], min_length=1,
                                         max_length=limits.LIST_ITEMS)
    # Optional, beside the statuses: hand off only runs with one of these outcomes
    # (rivercore.outcome; e.g. ["answered"] so a blocked or rejected run stops the
    # pipeline). Null: any outcome, as before outcomes existed.
    on_outcomes: list[Outcome] | None = Field(default=None, min_length=1, max_length=limits.LIST_ITEMS)

    @field_validator("on_outcomes")
    @classmethod
    def _distinct_outcomes(cls, value: list[Outcome] | None) -> list[Outcome] | None:
        return None if value is None else list(dict.fromkeys(value))

    @field_validator("on_statuses")
    @classmethod
    def _terminal(cls, value: list[RunStatus]) -> list[RunStatus]:
        for status in value:
            if status not in TERMINAL_STATUSES:
                raise ValueError(f"'{status}' is not a status a run ends with; choose from "
                                 f"{', '.join(sorted(TERMINAL_STATUSES))}")
        return list(dict.fromkeys(value))


CONFIG_MODELS: dict[TriggerType, type[_Config]] = {
    TriggerType.MANUAL: ManualConfig,
    TriggerType.SCHEDULED: ScheduledConfig,
    TriggerType.EVENT: EventConfig,
    TriggerType.API: ApiConfig,
    TriggerType.THRESHOLD: ThresholdConfig,
    TriggerType.WORKFLOW: WorkflowConfig,
}

TriggerConfig = Annotated[
    ManualConfig | ScheduledConfig | EventConfig | ApiConfig | ThresholdConfig | WorkflowConfig,
    Field(discriminator="trigger_type"),
]


def trigger_config_parse(*, trigger_type: TriggerType, config, field: str = "config") -> _Config:
    """The typed config for ``trigger_type`` (a 400 naming ``config.<path>`` otherwise).
    ``config`` is given without its tag, as the API shows it."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise InvalidInput("config must be an object.", details={field: ["Expected a JSON object."]})
    model = CONFIG_MODELS[TriggerType(trigger_type)]
    body = {key: value for key, value in config.items() if key != "trigger_type"}
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        details: dict[str, list[str]] = {}
        for error in exc.errors():
            refused = (error.get("ctx") or {}).get("error")
            if isinstance(refused, SchemaRefused):
                # The field itself (as for any other config error) and the exact place in it.
                top = ".".join(str(part) for part in (field, *error.get("loc", ())))
                for where, messages in refused.details.items():
                    inner = where.partition(".")[2]
                    details.setdefault(top, []).extend(f"at {inner}: {m}" if inner else m for m in messages)
                    if inner:
                        details.setdefault(f"{field}.{where}", []).extend(messages)
                continue
            path = ".".join(str(part) for part in (field, *error.get("loc", ())))
            message = error.get("msg", "invalid")
            message = message.removeprefix("Value error, ")
            if error.get("type") == "extra_forbidden":
                message = f"Unknown field for a {api_type_name(trigger_type)} trigger."
            details.setdefault(path, []).append(message)
        raise InvalidInput("The trigger's configuration is invalid.", details=details) from None


def config_public(config: _Config | dict) -> dict:
    """The config as the API shows it: without the type tag."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else dict(config or {})
    data.pop("trigger_type", None)
    return data
