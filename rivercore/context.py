"""The context builder: one system prompt per execution, built from the request.

Built once; later turns only append observations. Also screens trigger payloads
for prompt injection and compresses long histories without a model call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rivercore.contracts import ExecutionRequest
from rivercore.tools import Tool, tool_for
from rivercore.types.sessions import TRANSFER_TOOL, SessionContext

FINALIZE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "finalize",
        "description": "Finish the run: give your final answer to the user.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
        },
    },
}

NUDGE = "You appear to be repeating yourself. Please take action or conclude."
SUMMARY_REQUEST = (
    "The turn limit for this run has been reached. Do not call any tool. Summarise what you did, "
    "what you found and what is left to do, as your final progress report."
)
BUDGET_NOTICE = "Your token budget is nearly spent. Conclude now: give your final answer in this turn."

_INJECTION_PATTERNS = [
    r"ignore (all |any )?(the )?(previous|prior|above|earlier) (instructions|prompts?|messages?)",
    r"disregard (all |any )?(the )?(previous|prior|above|earlier|your) (instructions|prompts?|rules)",
    r"forget (all |everything )?(your|the|previous) (instructions|rules)",
    r"you are now (a|an|the|in) ",
    r"(reveal|print|show|repeat) (me )?(your|the) (system prompt|instructions|hidden prompt)",
    r"new (system )?instructions?\s*:",
    r"</?\s*(system|assistant)\s*>",
    r"<\|im_(start|end)\|>",
    r"\bact as (an? )?(unrestricted|jailbroken|developer mode)",
    r"\bdeveloper mode\b",
    r"\bDAN\b mode",
]
_INJECTION_RE = re.compile("|".join(f"(?:{p})" for p in _INJECTION_PATTERNS), re.IGNORECASE)
REDACTED = "[removed: possible prompt injection]"


@dataclass
class ScreenResult:
    payload: object
    detections: list[dict[str, Any]] = field(default_factory=list)


def screen_payload(payload: object, path: str = "trigger_payload") -> ScreenResult:
    """Replace instruction-like spans in every string of the payload."""
    detections: list[dict[str, Any]] = []

    def walk(value: object, where: str) -> object:
        if isinstance(value, str):
            matches = list(_INJECTION_RE.finditer(value))
            if not matches:
                return value
            for match in matches:
                detections.append({"path": where, "pattern": match.group(0)[:80]})
            return _INJECTION_RE.sub(REDACTED, value)
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    return ScreenResult(payload=walk(payload, path), detections=detections)


def allowed_tools(request: ExecutionRequest) -> list[Tool]:
    cfg = request.agent_config
    found = (tool_for(name, cfg) for name in cfg.tools)
    return [tool for tool in found if tool is not None]


def tool_schemas(request: ExecutionRequest) -> list[dict[str, Any]]:
    return [tool.function_schema() for tool in allowed_tools(request)] + [FINALIZE_SCHEMA]


_CONSTRAINTS = {
    "read_only": "only read: any write tool is blocked",
    "recommend": "only recommend: execution tools are recorded as suggestions, not run",
    "act_with_approval": "wait for human approval before any write tool runs (River pauses the run for it)",
    "automated": "act on your own within the policies below",
}


def system_prompt(request: ExecutionRequest) -> str:
    cfg = request.agent_config
    if cfg.system_prompt:
        head = cfg.system_prompt.strip()
    else:
        head = (
            f"You are {cfg.name}, a {cfg.business_function.value.replace('_', ' ')} agent for {cfg.domain}."
        )
    sections = [head, f"## Goal\n{cfg.goal}", f"## Instructions\n{cfg.instructions}"]

    tool_lines = [f"- {tool.model_name}: {tool.description}" for tool in allowed_tools(request)]
    tool_lines.append("- finalize: give your final answer (or simply answer in plain text without a tool call)")
    sections.append("## Available tools\n" + "\n".join(tool_lines))

    if request.data_source_metadata:
        lines = []
        for source in request.data_source_metadata:
            lines.append(
                f"### Data source {source.data_source_id}: {source.name} "
                f"(type {source.type}, {source.access_level}, {source.status})"
            )
            for table in source.schemas:
                columns = ", ".join(
                    f"{c.column_name} {c.data_type}{'' if c.is_nullable else ' not null'}"
                    + (f" -- {c.description}" if c.description else "")
                    for c in table.columns
                )
                extra = f" [{table.classification}]" if table.classification else ""
                rows = f" (~{table.row_estimate} rows)" if table.row_estimate is not None else ""
                lines.append(f"- {table.table_name}{extra}{rows}: {columns}")
        sections.append("## Data sources\n" + "\n".join(lines))
    else:
        sections.append("## Data sources\nNo data source is connected to this agent.")

    rules = cfg.approval_rules
    governance = [
        f"Your action level is {cfg.action_level.value}. You must {_CONSTRAINTS[cfg.action_level.value]}.",
    ]
    if rules.require_approval_for:
        governance.append("Tools that need approval: " + ", ".join(rules.require_approval_for) + ".")
    if cfg.governance_policies:
        governance.append("The following policies apply:")
        governance += [
            f"- {p.name} ({p.enforcement.value}): {json.dumps(p.conditions, sort_keys=True)}"
            for p in cfg.governance_policies
        ]
    sections.append("## Governance\n" + "\n".join(governance))

    if request.conversation_history:
        memory = []
        for entry in request.conversation_history[-10:]:
            memory.append(f"- Run {entry.execution_id}: {entry.summary}")
            memory += [f"  - learned: {item}" for item in entry.learnings]
            memory += [f"  - flagged: {item}" for item in entry.flagged_items]
        sections.append("## Long-term memory\nFrom previous runs, you have learned:\n" + "\n".join(memory))

    if request.session is not None:
        sections += session_sections(request.session)

    sections.append(f"## Trigger\n{trigger_text(request)}")
    sections.append(
        f"## Execution\nexecution_id={request.execution_id}, max_turns={cfg.model_settings.max_turns}, "
        f"workspace_id={request.user_context.workspace_id}"
    )
    return "\n\n".join(sections)


_RELATIONS = {"parent": "the agent that handed this team's work down to you", "child": "your sub-agent",
              "peer": "a sibling in your team"}


def session_sections(session: SessionContext) -> list[str]:
    """The conversation so far, the team and the hand-off, for a run inside a session."""
    sections = []
    if session.summary or session.turns:
        lines = ["This run answers the latest message of a conversation. Earlier in it:"]
        if session.summary:
            lines.append("Older turns, summarised:\n" + session.summary)
        for turn in session.turns:
            lines.append(f"- User: {turn.question}")
            who = f" ({turn.agent_name})" if turn.agent_name else ""
            lines.append(f"  Answer{who}: {turn.answer or '(no answer)'}")
            lines += [f"  Query on data source {q.data_source_id}: {q.query}"
                      + (f" -> {q.total_rows} row(s)" if q.total_rows is not None else "") for q in turn.queries]
        lines.append("Resolve a follow-up (\"and last month?\") against these turns.")
        sections.append("## Conversation so far\n" + "\n".join(lines))
    if session.team:
        members = [f"- {m.name} (id {m.agent_id}, {_RELATIONS[m.relation.value]})"
                   + (f": {m.description}" if m.description else "") for m in session.team]
        sections.append(
            "## Your team\nWhen another agent is better placed to handle the request, hand the conversation to "
            f"it with {TRANSFER_TOOL}; your run ends there and that agent continues with its own tools, data "
            "sources and governance (none of them acts above your action level). You may transfer to:\n"
            + "\n".join(members))
    if session.handoff is not None:
        handoff = session.handoff
        sections.append(f"## Hand-off\n{handoff.from_agent_name} handed this message to you"
                        + (f": {handoff.reason}" if handoff.reason else ".")
                        + f" (hand-off {handoff.depth} for this message).")
    return sections


GENERIC_PROMPT = "Handle this trigger according to your instructions."


def trigger_text(request: ExecutionRequest) -> str:
    """What started the run, as the prompt tells the model."""
    trigger = request.trigger_context
    payload = json.dumps(trigger.trigger_payload, sort_keys=True, default=str) if trigger.trigger_payload else "none"
    return f"This run was triggered by: {trigger.trigger_type.value} from {trigger.trigger_source}. Payload: {payload}"


def user_prompt(request: ExecutionRequest) -> str:
    """The run's user message: its input prompt, or the standing request to act on the trigger."""
    return request.input_prompt or GENERIC_PROMPT


