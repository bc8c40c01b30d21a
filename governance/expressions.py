"""The policy condition language: tokenized, parsed into a tree, interpreted.

Nothing here calls ``eval``. The grammar, loosest binding first::

    expr       := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | comparison
    comparison := unary [("==" | "!=" | ">" | ">=" | "<" | "<=" | "IN" | "NOT IN") unary]
    unary      := "-" unary | primary
    primary    := NUMBER | STRING | "true" | "false" | "null" | list | call | NAME | "(" expr ")"
    list       := "[" [expr ("," expr)*] "]"
    call       := FUNCTION "(" [expr ("," expr)*] ")"

Keywords are case-insensitive. Names are dotted paths (``table.classification``)
looked up in a facts dict; a name the facts do not carry evaluates to ``null``, and
ordering comparisons with ``null`` are false, so a condition about a fact that is
absent at an evaluation point does not match. Policies are stricter at save time:
``expression_validate(..., known_names=True)`` refuses names River never provides,
so a typo is caught when the policy is written rather than silently never matching.

Errors carry the 0-based character offset of the offending token and a reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from datasources.identifiers import policy_name_key
from governance import pii


class ExpressionError(Exception):
    """A condition that cannot be parsed or evaluated."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason


class ExpressionSyntaxError(ExpressionError):
    pass


class ExpressionEvalError(ExpressionError):
    pass


# --- tokens ------------------------------------------------------------------------

KEYWORDS = {"and", "or", "not", "in", "true", "false", "null"}


@dataclass(frozen=True)
class Token:
    kind: str  # NUMBER STRING NAME KW OP ( ) [ ] , - EOF
    value: Any
    pos: int


# Limits that keep every input, however hostile, a clean ExpressionSyntaxError (and
# so a 400) rather than a RecursionError, a memory blow-up or a 500: conditions are
# short in practice, and the parser recurses a few frames per nesting level.
MAX_EXPRESSION_CHARS = 4000
MAX_TOKENS = 1000
MAX_DEPTH = 32  # parentheses, lists, function calls, NOT and unary minus, nested
MAX_NUMBER_CHARS = 32
MAX_NUMBER = 10**15

_SPACE = frozenset(" \t\r\n")
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def _number(text: str, pos: int) -> int | float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ExpressionSyntaxError(pos, f"number longer than {MAX_NUMBER_CHARS} characters")
    if any(c in text for c in ".eE"):
        value = float(text)
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise ExpressionSyntaxError(pos, f"number out of range (at most {MAX_NUMBER:.0e} either side of 0)")
        return value
    value = int(text)
    if value > MAX_NUMBER:
        raise ExpressionSyntaxError(pos, f"number out of range (at most {MAX_NUMBER:.0e} either side of 0)")
    return value


