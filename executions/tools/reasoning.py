"""Model-backed reasoning tools: classify_intent, generate_query,
recommend_visualization, explain_results.

Each sends one structured sub-request through the run's router at the tier the
spec gives the tool: a system message that starts with ``RIVER-TOOL-TASK <tool>``
and describes the JSON object wanted (with its JSON schema), and a user message
holding the JSON input. The reply is validated with the tool's output model; a
reply that does not validate is a failed observation, never a guess. The offline
planner recognises the marker and answers these deterministically.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any, Literal

import pydantic
import sqlglot
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlglot import exp

from rivercore.llm import LLMError, LLMErrorKind, view_kwargs
from rivercore.planner.rules import DEFAULT_ROW_LIMIT, TASK_MARKER, dialect_for
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, register
from rivercore.types.agents import Tier


class IntentType(StrEnum):
    PLATFORM_EXPLANATION = "PLATFORM_EXPLANATION"
    DATA_DISCOVERY = "DATA_DISCOVERY"
    DATA_QUERY = "DATA_QUERY"
    DATA_SOURCE_MANAGEMENT = "DATA_SOURCE_MANAGEMENT"
    ACTION_EXECUTION = "ACTION_EXECUTION"
    GOVERNANCE_MANAGEMENT = "GOVERNANCE_MANAGEMENT"
    WORKSPACE_ADMIN = "WORKSPACE_ADMIN"
    STORAGE_MANAGEMENT = "STORAGE_MANAGEMENT"
    OBSERVABILITY = "OBSERVABILITY"


_SQLGLOT_DIALECTS = {"postgresql": "postgres"}


def _strict() -> ConfigDict:
    return ConfigDict(extra="forbid")


def _schemas(ctx: ToolContext, ids: list[int] | None = None) -> list[dict]:
    """The cached schemas of the agent's data sources (never credentials)."""
    chosen = []
    for source in ctx.data_sources:
        if ids and source.data_source_id not in ids:
            continue
        chosen.append({
            "data_source_id": source.data_source_id,
            "name": source.name,
            "type": source.type,
            "dialect": dialect_for(source.type),
            "access_level": source.access_level,
            "schemas": [table.model_dump(mode="json") for table in source.schemas],
        })
    return chosen


def _json_object(text: str) -> Any:
    text = (text or "").strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        text = text[start:end + 1] if start != -1 and end > start else text
    return json.loads(text)


def ask_model(ctx: ToolContext, *, task: str, tier: Tier, instructions: str, payload: dict,
              output_model: type[BaseModel]) -> BaseModel:
    """One sub-request through the run's model client, validated with ``output_model``."""
    if ctx.llm is None:
        raise ToolError(ToolErrorKind.FAILED, f"{task} needs a model and none is available to this run.")
    schema = json.dumps(output_model.model_json_schema(), sort_keys=True)
    system = (f"{TASK_MARKER} {task}\n{instructions}\n"
              f"Reply with one JSON object and nothing else. It must match this JSON schema: {schema}")
    settings = ctx.agent.model_settings
    try:
        reply = ctx.llm.complete(
            messages=[{"role": "system", "content": system},
                      {"role": "user", "content": json.dumps(payload, default=str, sort_keys=True)}],
            tools=[], tier=tier, timeout_seconds=min(settings.llm_timeout_seconds, settings.timeout_seconds),
            **view_kwargs(ctx.llm, lambda: {"task": task, "payload": payload}),
        )
    except LLMError as exc:
        kind = {LLMErrorKind.TIMEOUT: ToolErrorKind.TIMEOUT,
                LLMErrorKind.PROVIDER_UNAVAILABLE: ToolErrorKind.TRANSIENT}.get(exc.kind, ToolErrorKind.FAILED)
        raise ToolError(kind, f"{task}: the model call failed: {exc.message}") from exc
    sink = ctx.extras.get("llm_usage")
    if callable(sink):  # lets the engine count sub-request tokens in the run's usage
        sink(reply)
    try:
        data = _json_object(reply.content or "")
    except json.JSONDecodeError as exc:
        raise ToolError(ToolErrorKind.FAILED, f"{task}: the model did not reply with a JSON object.") from exc
    if isinstance(data, dict) and set(data) == {"error"}:
        raise ToolError(ToolErrorKind.FAILED, f"{task}: {data['error']}")
    try:
        return output_model.model_validate(data)
    except pydantic.ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors()})
        raise ToolError(ToolErrorKind.FAILED, f"{task}: the model's reply is not valid: {', '.join(fields)}",
                        {"fields": fields}) from exc


# --- classify_intent ---------------------------------------------------------------


class ClassifyIntentInput(BaseModel):
    model_config = _strict()

    user_prompt: str = Field(min_length=1, description="The user's natural language input.")
    available_intents: list[IntentType] | None = Field(
        default=None, description="Intent types to consider (defaults to all).")


