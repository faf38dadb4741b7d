"""The official checkers of ACEBench, re-stated (spec §4.1 normal, §4.3 special).

Every rule here is the observable behaviour of the upstream scorer
(ACEBench/ACEBench ``model_eval/checker.py`` + ``eval_main.py``). Where the upstream scorer
would crash on the data (unknown schema type, missing ``required``...), the verdict is a
fail whose detail says so. The public functions never raise. Values of the answer quoted
in a detail are cut by :func:`evalkit.benchmarks.bounds.short_repr` (at most 8 items per
level, 80 characters per string), so a failure message never renders an unbounded value.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from evalkit.benchmarks.acebench.decoder import DecodeError, decode_calls
from evalkit.benchmarks.bounds import short_repr


class _NoValueType:
    """Stands for schema type ``enum``: no decoded value ever has this type."""


#: schema ``type`` string -> Python type used for the exact-type test (spec §4.1 type table)
TYPE_MAP: dict[str, type] = {
    "string": str,
    "any": str,
    "integer": int,
    "int": int,
    "number": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "list": list,
    "list(string)": list,
    "list(enum)": list,
    "objectArray": list,
    "object": dict,
    "dict": dict,
    "enum": _NoValueType,
}
#: schema types whose elements are type-checked against an inner type
CONTAINER_TYPES = frozenset({"array", "tuple", "list(string)", "list(enum)", "object", "objectArray"})

_SUFFIX = re.compile(r"_\d+$")
_NORM_DROP = re.compile(r"[ ,./\-_*^]")
_BRACKET = re.compile(r"[\[\]]")

INCOMPLETE_MARKER = "Missing necessary parameters"
ERROR_PARAM_MARKER = "There is incorrect value"
IRRELEVANT_MARKER = "the limitations of the function"


@dataclass
class Verdict:
    """Outcome of a check: ``passed`` and the first reason of a failure."""

    passed: bool
    detail: str | None = None


class _UpstreamCrash(Exception):
    """The upstream scorer raises on this input; evalkit fails the sample instead."""


PASS = Verdict(True)


def _fail(detail: str) -> Verdict:
    return Verdict(False, detail)


def norm(text: str) -> str:
    """Upstream string normalisation: drop `` ,./-_*^``, lowercase, ``'`` -> ``"``."""
    return _NORM_DROP.sub("", text).lower().replace("'", '"')


def canonical_name(key: str) -> str:
    """Ground-truth key without one trailing ``_<digits>`` group (``f_1`` -> ``f``)."""
    return _SUFFIX.sub("", key)


def strip_think(output: str) -> str:
    """Keep only the text after the first ``</think>`` when present (spec §9.6)."""
    marker = "</think>"
    return output.split(marker, 1)[1] if marker in output else output


# ---- normal ---------------------------------------------------------------------------------


def score_normal(functions: list[dict[str, Any]], output: str, ground_truth: Any) -> tuple[Verdict, Any]:
    """Decode ``output`` and check it; returns ``(verdict, decoded calls or None)``.

    A decode failure gives a verdict whose detail starts with ``wrong_output_format``.
    """
    return _decode_and_check(functions, strip_think(output), ground_truth, keep_whitespace=False)


def _decode_and_check(functions: list[dict[str, Any]], text: str, ground_truth: Any, keep_whitespace: bool,
                      drop_splat: bool = False, source_values: bool = False) -> tuple[Verdict, Any]:  # fmt: skip
    try:
        calls = decode_calls(text, keep_whitespace=keep_whitespace, drop_splat=drop_splat, source_values=source_values)
    except DecodeError as exc:
        return _fail(f"wrong_output_format: {exc}"), None
    return check_normal(functions, calls, ground_truth), calls


# ---- EvalScope's rules (benchmark.scoring=evalscope) ------------------------------------------
#
# Where the two scorings differ, the ``scoring_rule`` of a row names the EvalScope rule that
# decided its verdict; ``rescore`` counts them. Every name is in :data:`EVALSCOPE_RULES`.

