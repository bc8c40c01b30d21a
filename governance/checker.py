"""The governance checker the engine calls before every tool call.

Plain Python over pydantic values: the same code serves the stateless
/api/v1/execute driver and durable runs. The only I/O is the atomic counter behind
``agent.tool_calls_this_hour``.

Order of evaluation for a tool call: the action-level matrix first; a BLOCKED there
is final. Then the policies that apply at this point (tool restriction, content,
time window for write tools, budget), then rate limits, whose counter is only
consumed once nothing else has blocked the call. The strictest matched policy
wins (block > require_approval > warn > log_only) and a decision is never
loosened: ``require_approval`` turns PROCEED into APPROVAL_REQUIRED, ``block``
turns anything into BLOCKED.

A condition that cannot be evaluated (a type mismatch, a malformed policy in an
agent config) blocks the call, whatever the policy's enforcement: an unreadable
policy must not grant anything. The reason names the policy and the error, and
the engine's governance step (audited) carries it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone

from datasources.identifiers import identifier_key, policy_name_key
from governance import counters, expressions
from rivercore.types.governance import (
    CallFacts,
    Decision,
    Enforcement,
    GovernancePolicySpec,
    GovernanceResult,
    PolicyMatch,
    PolicyType,
)

logger = logging.getLogger(__name__)

READ_ONLY = "read_only"
RECOMMEND = "recommend"
ACT_WITH_APPROVAL = "act_with_approval"
AUTOMATED = "automated"

SEVERITY = {Enforcement.LOG_ONLY: 0, Enforcement.WARN: 1, Enforcement.REQUIRE_APPROVAL: 2, Enforcement.BLOCK: 3}
TOOL_CALLS_NAME = "agent.tool_calls_this_hour"
QUERY_NAMES = ("rows", "table", "query")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


ACTION_LEVELS = frozenset({READ_ONLY, RECOMMEND, ACT_WITH_APPROVAL, AUTOMATED})


def action_level_decision(*, action_level: str, writes: bool, requires_approval: bool = False) -> Decision:
    """The action-level matrix, read strictly.

    - ``read_only``: reads proceed, writes are blocked.
    - ``recommend``: nothing runs; every call is recorded as a suggestion.
    - ``act_with_approval``: reads proceed; *every* write needs a human approval.
      ``require_approval_for`` cannot loosen that (a write missing from the list
      still pauses); only an explicit auto-approve condition that holds for the
      call may exempt it, and that is decided after this, by the engine.
    - ``automated``: everything proceeds (policies still apply).
    - anything else (a typo, a new level this code does not know): blocked, reads
      included. A level River cannot read must not grant anything.

    ``requires_approval`` is kept for callers that pass it; it can only make a
    decision stricter, and at act_with_approval writes need approval anyway.
    """
    if action_level not in ACTION_LEVELS:
        return Decision.BLOCKED
    if action_level == RECOMMEND:
        return Decision.SUGGEST_ONLY
    if not writes:
        return Decision.PROCEED
    if action_level == READ_ONLY:
        return Decision.BLOCKED
    if action_level == ACT_WITH_APPROVAL:
        return Decision.APPROVAL_REQUIRED
    return Decision.PROCEED


# --- policy shapes -----------------------------------------------------------------


def conditions_expression(conditions: dict | str) -> str:
    """The expression behind a policy's conditions (``{"expression": ...}`` or the keyed form).

    Raises ValueError for a shape that is neither.
    """
    if isinstance(conditions, str):
        return conditions
    if not isinstance(conditions, dict):
        raise ValueError("conditions must be an object")
    if "expression" in conditions:
        if len(conditions) != 1:
            raise ValueError("'expression' cannot be combined with other condition keys")
        if not isinstance(conditions["expression"], str):
            raise ValueError("'expression' must be a string")
        return conditions["expression"]
    return expressions.keyed_to_expression(conditions)


def infer_policy_type(tree: expressions.Node) -> PolicyType:
    """The policy type a condition implies, from the facts it looks at."""
    roots = {name.path.split(".")[0] for name in expressions.names_in(tree)}
    paths = {name.path for name in expressions.names_in(tree)}
    if roots & set(QUERY_NAMES):
        return PolicyType.DATA_EXPORT_LIMIT
    if TOOL_CALLS_NAME in paths:
        return PolicyType.RATE_LIMIT
    if "cost" in roots:
        return PolicyType.BUDGET
    if "time" in roots:
        return PolicyType.TIME_WINDOW
    if "args" in roots or any(call.name == "contains_pii" for call in expressions.functions_in(tree)):
        return PolicyType.CONTENT
    return PolicyType.TOOL_RESTRICTION


class _Compiled:
    __slots__ = ("spec", "expression", "tree", "policy_type", "error")

    def __init__(self, spec: GovernancePolicySpec):
        self.spec = spec
        self.tree = None
        self.error = None
        try:
            self.expression = conditions_expression(spec.conditions)
        except ValueError as exc:
            self.expression = str(spec.conditions)
            self.error = f"invalid conditions: {exc}"
        else:
            try:
                self.tree = expressions.parse(self.expression)
            except expressions.ExpressionError as exc:
                self.error = f"invalid condition: {exc}"
        if spec.policy_type is not None:
            self.policy_type = PolicyType(spec.policy_type)
        elif self.tree is not None:
            self.policy_type = infer_policy_type(self.tree)
        else:
            self.policy_type = PolicyType.TOOL_RESTRICTION

    def uses(self, path: str) -> bool:
        return self.tree is not None and any(name.path == path for name in expressions.names_in(self.tree))

    def evaluate(self, facts_variants: list[dict]) -> PolicyMatch | None:
        """Matched if the condition holds for any of the fact sets (one per table after a query)."""
        error = self.error
        if error is None:
            for facts in facts_variants:
                try:
                    if expressions.matches(self.tree, facts):
                        return self._match(None)
                except expressions.ExpressionError as exc:
                    error = f"could not evaluate: {exc}"
            if error is None:
                return None
        return self._match(error)

    def _match(self, error: str | None) -> PolicyMatch:
        return PolicyMatch(
            policy_id=self.spec.policy_id,
            name=self.spec.name,
            policy_type=self.policy_type,
            enforcement=self.spec.enforcement,
            expression=self.expression,
            error=error,
            required_approvals=self.spec.required_approvals,
        )


def policy_type_of(spec: GovernancePolicySpec) -> PolicyType:
    """The spec's policy type, or the one its condition implies."""
    return _Compiled(spec).policy_type


