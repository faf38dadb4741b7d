"""The call dispatcher of the agent categories (the spec's "executor"): decoding (spec §3.3), dispatch (§5.2) and
observation formatting (§5.3).

Model text is parsed with :mod:`ast` and never executed: decoded values are passed as
keyword arguments to the simulator methods. Upstream rebuilt a call string from the decoded
values and ``eval``-ed it; its observable consequences are reproduced here:

* every top-level argument value travels through ``repr`` and back (here with
  :func:`ast.literal_eval`), so each target gets a fresh copy and values whose ``repr`` is
  not a literal (``inf``, ``nan``) make the call raise;
* a dict-valued top-level argument is re-rendered as a nested call ``firstkey(...)``: an
  empty dict or one whose first value is not a dict (recursively) makes the message
  undecodable, any other such dict makes the call raise at execution (upstream: a name
  error; evalkit never resolves the name). A keyword-less nested call is its source text;
* a dotted call name whose last part is a known method raises at execution, an unknown one
  is an unknown method;
* an unknown method returns the previous result of the same message, or raises the
  unbound-variable error :data:`UNBOUND_MESSAGE` when it is the first call.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from evalkit.benchmarks.acebench.decoder import MAX_SOURCE_CHARS, ArithmeticAllowance, DecodeError, call_name, decode_value
from evalkit.benchmarks.acebench.jsonsafe import json_safe

#: str() of the error upstream raises when an unknown method is the first call of a message
#: (Python 3.11+ wording; 3.10 and older said "local variable ... referenced before assignment")
UNBOUND_MESSAGE = "cannot access local variable 'func_call_result' where it is not associated with a value"
#: the multi-turn error observation: upstream forgot the f-string, so this literal text
#: (not the exception message) is sent, as a list of its characters
MULTI_TURN_ERROR_TEXT = "Error during execution: {str(e)}"
#: prefix of a failed call's result in multi-step
MULTI_STEP_ERROR_PREFIX = "Error during execution: "
#: multi-step reply to an undecodable agent message (evalkit's wording, spec §5.3)
NUDGE = "Please do not ask me questions; solve the task with the information you already have."

_ROUTE = re.compile(r"\[.*\]")  # no DOTALL: the brackets must be on one line


class Undecodable(Exception):
    """The agent message is not a call list under §3.3."""


class ExecutionError(Exception):
    """A call that upstream would have raised on while evaluating its rebuilt text."""


@dataclass
class Call:
    """One decoded call: its name, decoded keyword values, and a reason it will raise."""

    name: str
    arguments: dict[Any, Any] = field(default_factory=dict)
    raises: str | None = None

    def fresh_kwargs(self) -> dict[str, Any]:
        """The keyword arguments as the rebuilt call text would produce them (a new copy)."""
        if self.raises is not None:
            raise ExecutionError(self.raises)
        out = {}
        for key, value in self.arguments.items():
            try:
                out[key] = ast.literal_eval(repr(value))
            except Exception as exc:  # noqa: BLE001 - e.g. repr 'inf' is not a literal
                raise ExecutionError(f"name {repr(value)!r} is not defined") from exc
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": json_safe(self.arguments), **({"raises": self.raises} if self.raises else {})}


# ---- decoding ---------------------------------------------------------------------------------
def prepare(text: str) -> str:
    """Steps 1–3 of §3.3: drop one leading space, wrap in brackets, strip ``[`` ``]`` ``'``."""
    if text == "":
        raise Undecodable("empty message")
    if text[0] == " ":
        text = text[1:]
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    return text.strip("[]'")


def decode_message(text: str, strict: bool) -> list[Call]:
    """The calls of an agent message (§3.3). ``strict``: a non-call element in a list makes
    the message undecodable (multi-step executor, multi-turn routing); otherwise such
    elements are skipped (multi-turn executor). Raises :class:`Undecodable`, also for a
    message over the decoder's bounds (:data:`~evalkit.benchmarks.acebench.decoder.MAX_SOURCE_CHARS`
    characters; arithmetic over one :class:`~evalkit.benchmarks.acebench.decoder.ArithmeticAllowance`
    per message)."""
    if not isinstance(text, str):
        raise Undecodable("not text")
    try:
        source = prepare(text)
        if len(source) > MAX_SOURCE_CHARS:
            raise Undecodable(f"message of {len(source):,} characters is over the {MAX_SOURCE_CHARS:,}-character limit")
        return _decode(source, strict)
    except Undecodable:
        raise
    except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, ... -> undecodable
        raise Undecodable(f"{type(exc).__name__}: {exc}") from None