def tokenize(source: str) -> list[Token]:
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionSyntaxError(
            MAX_EXPRESSION_CHARS, f"expression longer than {MAX_EXPRESSION_CHARS} characters"
        )
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        if len(tokens) >= MAX_TOKENS:
            raise ExpressionSyntaxError(i, f"expression has more than {MAX_TOKENS} tokens")
        ch = source[i]
        if ch in _SPACE:
            i += 1
            continue
        if ch in _DIGITS:
            m = _NUMBER.match(source, i)
            text = m.group()
            end = m.end()
            if end < n and (source[end] in _NAME_START or source[end] in _DIGITS):
                raise ExpressionSyntaxError(end, f"unexpected character {source[end]!r} after number")
            tokens.append(Token("NUMBER", _number(text, i), i))
            i = end
            continue
        if ch in _NAME_START:
            m = _NAME.match(source, i)
            text = m.group()
            if m.end() < n and source[m.end()] == ".":
                raise ExpressionSyntaxError(m.end(), "a name cannot end with '.'")
            if text.lower() in KEYWORDS:
                tokens.append(Token("KW", text.lower(), i))
            else:
                tokens.append(Token("NAME", text, i))
            i = m.end()
            continue
        if ch in "'\"":
            start, i, chars = i, i + 1, []
            while True:
                if i >= n:
                    raise ExpressionSyntaxError(start, "unterminated string")
                c = source[i]
                if c == "\\":
                    if i + 1 >= n:
                        raise ExpressionSyntaxError(start, "unterminated string")
                    nxt = source[i + 1]
                    if nxt not in _ESCAPES:
                        raise ExpressionSyntaxError(i, f"unknown escape \\{nxt}")
                    chars.append(_ESCAPES[nxt])
                    i += 2
                    continue
                if c == ch:
                    i += 1
                    break
                if ord(c) < 0x20 or c == "\x7f":
                    raise ExpressionSyntaxError(i, f"control character {c!r} in a string (write \\n or \\t)")
                chars.append(c)
                i += 1
            tokens.append(Token("STRING", "".join(chars), start))
            continue
        two = source[i : i + 2]
        if two in ("==", "!=", ">=", "<="):
            tokens.append(Token("OP", two, i))
            i += 2
            continue
        if ch in "<>":
            tokens.append(Token("OP", ch, i))
            i += 1
            continue
        if ch == "=":
            raise ExpressionSyntaxError(i, "use '==' to compare")
        if two in ("&&", "||"):
            raise ExpressionSyntaxError(i, f"use {'AND' if two == '&&' else 'OR'} instead of {two!r}")
        if ch in "()[],-":
            tokens.append(Token(ch, ch, i))
            i += 1
            continue
        if not ch.isascii():
            raise ExpressionSyntaxError(
                i, f"unexpected non-ASCII character {ch!r}: names and operators are ASCII; quote other text"
            )
        raise ExpressionSyntaxError(i, f"unexpected character {ch!r}")
    tokens.append(Token("EOF", None, n))
    return tokens


# --- tree --------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    value: Any
    pos: int


@dataclass(frozen=True)
class Name:
    path: str
    pos: int


@dataclass(frozen=True)
class ListExpr:
    items: tuple
    pos: int


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple
    pos: int


@dataclass(frozen=True)
class Neg:
    operand: Any
    pos: int


@dataclass(frozen=True)
class Not:
    operand: Any
    pos: int


@dataclass(frozen=True)
class BoolOp:
    """``a OR b OR c`` is one node with three operands: a long chain stays shallow."""

    op: str  # "and" | "or"
    operands: tuple
    pos: int


@dataclass(frozen=True)
class Compare:
    op: str  # == != > >= < <= in "not in"
    left: Any
    right: Any
    pos: int


Node = Literal | Name | ListExpr | Call | Neg | Not | BoolOp | Compare


# --- functions ---------------------------------------------------------------------


def _fn_contains_pii(value):
    return pii.contains_pii(value)


def _fn_lower(value):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("lower() needs a string")
    return value.lower()


def _fn_len(value):
    if value is None:
        return None
    if not isinstance(value, str | list | dict):
        raise TypeError("len() needs a string or a list")
    return len(value)


FUNCTIONS: dict[str, tuple[int, Callable]] = {
    "contains_pii": (1, _fn_contains_pii),
    "lower": (1, _fn_lower),
    "len": (1, _fn_len),
}


# --- parser ------------------------------------------------------------------------

_COMPARE_OPS = {"==", "!=", ">", ">=", "<", "<="}


def _describe(token: Token) -> str:
    if token.kind == "EOF":
        return "end of expression"
    if token.kind == "STRING":
        return "string " + json.dumps(token.value)
    if token.kind == "KW":
        return token.value.upper()
    return repr(str(token.value))