#: ``scoring_rule`` of a verdict given by the official rules (scoring=official, and under
#: scoring=evalscope a multi-turn or special answer both rules give the same verdict)
RULE_OFFICIAL = "official"
#: scoring=evalscope, and the official rules give the same verdict
RULE_EVALSCOPE_SAME = "evalscope:same_as_official"
#: scoring=evalscope decided by EvalScope's reasoning rule: it cuts the first
#: ``<think>…</think>`` block wherever it stands and leaves a bare ``</think>`` (no opening
#: tag) in place, where the official scorer keeps the text after the first ``</think>``
RULE_EVALSCOPE_THINK = "evalscope:think_block"
#: scoring=evalscope decided by scoring the first ``[...]`` block of an answer that is not
#: only that block (text, a code fence or more calls around it, or no block at all); the
#: official verdict differs
RULE_EVALSCOPE_BLOCK = "evalscope:first_block"
#: scoring=evalscope decided by keeping the whitespace the official scorer deletes; the
#: official verdict differs
RULE_EVALSCOPE_WHITESPACE = "evalscope:whitespace_kept"
#: scoring=evalscope decided by ignoring a ``**mapping`` argument of a call, which the
#: official scorer reads as a parameter named ``None``
RULE_EVALSCOPE_KWARGS = "evalscope:kwargs_ignored"
#: scoring=evalscope decided by EvalScope's value resolution, which evaluates no arithmetic
#: (:func:`evalkit.benchmarks.acebench.decoder.source_value`: ``N-1+1`` is its source text,
#: ``--N`` is N, ``+N`` is N) and takes a list or a tuple of calls only, where the official
#: scorer computes literal arithmetic (and negates the constant of any unary operator)
RULE_EVALSCOPE_ARITHMETIC = "evalscope:no_arithmetic"
#: every ``scoring_rule`` a row scored under benchmark.scoring=evalscope can carry, in the
#: order the rules are applied when one is named (:func:`score_normal_evalscope`)
EVALSCOPE_RULES = (RULE_EVALSCOPE_SAME, RULE_OFFICIAL, RULE_EVALSCOPE_THINK, RULE_EVALSCOPE_BLOCK,
                   RULE_EVALSCOPE_WHITESPACE, RULE_EVALSCOPE_KWARGS, RULE_EVALSCOPE_ARITHMETIC)  # fmt: skip

_THINK_OPEN = "<think"
_THINK_CLOSE = "</think>"


def evalscope_think_cut(output: str) -> str:
    """The answer as EvalScope scores it: the first ``<think>…</think>`` block removed,
    wherever it stands, and the rest stripped of surrounding white space; unchanged when no
    opening tag is followed by a closing one (a bare ``</think>`` stays in place).

    The opening tag is ``<think`` with an optional ``signature="…"`` then an optional
    ``redacted="true"`` attribute (each after white space), optional white space and ``>``;
    the block ends at the first ``</think>`` after it (so a nested block leaves its outer
    tail). Linear in the answer's length."""
    at = 0
    quote_cache: tuple[int, int] = (len(output) + 1, -1)  # (searched from, first '"' found), for one scan

    def next_quote(i: int) -> int:
        nonlocal quote_cache
        start, found = quote_cache
        if not (start <= i and (found == -1 or i <= found)):
            quote_cache = (i, output.find('"', i))
        return quote_cache[1]

    while (i := output.find(_THINK_OPEN, at)) >= 0:
        end = _opening_tag_end(output, i + len(_THINK_OPEN), next_quote)
        if end is not None:
            close = output.find(_THINK_CLOSE, end)
            if close < 0:  # no closing tag after the first opening one: none after a later one either
                return output
            return (output[:i] + output[close + len(_THINK_CLOSE):]).strip()
        at = i + 1
    return output


