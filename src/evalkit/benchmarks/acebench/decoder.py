"""The strict decoder of normal-category answers (spec §3.1).

The official scorer deletes every whitespace character, parses the rest as one Python
expression and turns a list/tuple/set display of calls into ``[{name: {kw: value}}]``.
This module reproduces its observable behaviour on top of :func:`ast.parse` without ever
executing model text: binary operations are computed by a small evaluator that accepts
literal operands only (constants and container displays) and refuses oversized results.

Bounds on hostile answers (issue 17; upstream computes whatever it is given, so each bound
is a deviation for answers no real model writes, and each makes the answer a
``wrong_output_format`` with the reason):

- the answer, after whitespace deletion, is at most :data:`MAX_SOURCE_CHARS` characters
  (the longest reference answer of the data is 1,807; parsing costs about 470 bytes of
  syntax tree per character of a literal list);
- everything the arithmetic of one answer produces (``[x]*n``, ``'x'*n``, ``a+b``,
  ``'%s'%x``, nested or not) is at most :data:`MAX_ARITHMETIC_UNITS` units in total,
  measured *before* each result is built and counting shared objects once per use
  (:func:`evalkit.benchmarks.bounds.expanded_size`): ``[[0]*2**20]*2**20`` would be a
  thousand billion elements once written out (by ``repr``, JSON or a comparison), though
  Python holds it in 16 MB. No reference answer uses arithmetic at all.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

from evalkit.benchmarks.bounds import expanded_size

#: longest answer (characters, after whitespace deletion) the decoder parses
MAX_SOURCE_CHARS = 256 * 1024
#: most units (see :func:`evalkit.benchmarks.bounds.expanded_size`) the arithmetic of one
#: answer may produce, all operations together
MAX_ARITHMETIC_UNITS = 1 << 20


class DecodeError(Exception):
    """The output is not a decodable call list (upstream: ``wrong_output_format``)."""


def delete_whitespace(text: str) -> str:
    """Remove every whitespace character (``str.split()`` semantics), as the official scorer does."""
    return "".join(text.split())


def decode_calls(text: str, keep_whitespace: bool = False, drop_splat: bool = False,
                 source_values: bool = False) -> list[dict[str, dict[Any, Any]]]:  # fmt: skip
    """Decode a raw normal-category answer into ``[{call_name: {keyword: value}}]``.

    Steps of spec §3.1: whitespace deletion, one expression, a list/tuple/set display whose
    elements are all calls, keyword arguments only (``**x`` gives the key ``None``).
    EvalScope 1.14.1's decoder differs in three rules, each a switch here (the bounds apply
    alike):

    - ``keep_whitespace``: skip the deletion (``'New York'`` stays ``'New York'``, where the
      official scorer reads ``'NewYork'``);
    - ``drop_splat``: a ``**mapping`` argument of a call is ignored, not the key ``None``;
    - ``source_values``: values are resolved as EvalScope resolves them
      (:func:`source_value`: no arithmetic), and the answer must be a list or a tuple of
      calls (a set of calls is a format error).
    Raises DecodeError for anything else, and for an answer over the bounds of the module
    docstring; never raises another exception but ``MemoryError`` when memory runs out
    (CPython's parser reports a too deeply nested answer as a ``MemoryError`` "too complex
    to parse": that one is a format error, as everything the parser refuses).
    """
    try:
        source = text if keep_whitespace else delete_whitespace(text)
        if len(source) > MAX_SOURCE_CHARS:
            raise DecodeError(f"answer of {len(source):,} characters is over the {MAX_SOURCE_CHARS:,}-character limit")
        return _decode(source, ArithmeticAllowance(), drop_splat, source_values)
    except DecodeError:
        raise
    except MemoryError as exc:
        if "too complex" not in str(exc) and "stack overflow" not in str(exc):
            raise  # out of memory: the scoring's own bound (benchmark.score_memory_mb), not a verdict
        raise DecodeError(f"MemoryError: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure is a format error (RecursionError...)
        raise DecodeError(f"{type(exc).__name__}: {exc}") from None


def _decode(source: str, allowance: ArithmeticAllowance, drop_splat: bool = False,
            source_values: bool = False) -> list[dict[str, dict[Any, Any]]]:  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise DecodeError(f"invalid syntax: {exc.msg}") from None
    body = tree.body
    if not isinstance(body, (ast.List, ast.Tuple) if source_values else (ast.List, ast.Tuple, ast.Set)):
        raise DecodeError(f"expected a list of calls, got {type(body).__name__}"
                          + (" (EvalScope rules: a list or a tuple)" if isinstance(body, ast.Set) else ""))  # fmt: skip
    calls = []
    for element in body.elts:
        if not isinstance(element, ast.Call):
            raise DecodeError(f"list element is {type(element).__name__}, not a call")
        calls.append(_source_call(element) if source_values else _call_value(element, allowance, drop_splat=drop_splat))
    return calls


def call_name(node: ast.Call) -> str:
    """Dotted name of the called object (``a.b.f`` -> ``"a.b.f"``); non-name bases are left out."""
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _call_value(node: ast.Call, allowance: ArithmeticAllowance, bare_call: Callable[[ast.Call], Any] | None = None,
                drop_splat: bool = False) -> dict[str, dict[Any, Any]]:  # fmt: skip
    args: dict[Any, Any] = {}
    for kw in node.keywords:  # positional arguments are ignored (never looked at)
        if kw.arg is None and drop_splat:
            continue
        args[kw.arg] = decode_value(kw.value, allowance, bare_call, drop_splat)
    return {call_name(node): args}


def _empty_call(node: ast.Call) -> dict[str, dict[Any, Any]]:
    return {call_name(node): {}}


def decode_value(node: ast.AST, allowance: ArithmeticAllowance, bare_call: Callable[[ast.Call], Any] | None = None,
                 drop_splat: bool = False) -> Any:  # fmt: skip
    """Decoded value of an argument node (the table of spec §3.1 step 7).

    ``bare_call`` decodes a keyword-less call: the strict decoder's ``{name: {}}`` by
    default; the agent dispatcher passes :func:`ast.unparse` (its source text, spec §3.3
    step 5). ``drop_splat``: a nested call's ``**mapping`` is ignored (EvalScope's rule).
    Raises :class:`DecodeError` for a value the table does not accept.
    """
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # upstream negates the operand's constant value whatever the operator is (+5 -> -5)
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float, complex, bool):
            return -operand.value
        raise DecodeError("unary operator on a non-numeric operand")
    if isinstance(node, ast.List):
        return [decode_value(v, allowance, bare_call, drop_splat) for v in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise DecodeError("dict unpacking (**) is not supported")
            key = decode_value(k, allowance, bare_call, drop_splat)
            out[key] = decode_value(v, allowance, bare_call, drop_splat)
        return out
    if isinstance(node, ast.BinOp):
        return literal_eval_node(node, allowance)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        if node.keywords:
            return _call_value(node, allowance, bare_call, drop_splat)
        return (bare_call or _empty_call)(node)
    if isinstance(node, ast.Tuple):
        return tuple(decode_value(v, allowance, bare_call, drop_splat) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"unsupported value {type(node).__name__}")


# ---- EvalScope's value resolution (benchmark.scoring=evalscope) -----------------------------


def _source_call(node: ast.Call) -> dict[str, dict[Any, Any]]:
    """A call as EvalScope resolves it: its keyword arguments by :func:`source_value`, a
    ``**mapping`` argument ignored, positional ones never looked at."""
    return {call_name(node): {kw.arg: source_value(kw.value) for kw in node.keywords if kw.arg is not None}}


def source_value(node: ast.AST) -> Any:
    """An argument node as EvalScope 1.14.1's ACEBench decoder resolves it, which evaluates
    no arithmetic:

    - a constant is its value (``...`` is the string ``"..."``), a name its text, a list, a
      tuple or a dict display its items resolved alike, a call with keywords a nested call
      and one without ``{name: {}}``;
    - a unary operator resolves its operand, then only a minus on a number (``bool``
      included) negates it: ``-5`` is -5, ``--5`` is 5, ``+5`` is 5, ``not x`` is ``"x"``,
      ``-(1+2)`` is ``"1 + 2"``;
    - anything else (``N-1+1``, ``2*3``, an f-string, a subscript, an attribute, a set) is
      Python's literal value where :func:`ast.literal_eval` gives one (a set of constants,
      ``1+2j``), else its source text as :func:`ast.unparse` writes it (``"N - 1 + 1"``).

    Raises:
        DecodeError: a ``**mapping`` inside a dict display, on which EvalScope's scorer
            raises and records no verdict.
    """
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        operand = source_value(node.operand)
        negate = isinstance(node.op, ast.USub) and isinstance(operand, (int, float))
        return -operand if negate else operand
    if isinstance(node, ast.List):
        return [source_value(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(source_value(v) for v in node.elts)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("dict unpacking (**) in a value: EvalScope's scorer raises on it and records no verdict")
        return {source_value(k): source_value(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _source_call(node) if node.keywords else {call_name(node): {}}
    try:  # literal_eval computes no operator but + and - of a complex literal (bounded by the answer's length)
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return ast.unparse(node)


# ---- literal arithmetic ---------------------------------------------------------------------

_MAX_INT_BITS = 1 << 16  # results larger than this are refused (upstream would compute them)

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_FORMAT_WIDTH = re.compile(r"\d{5,}")


class ArithmeticAllowance:
    """Units the arithmetic of one answer may still produce (:data:`MAX_ARITHMETIC_UNITS`
    at first); :meth:`charge` refuses a result that would overdraw it (a
    :class:`DecodeError`). A bound on decoding work, not the run's spend (that is
    :class:`evalkit.engine.budget.Budget`)."""

    def __init__(self, units: int = MAX_ARITHMETIC_UNITS) -> None:
        self.left = units

    def size(self, value: Any) -> int:
        """``expanded_size(value)``; refused when it alone is over what is left."""
        size = expanded_size(value, self.left)
        if size is None:
            raise DecodeError("arithmetic result too large")
        return size

    def charge(self, units: int) -> None:
        if units > self.left:
            raise DecodeError("arithmetic result too large")
        self.left -= units


def literal_eval_node(node: ast.AST, allowance: ArithmeticAllowance | None = None) -> Any:
    """Python's value of a literal-only expression (constants, displays, unary/binary operators).

    Gives what ``eval`` would give for such an expression; raises DecodeError for names, calls,
    attribute access or any other non-literal node, for errors Python would raise (e.g. division
    by zero) and for results too large to compute safely: an int over 65,536 bits, a
    ``%``-format with a ``*`` or a 5-digit width, or results over what ``allowance`` has left
    (a new :class:`ArithmeticAllowance` of :data:`MAX_ARITHMETIC_UNITS` when not given).
    """
    allowance = ArithmeticAllowance() if allowance is None else allowance
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List):
        return [literal_eval_node(v, allowance) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(literal_eval_node(v, allowance) for v in node.elts)
    if isinstance(node, ast.Set):
        return {literal_eval_node(v, allowance) for v in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("dict unpacking (**) is not supported")
        return {literal_eval_node(k, allowance): literal_eval_node(v, allowance) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = literal_eval_node(node.operand, allowance)
        try:
            return _UNARY[type(node.op)](operand)
        except Exception as exc:  # noqa: BLE001
            raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = literal_eval_node(node.left, allowance)
        right = literal_eval_node(node.right, allowance)
        _guard(type(node.op), left, right, allowance)
        try:
            return _BINOPS[type(node.op)](left, right)
        except Exception as exc:  # noqa: BLE001
            raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    raise DecodeError(f"non-literal expression {type(node).__name__} is not evaluated")


def _int_bits(x: Any) -> int:
    return abs(int(x)).bit_length() if isinstance(x, (int, bool)) else 0


def _guard(op: type, left: Any, right: Any, allowance: ArithmeticAllowance) -> None:
    """Refuse operations whose result would be huge (time or memory), and charge the
    result's size, predicted from the operands' sizes, to ``allowance``:

    - ``seq * n`` (str, bytes, list, tuple): ``size(seq) * n``;
    - ``fmt % args`` (str, bytes): ``len(fmt) + 4 * size(args)`` per ``%`` of ``fmt`` (a
      ``repr`` is at most 4 characters per unit); a ``*`` or a width of 5+ digits is refused;
    - ``**`` and ``<<`` on ints: refused over 65,536 bits;
    - anything else: ``size(left) + size(right)``.
    """
    if op is ast.Pow and isinstance(left, int) and isinstance(right, int) and right > 0:
        if abs(left) > 1 and right * math.log2(abs(left)) > _MAX_INT_BITS:
            raise DecodeError("arithmetic result too large")
        allowance.charge(1 + int(right * math.log2(abs(left) or 1)) // 3)
        return
    if op is ast.LShift and isinstance(right, int) and isinstance(left, int):
        if right > 0 and left != 0 and _int_bits(left) + right > _MAX_INT_BITS:
            raise DecodeError("arithmetic result too large")
        allowance.charge(1 + (_int_bits(left) + max(right, 0)) // 3)
        return
    if op is ast.Mult:
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
                allowance.charge(allowance.size(seq) * max(count, 1) if count <= allowance.left else allowance.left + 1)
                return
        if isinstance(left, int) and isinstance(right, int) and _int_bits(left) + _int_bits(right) > _MAX_INT_BITS:
            raise DecodeError("arithmetic result too large")
    if op is ast.Mod and isinstance(left, (str, bytes)):
        fmt = left if isinstance(left, str) else left.decode("latin-1")
        if "*" in fmt or _FORMAT_WIDTH.search(fmt):
            raise DecodeError("arithmetic result too large")
        allowance.charge(len(fmt) + 4 * allowance.size(right) * fmt.count("%"))
        return
    allowance.charge(allowance.size(left) + allowance.size(right))