class _Parser:
    def __init__(self, source: str):
        self.tokens = tokenize(source)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at_kw(self, *words: str) -> bool:
        return self.tok.kind == "KW" and self.tok.value in words

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise ExpressionSyntaxError(self.tok.pos, f"expected {what}, found {_describe(self.tok)}")
        return self.advance()

    def enter(self, pos: int) -> None:
        """One level deeper (parenthesis, list, call, NOT, unary minus); refused past MAX_DEPTH."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionSyntaxError(pos, f"nested more than {MAX_DEPTH} levels deep")

    def leave(self) -> None:
        self.depth -= 1

    def parse(self) -> Node:
        if self.tok.kind == "EOF":
            raise ExpressionSyntaxError(0, "empty expression")
        node = self.parse_or()
        if self.tok.kind != "EOF":
            raise ExpressionSyntaxError(self.tok.pos, f"unexpected {_describe(self.tok)}")
        return node

    def parse_or(self) -> Node:
        node = self.parse_and()
        operands, pos = [node], None
        while self.at_kw("or"):
            pos = pos if pos is not None else self.tok.pos
            self.advance()
            operands.append(self.parse_and())
        return node if len(operands) == 1 else BoolOp("or", tuple(operands), pos)

    def parse_and(self) -> Node:
        node = self.parse_not()
        operands, pos = [node], None
        while self.at_kw("and"):
            pos = pos if pos is not None else self.tok.pos
            self.advance()
            operands.append(self.parse_not())
        return node if len(operands) == 1 else BoolOp("and", tuple(operands), pos)

    def parse_not(self) -> Node:
        if self.at_kw("not"):
            pos = self.advance().pos
            self.enter(pos)
            node = Not(self.parse_not(), pos)
            self.leave()
            return node
        return self.parse_comparison()

    def parse_comparison(self) -> Node:
        left = self.parse_unary()
        op, pos = self._comparison_op()
        if op is None:
            return left
        node = Compare(op, left, self.parse_unary(), pos)
        if self._comparison_op(peek=True)[0] is not None:
            raise ExpressionSyntaxError(self.tok.pos, "comparisons cannot be chained; join them with AND")
        return node

    def _comparison_op(self, *, peek: bool = False) -> tuple[str | None, int]:
        tok = self.tok
        if tok.kind == "OP":
            if not peek:
                self.advance()
            return tok.value, tok.pos
        if self.at_kw("in"):
            if not peek:
                self.advance()
            return "in", tok.pos
        if self.at_kw("not") and self.tokens[self.i + 1].kind == "KW" and self.tokens[self.i + 1].value == "in":
            if not peek:
                self.advance()
                self.advance()
            return "not in", tok.pos
        return None, tok.pos

    def parse_unary(self) -> Node:
        if self.tok.kind == "-":
            pos = self.advance().pos
            self.enter(pos)
            node = Neg(self.parse_unary(), pos)
            self.leave()
            return node
        return self.parse_primary()

    def parse_primary(self) -> Node:
        tok = self.tok
        if tok.kind in ("NUMBER", "STRING"):
            self.advance()
            return Literal(tok.value, tok.pos)
        if tok.kind == "KW" and tok.value in ("true", "false", "null"):
            self.advance()
            return Literal({"true": True, "false": False, "null": None}[tok.value], tok.pos)
        if tok.kind == "(":
            self.advance()
            self.enter(tok.pos)
            node = self.parse_or()
            self.expect(")", "')'")
            self.leave()
            return node
        if tok.kind == "[":
            self.advance()
            self.enter(tok.pos)
            items = self._arguments("]")
            self.leave()
            return ListExpr(tuple(items), tok.pos)
        if tok.kind == "NAME":
            self.advance()
            if self.tok.kind == "(":
                if tok.value not in FUNCTIONS:
                    known = ", ".join(sorted(FUNCTIONS))
                    raise ExpressionSyntaxError(tok.pos, f"unknown function {tok.value!r} (known: {known})")
                self.advance()
                self.enter(tok.pos)
                args = self._arguments(")")
                self.leave()
                arity = FUNCTIONS[tok.value][0]
                if len(args) != arity:
                    raise ExpressionSyntaxError(
                        tok.pos, f"{tok.value}() takes {arity} argument{'s' if arity != 1 else ''}, got {len(args)}"
                    )
                return Call(tok.value, tuple(args), tok.pos)
            return Name(tok.value, tok.pos)
        raise ExpressionSyntaxError(tok.pos, f"expected a value, found {_describe(tok)}")

    def _arguments(self, closing: str) -> list[Node]:
        items: list[Node] = []
        if self.tok.kind == closing:
            self.advance()
            return items
        while True:
            items.append(self.parse_or())
            if self.tok.kind == ",":
                self.advance()
                continue
            self.expect(closing, f"',' or '{closing}'")
            return items


def _check_boolean_shape(node: Node) -> None:
    """A condition must be able to come out true or false: refuse `5` or `['a']`."""
    if isinstance(node, Literal) and not isinstance(node.value, bool):
        raise ExpressionSyntaxError(node.pos, "a condition must be true or false, not a single value")
    if isinstance(node, ListExpr | Neg):
        raise ExpressionSyntaxError(node.pos, "a condition must be true or false, not a single value")


def parse(source: str) -> Node:
    """Parse a condition into a tree.

    Any string at all gives a tree or an ExpressionSyntaxError with a position: the
    limits above bound length, tokens, nesting and numbers."""
    if not isinstance(source, str):
        raise ExpressionSyntaxError(0, "the expression must be a string")
    return _parse_cached(source)


@lru_cache(maxsize=1024)
def _parse_cached(source: str) -> Node:
    # Cached: trees are immutable. Errors are not cached, they are raised again.
    node = _Parser(source).parse()
    _check_boolean_shape(node)
    return node


# --- names -------------------------------------------------------------------------

# Every fact River supplies to policies, by root. ``None`` means any sub-path is allowed
# (tool arguments are free-form); an empty set means the root has no sub-paths.
KNOWN_NAMES: dict[str, frozenset[str] | None] = {
    "tool": frozenset({"name", "category", "writes"}),
    "args": None,
    "agent": frozenset({"id", "action_level", "tool_calls_this_hour"}),
    "cost": frozenset({"tokens"}),
    "time": frozenset({"hour", "minute", "weekday", "day", "date", "time_zone"}),
    "confidence_score": frozenset(),
    "workspace": frozenset({"id"}),
    "execution": frozenset({"id"}),
    "rows": frozenset(),
    "table": frozenset({"name", "classification"}),
    "query": frozenset({"tables", "classifications"}),
}


def walk(node: Node):
    """Every node of the tree, parents first (iterative: no recursion limit to hit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(_children(current)))


