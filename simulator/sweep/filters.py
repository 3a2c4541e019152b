"""Filter expressions of sweeps (``filters`` in an experiment, ``sweep show --where``, ``plot --where``).

An expression is Python syntax over column names, read with :mod:`ast` and interpreted here, never
handed to ``eval``: names (dotted column names, or their last part when unique), numbers, strings,
``True``/``False``/``None``, comparisons (``== != < <= > >= in not in``, chained), ``and or not``,
``+ - * / // % **``, tuples and lists (for ``in``), parentheses and the functions ``min``, ``max``
and ``abs``. Every operation is bounded: integers stay under :data:`MAX_INT_BITS` bits (so
``9**9**9**9`` is refused at once), strings under :data:`MAX_STR_CHARS` characters (so
``'a' * 10**10`` is refused before any memory is taken), and an expression under
:data:`MAX_EXPR_CHARS` characters. A problem is a :class:`FilterError` naming the expression and
the column (1-based) of the offending part.

Examples
--------
>>> f = compile_filter("batch * context <= 4096 and dtype == 'bf16'", ["workload.batch", "workload.context",
...                                                                     "workload.dtype"])
>>> f.names
('workload.batch', 'workload.context', 'workload.dtype')
>>> f({"workload.batch": 8, "workload.context": 512, "workload.dtype": "bf16"})
True
>>> compile_filter("9**9**9**9", [])({})
Traceback (most recent call last):
...
simulator.sweep.filters.FilterError: ** too large in '9**9**9**9' at column 4; got 9 ** 387420489; expected a result under 4096 bits
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean, near_match

__all__ = ["FilterError", "FilterExpression", "compile_filter", "MAX_INT_BITS", "MAX_STR_CHARS", "MAX_EXPR_CHARS"]

#: Largest integer (in bits) an operand or result may have.
MAX_INT_BITS = 4096
#: Longest string an operand or result may be, characters.
MAX_STR_CHARS = 100_000
#: Longest expression text, characters.
MAX_EXPR_CHARS = 10_000
#: Functions an expression may call.
FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}

_SYNTAX = "column names, numbers, strings, arithmetic, comparisons, in, and/or/not, min/max/abs"
_CMP: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


class FilterError(NodeperfError, ValueError):
    """A filter expression is invalid, or cannot be evaluated on a row (located by column)."""


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, complex)


class FilterExpression:
    """A parsed, checked filter: call it with ``{column: value}`` to get a bool.

    Attributes
    ----------
    text
        The expression as written.
    names
        The columns it reads, in order of first use.
    """

    def __init__(self, text: str, tree: ast.Expression, names: tuple[str, ...], *, missing_unordered: bool = False) -> None:
        self.text = text
        self.tree = tree
        self.names = names
        #: an ordering comparison (< <= > >=) with None is False, not an error: a results row without a value
        #: (a point that failed) is not kept by ``latency_s < 1``, as SQL's NULL is not
        self.missing_unordered = missing_unordered

    def __call__(self, env: Mapping[str, Any]) -> bool:
        return bool(self.value(env))

    def value(self, env: Mapping[str, Any]) -> Any:
        """The expression's value on one row (:class:`FilterError` when an operation is refused or fails)."""
        try:
            return self._ev(self.tree.body, env)
        except RecursionError:
            raise FilterError(f"{self.text[:40]!r}...: nested too deeply to evaluate; expected a flatter "
                              "expression") from None

    def __repr__(self) -> str:
        return f"FilterExpression({self.text!r})"

    # -- interpretation ----------------------------------------------------------------------------
    def _fail(self, node: ast.AST, msg: str) -> FilterError:
        head, _, rest = msg.partition(";")
        at = f" in {self.text!r} at column {getattr(node, 'col_offset', 0) + 1}"
        return FilterError(f"{head}{at}{';' + rest if rest else ''}")

    def _ev(self, node: ast.AST, env: Mapping[str, Any]) -> Any:  # noqa: C901 - one case per node type
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.Tuple | ast.List):
            return tuple(self._ev(e, env) for e in node.elts)
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            v: Any = None
            for e in node.values:
                v = self._ev(e, env)
                if bool(v) != is_and:
                    return v
            return v
        if isinstance(node, ast.UnaryOp):
            v = self._ev(node.operand, env)
            if isinstance(node.op, ast.Not):
                return not v
            if not _is_num(v):
                raise self._fail(node, f"sign of a non-number; got {v!r}; expected a number")
            return -v if isinstance(node.op, ast.USub) else +v
        if isinstance(node, ast.BinOp):
            return self._binop(node, self._ev(node.left, env), self._ev(node.right, env))
        if isinstance(node, ast.Compare):
            left = self._ev(node.left, env)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = self._ev(right_node, env)
                if self.missing_unordered and (left is None or right is None) and \
                        isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                    return False
                try:
                    ok = _CMP[type(op)](left, right)
                except TypeError:
                    raise self._fail(node, f"cannot compare {left!r} with {right!r}; expected values of like "
                                           "kinds") from None
                if not ok:
                    return False
                left = right
            return True
        if isinstance(node, ast.Call):
            args = [self._ev(a, env) for a in node.args]
            fn = FUNCTIONS[node.func.id]  # type: ignore[attr-defined]
            try:
                return fn(*args)
            except (TypeError, ValueError) as exc:
                raise self._fail(node, f"{node.func.id}(): {exc}") from None  # type: ignore[attr-defined]
        raise self._fail(node, f"unsupported expression ({type(node).__name__}); expected {_SYNTAX}")  # pragma: no cover

    def _binop(self, node: ast.BinOp, a: Any, b: Any) -> Any:
        sym = _BIN[type(node.op)]
        if isinstance(node.op, ast.Add) and isinstance(a, str) and isinstance(b, str):
            if len(a) + len(b) > MAX_STR_CHARS:
                raise self._fail(node, f"+ too long; got {len(a) + len(b)} characters; expected at most "
                                       f"{MAX_STR_CHARS}")
            return a + b
        if isinstance(node.op, ast.Mult) and (isinstance(a, str) or isinstance(b, str)):
            s, n = (a, b) if isinstance(a, str) else (b, a)
            if not isinstance(n, int) or isinstance(n, bool) or isinstance(s, bool):
                raise self._fail(node, f"* of a string; got {a!r} * {b!r}; expected a string times an integer")
            if len(s) * max(n, 0) > MAX_STR_CHARS:
                raise self._fail(node, f"* too long; got {len(s)} x {n} characters; expected at most "
                                       f"{MAX_STR_CHARS}")
            return s * n
        if not (_is_num(a) and _is_num(b)):
            raise self._fail(node, f"{sym} needs numbers; got {a!r} {sym} {b!r}; expected numbers (or string + "
                                   "string, string * integer)")
        if isinstance(node.op, ast.Pow):
            if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 \
                    and b * math.log2(abs(a)) > MAX_INT_BITS:
                raise self._fail(node, f"** too large; got {a} ** {b}; expected a result under {MAX_INT_BITS} bits")
        elif isinstance(node.op, ast.Mult) and isinstance(a, int) and isinstance(b, int) \
                and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
            raise self._fail(node, f"* too large; got integers of {a.bit_length()} and {b.bit_length()} bits; "
                                   f"expected a result under {MAX_INT_BITS} bits")
        try:
            r = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
                 ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}[type(node.op)](a, b)
        except (ArithmeticError, ValueError) as exc:
            raise self._fail(node, f"{sym}: {exc}; got {a!r} {sym} {b!r}") from None
        if isinstance(r, complex):
            raise self._fail(node, f"{sym}: a complex result; got {a!r} {sym} {b!r}; expected a real number")
        if isinstance(r, int) and r.bit_length() > MAX_INT_BITS:
            raise self._fail(node, f"{sym} too large; expected a result under {MAX_INT_BITS} bits")
        return r


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _near_column(got: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` by the full names or, for a short name, by their last part."""
    hint = did_you_mean(got, known)
    if hint or "." in got:
        return hint
    last: dict[str, str] = {}
    for k in known:
        last.setdefault(k.rsplit(".", 1)[-1], k)
    m = near_match(got, list(last))
    return f"; did you mean {last[m[0]]!r}?" if m else ""


def compile_filter(text: str, known: Sequence[str], aliases: Mapping[str, str] | None = None, *,
                   missing_unordered: bool = False) -> FilterExpression:
    """Parse and check a filter over the columns ``known`` (a short name is the unique column it ends).

    ``aliases`` maps other spellings (a ``df.query``-style identifier) to columns. ``missing_unordered``: an
    ordering comparison with None is False (results rows of failed points), not an error.

    Raises
    ------
    FilterError
        Not an expression, unsupported syntax, an unknown name, or a constant too large.
    """
    tree = _parse_filter(text)
    names: list[str] = []
    alias = dict(aliases or {})

    def column(d: str, node: ast.AST) -> ast.Name:
        if d not in known:
            if d in alias:
                d = alias[d]
            else:
                short = [k for k in known if k.rsplit(".", 1)[-1] == d]
                if len(short) == 1:
                    d = short[0]
                else:
                    why = "ambiguous short name" if short else "unknown name"
                    raise FilterError(f"{why} in {text!r} at column {getattr(node, 'col_offset', 0) + 1}; got {d!r}; "
                                      f"expected an axis or base setting ({', '.join(known)}){_near_column(d, known)}")
        if d not in names:
            names.append(d)
        return ast.copy_location(ast.Name(id=d, ctx=ast.Load()), node)

    def check(node: ast.AST) -> ast.AST:  # noqa: C901 - one case per node type
        at = f"in {text!r} at column {getattr(node, 'col_offset', 0) + 1}"
        if isinstance(node, ast.Attribute | ast.Name):
            d = _dotted(node)
            if d is None:
                raise FilterError(f"unsupported attribute of an expression {at}; expected {_SYNTAX}")
            return column(d, node)
        if isinstance(node, ast.Constant):
            v = node.value
            if not isinstance(v, int | float | str | bool | type(None)) or isinstance(v, complex):
                raise FilterError(f"unsupported constant {at}; got {v!r}; expected a number or a string")
            if isinstance(v, int) and v.bit_length() > MAX_INT_BITS:
                raise FilterError(f"integer too large {at}; expected under {MAX_INT_BITS} bits")
            if isinstance(v, str) and len(v) > MAX_STR_CHARS:
                raise FilterError(f"string too long {at}; expected at most {MAX_STR_CHARS} characters")
            return node
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS) or node.keywords \
                    or any(isinstance(a, ast.Starred) for a in node.args):
                raise FilterError(f"unsupported call {at}; expected only {', '.join(FUNCTIONS)} with plain arguments")
            node.args = [check(a) for a in node.args]  # type: ignore[misc]
            return node
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BIN:
                raise FilterError(f"unsupported operator ({type(node.op).__name__}) {at}; expected + - * / // % **")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.Not | ast.USub | ast.UAdd):
                raise FilterError(f"unsupported operator ({type(node.op).__name__}) {at}; expected not, -, +")
        elif isinstance(node, ast.Compare):
            if any(type(op) not in _CMP for op in node.ops):
                raise FilterError(f"unsupported comparison (is / is not) {at}; expected == != < <= > >= in not in")
        elif not isinstance(node, ast.BoolOp | ast.Tuple | ast.List | ast.Expression):
            raise FilterError(f"unsupported expression ({type(node).__name__}) {at}; expected {_SYNTAX}")
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                setattr(node, name, [check(v) if isinstance(v, ast.expr) else v for v in value])
            elif isinstance(value, ast.expr):
                setattr(node, name, check(value))
        return node

    try:
        tree = check(tree)  # type: ignore[assignment]
    except RecursionError:
        raise FilterError(f"expression nested too deeply; got {text[:40]!r}...; expected a flatter expression") from None
    return FilterExpression(text, tree, tuple(names), missing_unordered=missing_unordered)


def _parse_filter(text: Any) -> ast.Expression:
    """The syntax tree of a filter's text, or a FilterError (not a string, too long, not an expression)."""
    if not isinstance(text, str):
        raise FilterError(f"not an expression; got {text!r}; expected a string such as \"batch <= 8\"")
    if len(text) > MAX_EXPR_CHARS:
        raise FilterError(f"expression too long; got {len(text)} characters; expected at most {MAX_EXPR_CHARS}")
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset or len(text.strip()) + 1}"  # (no offset: the end of the text)
        raise FilterError(f"not an expression{col}; got {text!r}; expected e.g. \"workload.batch * workload.context "
                          f"<= 65536\" ({exc.msg})") from None
    except (RecursionError, MemoryError):
        raise FilterError(f"expression nested too deeply; got {text[:40]!r}...; expected a flatter expression") from None