def base_messages(request: ExecutionRequest) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system_prompt(request)}, {"role": "user", "content": user_prompt(request)}]


def message_chars(message: dict[str, Any]) -> int:
    """Roughly the JSON size of a chat message: its text, its tool calls' names and
    arguments, and a fixed allowance for the framing (role, ids, quotes)."""
    content = message.get("content")
    size = 24 + (len(content) if isinstance(content, str) else len(json.dumps(content, default=str)))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        size += 48 + len(function.get("name") or "") + len(function.get("arguments") or "")
    return size


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(message_chars(m) for m in messages) // 4


def compress(messages: list[dict[str, Any]], *, threshold_tokens: int, keep_last: int = 8,
             estimated_tokens: int | None = None) -> list[dict[str, Any]]:
    """Deterministic compression: keep the base context and the latest exchanges, and
    replace older turns with one summary line per tool call. Turn boundaries are
    kept so every tool result still follows the assistant message that asked for it.

    ``estimated_tokens`` is the caller's running estimate for ``messages`` (the
    runner keeps one on the RunState, so a turn does not re-serialise the history)."""
    if estimated_tokens is None:
        estimated_tokens = estimate_tokens(messages)
    if estimated_tokens <= threshold_tokens or len(messages) <= keep_last + 2:
        return messages
    head, body = messages[:2], messages[2:]
    cut = len(body) - keep_last
    while cut < len(body) and body[cut].get("role") == "tool":
        cut -= 1  # never start the kept tail in the middle of a turn
    cut = max(cut, 0)
    older, tail = body[:cut], body[cut:]
    lines = []
    for message in older:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                lines.append(f"- called {call['function']['name']}({call['function']['arguments'][:120]})")
            if message.get("content"):
                lines.append(f"- said: {message['content'][:160]}")
        elif message.get("role") == "tool":
            lines.append(f"  -> {str(message.get('content', ''))[:200]}")
    summary = {"role": "system", "content": "Summary of earlier turns (compressed):\n" + "\n".join(lines)}
    return [*head, summary, *tail]