def _opening_tag_end(text: str, j: int, next_quote: Any) -> int | None:
    """Index just past an opening think tag whose name ends at ``j``, or ``None``."""

    def spaces(k: int) -> int:
        while k < len(text) and text[k].isspace():
            k += 1
        return k

    k = spaces(j)
    if k > j and text.startswith('signature="', k):
        q = next_quote(k + len('signature="'))
        if q >= 0:
            j = q + 1
    k = spaces(j)
    if k > j and text.startswith('redacted="true"', k):
        j = k + len('redacted="true"')
    k = spaces(j)
    return k + 1 if text.startswith(">", k) else None


def first_bracket_block(text: str) -> str | None:
    """The first balanced ``[...]`` of ``text`` (brackets counted as characters, quotes not
    considered: EvalScope 1.14.1's extraction as its documentation and observed verdicts
    show), or ``None`` when no ``[`` is ever closed. A ``]`` before any ``[`` is ignored."""
    depth, start = 0, -1
    for match in _BRACKET.finditer(text):  # only the brackets are visited (an answer may be long prose)
        i = match.start()
        if text[i] == "[":
            if depth == 0:
                start = i
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def score_normal_evalscope(functions: list[dict[str, Any]], output: str, ground_truth: Any,
                           category: str) -> tuple[Verdict, Any, str]:  # fmt: skip
    """``(verdict, decoded calls or None, scoring_rule)`` by EvalScope 1.14.1's ACEBench rules.

    Source: EvalScope's ACEBench adapter (its parser and the message model that cuts
    reasoning out of an answer), and the differential study of issue 36 on 22,462 outputs.
    The rules that differ from the official scorer, applied in this order:

    1. reasoning (:func:`evalscope_think_cut`): the first ``<think>…</think>`` block is cut
       out wherever it stands, a bare ``</think>`` stays; the official scorer keeps the
       text after the first ``</think>``;
    2. outside the ``normal_multi_turn_*`` categories, the first ``[...]`` block anywhere in
       the answer is decoded (:func:`first_bracket_block`; none is ``wrong_output_format``)
       and its whitespace kept (``{'first name': ...}`` keeps its key; ``[['New York']]``
       matches ``'New York'``); multi-turn answers are read whole, whitespace deleted, as
       upstream reads them;
    3. a ``**mapping`` argument of a call is ignored;
    4. values are resolved without arithmetic
       (:func:`evalkit.benchmarks.acebench.decoder.source_value`), and a set of calls is
       not a call list.

    Comparison after decoding is the official :func:`check_normal`. ``scoring_rule`` says
    what decided: :data:`RULE_EVALSCOPE_SAME` when the official rules give the same verdict
    (:data:`RULE_OFFICIAL` in a multi-turn category), else the rule whose step last changed
    the verdict on the way from the official rules to EvalScope's, one step at a time: :data:`RULE_EVALSCOPE_THINK`,
    step 2's :data:`RULE_EVALSCOPE_BLOCK` (the answer is more than its first block: text
    around it, which the official scorer reads) or :data:`RULE_EVALSCOPE_WHITESPACE` (the
    answer is the block), :data:`RULE_EVALSCOPE_KWARGS`, :data:`RULE_EVALSCOPE_ARITHMETIC`.
    """
    multi_turn = category.startswith("normal_multi_turn_")
    official_text, text = strip_think(output), evalscope_think_cut(output)
    official, official_calls = _decode_and_check(functions, official_text, ground_truth, keep_whitespace=False)

    def step(think_text: str, block_rule: bool, splat: bool, values: bool) -> tuple[Verdict, Any]:
        if multi_turn or not block_rule:
            return _decode_and_check(functions, think_text, ground_truth, False, splat, values)
        block = first_bracket_block(think_text)
        if block is None:
            return _fail("wrong_output_format: no [...] block in the answer (EvalScope rules)"), None
        return _decode_and_check(functions, block, ground_truth, True, splat, values)

    verdict, calls = step(text, True, True, True)
    if verdict.passed == official.passed:
        return verdict, calls, RULE_OFFICIAL if multi_turn else RULE_EVALSCOPE_SAME
    block = None if multi_turn else first_bracket_block(text)
    block_name = RULE_EVALSCOPE_BLOCK if block is None or block != text.strip() else RULE_EVALSCOPE_WHITESPACE
    chain: list[tuple[str, tuple[str, bool, bool, bool]]] = [(RULE_EVALSCOPE_THINK, (text, False, False, False))]
    if not multi_turn:
        chain.append((block_name, (text, True, False, False)))
    chain.append((RULE_EVALSCOPE_KWARGS, (text, True, True, False)))
    passed, rule = official.passed, RULE_EVALSCOPE_ARITHMETIC
    for name, now in [(name, step(*args)[0].passed) for name, args in chain] + [(RULE_EVALSCOPE_ARITHMETIC, verdict.passed)]:
        if now != passed:  # this step changed the verdict; the last such step decided it
            passed, rule = now, name
    return verdict, calls, rule