def _decode(source: str, strict: bool) -> list[Call]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            body = ast.parse(source, mode="eval").body
        except (SyntaxError, ValueError) as exc:
            raise Undecodable(f"invalid syntax: {exc}") from None
    if isinstance(body, ast.Call):
        nodes = [body]
    elif isinstance(body, (ast.List, ast.Tuple)):
        nodes = []
        for element in body.elts:
            if isinstance(element, ast.Call):
                nodes.append(element)
            elif strict:
                raise Undecodable(f"list element is {type(element).__name__}, not a call")
    else:
        nodes = []  # a name, a number...: zero calls, still decodable
    allowance = ArithmeticAllowance()
    return [_call(node, allowance) for node in nodes]


def _resolve(node: ast.Call, allowance: ArithmeticAllowance) -> tuple[str, dict[Any, Any]]:
    arguments: dict[Any, Any] = {}
    for kw in node.keywords:  # positional arguments are ignored
        arguments[kw.arg] = _value(kw.value, allowance)
    return call_name(node), arguments


def _call(node: ast.Call, allowance: ArithmeticAllowance) -> Call:
    name, arguments = _resolve(node, allowance)
    call = Call(name=name, arguments=arguments)
    # the rebuilt call text: repr of every value, dicts re-rendered as nested calls
    for key, value in arguments.items():
        if isinstance(value, dict):
            _check_nested(value)
            call.raises = call.raises or f"name {next(iter(value))!r} is not defined"
        else:
            try:
                repr(value)
            except Exception as exc:  # noqa: BLE001 - e.g. an int too long to print
                raise Undecodable(f"argument {key!r} cannot be rendered: {exc}") from None
        if key is None and call.raises is None:
            call.raises = "invalid syntax (keyword unpacking)"
    return call


def _check_nested(value: dict[Any, Any]) -> None:
    """Whether a dict can be rendered as ``firstkey(k=v, ...)`` (else undecodable)."""
    if not value:
        raise Undecodable("empty dict argument")
    first = next(iter(value.values()))
    if not isinstance(first, dict):
        raise Undecodable("dict argument whose first value is not a mapping")
    for inner in first.values():
        if isinstance(inner, dict):
            _check_nested(inner)


def _value(node: ast.AST, allowance: ArithmeticAllowance) -> Any:
    """Argument value of §3.1 step 7 with the executor's difference (§3.3 step 5): a
    keyword-less nested call is its source text. Raises :class:`Undecodable`."""
    try:
        return decode_value(node, allowance, bare_call=ast.unparse)
    except DecodeError as exc:
        raise Undecodable(str(exc)) from None


def routes_to_executor(text: str) -> bool:
    """Multi-turn routing (§5.5): a ``[...]`` span on one line and a strict decode."""
    if not isinstance(text, str) or not _ROUTE.search(text):
        return False
    try:
        decode_message(text, strict=True)
    except Undecodable:
        return False
    return True


# ---- dispatch ---------------------------------------------------------------------------------
_UNSET = object()


@dataclass
class Execution:
    """What executing one message produced: per-call results (raw), or the aborting error."""

    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None


def apply_calls(env: Any, calls: list[Call], abort_on_error: bool) -> Execution:
    """Apply ``calls`` (decoded from one agent message) in order to the simulated
    environment ``env``, ACEBench's *execution* role (§5.2); returns the :class:`Execution`.

    Multi-step (``abort_on_error=False``): a raising call's result is
    ``"Error during execution: <message>"`` and the next calls still run. Multi-turn: the
    first raising call stops the message and is returned as ``error``.
    """
    out = Execution()
    last: Any = _UNSET  # the value the upstream loop variable holds
    for call in calls:
        try:
            name = call.name
            if "." in name:
                head, _, method = name.rpartition(".")
                if env.knows(method):
                    raise ExecutionError(f"name {head.split('.')[0]!r} is not defined")
                targets = []
            else:
                targets = env.targets(name) if name else []
            if not targets:
                if last is _UNSET:
                    raise UnboundLocalError(UNBOUND_MESSAGE)
                out.results.append(last)
                continue
            for target in targets:
                last = target(**call.fresh_kwargs())
            out.results.append(last)
        except Exception as exc:  # noqa: BLE001 - any simulator error is an observation
            if abort_on_error:
                out.error = exc
                return out
            out.results.append(MULTI_STEP_ERROR_PREFIX + str(exc))
    return out


# ---- observations -----------------------------------------------------------------------------
def _as_text(result: Any) -> str:
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001
            return str(result)
    return str(result)


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except Exception:  # noqa: BLE001
        return text


def observation(results: list[Any]) -> list[Any]:
    """Text, then JSON-parsed when possible (§5.3): dicts come back with string keys,
    lists as their repr text, ``True``/``None`` as the texts ``"True"``/``"None"``."""
    return [_parse(_as_text(r)) for r in results]


def multi_turn_error_observation() -> list[Any]:
    """The multi-turn error observation: the literal template text as single characters."""
    return [_parse(ch) for ch in MULTI_TURN_ERROR_TEXT]