def _compile(policies: list[GovernancePolicySpec], types: set[PolicyType]) -> list[_Compiled]:
    compiled = [_Compiled(spec) for spec in policies]
    return [c for c in compiled if c.policy_type in types]


# --- facts -------------------------------------------------------------------------


def time_facts(*, now: datetime | None = None, time_zone: str = "UTC") -> tuple[dict, str | None]:
    """Local wall-clock facts for ``now`` in ``time_zone`` (DST-correct via zoneinfo).

    Returns the facts and a warning when the zone is unknown (UTC is used then).
    """
    warning = None
    try:
        zone = ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
        warning = f"Unknown time zone {time_zone!r}; time windows were evaluated in UTC."
    local = (now or timezone.now()).astimezone(zone)
    return {
        "hour": local.hour,
        "minute": local.minute,
        "weekday": local.weekday(),
        "day": WEEKDAYS[local.weekday()],
        "date": local.date().isoformat(),
        "time_zone": zone.key,
    }, warning


def _column_keys(value):
    if isinstance(value, dict):
        return {identifier_key(key) if isinstance(key, str) else key: item for key, item in value.items()}
    if isinstance(value, list):
        return [_column_keys(item) for item in value]
    return value


def policy_arguments(arguments: dict) -> dict:
    """Tool arguments as policies see them: SQL names in their policy form.

    ``table_name`` becomes its key (``"public"."Canary"`` -> ``canary``), and next to a
    table name the column names in ``data`` and ``conditions`` are case-folded, so
    ``args.table_name == 'canary'`` or ``args.data.ssn != null`` hold however the
    model spelled the names. The arguments that run are not changed.
    """
    if not isinstance(arguments, dict) or not isinstance(arguments.get("table_name"), str):
        return arguments
    seen = dict(arguments)
    seen["table_name"] = policy_name_key(arguments["table_name"])
    for field in ("data", "conditions"):
        if field in seen:
            seen[field] = _column_keys(seen[field])
    return seen


