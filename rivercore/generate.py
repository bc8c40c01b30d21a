"""Generate an agent configuration from a description (POST /api/v1/generate-agent).

The description goes to the router as one structured sub-request (the same
``RIVER-TOOL-TASK`` form the reasoning tools use) at the reasoning tier; the
reply must validate as a GenerateAgentResponse. River then keeps the suggestion
inside what the caller may use: tools outside ``available_tools`` and data
sources outside ``available_data_sources`` are dropped with a warning. The
offline planner answers with ``offline_configuration``, a keyword reading of the
description.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic

from rivercore.contracts import GenerateAgentRequest, GenerateAgentResponse
from rivercore.errors import RiverError
from rivercore.llm import LLMClient, LLMError, view_kwargs
from rivercore.planner.rules import TASK_MARKER
from rivercore.types.agents import ActionLevel, BusinessFunction, Tier

DATA_TOOLS = ("classify_intent", "search_catalog", "generate_query", "execute_query", "explain_results")
GENERATION_TIMEOUT_SECONDS = 120


class GenerationFailed(RiverError):
    status_code = 502
    code = "generation_failed"


def agent_generate(*, request: GenerateAgentRequest, llm: LLMClient) -> GenerateAgentResponse:
    payload = {
        "prompt": request.prompt,
        "available_data_sources": [s.model_dump(mode="json") for s in request.available_data_sources],
        "available_tools": request.available_tools,
        "workspace_templates": request.workspace_templates,
        "business_functions": [f.value for f in BusinessFunction],
        "action_levels": [a.value for a in ActionLevel],
    }
    schema = json.dumps(GenerateAgentResponse.model_json_schema(), sort_keys=True)
    system = (
        f"{TASK_MARKER} generate_agent\n"
        "Design a River agent from the user's description: name, description, category (one of "
        "business_functions), goal, instructions, action_level (one of action_levels; choose the least power "
        "that does the job), suggested triggers, data sources (only from available_data_sources), tools (only "
        "from available_tools) and governance policies (require approval for write tools). Explain your choices "
        "in reasoning, give a confidence_score between 0 and 1, and list warnings.\n"
        f"Reply with one JSON object and nothing else. It must match this JSON schema: {schema}"
    )
    try:
        reply = llm.complete(
            messages=[{"role": "system", "content": system},
                      {"role": "user", "content": json.dumps(payload, sort_keys=True)}],
            tools=[], tier=Tier.REASONING, timeout_seconds=GENERATION_TIMEOUT_SECONDS,
            **view_kwargs(llm, lambda: {"task": "generate_agent", "payload": payload}),
        )
    except LLMError as exc:
        raise GenerationFailed(f"The model could not generate an agent: {exc.message}") from exc
    text = (reply.content or "").strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    try:
        response = GenerateAgentResponse.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise GenerationFailed("The model's configuration is not valid.",
                               details={"fields": sorted({".".join(map(str, e["loc"])) for e in exc.errors()})}) \
            from exc
    return _within_reach(response, request)


def _within_reach(response: GenerateAgentResponse, request: GenerateAgentRequest) -> GenerateAgentResponse:
    config = response.agent_config
    warnings = list(response.warnings)
    allowed_tools = set(request.available_tools)
    dropped = [t.tool_name for t in config.suggested_tools if t.tool_name not in allowed_tools]
    if dropped:
        warnings.append("Left out tools this workspace cannot use: " + ", ".join(dropped) + ".")
    sources = {s.data_source_id for s in request.available_data_sources}
    unknown = [s.name for s in config.suggested_data_sources if s.data_source_id not in sources]
    if unknown:
        warnings.append("Left out data sources this workspace does not have: " + ", ".join(unknown) + ".")
    config = config.model_copy(update={
        "suggested_tools": [t for t in config.suggested_tools if t.tool_name in allowed_tools],
        "suggested_data_sources": [s for s in config.suggested_data_sources if s.data_source_id in sources],
    })
    return response.model_copy(update={"agent_config": config, "warnings": warnings})


# --- the offline planner's answer -------------------------------------------------------------

_FUNCTIONS = [
    (BusinessFunction.CUSTOMER_SUPPORT, r"support|tickets?|zendesk|helpdesk|customer (issues|complaints)|sla"),
    (BusinessFunction.FINANCE, r"financ|invoices?|charges?|payments?|refunds?|billing|revenue|expenses?|stripe"),
    (BusinessFunction.SALES, r"sales|leads?|deals?|pipeline|crm|prospects?|quota"),
    (BusinessFunction.RISK_COMPLIANCE, r"risk|compliance|fraud|aml|kyc|regulat"),
    (BusinessFunction.OPERATIONS, r"operations|inventory|logistics|incidents?|outages?|shipments?"),
    (BusinessFunction.EXECUTIVE, r"executive|leadership|board|ceo|cfo"),
    (BusinessFunction.DATA_ANALYST, r"analy[sz]|reports?|dashboards?|metrics|kpis?|trends?"),
]
_WRITE_VERBS = r"\b(draft|send|update|close|resolve|escalate|reply|respond|assign|refund|write|post|mark|create)\w*"
_RECOMMEND_VERBS = r"\b(recommend|suggest|advise|propose)\w*"
_READ_VERBS = r"\b(monitor|report|analy[sz]e|summari[sz]e|track|watch|alert|review|answer)\w*"


def _schedule(text: str) -> tuple[dict[str, Any], str] | None:
    found = re.search(r"every (\d+) (minute|hour)s?", text)
    if found:
        amount, unit = int(found.group(1)), found.group(2)
        cron = f"*/{amount} * * * *" if unit == "minute" else f"0 */{amount} * * *"
        return {"cron": cron}, f"The description asks for a run every {amount} {unit}(s)."
    if re.search(r"\bhourly\b|every hour", text):
        return {"cron": "0 * * * *"}, "The description asks for hourly runs."
    if re.search(r"\bweekly\b|every week", text):
        return {"cron": "0 8 * * 1"}, "The description asks for weekly runs; Monday 08:00 is a working-week start."
    if re.search(r"\bdaily\b|every day|each day|every morning|each morning", text):
        return {"cron": "0 8 * * *"}, "The description asks for daily runs; 08:00 has results ready for the day."
    if re.search(r"\bmonitor|\bwatch", text):
        return {"cron": "*/15 * * * *"}, "Monitoring needs regular polling; every 15 minutes keeps it timely."
    return None


def offline_configuration(payload: dict[str, Any]) -> dict[str, Any]:
    """A configuration from the description's keywords (the offline planner's answer)."""
    prompt = str(payload.get("prompt") or "")
    text = prompt.lower()
    tools = [str(t) for t in payload.get("available_tools") or []]
    sources = payload.get("available_data_sources") or []

    function = next((f for f, pattern in _FUNCTIONS if re.search(pattern, text)), BusinessFunction.CUSTOM)
    writes = bool(re.search(_WRITE_VERBS, text))
    if writes:
        level, level_reason = ActionLevel.ACT_WITH_APPROVAL, (
            "it changes records or messages people, so each write waits for human approval")
    elif re.search(_RECOMMEND_VERBS, text):
        level, level_reason = ActionLevel.RECOMMEND, "it should propose actions, not take them"
    else:
        level, level_reason = ActionLevel.READ_ONLY, "it only reads and reports"

    def words(value: str) -> set[str]:
        return {w for w in re.findall(r"[a-z0-9]+", value.lower()) if len(w) > 2}

    prompt_words = words(prompt)
    matched = [s for s in sources if words(f"{s.get('name', '')} {s.get('type', '')}") & prompt_words]
    warnings: list[str] = []
    confidence = 0.55
    if not matched and len(sources) == 1:
        matched = list(sources)
        warnings.append(f"The description names no data source; {sources[0].get('name')} is the only one "
                        "available, so it was suggested.")
    elif not matched:
        warnings.append("The description names no available data source; connect one before deploying.")
    else:
        confidence += 0.15
    write_tool = "write_back" if writes and "write_back" in tools else None
    access = "read_write" if write_tool else "read_only"
    suggested_sources = [{
        "data_source_id": s.get("data_source_id"), "name": s.get("name"), "access_level": access,
        "reasoning": ("Named in the description" if s in matched and words(f"{s.get('name', '')} "
                      f"{s.get('type', '')}") & prompt_words else "The only data source available")
        + ("; write access is needed to record the agent's changes." if write_tool else "; read access suffices."),
    } for s in matched]

    reasons = {
        "classify_intent": "Understand each request before acting.",
        "search_catalog": "Find the tables and columns a question refers to.",
        "generate_query": "Turn questions into SQL over the cached schema.",
        "execute_query": "Read the data (read-only, row-capped).",
        "explain_results": "Summarise results with real numbers.",
        "recommend_visualization": "Chart results for reports.",
        "check_governance": "Check policies before acting.",
        "ask_user": "Ask for clarification when a request is ambiguous.",
        "write_back": "Record the agent's changes (each one approved first).",
    }
    chosen = []
    for name in (*DATA_TOOLS, "check_governance", "ask_user"):
        if name in tools and (matched or name not in DATA_TOOLS[1:]):
            chosen.append(name)
    if "recommend_visualization" in tools and re.search(r"report|dashboard|chart|trend", text):
        chosen.append("recommend_visualization")
    if write_tool:
        chosen.append(write_tool)
        confidence += 0.05
    elif writes:
        warnings.append("The description asks for changes but write_back is not among the available tools; the "
                        "agent can only report what it would change.")
    if re.search(r"\bsend|\bemail|\bslack|\bnotify", text):
        warnings.append("River has no messaging tool: the agent can draft or record responses, but sending them "
                        "is left to people or notifications.")

    triggers = []
    schedule = _schedule(text)
    if schedule:
        triggers.append({"trigger_type": "scheduled", "trigger_config": schedule[0], "reasoning": schedule[1]})
        confidence += 0.05
    if re.search(r"\bwhen(ever)? (a|an|new)\b|\bon new\b", text):
        triggers.append({"trigger_type": "event", "trigger_config": {"source": "webhook"},
                         "reasoning": "The description reacts to events as they happen."})
    if not triggers:
        triggers.append({"trigger_type": "manual", "trigger_config": {},
                         "reasoning": "No schedule or event is described; run it on demand."})

    policies = []
    if write_tool:
        policies.append({"name": "Require approval before writing", "conditions": {"tool": write_tool},
                         "enforcement": "require_approval",
                         "reasoning": "Changes to business records should be reviewed by a person first."})
        warnings.append(f"Write access: the agent can change records in "
                        f"{', '.join(str(s.get('name')) for s in matched) or 'its data sources'}; "
                        "approvals are required before each change.")
    if function == BusinessFunction.CUSTOM:
        warnings.append("The business function could not be recognised; the agent is marked custom.")
    else:
        confidence += 0.1

    label = function.value.replace("_", " ").title() if function != BusinessFunction.CUSTOM else "Custom"
    source_label = str(matched[0].get("name", "")).split()[0] if matched else ""
    name = " ".join(p for p in (source_label, label, "Agent") if p)
    goal = re.sub(r"^(create|build|make|i want|i need) (an? )?(agent|assistant|bot) (that|to|which) ", "",
                  prompt.strip().rstrip("."), flags=re.IGNORECASE).strip()
    goal = goal[0].upper() + goal[1:] if goal else "Help the team with its data"
    instructions = [f"{goal}."]
    if matched:
        instructions.append("Use " + ", ".join(str(s.get("name")) for s in matched) + " as the source of truth; "
                            "look up the relevant tables before querying.")
    if write_tool:
        instructions.append("Propose each change with write_back and wait for approval; never change records "
                            "that were not returned by your query.")
    else:
        instructions.append("Do not change any data; report what you find with the numbers behind it.")
    instructions.append("Ask the user when a request is ambiguous.")
    reasoning = (f"Category {function.value} from the description's vocabulary. Action level {level.value} "
                 f"because {level_reason}. "
                 + (f"Triggers: {triggers[0]['reasoning']} " if triggers else "")
                 + (f"Data sources: {', '.join(str(s.get('name')) for s in matched)}. " if matched else "")
                 + f"Tools: {', '.join(chosen) or 'none available'}. "
                 "Generated by River's offline planner from keywords; review it before deploying.")
    return {
        "agent_config": {
            "name": name, "description": prompt.strip(), "category": function.value, "goal": goal + ".",
            "instructions": " ".join(instructions), "action_level": level.value,
            "suggested_triggers": triggers, "suggested_data_sources": suggested_sources,
            "suggested_tools": [{"tool_name": t, "reasoning": reasons.get(t, "Available and relevant.")}
                                for t in chosen],
            "suggested_policies": policies,
        },
        "reasoning": reasoning,
        "confidence_score": round(min(confidence, 0.9), 2),
        "warnings": warnings,
    }
