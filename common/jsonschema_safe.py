"""JSON Schemas written by users: refused at save unless they are cheap to evaluate,
then evaluated with a linear-time regex engine under a step budget.

A workspace stores a schema once (an API trigger's ``input_schema``) and River applies
it to every payload, so the schema decides how much work each request costs. The rules:

* Every regular expression (``pattern``, the keys of ``patternProperties``, and
  ``format: regex`` values in a payload) runs on RE2, whose matching time is linear in
  the input. A pattern RE2 cannot compile (backreferences, lookahead, lookbehind,
  repetitions above 1000) is refused at save, never handed to Python's backtracking
  ``re``; a stored one that slipped in earlier fails the payload, not the process.
* References stay inside the document and point at a JSON pointer (``#`` or
  ``#/$defs/x``): remote references, plain-name anchors, nested ``$id`` and dynamic
  references are refused, so what a ``$ref`` means is decided here, not by a resolver.
* Reference cycles that do not descend into the payload (``x`` -> ``x``, or ``a`` ->
  ``b`` -> ``a`` through ``allOf``/``anyOf``/``not``/...) are refused: they never end.
  Recursion through ``properties``/``items`` is fine: the payload's depth ends it.
* A schema applies at most MAX_FANOUT subschemas to one payload value and chains at
  most MAX_CHAIN of them, so ``allOf: [a, a]`` stacked thirty times (a billion
  evaluations) is refused at save.
* The document is bounded in nodes, depth and pattern length.
* Validation itself counts keyword evaluations (MAX_STEPS) and stops at the first
  MAX_ERRORS errors; running out of budget, or out of stack, fails the payload with an
  error, never a 500.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import jsonschema
import re2
import referencing.exceptions
from jsonschema import ValidationError, validators

from rivercore.errors import InvalidInput

MAX_NODES = 5_000  # JSON values in the whole document
MAX_DEPTH = 64  # JSON nesting of the document
MAX_PATTERN_CHARS = 1_000
MAX_FANOUT = 500  # subschemas applied to one payload value
MAX_CHAIN = 24  # subschemas applied to one payload value one inside another
MAX_STEPS = 200_000  # keyword evaluations per payload
MAX_ERRORS = 20
RE2_MAX_MEM = 8 << 20

# Keywords whose value is a subschema applied to the same value as their schema.
_SAME_VALUE_ONE = ("not", "if", "then", "else")
_SAME_VALUE_LIST = ("allOf", "anyOf", "oneOf")
_SAME_VALUE_MAP = ("dependentSchemas",)
# Keywords whose subschemas apply to a part of the value (a member, an item, a key).
_INNER_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "unevaluatedItems",
              "unevaluatedProperties", "items")
_INNER_LIST = ("prefixItems", "items")
_INNER_MAP = ("properties", "patternProperties")
# Definitions apply only through a $ref, but are checked like any other subschema.
_DEFINITIONS = ("$defs", "definitions")
_REFUSED_KEYWORDS = {
    "$dynamicRef": "dynamic references are not supported; use $ref with a JSON pointer such as #/$defs/x",
    "$recursiveRef": "recursive references are not supported; use $ref with a JSON pointer such as #/$defs/x",
    "$dynamicAnchor": "dynamic anchors are not supported; use $ref with a JSON pointer such as #/$defs/x",
    "$recursiveAnchor": "recursive anchors are not supported; use $ref with a JSON pointer such as #/$defs/x",
}


class SchemaBudgetExceeded(Exception):
    """Validation used more than MAX_STEPS keyword evaluations."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    return options


@lru_cache(maxsize=2048)
def regex_compile(pattern: str):
    """``pattern`` compiled by RE2 (cached); ``re2.error`` when RE2 cannot run it."""
    return re2.compile(pattern, _options())