def call_fact_dict(facts: CallFacts, *, now: datetime | None = None) -> tuple[dict, list[str]]:
    """The names a tool-call condition can use."""
    time, warning = time_facts(now=now, time_zone=facts.time_zone)
    return {
        "tool": {"name": facts.tool_name, "category": facts.tool_category, "writes": facts.writes},
        "args": policy_arguments(facts.arguments),
        "agent": {"id": facts.agent_id, "action_level": facts.action_level},
        "cost": {"tokens": facts.tokens_used},
        "time": time,
        "confidence_score": facts.confidence_score,
        "workspace": {"id": facts.workspace_id},
        "execution": {"id": facts.execution_id},
    }, [warning] if warning else []


def tool_calls_key(*, agent_id: str) -> str:
    return f"agent:{agent_id}:tool_calls"


# --- decisions ---------------------------------------------------------------------


def _strictest(matches: list[PolicyMatch]) -> PolicyMatch | None:
    best = None
    for match in matches:
        if best is None or SEVERITY[match.enforcement] > SEVERITY[best.enforcement]:
            best = match
    return best


def _describe(match: PolicyMatch) -> str:
    text = f"Policy '{match.name}' ({match.policy_type.value}, {match.enforcement.value}) matched: {match.expression}"
    if match.error:
        text += f" [{match.error}]"
    return text


def _combine(
    *, base: Decision, base_reason: str, matches: list[PolicyMatch], point: str, execution_id: int | None,
    warnings: list[str], approval_possible: bool = True, quiet: bool = False,
) -> GovernanceResult:
    decision = base
    enforcements = {m.enforcement for m in matches}
    broken = [m for m in matches if m.error]
    if Enforcement.BLOCK in enforcements or broken:
        # A condition that cannot be evaluated denies, whatever its enforcement says.
        decision = Decision.BLOCKED
    elif Enforcement.REQUIRE_APPROVAL in enforcements and base == Decision.PROCEED and approval_possible:
        decision = Decision.APPROVAL_REQUIRED
    warnings = list(warnings)
    for match in matches:
        if match.enforcement == Enforcement.WARN or (
            match.enforcement == Enforcement.REQUIRE_APPROVAL and not approval_possible
        ):
            warnings.append(_describe(match))
        elif match.error:
            warnings.append(_describe(match))
        if match.enforcement == Enforcement.LOG_ONLY and not quiet:
            logger.info("governance %s: %s (execution %s)", point, _describe(match), execution_id)
    strictest = broken[0] if broken else _strictest(matches)
    reason = base_reason
    if strictest is not None and decision != base:
        reason = _describe(strictest)
    elif strictest is not None:
        reason = f"{base_reason} {_describe(strictest)}"
    return GovernanceResult(
        decision=decision,
        reason=reason,
        policy_matched=strictest.name if strictest else None,
        policy_id=strictest.policy_id if strictest else None,
        policy_type=strictest.policy_type.value if strictest else None,
        enforcement=strictest.enforcement.value if strictest else None,
        warnings=warnings,
        matched=matches,
        required_approvals=_quorum(decision, matches),
    )


def _quorum(decision: Decision, matches: list[PolicyMatch]) -> int:
    """Quorum: the most distinct approvers any matched require_approval policy asks for."""
    if decision != Decision.APPROVAL_REQUIRED:
        return 1
    return max([m.required_approvals for m in matches if m.enforcement == Enforcement.REQUIRE_APPROVAL] or [1])


_TOOL_POINT_TYPES = {PolicyType.TOOL_RESTRICTION, PolicyType.CONTENT, PolicyType.TIME_WINDOW, PolicyType.BUDGET}