class ClassifyIntentOutput(BaseModel):
    intent_type: IntentType
    confidence: float = Field(ge=0.0, le=1.0)
    sub_intents: list[str] = Field(default_factory=list)
    entities: dict = Field(default_factory=dict)


def classify_intent(ctx: ToolContext, args: ClassifyIntentInput) -> ClassifyIntentOutput:
    payload = {
        "user_prompt": args.user_prompt,
        "available_intents": [i.value for i in (args.available_intents or list(IntentType))],
        "data_sources": _schemas(ctx),
    }
    return ask_model(
        ctx, task="classify_intent", tier=Tier.FAST, payload=payload, output_model=ClassifyIntentOutput,
        instructions=("Classify the user's prompt into one of available_intents. Give your confidence (0 to 1), "
                      "the other intents of a compound prompt as sub_intents, and the entities you recognise "
                      "(tables, columns, values, time windows) using the data sources' schemas."),
    )


CLASSIFY_INTENT = register(Tool(
    name="classify_intent",
    description="Classify the prompt into an intent type (DATA_QUERY, ACTION_EXECUTION, ...) with entities.",
    category=ToolCategory.REASONING, input_model=ClassifyIntentInput, output_model=ClassifyIntentOutput,
    handler=classify_intent, idempotent=True, tier=Tier.FAST,
))


# --- generate_query ----------------------------------------------------------------


class GenerateQueryInput(BaseModel):
    model_config = _strict()

    user_prompt: str = Field(min_length=1, description="The question to answer with a query.")
    intent_type: IntentType = Field(description="The classified intent.")
    data_sources: list[int] = Field(
        default_factory=list,
        description="IDs of the data sources to query (see the Data sources section); empty means all.")
    table_schemas: list[str] | None = Field(default=None, description="Restrict the query to these tables.")
    governance: dict | None = Field(default=None, description="Constraints to apply, e.g. {\"row_limit\": 500}.")

    @field_validator("data_sources", mode="before")
    @classmethod
    def _ids(cls, value):
        # The spec passes data source metadata objects; River needs only their ids.
        if isinstance(value, list):
            return [item.get("data_source_id") if isinstance(item, dict) else item for item in value]
        return value

    @field_validator("table_schemas", mode="before")
    @classmethod
    def _table_names(cls, value):
        if isinstance(value, list):
            return [item.get("table_name") if isinstance(item, dict) else item for item in value]
        return value


class GenerateQueryOutput(BaseModel):
    query: str = Field(min_length=1)
    dialect: str
    explanation: str = ""
    operations: list[dict] = Field(default_factory=list)
    plan_type: Literal["query", "mutation", "federated"] = "query"
    data_source_ids: list[int] = Field(default_factory=list)


def _row_limit(governance: dict | None) -> int:
    governance = governance or {}
    nested = governance.get("constraints") if isinstance(governance.get("constraints"), dict) else {}
    for source in (governance, nested):
        for key in ("row_limit", "max_rows", "limit"):
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return min(value, DEFAULT_ROW_LIMIT)
    return DEFAULT_ROW_LIMIT