def _children(node: Node) -> tuple:
    if isinstance(node, ListExpr):
        return node.items
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Neg | Not):
        return (node.operand,)
    if isinstance(node, BoolOp):
        return node.operands
    if isinstance(node, Compare):
        return (node.left, node.right)
    return ()


def names_in(node: Node) -> list[Name]:
    return [n for n in walk(node) if isinstance(n, Name)]


def functions_in(node: Node) -> list[Call]:
    return [n for n in walk(node) if isinstance(n, Call)]


def _check_known(name: Name, known: dict[str, frozenset[str] | None]) -> None:
    root, _, rest = name.path.partition(".")
    if root not in known:
        roots = ", ".join(sorted(known))
        raise ExpressionSyntaxError(name.pos, f"unknown name {name.path!r} (names start with one of: {roots})")
    allowed = known[root]
    if allowed is None:
        return
    if not rest and allowed:
        choices = ", ".join(f"{root}.{leaf}" for leaf in sorted(allowed))
        raise ExpressionSyntaxError(name.pos, f"{root!r} needs a field: one of {choices}")
    if rest and rest not in allowed:
        if not allowed:
            raise ExpressionSyntaxError(name.pos, f"{root!r} has no fields")
        choices = ", ".join(f"{root}.{leaf}" for leaf in sorted(allowed))
        raise ExpressionSyntaxError(name.pos, f"unknown name {name.path!r} (known: {choices})")


