"""The strict decoder of normal-category answers (spec §3.1).

The official scorer deletes every whitespace character, parses the rest as one Python
expression and turns a list/tuple/set display of calls into ``[{name: {kw: value}}]``.
This module reproduces its observable behaviour on top of :func:`ast.parse` without ever
executing model text: binary operations are computed by a small evaluator that accepts
literal operands only (constants and container displays) and refuses oversized results.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import warnings
from typing import Any


class DecodeError(Exception):
    """The output is not a decodable call list (upstream: ``wrong_output_format``)."""


def delete_whitespace(text: str) -> str:
    """Remove every whitespace character (``str.split()`` semantics), as the official scorer does."""
    return "".join(text.split())


def decode_calls(text: str) -> list[dict[str, dict[Any, Any]]]:
    """Decode a raw normal-category answer into ``[{call_name: {keyword: value}}]``.

    Steps of spec §3.1: whitespace deletion, one expression, a list/tuple/set display whose
    elements are all calls, keyword arguments only (``**x`` gives the key ``None``).
    Raises DecodeError for anything else; never raises another exception.
    """
    try:
        return _decode(delete_whitespace(text))
    except DecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure is a format error (RecursionError, MemoryError...)
        raise DecodeError(f"{type(exc).__name__}: {exc}") from None


def _decode(source: str) -> list[dict[str, dict[Any, Any]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise DecodeError(f"invalid syntax: {exc.msg}") from None
    body = tree.body
    if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
        raise DecodeError(f"expected a list of calls, got {type(body).__name__}")
    calls = []
    for element in body.elts:
        if not isinstance(element, ast.Call):
            raise DecodeError(f"list element is {type(element).__name__}, not a call")
        calls.append(_call_value(element))
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


def _call_value(node: ast.Call) -> dict[str, dict[Any, Any]]:
    args: dict[Any, Any] = {}
    for kw in node.keywords:  # positional arguments are ignored (never looked at)
        args[kw.arg] = _value(kw.value)
    return {call_name(node): args}


def _value(node: ast.AST) -> Any:
    """Decoded value of an argument node (the table of spec §3.1 step 7)."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # upstream negates the operand's constant value whatever the operator is (+5 -> -5)
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float, complex, bool):
            return -operand.value
        raise DecodeError("unary operator on a non-numeric operand")
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise DecodeError("dict unpacking (**) is not supported")
            key = _value(k)
            out[key] = _value(v)
        return out
    if isinstance(node, ast.BinOp):
        return literal_eval_node(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _call_value(node) if node.keywords else {call_name(node): {}}
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    raise DecodeError(f"unsupported value {type(node).__name__}")


# ---- literal arithmetic ---------------------------------------------------------------------

_MAX_INT_BITS = 1 << 16  # results larger than this are refused (upstream would compute them)
_MAX_LEN = 1 << 20  # longest sequence / string a binary operation may produce

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


def literal_eval_node(node: ast.AST) -> Any:
    """Python's value of a literal-only expression (constants, displays, unary/binary operators).

    Gives what ``eval`` would give for such an expression; raises DecodeError for names, calls,
    attribute access or any other non-literal node, for errors Python would raise (e.g. division
    by zero) and for results too large to compute safely.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List):
        return [literal_eval_node(v) for v in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(literal_eval_node(v) for v in node.elts)
    if isinstance(node, ast.Set):
        return {literal_eval_node(v) for v in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise DecodeError("dict unpacking (**) is not supported")
        return {literal_eval_node(k): literal_eval_node(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = literal_eval_node(node.operand)
        try:
            return _UNARY[type(node.op)](operand)
        except Exception as exc:  # noqa: BLE001
            raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = literal_eval_node(node.left)
        right = literal_eval_node(node.right)
        _guard(type(node.op), left, right)
        try:
            return _BINOPS[type(node.op)](left, right)
        except Exception as exc:  # noqa: BLE001
            raise DecodeError(f"{type(exc).__name__}: {exc}") from None
    raise DecodeError(f"non-literal expression {type(node).__name__} is not evaluated")


def _int_bits(x: Any) -> int:
    return abs(int(x)).bit_length() if isinstance(x, (int, bool)) else 0


def _guard(op: type, left: Any, right: Any) -> None:
    """Refuse operations whose result would be huge (time or memory)."""
    too_big = False
    if op is ast.Pow and isinstance(left, int) and isinstance(right, int) and right > 0:
        too_big = abs(left) > 1 and right * math.log2(abs(left)) > _MAX_INT_BITS
    elif op is ast.LShift and isinstance(right, int) and isinstance(left, int):
        too_big = right > 0 and left != 0 and _int_bits(left) + right > _MAX_INT_BITS
    elif op is ast.Mult:
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
                too_big = too_big or len(seq) * max(count, 0) > _MAX_LEN
        if isinstance(left, int) and isinstance(right, int):
            too_big = too_big or _int_bits(left) + _int_bits(right) > _MAX_INT_BITS
    elif op is ast.Mod and isinstance(left, (str, bytes)):
        fmt = left if isinstance(left, str) else left.decode("latin-1")
        too_big = "*" in fmt or bool(_FORMAT_WIDTH.search(fmt))
    if too_big:
        raise DecodeError("arithmetic result too large")