def check_normal(functions: list[dict[str, Any]], calls: list[dict[Any, Any]], ground_truth: Any) -> Verdict:
    """Spec §4.1 A: pass if the decoded calls pass against any candidate of the ground truth."""
    candidates = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    first: Verdict | None = None
    for candidate in candidates:
        try:
            verdict = _check_candidate(functions, calls, candidate)
        except _UpstreamCrash as exc:
            verdict = _fail(f"upstream scorer would crash here: {exc}")
        except Exception as exc:  # noqa: BLE001 - data shapes upstream cannot handle either
            verdict = _fail(f"upstream scorer would crash here: {type(exc).__name__}: {exc}")
        if verdict.passed:
            return verdict
        first = first or verdict
    return first or _fail("no ground-truth candidate")


def _check_candidate(functions: list[dict[str, Any]], calls: list[dict[Any, Any]], candidate: dict[str, Any]) -> Verdict:
    """Spec §4.1 B."""
    if len(calls) != len(candidate):
        return _fail(f"wrong number of calls: expected {len(candidate)}, got {len(calls)}")
    got = Counter(name for call in calls for name in call)
    want = Counter(canonical_name(key) for key in candidate)
    for name in got:
        if name not in want:
            return _fail(f"function {short_repr(name)} is not in the ground truth")
    for name in want:
        if name not in got:
            return _fail(f"function {name!r} is missing")
    for name, count in got.items():
        if count != want[name]:
            return _fail(f"function {short_repr(name)} called {count} times, expected {want[name]}")
    for key, expected in candidate.items():
        name = canonical_name(key)
        schema = next((f for f in functions if f["name"] in key), None)
        if schema is None:
            raise _UpstreamCrash(f"no function in the list matches ground-truth key {key!r}")
        verdict: Verdict | None = None
        for call in calls:
            if next(iter(call)) != name:
                continue
            verdict = _check_call(schema, call, expected)
            if verdict.passed:
                break
        if verdict is None or not verdict.passed:
            return verdict or _fail(f"no call of {name!r}")
    return PASS