def expression_validate(
    source: str, *, known_names: bool = True, names: dict[str, frozenset[str] | None] | None = None
) -> Node:
    """Parse ``source`` and, with ``known_names``, refuse names River never provides
    (``names`` narrows them for a context that offers fewer facts)."""
    tree = parse(source)
    if known_names:
        for name in names_in(tree):
            _check_known(name, KNOWN_NAMES if names is None else names)
    return tree


# --- interpreter -------------------------------------------------------------------


def _lookup(facts: dict, path: str):
    value: Any = facts
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _truth(value, pos: int, what: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise ExpressionEvalError(pos, f"{what} needs true or false, got {_type_name(value)}")


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _equal(a, b) -> bool:
    if _is_number(a) and _is_number(b):
        return a == b
    if type(a) is not type(b) and not (a is None or b is None):
        return False
    return a == b


def _compare(node: Compare, a, b) -> bool:
    op = node.op
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op in ("in", "not in"):
        if b is None:
            found = False
        elif isinstance(b, list):
            found = any(_equal(a, item) for item in b)
        elif isinstance(b, str):
            if not isinstance(a, str):
                raise ExpressionEvalError(node.pos, f"IN a string needs a string on the left, got {_type_name(a)}")
            found = a in b
        else:
            raise ExpressionEvalError(node.pos, f"IN needs a list or a string on the right, got {_type_name(b)}")
        return found if op == "in" else not found
    if a is None or b is None:
        return False
    if not ((_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))):
        raise ExpressionEvalError(node.pos, f"cannot compare {_type_name(a)} {op} {_type_name(b)}")
    return {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]


# Facts that hold SQL table names. A comparison with one of them ignores case, quoting,
# schema qualifier and Unicode form on both sides (datasources.identifiers), so a
# policy on 'canary' matches Canary, "CANARY" and public.canary.
IDENTIFIER_NAMES = frozenset({"table.name", "query.tables", "args.table_name"})


def _identifier_fold(value):
    if isinstance(value, str):
        return policy_name_key(value)
    if isinstance(value, list):
        return [_identifier_fold(item) for item in value]
    return value


def _names_identifier(node: Node) -> bool:
    return isinstance(node, Name) and node.path in IDENTIFIER_NAMES


# Evaluation is bounded too: a condition is at most MAX_TOKENS nodes, but each node can
# touch a whole fact (a payload of megabytes), and contains_pii() scans text with several
# regular expressions. Every node costs one unit, and every value a function, IN or a
# comparison reads costs its size (characters and items), contains_pii more per
# character. Past MAX_EVAL_WORK the evaluation stops with an ExpressionEvalError, which
# every caller treats as "does not hold" or as an error (never as a match).
MAX_EVAL_WORK = 5_000_000
PII_COST_PER_CHAR = 8


class ExpressionBudgetExceeded(ExpressionEvalError):
    pass


class _Budget:
    __slots__ = ("left",)

    def __init__(self, units: int):
        self.left = units

    def charge(self, units: int, pos: int) -> None:
        self.left -= units
        if self.left < 0:
            raise ExpressionBudgetExceeded(
                pos, f"the condition needs more than {MAX_EVAL_WORK} units of work on these facts; "
                     "it is treated as not evaluable")