def check_tool_call(
    facts: CallFacts, *, now: datetime | None = None, count: bool = True, recorded_calls_this_hour: int | None = None,
) -> GovernanceResult:
    """Decide one proposed tool call. ``count=False`` evaluates rate limits without
    consuming a call (for dry runs such as the check_governance tool).

    ``recorded_calls_this_hour`` re-decides a recorded call (a backtest,
    ``executions.backtest``): the agent's calls that hour, this one included, come from
    the history, so the live counter is neither read nor consumed, and no log-only
    match is logged as if it had just happened."""
    decision = action_level_decision(
        action_level=facts.action_level,
        writes=facts.writes,
        requires_approval=facts.tool_name in facts.require_approval_for,
    )
    reason = {
        Decision.PROCEED: f"{facts.tool_name} is allowed at action level {facts.action_level}.",
        Decision.APPROVAL_REQUIRED: f"{facts.tool_name} needs human approval at action level {facts.action_level}.",
        Decision.SUGGEST_ONLY: f"Action level {facts.action_level}: {facts.tool_name} is recorded as a suggestion.",
        Decision.BLOCKED: (
            f"{facts.tool_name} writes, and action level {facts.action_level} forbids writes."
            if facts.action_level in ACTION_LEVELS
            else f"Unknown action level {facts.action_level!r}: nothing is allowed."
        ),
    }[decision]
    if decision == Decision.BLOCKED or not facts.policies:
        return GovernanceResult(decision=decision, reason=reason)

    fact_dict, warnings = call_fact_dict(facts, now=now)
    types = set(_TOOL_POINT_TYPES)
    if not facts.writes:
        types.discard(PolicyType.TIME_WINDOW)  # time windows guard write tools only
    first = _compile(facts.policies, types)
    matches = [m for c in first if (m := c.evaluate([fact_dict])) is not None]
    if any(m.enforcement == Enforcement.BLOCK for m in matches):
        return _combine(base=decision, base_reason=reason, matches=matches, point="before_tool",
                        execution_id=facts.execution_id, warnings=warnings, quiet=recorded_calls_this_hour is not None)

    rate = _compile(facts.policies, {PolicyType.RATE_LIMIT})
    consumed = False
    if rate and recorded_calls_this_hour is not None:
        fact_dict["agent"]["tool_calls_this_hour"] = recorded_calls_this_hour
        matches += [m for c in rate if (m := c.evaluate([fact_dict])) is not None]
    elif rate:
        key = tool_calls_key(agent_id=facts.agent_id)
        counted = count and decision != Decision.SUGGEST_ONLY and any(c.uses(TOOL_CALLS_NAME) for c in rate)
        if counted:
            calls = counters.counter_hit(key=key, window=counters.HOUR, now=now)
            consumed = True
        else:
            calls = counters.counter_value(key=key, window=counters.HOUR, now=now) + 1
        # The count includes the call being decided: "> 100" lets exactly 100 calls through.
        fact_dict["agent"]["tool_calls_this_hour"] = calls
        matches += [m for c in rate if (m := c.evaluate([fact_dict])) is not None]

    result = _combine(base=decision, base_reason=reason, matches=matches, point="before_tool",
                      execution_id=facts.execution_id, warnings=warnings, quiet=recorded_calls_this_hour is not None)
    if consumed and result.decision in (Decision.BLOCKED, Decision.SUGGEST_ONLY):
        # The call will not run: give the slot back.
        counters.counter_hit(key=tool_calls_key(agent_id=facts.agent_id), window=counters.HOUR, amount=-1, now=now)
    return result


def check_llm_call(
    *,
    policies: list[GovernancePolicySpec],
    tokens_used: int,
    org_id: int,
    workspace_id: int,
    agent_id: str,
    execution_id: int,
    time_zone: str = "UTC",
    now: datetime | None = None,
) -> GovernanceResult:
    """Budget policies before an LLM call. There is nothing to approve at this point, so a
    ``require_approval`` budget policy adds a warning here and acts at the next tool call."""
    reason = "No budget policy stops this model call."
    compiled = _compile(policies, {PolicyType.BUDGET})
    if not compiled:
        return GovernanceResult(decision=Decision.PROCEED, reason=reason)
    time, warning = time_facts(now=now, time_zone=time_zone)
    fact_dict = {
        "cost": {"tokens": tokens_used},
        "agent": {"id": agent_id},
        "time": time,
        "workspace": {"id": workspace_id},
        "execution": {"id": execution_id},
    }
    matches = [m for c in compiled if (m := c.evaluate([fact_dict])) is not None]
    return _combine(base=Decision.PROCEED, base_reason=reason, matches=matches, point="before_llm",
                    execution_id=execution_id, warnings=[warning] if warning else [], approval_possible=False)


