"""Typed values for data sources: connection settings and the cached schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ConnectionConfig(BaseModel):
    """Where the source lives. Secrets never go here: they go in credentials."""

    # populate_by_name: the stored JSON is dumped by field name (schema_name), the
    # API and tools send the alias (schema); both must validate.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    database: str | None = None
    path: str | None = None  # sqlite file
    sslmode: str | None = None
    schema_name: str | None = Field(default=None, alias="schema")
    # Overrides the source's query_timeout_seconds when set (finer than seconds).
    statement_timeout_ms: int | None = Field(default=None, ge=100, le=300_000)


class ColumnInfo(BaseModel):
    column_name: str
    data_type: str
    is_nullable: bool = True
    is_primary_key: bool = False
    foreign_key: str | None = None  # "table.column"
    description: str = ""
    # The distinct values of a low-cardinality text column, read at discovery (empty
    # when the column has more than SAMPLE_DISTINCT_MAX values or its table is classified).
    sample_values: list[str] = Field(default_factory=list)


class TableInfo(BaseModel):
    table_name: str
    columns: list[ColumnInfo] = Field(default_factory=list)
    row_estimate: int | None = None
    classification: str | None = None  # e.g. "pii"
    description: str = ""


class ConnectionTestResult(BaseModel):
    success: bool
    latency_ms: int = 0
    message: str = ""


class QueryResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    total_rows: int
    execution_time_ms: int
    truncated: bool = False
    tables: list[str] = Field(default_factory=list)
    total_available: int | None = None  # rows the query produced, when known without more work
    note: str | None = None  # why rows or values were cut


class WriteResult(BaseModel):
    success: bool
    rows_affected: int = 0
    message: str = ""
