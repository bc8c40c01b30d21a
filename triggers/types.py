"""Typed configuration per trigger type (validated on every save)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# The six trigger types are part of the engine's contract (trigger_context.trigger_type).
from rivercore import limits
from rivercore.contracts import TriggerType
from rivercore.types.runs import RunStatus

__all__ = ["TriggerType", "TriggerConfig"]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManualConfig(_Config):
    trigger_type: Literal["manual"] = "manual"
    default_prompt: str = ""


class ScheduledConfig(_Config):
    trigger_type: Literal["scheduled"] = "scheduled"
    cron: str
    timezone: str = "UTC"
    input_prompt: str = ""


class EventConfig(_Config):
    trigger_type: Literal["event"] = "event"
    event_type: str
    conditions: dict = Field(default_factory=dict)  # payload field -> required value


class ApiConfig(_Config):
    trigger_type: Literal["api"] = "api"
    payload_schema: dict | None = None
    rate_limit_per_minute: int = Field(default=60, ge=1)


class ThresholdConfig(_Config):
    trigger_type: Literal["threshold"] = "threshold"
    metric: str
    expression: str  # e.g. "value > 90"
    for_seconds: int = Field(default=0, ge=0)
    cooldown_seconds: int = Field(default=900, ge=0)


class WorkflowConfig(_Config):
    trigger_type: Literal["workflow"] = "workflow"
    upstream_agent_id: str
    on_statuses: list[RunStatus] = Field(default_factory=lambda: [RunStatus.COMPLETED], max_length=limits.LIST_ITEMS)


TriggerConfig = Annotated[
    ManualConfig | ScheduledConfig | EventConfig | ApiConfig | ThresholdConfig | WorkflowConfig,
    Field(discriminator="trigger_type"),
]