def regex_problem(pattern: Any) -> str | None:
    """Why ``pattern`` cannot be stored, or None when RE2 runs it in linear time."""
    if not isinstance(pattern, str):
        return "a regular expression must be a string"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a regular expression of at most {MAX_PATTERN_CHARS} characters"
    try:
        regex_compile(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        return (f"River runs regular expressions in linear time (RE2) and cannot run this one: {reason[:200]} "
                "(backreferences, lookahead/lookbehind and repetitions above 1000 are not supported)")
    return None


def _search(pattern: str, text: str) -> bool:
    return regex_compile(pattern).search(text) is not None


# --- save time -------------------------------------------------------------------------------


def _dotted(path: tuple) -> str:
    return ".".join(str(part) for part in path)


def _refused(field: str, path: tuple, message: str) -> InvalidInput:
    where = ".".join([field, *(str(part) for part in path)])
    return InvalidInput("The JSON Schema is refused.", details={where: [message]})


def _document_check(schema: Any, field: str) -> None:
    """Nodes and depth of the JSON document, iteratively (no recursion to exhaust)."""
    stack: list[tuple[Any, tuple, int]] = [(schema, (), 1)]
    nodes = 0
    while stack:
        node, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise _refused(field, (), f"a JSON Schema of at most {MAX_NODES} values")
        if depth > MAX_DEPTH:
            raise _refused(field, path[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((value, (*path, key), depth + 1) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, (*path, index), depth + 1) for index, value in enumerate(node))


def _pointer_target(document: Any, ref: str) -> tuple[tuple, Any] | None:
    """(path, node) that ``#/a/b`` names in ``document``, or None."""
    fragment = unquote(ref[1:])
    if fragment == "":
        return (), document
    if not fragment.startswith("/"):
        return None
    node, path = document, []
    for raw in fragment[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node, key = node[token], token
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node, key = node[int(token)], int(token)
        else:
            return None
        path.append(key)
    return tuple(path), node


def _children(schema: dict) -> tuple[list[tuple[tuple, Any]], list[tuple[tuple, Any]]]:
    """(subschemas on the same value, subschemas on parts of it), as (relative path, node)."""
    same: list[tuple[tuple, Any]] = []
    inner: list[tuple[tuple, Any]] = []
    for key in _SAME_VALUE_ONE:
        if key in schema:
            same.append(((key,), schema[key]))
    for key in _SAME_VALUE_LIST:
        if isinstance(schema.get(key), list):
            same.extend(((key, i), sub) for i, sub in enumerate(schema[key]))
    for key in _SAME_VALUE_MAP:
        if isinstance(schema.get(key), dict):
            same.extend(((key, name), sub) for name, sub in schema[key].items())
    if isinstance(schema.get("dependencies"), dict):  # drafts 4-7: a schema or a list of names
        same.extend((("dependencies", name), sub) for name, sub in schema["dependencies"].items()
                    if isinstance(sub, dict | bool))
    for key in _INNER_ONE:
        if isinstance(schema.get(key), dict | bool):
            inner.append(((key,), schema[key]))
    for key in _INNER_LIST:
        if isinstance(schema.get(key), list):
            inner.extend(((key, i), sub) for i, sub in enumerate(schema[key]))
    for key in (*_INNER_MAP, *_DEFINITIONS):
        if isinstance(schema.get(key), dict):
            inner.extend(((key, name), sub) for name, sub in schema[key].items())
    return same, inner


def _schema_node_check(node: dict, path: tuple, *, field: str, old_draft: bool) -> None:
    for keyword, why in _REFUSED_KEYWORDS.items():
        if keyword in node:
            raise _refused(field, (*path, keyword), why)
    if path and ("$id" in node or (old_draft and isinstance(node.get("id"), str))):
        raise _refused(field, (*path, "$id" if "$id" in node else "id"),
                       "only the top of the schema may have an $id (a nested one changes what $ref means)")
    if "$anchor" in node:
        raise _refused(field, (*path, "$anchor"), "anchors are not supported; use $ref with a JSON pointer")
    if "pattern" in node:
        problem = regex_problem(node["pattern"])
        if problem:
            raise _refused(field, (*path, "pattern"), problem)
    properties = node.get("patternProperties")
    if isinstance(properties, dict):
        for pattern in properties:
            problem = regex_problem(pattern)
            if problem:
                raise _refused(field, (*path, "patternProperties", pattern), problem)


def schema_check(schema: Any, *, field: str = "schema") -> None:
    """Refuse (InvalidInput naming ``<field>.<path>``) a schema River will not evaluate:
    see the module docstring. Remote references are refused too."""
    if not isinstance(schema, dict | bool):
        raise _refused(field, (), "a JSON Schema is an object (or true/false)")
    _document_check(schema, field)
    cls = validators.validator_for(schema) if isinstance(schema, dict) else validators.validator_for({})
    old_draft = cls.META_SCHEMA.get("$schema", "").rstrip("#/").endswith(("draft-03/schema", "draft-04/schema"))

    # Every place that is read as a schema: the top, the subschemas of keywords, and
    # whatever a $ref points at. Edges record which subschemas apply to the same value.
    same_edges: dict[tuple, list[tuple]] = {}
    seen: set[tuple] = set()
    stack: list[tuple[tuple, Any]] = [((), schema)]
    has_pattern_properties = False
    uses_unevaluated: tuple | None = None
    while stack:
        path, node = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        same_edges[path] = []
        if not isinstance(node, dict):
            continue
        _schema_node_check(node, path, field=field, old_draft=old_draft)
        has_pattern_properties = has_pattern_properties or "patternProperties" in node
        for keyword in ("unevaluatedProperties", "unevaluatedItems"):
            if keyword in node and uses_unevaluated is None:
                uses_unevaluated = (*path, keyword)
        if "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise _refused(field, (*path, "$ref"), "a $ref must point inside the schema (starting with '#')")
            found = _pointer_target(schema, ref)
            if found is None:
                raise _refused(field, (*path, "$ref"),
                               f"{ref[:100]!r} does not name a place in this schema (write a JSON pointer "
                               "such as #/$defs/x)")
            target_path, target = found
            if not isinstance(target, dict | bool):
                raise _refused(field, (*path, "$ref"), f"{ref[:100]!r} points at a value that is not a schema")
            same_edges[path].append(target_path)
            stack.append((target_path, target))
        same, inner = _children(node)
        for relative, child in same:
            same_edges[path].append((*path, *relative))
            stack.append(((*path, *relative), child))
        for relative, child in inner:
            stack.append(((*path, *relative), child))
    _meta_check(cls, schema, field)
    if uses_unevaluated is not None and has_pattern_properties:
        raise _refused(field, uses_unevaluated,
                       "unevaluatedProperties/unevaluatedItems cannot be combined with patternProperties")
    _same_value_graph_check(same_edges, field)


def _meta_check(cls, schema: Any, field: str) -> None:
    """The schema against its draft's meta-schema, with ``format: regex`` judged by RE2
    (jsonschema's own check compiles with Python's ``re``, which knows other syntax)."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_regex_format, re2.error)}
    meta = validators.validator_for(cls.META_SCHEMA, default=cls)(cls.META_SCHEMA, format_checker=checker)
    try:
        error = jsonschema.exceptions.best_match(meta.iter_errors(schema))
    except RecursionError:
        raise _refused(field, (), "the schema is nested too deeply to check") from None
    if error is not None:
        raise _refused(field, tuple(error.absolute_path), f"not a valid JSON Schema: {error.message[:300]}")


def _same_value_graph_check(edges: dict[tuple, list[tuple]], field: str) -> None:
    """Refuse cycles among subschemas applied to the same value, and fan-out or chains
    past the bounds (iterative depth-first search with memoized costs)."""
    fanout: dict[tuple, int] = {}
    chain: dict[tuple, int] = {}
    state: dict[tuple, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start) == 2:
            continue
        stack: list[tuple[tuple, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            node, index = stack[-1]
            targets = edges.get(node, [])
            if index < len(targets):
                stack[-1] = (node, index + 1)
                target = targets[index]
                mark = state.get(target)
                if mark == 1:
                    inside = target[: len(node)] == node and len(target) > len(node)
                    raise _refused(field, node if inside else (*node, "$ref"),
                                   "this reference leads back to itself without descending into the value "
                                   "(a schema that refers to itself never finishes)")
                if mark is None:
                    state[target] = 1
                    stack.append((target, 0))
                continue
            stack.pop()
            state[node] = 2
            fanout[node] = min(1 + sum(fanout[t] for t in targets), MAX_FANOUT + 1)
            chain[node] = 1 + max((chain[t] for t in targets), default=0)
            if fanout[node] > MAX_FANOUT:
                raise _refused(field, node, f"applies more than {MAX_FANOUT} subschemas to one value "
                                            "(through $ref, allOf, anyOf, oneOf, not, if/then/else)")
            if chain[node] > MAX_CHAIN:
                raise _refused(field, node, f"chains more than {MAX_CHAIN} subschemas on one value "
                                            "(through $ref, allOf, anyOf, oneOf, not, if/then/else)")


# --- validate time ---------------------------------------------------------------------------

_steps: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("jsonschema_safe_steps", default=None)


def _counted(keyword_fn):
    def run(validator, value, instance, schema):
        budget = _steps.get()
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise SchemaBudgetExceeded
        result = keyword_fn(validator, value, instance, schema)
        if result is not None:
            yield from result

    return run


def _pattern(validator, pattern, instance, schema):
    if not validator.is_type(instance, "string"):
        return
    try:
        found = _search(pattern, instance)
    except re2.error:
        yield ValidationError(f"the schema's pattern {pattern[:100]!r} cannot be evaluated")
        return
    if not found:
        yield ValidationError(f"{instance[:100]!r} does not match {pattern[:100]!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        try:
            compiled = regex_compile(pattern)
        except re2.error:
            yield ValidationError(f"the schema's pattern {pattern[:100]!r} cannot be evaluated")
            continue
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: dict, schema: dict) -> Iterator[str]:
    properties = schema.get("properties", {})
    patterns = []
    for pattern in schema.get("patternProperties", {}):
        try:
            patterns.append(regex_compile(pattern))
        except re2.error:
            continue
    for key in instance:
        if key in properties or any(p.search(key) is not None for p in patterns):
            continue
        yield key


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    extras = list(_additional(instance, schema))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        shown = ", ".join(repr(each) for each in sorted(extras)[:10])
        if "patternProperties" in schema:
            yield ValidationError(f"{shown} {'does' if len(extras) == 1 else 'do'} not match any allowed pattern")
        else:
            yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


def _regex_format(instance) -> bool:
    if not isinstance(instance, str):
        return True
    if len(instance) > MAX_PATTERN_CHARS:
        return False
    regex_compile(instance)
    return True


def _format_checker() -> jsonschema.FormatChecker:
    """Formats stay annotations as before, except ``regex``, which is checked by RE2."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("regex", raises=re2.error)(_regex_format)
    return checker


_FORMATS = _format_checker()


@lru_cache(maxsize=16)
def _safe_class(base):
    overrides = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    keywords = {name: _counted(overrides.get(name, fn)) for name, fn in base.VALIDATORS.items()}
    return validators.extend(base, keywords)


def schema_validator(schema):
    """A validator for ``schema`` (the draft it declares) whose regexes run on RE2 and
    whose keyword evaluations are counted while ``schema_errors`` runs."""
    base = validators.validator_for(schema) if isinstance(schema, dict) else validators.validator_for({})
    return _safe_class(base)(schema, format_checker=_FORMATS)


def schema_errors(schema, instance, *, prefix: str = "payload") -> dict[str, list[str]]:
    """``<prefix>.<path>`` -> messages for each way ``instance`` fails ``schema`` (at most
    MAX_ERRORS paths); empty when it satisfies it. Runs out of budget or stack as an
    error on ``prefix``, never as an exception."""
    validator = schema_validator(schema)
    details: dict[str, list[str]] = {}
    token = _steps.set([MAX_STEPS])
    try:
        for error in validator.iter_errors(instance):
            path = ".".join([prefix, *(str(part) for part in error.absolute_path)])
            details.setdefault(path, []).append(error.message[:300])
            if len(details) >= MAX_ERRORS:
                break
    except SchemaBudgetExceeded:
        return {prefix: [f"The payload needs more than {MAX_STEPS} schema checks; the schema or payload is "
                         "too complex to validate."]}
    except RecursionError:
        return {prefix: ["The payload is nested too deeply for this schema to validate."]}
    except referencing.exceptions.Unresolvable:
        return {prefix: ["The schema has a $ref that cannot be resolved."]}
    finally:
        _steps.reset(token)
    return dict(sorted(details.items()))