def apply_row_limit(query: str, *, dialect: str, row_limit: int) -> tuple[str, str]:
    """The query with at most ``row_limit`` rows, and its plan type. Aggregates
    without GROUP BY return one row and are left alone."""
    read = _SQLGLOT_DIALECTS.get(dialect, dialect)
    try:
        statements = [s for s in sqlglot.parse(query, read=read) if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise ToolError(ToolErrorKind.FAILED, f"generate_query: the generated query is not valid {dialect} SQL.",
                        {"query": query}) from exc
    if len(statements) != 1:
        raise ToolError(ToolErrorKind.FAILED, "generate_query: the model produced more than one statement.",
                        {"query": query})
    statement = statements[0]
    if isinstance(statement, exp.Insert | exp.Update | exp.Delete | exp.Merge):
        return query, "mutation"
    if not isinstance(statement, exp.Select):
        return query, "query"
    single_row = not statement.args.get("group") and statement.expressions and all(
        isinstance(p.unalias(), exp.AggFunc) for p in statement.expressions)
    current = statement.args.get("limit")
    value = current.expression if current is not None else None
    if single_row:
        return query, "query"
    if isinstance(value, exp.Literal) and value.is_int and int(value.name) <= row_limit:
        return query, "query"
    return statement.limit(row_limit).sql(dialect=read), "query"


def generate_query(ctx: ToolContext, args: GenerateQueryInput) -> GenerateQueryOutput:
    known = {s.data_source_id for s in ctx.data_sources}
    unknown = [i for i in args.data_sources if i not in known]
    if unknown:
        raise ToolError(ToolErrorKind.NOT_FOUND, f"Data source {unknown[0]} is not connected to this agent.")
    sources = _schemas(ctx, args.data_sources or None)
    if args.table_schemas:
        wanted = set(args.table_schemas)
        for source in sources:
            source["schemas"] = [t for t in source["schemas"] if t["table_name"] in wanted]
    if not any(source["schemas"] for source in sources):
        raise ToolError(ToolErrorKind.FAILED, "No cached schema is available for the requested data sources; "
                                              "run discover_schema first.")
    row_limit = _row_limit(args.governance)
    payload = {"user_prompt": args.user_prompt, "intent_type": args.intent_type.value, "data_sources": sources,
               "row_limit": row_limit, "governance": args.governance or {}}
    result = ask_model(
        ctx, task="generate_query", tier=Tier.CODING, payload=payload, output_model=GenerateQueryOutput,
        instructions=("Write one read-only SQL query in the dialect of the data source it targets that answers "
                      "user_prompt, using only the tables and columns listed. Return at most row_limit rows. "
                      "Explain the query, list its operations, and name the data sources it reads."),
    )
    by_id = {s["data_source_id"]: s for s in sources}
    target = next((i for i in result.data_source_ids if i in by_id), sources[0]["data_source_id"])
    dialect = by_id[target]["dialect"]
    query, plan_type = apply_row_limit(result.query, dialect=dialect, row_limit=row_limit)
    return result.model_copy(update={
        "query": query, "dialect": dialect, "data_source_ids": [target],
        "plan_type": plan_type if plan_type == "mutation" else result.plan_type,
    })


GENERATE_QUERY = register(Tool(
    name="generate_query",
    description="Write a SQL query for a data source from a question, using the cached schema and governance "
                "constraints (row limit).",
    category=ToolCategory.REASONING, input_model=GenerateQueryInput, output_model=GenerateQueryOutput,
    handler=generate_query, idempotent=True, tier=Tier.CODING,
))


# --- recommend_visualization ---------------------------------------------------------


class RecommendVisualizationInput(BaseModel):
    model_config = _strict()

    columns: list[str] = Field(min_length=1, description="Result column names.")
    column_types: list[str] = Field(description="Result column data types.")
    row_count: int = Field(ge=0, description="Number of result rows.")
    user_prompt: str | None = Field(default=None, description="The original question, for context.")


class RecommendVisualizationOutput(BaseModel):
    recommended_type: str
    x_axis: str | None = None
    y_axis: str | None = None
    title: str = ""
    config: dict = Field(default_factory=dict)


def recommend_visualization(ctx: ToolContext, args: RecommendVisualizationInput) -> RecommendVisualizationOutput:
    return ask_model(
        ctx, task="recommend_visualization", tier=Tier.FAST, payload=args.model_dump(mode="json"),
        output_model=RecommendVisualizationOutput,
        instructions=("Suggest how to display a query result: a chart type (bar, line, pie or table), the x and y "
                      "axis columns, a title and any extra configuration."),
    )


RECOMMEND_VISUALIZATION = register(Tool(
    name="recommend_visualization",
    description="Suggest a chart type, axes and title for a query result.",
    category=ToolCategory.REASONING, input_model=RecommendVisualizationInput,
    output_model=RecommendVisualizationOutput, handler=recommend_visualization, idempotent=True, tier=Tier.FAST,
))


# --- explain_results -----------------------------------------------------------------


class ExplainResultsInput(BaseModel):
    model_config = _strict()

    user_prompt: str = Field(min_length=1, description="The original question.")
    query_result_columns: list[str] = Field(description="Column names of the result.")
    query_result_sample: list[list[Any] | dict[str, Any]] = Field(description="Sample rows of the result.")
    generated_query: str | None = Field(default=None, description="The query that produced the result.")
    total_rows: int | None = Field(default=None, ge=0, description="How many rows the query returned in all.")


class ExplainResultsOutput(BaseModel):
    explanation: str = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    suggestions: list[str] = Field(default_factory=list)
    data_quality_notes: list[str] = Field(default_factory=list)


def explain_results(ctx: ToolContext, args: ExplainResultsInput) -> ExplainResultsOutput:
    return ask_model(
        ctx, task="explain_results", tier=Tier.BALANCED, payload=args.model_dump(mode="json"),
        output_model=ExplainResultsOutput,
        instructions=("Explain what the query result says about the user's question, using the actual numbers. "
                      "Score your confidence (0 to 1), suggest follow-up questions, and note data quality issues "
                      "(empty values, truncated samples)."),
    )


EXPLAIN_RESULTS = register(Tool(
    name="explain_results",
    description="Explain a query result in plain language with a confidence score and follow-up suggestions.",
    category=ToolCategory.REASONING, input_model=ExplainResultsInput, output_model=ExplainResultsOutput,
    handler=explain_results, idempotent=True, tier=Tier.BALANCED,
))