def _check_call(schema: dict[str, Any], call: dict[Any, Any], expected: Any) -> Verdict:
    """Spec §4.1 C: one decoded call against one expected argument mapping."""
    model_args = next(iter(call.values()))
    params = schema["parameters"]
    if model_args == {} and params == {}:
        return PASS
    if model_args == {} or params == {}:
        return _fail(f"call of {schema['name']!r} without arguments" if model_args == {} else "schema has no parameters")
    properties = params["properties"]
    if expected == properties:
        return PASS
    if expected == {}:
        return _fail("ground truth has no arguments")
    func_name = schema["name"]
    if func_name not in call:
        return _fail(f"wrong function name: expected {func_name!r}, got {short_repr(next(iter(call)))}")
    if "required" not in params:
        raise _UpstreamCrash(f"schema of {func_name!r} has no 'required' list")
    for param in params["required"]:
        if param not in model_args:
            return _fail(f"{func_name}: missing required parameter {param!r}")
    for param, value in model_args.items():
        if param not in properties or param not in expected:
            return _fail(f"{func_name}: unexpected parameter {short_repr(param)}")
        spec = properties[param]
        type_name = spec["type"]
        if not isinstance(type_name, str) or type_name not in TYPE_MAP:
            raise _UpstreamCrash(f"{func_name}.{param}: unknown schema type {type_name!r}")
        py_type = TYPE_MAP[type_name]
        inner: type | None = None
        if type_name in CONTAINER_TYPES:
            try:
                inner_name = spec["items"]["type"]
            except Exception:  # noqa: BLE001 - no usable items.type
                inner_name = "string" if "string" in type_name else "enum" if "enum" in type_name else "dict"
            if not isinstance(inner_name, str) or inner_name not in TYPE_MAP:
                raise _UpstreamCrash(f"{func_name}.{param}: unknown items type {inner_name!r}")
            inner = TYPE_MAP[inner_name]
        if type_name == "tuple" and type(value) is tuple:
            value = list(value)
        if type_name == "float" and type(value) is int:
            value = float(value)
        gold = expected[param]
        valid, skip_value = _type_gate(value, gold, py_type, inner)
        if not valid:
            return _fail(f"{func_name}: wrong type for parameter {param!r}: expected {type_name}, got {type(value).__name__}")
        if skip_value:
            continue
        verdict = _check_value(func_name, param, type_name, py_type, inner, value, gold)
        if not verdict.passed:
            return verdict
    return PASS


def _coerce_bool_text(value: Any) -> Any:
    if value == "true":
        return True
    if value == "false":
        return False
    return value


def _type_gate(value: Any, gold: Any, py_type: type, inner: type | None) -> tuple[bool, bool]:
    """Spec §4.1 type gate: ``(valid, skip_value)``."""
    gold_type = type(gold) if gold != "" else None
    skip_value = gold_type is not None and gold_type is not py_type
    value = _coerce_bool_text(value)
    if type(value) is py_type:
        if inner is None:
            return True, skip_value
        try:
            gold_items = iter(gold)
        except TypeError:
            raise _UpstreamCrash(f"expected value {gold!r} of a container parameter is not iterable") from None
        for gold_item in gold_items:
            if type(gold_item) is not list or all(_type_gate(v, gold_item, inner, None)[0] for v in value):
                return True, skip_value
        return False, skip_value
    if gold_type is not None and (type(value) is gold_type or gold == value):
        return True, True
    return False, skip_value


def _check_value(func_name: str, param: str, type_name: str, py_type: type, inner: type | None, value: Any, gold: Any) -> Verdict:
    """Spec §4.1 value check (only reached when the type gate did not skip it)."""
    if py_type is dict:
        return _check_object(func_name, param, value, gold)
    if py_type is list and inner is dict:
        if type_name == "objectArray" and len(value) == len(gold) and len(value) > 0:
            raise _UpstreamCrash("objectArray value check")
        if type_name == "objectArray" and len(value) != len(gold):
            return _fail(f"{func_name}.{param}: wrong number of objects")
        if len(value) != len(gold):
            return _fail(f"{func_name}.{param}: expected {len(gold)} objects, got {len(value)}")
        for got_item, gold_item in zip(value, gold):
            verdict = _check_object(func_name, param, got_item, gold_item)
            if not verdict.passed:
                return verdict
        return PASS
    if py_type is str:
        if norm(gold) not in norm(value):
            return _fail(f"{func_name}.{param}: wrong value: expected {short_repr(gold)}, got {short_repr(value)}")
        return PASS
    if py_type is list:
        got = [norm(v) if type(v) is str else v for v in value]
        want = [norm(g) if type(g) is str else g for g in gold]
        if got != want:
            return _fail(f"{func_name}.{param}: wrong list: expected {short_repr(gold)}, got {short_repr(value)}")
    return PASS


