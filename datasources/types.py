"""Typed values the data source services take, with the checks that need neither the
database nor the network.

Errors are raised as ``InvalidInput`` naming the field (``details`` keys such as
``name``, ``query_row_limit`` or ``classifications.tickets``). They are not pydantic
errors on purpose: pydantic lets them through unchanged, so every entry point (API,
admin, agent tool) answers with the field names and messages the service always gave.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from datasources import connectors
from datasources.models import DataSource
from rivercore import limits
from rivercore.errors import InvalidInput
from rivercore.text import json_unstorable_path

# name -> (minimum, maximum); null means "inherit the workspace's value".
LIMIT_RANGES = {
    "query_row_limit": (1, 100_000),
    "observation_byte_limit": (1024, 1_048_576),
    "query_timeout_seconds": (1, 300),
}


def storable_check(value: Any, field: str) -> None:
    """Refuse text PostgreSQL cannot store (NUL, lone surrogates), naming the field."""
    where = json_unstorable_path(value)
    if where:
        name = field if where == "value" else f"{field}.{where}"
        raise InvalidInput(
            f"{name} contains a NUL byte or an invalid character.", details={name: ["must not contain NUL bytes"]}
        )


def choice_validate(value: Any, choices, field: str) -> str:
    allowed = [c.value for c in choices]
    if value not in allowed:
        raise InvalidInput(
            f"{field} must be one of {', '.join(allowed)}.", details={field: [f"must be one of {allowed}"]}
        )
    return value


def type_validate(value: Any) -> str:
    """A type River has a connector for; the error lists the supported ones."""
    supported = list(connectors.SUPPORTED_TYPES)
    if value not in supported:
        listed = ", ".join(supported)
        raise InvalidInput(
            f"type {str(value)[:40]!r} is not supported; supported types: {listed}.",
            details={"type": [f"unsupported type; supported types: {listed}"]},
        )
    return value


def limit_validate(name: str, value: Any) -> int | None:
    """One per-source limit: an integer in its range, or null to inherit the workspace's."""
    low, high = LIMIT_RANGES[name]
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
        raise InvalidInput(
            f"{name} must be an integer from {low} to {high}, or null to use the workspace's.",
            details={name: [f"{low}..{high} or null"]},
        )
    return value


def limits_validate(values: Mapping) -> dict:
    """The per-source limits present in ``values``, each checked by ``limit_validate``."""
    return {name: limit_validate(name, values[name]) for name in LIMIT_RANGES if name in values}


def name_validate(value: Any) -> str:
    """A data source name: text PostgreSQL can store, not blank, at most limits.NAME long."""
    storable_check(value, "name")
    name = value.strip() if isinstance(value, str) else ""
    if not name:
        raise InvalidInput("name is required.", details={"name": ["required"]})
    if len(name) > limits.NAME:
        raise InvalidInput("name is too long.", details={"name": [f"at most {limits.NAME} characters"]})
    return name


def classifications_validate(value: Any) -> dict[str, str]:
    """Table name -> label; null means none."""
    storable_check(value, "classifications")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidInput(
            "classifications must map table names to labels.", details={"classifications": ["must be {table: label}"]}
        )
    return value


def patch_merge(current: dict, patch: Mapping) -> dict:
    """Shallow merge where a null value removes the key."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _object_or_empty(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise InvalidInput(f"{field} must be an object.", details={field: ["must be an object"]})
    return value


class DataSourceChanges(pydantic.BaseModel):
    """What to change on a data source. Only the fields given are applied
    (``model_fields_set``), so "not given" differs from "set to null": a null limit
    inherits the workspace's value, a null description or classifications clears it.

    ``connection_config`` and ``credentials`` are patches merged into the stored
    values by the service, where a null value removes that key; given as null, the
    patch is empty (the stored settings are checked again as they are). Keys that are
    not fields here (``status``, ``credentials_encrypted``, ...) are refused.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    name: str | None = None
    description: str | None = None
    type: str | None = None
    access_level: str | None = None
    classifications: dict[str, str] | None = None
    connection_config: dict[str, Any] | None = None
    credentials: dict[str, Any] | None = None
    query_row_limit: int | None = None
    observation_byte_limit: int | None = None
    query_timeout_seconds: int | None = None

    @pydantic.model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise InvalidInput("The changes must be an object.", details={"non_field_errors": ["must be an object"]})
        unknown = sorted(str(key) for key in data if key not in cls.model_fields)
        if unknown:
            raise InvalidInput(
                f"Unknown or read-only fields: {', '.join(unknown)}.",
                details={key: ["cannot be updated"] for key in unknown},
            )
        return data

    @pydantic.field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> str:
        return name_validate(value)

    @pydantic.field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: Any) -> str:
        storable_check(value, "description")
        if value is None:
            return ""
        if not isinstance(value, str):
            raise InvalidInput("description must be text.", details={"description": ["must be a string"]})
        return value

    @pydantic.field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> str:
        return type_validate(value)

    @pydantic.field_validator("access_level", mode="before")
    @classmethod
    def _access_level(cls, value: Any) -> str:
        return choice_validate(value, DataSource.AccessLevel, "access_level")

    @pydantic.field_validator("classifications", mode="before")
    @classmethod
    def _classifications(cls, value: Any) -> dict[str, str]:
        return classifications_validate(value)

    @pydantic.field_validator(*LIMIT_RANGES, mode="before")
    @classmethod
    def _limit(cls, value: Any, info: pydantic.ValidationInfo) -> int | None:
        return limit_validate(info.field_name, value)

    @pydantic.field_validator("connection_config", mode="before")
    @classmethod
    def _connection_config(cls, value: Any) -> dict[str, Any]:
        return _object_or_empty(value, "connection_config")

    @pydantic.field_validator("credentials", mode="before")
    @classmethod
    def _credentials(cls, value: Any) -> dict[str, Any]:
        return _object_or_empty(value, "credentials")