def _size(value, cap: int) -> int:
    """Characters and items in ``value`` (iterative), counted up to ``cap``."""
    total, stack = 0, [value]
    while stack and total <= cap:
        item = stack.pop()
        total += 1
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def evaluate(node: Node, facts: dict, budget: _Budget | None = None) -> Any:
    budget = budget if budget is not None else _Budget(MAX_EVAL_WORK)
    budget.charge(1, getattr(node, "pos", 0))
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Name):
        return _lookup(facts, node.path)
    if isinstance(node, ListExpr):
        return [evaluate(item, facts, budget) for item in node.items]
    if isinstance(node, Neg):
        value = evaluate(node.operand, facts, budget)
        if value is None:
            return None
        if not _is_number(value):
            raise ExpressionEvalError(node.pos, f"'-' needs a number, got {_type_name(value)}")
        return -value
    if isinstance(node, Not):
        return not _truth(evaluate(node.operand, facts, budget), node.pos, "NOT")
    if isinstance(node, BoolOp):
        for operand in node.operands:
            value = _truth(evaluate(operand, facts, budget), node.pos, node.op.upper())
            if node.op == "and" and not value:
                return False
            if node.op == "or" and value:
                return True
        return node.op == "and"
    if isinstance(node, Compare):
        left, right = evaluate(node.left, facts, budget), evaluate(node.right, facts, budget)
        budget.charge(_size(left, budget.left) + _size(right, budget.left), node.pos)
        if _names_identifier(node.left) or _names_identifier(node.right):
            left, right = _identifier_fold(left), _identifier_fold(right)
        return _compare(node, left, right)
    if isinstance(node, Call):
        _, fn = FUNCTIONS[node.name]
        args = [evaluate(arg, facts, budget) for arg in node.args]
        per_unit = PII_COST_PER_CHAR if node.name == "contains_pii" else 1
        budget.charge(per_unit * sum(_size(arg, budget.left) for arg in args), node.pos)
        try:
            return fn(*args)
        except TypeError as exc:
            raise ExpressionEvalError(node.pos, str(exc)) from None
    raise ExpressionEvalError(0, f"unknown node {type(node).__name__}")


def matches(source: str | Node, facts: dict) -> bool:
    """True when the condition holds. ``null`` counts as false; other non-booleans are
    errors, and so is a condition that needs more than MAX_EVAL_WORK units of work."""
    tree = parse(source) if isinstance(source, str) else source
    return _truth(evaluate(tree, facts, _Budget(MAX_EVAL_WORK)), getattr(tree, "pos", 0), "a condition")


# --- the keyed form ----------------------------------------------------------------

_SUFFIXES = [("_not_in", "NOT IN"), ("_gte", ">="), ("_lte", "<="), ("_gt", ">"), ("_lt", "<"), ("_eq", "=="),
             ("_ne", "!="), ("_in", "IN")]
# A bare key naming one of these roots means its ``name`` field: {"tool": "write_back"}.
_BARE_ROOTS = {"tool": "tool.name", "table": "table.name"}
_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")


def literal_source(value) -> str:
    """A value as the expression language writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t") + "'"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal_source(v) for v in value) + "]"
    raise ValueError(f"{_type_name(value)} cannot be written as a literal")


def _key_name(base: str) -> str:
    if base in _BARE_ROOTS:
        return _BARE_ROOTS[base]
    for root, fields in KNOWN_NAMES.items():
        if fields != frozenset() and base.startswith(root + "_"):
            return f"{root}.{base[len(root) + 1:]}"
    return base


def keyed_to_expression(conditions: dict) -> str:
    """``{"rows_gt": 10000, "table_classification": "pii"}`` -> ``rows > 10000 AND table.classification == 'pii'``.

    Keys end in ``_gt _gte _lt _lte _eq _ne _in _not_in`` (no suffix means ``==``); the
    part before names a fact, with the first underscore after a known root read as a
    dot (``table_classification`` -> ``table.classification``). Raises ValueError.
    """
    if not conditions:
        raise ValueError("no conditions given")
    parts = []
    for key, value in conditions.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"condition key {key!r} is not a lower-case name")
        base, op = key, "=="
        for suffix, symbol in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                base, op = key[: -len(suffix)], symbol
                break
        if op in ("IN", "NOT IN") and not isinstance(value, list):
            raise ValueError(f"condition {key!r} needs a list")
        if isinstance(value, list) and any(isinstance(item, list | dict) for item in value):
            raise ValueError(f"condition {key!r}: a list may only hold strings, numbers, booleans or null")
        try:
            rendered = literal_source(value)
        except ValueError as exc:
            raise ValueError(f"condition {key!r}: {exc}") from None
        parts.append(f"{_key_name(base)} {op} {rendered}")
    return " AND ".join(parts)