def check_query_result(
    *, facts: CallFacts, rows: int, tables: list[str], classifications: dict[str, str], now: datetime | None = None
) -> GovernanceResult:
    """Data export limits after a query ran, before its rows reach the model.

    ``table.*`` conditions hold if they hold for any table the query read.
    """
    reason = "No data export limit applies to this result."
    compiled = _compile(facts.policies, {PolicyType.DATA_EXPORT_LIMIT})
    if not compiled:
        return GovernanceResult(decision=Decision.PROCEED, reason=reason)
    base, warnings = call_fact_dict(facts, now=now)
    # Table names in their policy form, so classifications and policies match whatever
    # the spelling (see datasources.identifiers).
    labels: dict[str, str] = {}
    for name, label in classifications.items():
        if label:
            labels.setdefault(policy_name_key(name), label)
    tables = list(dict.fromkeys(policy_name_key(t) for t in tables))
    base["rows"] = rows
    base["query"] = {"tables": list(tables), "classifications": sorted({labels.get(t) or "" for t in tables})}
    variants = [{**base, "table": {"name": t, "classification": labels.get(t)}} for t in tables]
    variants = variants or [{**base, "table": {"name": None, "classification": None}}]
    matches = [m for c in compiled if (m := c.evaluate(variants)) is not None]
    return _combine(base=Decision.PROCEED, base_reason=reason, matches=matches, point="after_query",
                    execution_id=facts.execution_id, warnings=warnings)


# The facts an auto-approve condition sees: the proposed call and the model's
# reported confidence. Nothing else is known when the gate decides.
AUTO_APPROVE_NAMES: dict[str, frozenset[str] | None] = {
    "confidence_score": frozenset(),
    "tool": frozenset({"name"}),
    "args": None,
}


def auto_approve_condition_validate(condition) -> expressions.Node:
    """Check an ``auto_approve_conditions`` entry: it parses, uses only the facts the
    gate offers, and depends on them. A constant (``true``, ``1 == 1``) or a
    condition that holds with every fact unknown (``true OR ...``,
    ``confidence_score == null``) would approve writes unseen, so it is refused.
    Raises ExpressionError."""
    if not isinstance(condition, str) or not condition.strip():
        raise expressions.ExpressionSyntaxError(0, "an auto-approve condition may not be empty")
    tree = expressions.expression_validate(condition, known_names=True, names=AUTO_APPROVE_NAMES)
    if not expressions.names_in(tree):
        raise expressions.ExpressionSyntaxError(
            0, "an auto-approve condition must look at the call (confidence_score, tool.name or args.*); "
            "a constant condition would approve every call"
        )
    try:
        holds_on_nothing = expressions.matches(tree, {})
    except expressions.ExpressionError:
        holds_on_nothing = False
    if holds_on_nothing:
        raise expressions.ExpressionSyntaxError(
            0, "this condition holds even when nothing is known about the call (no confidence, no arguments), "
            "so it would approve every call; compare a fact with a value instead"
        )
    return tree


def auto_approve_matches(*, condition: str, facts: dict) -> bool:
    """Whether an ``auto_approve_conditions`` entry holds. Any doubt means no: a
    condition that is invalid, constant, or cannot be evaluated never skips an
    approval; only one that clearly holds does. Arguments are compared in their
    normalized form, as policies see them."""
    if isinstance(facts, dict) and "args" in facts:
        facts = {**facts, "args": policy_arguments(facts["args"])}
    try:
        tree = auto_approve_condition_validate(condition)
        return expressions.matches(tree, facts)
    except expressions.ExpressionError as exc:
        logger.warning("auto-approve condition %r not applied: %s", condition, exc)
        return False