def _check_object(func_name: str, param: str, value: Any, gold: Any) -> Verdict:
    """Spec §4.1 object rule: same key count, known keys, text-substring leaf comparison."""
    if not isinstance(value, dict):
        return _fail(f"{func_name}.{param}: expected an object, got {short_repr(value)}")
    if not isinstance(gold, dict):
        raise _UpstreamCrash(f"{func_name}.{param}: expected object is {short_repr(gold)}")
    if len(value) != len(gold):
        return _fail(f"{func_name}.{param}: object has {len(value)} keys, expected {len(gold)}")
    for key, item in value.items():
        item = _coerce_bool_text(item)
        if key not in gold:
            return _fail(f"{func_name}.{param}: unexpected key {short_repr(key)}")
        gold_item = gold[key]
        if isinstance(gold_item, dict):
            verdict = _check_object(func_name, param, item, gold_item)
            if not verdict.passed:
                return verdict
            continue
        got_text = str(norm(item) if type(item) is str else item)
        want_text = str(norm(gold_item) if type(gold_item) is str else gold_item)
        if want_text not in got_text:
            return _fail(f"{func_name}.{param}.{key}: wrong value: expected {short_repr(gold_item)}, got {short_repr(item)}")
    return PASS


# ---- special --------------------------------------------------------------------------------


def check_special(category: str, output: str, ground_truth: Any) -> Verdict:
    """Spec §4.3: case-sensitive substring tests on the raw text (English phrases for zh too),
    after the first ``</think>`` when there is one."""
    return _check_special_text(category, strip_think(output), ground_truth)


def check_special_evalscope(category: str, output: str, ground_truth: Any) -> tuple[Verdict, str]:
    """``(verdict, scoring_rule)`` by EvalScope 1.14.1's rules: the official tests on the
    answer with its reasoning cut as EvalScope cuts it (:func:`evalscope_think_cut`).
    ``scoring_rule`` is :data:`RULE_OFFICIAL` when the official rules give the same verdict,
    else :data:`RULE_EVALSCOPE_THINK` (the only rule on which they differ here)."""
    verdict = _check_special_text(category, evalscope_think_cut(output), ground_truth)
    same = verdict.passed == check_special(category, output, ground_truth).passed
    return verdict, RULE_OFFICIAL if same else RULE_EVALSCOPE_THINK


def _check_special_text(category: str, text: str, ground_truth: Any) -> Verdict:
    try:
        if "incomplete" in category:
            first = None
            for api, names in ground_truth.items():
                if INCOMPLETE_MARKER not in text:
                    first = first or f"missing the phrase {INCOMPLETE_MARKER!r}"
                elif api not in text:
                    first = first or f"does not name the API {api!r}"
                else:
                    for name in names:
                        if name not in text:
                            first = first or f"does not name the missing parameter {name!r}"
            return _fail(first) if first else PASS
        if "error" in category:
            first = None
            for _param, values in ground_truth.items():
                if ERROR_PARAM_MARKER not in text:
                    first = first or f"missing the phrase {ERROR_PARAM_MARKER!r}"
                else:
                    for value in values:
                        if value not in text:
                            first = first or f"does not quote the incorrect value {value!r}"
            return _fail(first) if first else PASS
        if "irrelevant" in category:
            return PASS if IRRELEVANT_MARKER in text else _fail(f"missing the phrase {IRRELEVANT_MARKER!r}")
    except Exception as exc:  # noqa: BLE001
        return _fail(f"upstream scorer would crash here: {type(exc).__name__}: {exc}")
    return _fail(f"not a special category: {category}")
