"""Regular expressions of model-written JSON Schemas, matched in linear time (issue 17).

``jsonschema`` matches ``pattern`` and ``patternProperties`` with Python's backtracking
``re.search``: a pattern such as ``(.|.|.|.)*#`` runs for hours on a 30-character string.
:func:`search` gives the same answer as ``re.search(pattern, string) is not None`` but runs
the pattern on RE2 (PyPI ``google-re2``, linear in the string) whenever RE2 can say exactly
what Python would say:

- the pattern is read by Python's own regex parser (``re._parser``, so its syntax is
  Python's and so are its syntax errors) and rewritten for RE2 node by node; Python's
  Unicode classes ``\\d`` ``\\s`` ``\\w`` (and their negations) become explicit code-point
  ranges built from ``str.isdecimal``/``isspace``/``isalnum`` (RE2's own ``\\d`` ``\\w``
  ``\\s`` are ASCII-only and would turn Russian words into non-words);
- constructs RE2 lacks (backreferences, lookaround, conditionals, possessive and atomic
  groups, repetition counts over 1000) keep Python's ``re``;
- three constructs are exact on RE2 only for some strings, and the others keep ``re``:
  ``$`` (Python also matches before a final newline: exact when the string has no newline
  before its last character), ``\\b``/``\\B`` (Unicode word boundaries: exact on ASCII
  strings or under the ``(?a)`` flag; Python's ``\\B`` never matches an empty string) and
  case-insensitive matching (exact on ASCII patterns and ASCII strings);
- a string RE2 cannot take (lone surrogates) keeps ``re``.

What keeps ``re`` is not bounded in time here; the scoring process's time bound covers it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

try:  # Python >= 3.11
    from re import _constants as _c
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_MAX_CODEPOINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_RE2_MAX_MEM = 64 << 20  # bytes RE2 may use for one compiled pattern (its default is 8 MiB)


class _Unsupported(Exception):
    """The pattern has no exact RE2 equivalent: Python's ``re`` matches it."""


Ranges = tuple[tuple[int, int], ...]


def _ranges_of(codes: list[int]) -> Ranges:
    out: list[tuple[int, int]] = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return tuple(out)


def _merge(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= _MAX_CODEPOINT:
        out.append((start, _MAX_CODEPOINT))
    return tuple(out)


@functools.cache
def _category(code: Any, ascii_only: bool) -> Ranges:
    """The code points of a category escape as Python's ``re`` (``_sre``) defines them:
    ``\\d`` = ``str.isdecimal``, ``\\s`` = ``str.isspace``, ``\\w`` = ``str.isalnum`` or
    ``_``; with the ASCII flag ``[0-9]``, ``[ \\t\\n\\r\\f\\v]``, ``[A-Za-z0-9_]``."""
    table = {
        _c.CATEGORY_DIGIT: ("digit", False), _c.CATEGORY_NOT_DIGIT: ("digit", True),
        _c.CATEGORY_SPACE: ("space", False), _c.CATEGORY_NOT_SPACE: ("space", True),
        _c.CATEGORY_WORD: ("word", False), _c.CATEGORY_NOT_WORD: ("word", True),
    }  # fmt: skip
    if code not in table:
        raise _Unsupported(f"category {code}")
    kind, negated = table[code]
    limit = 0x80 if ascii_only else _MAX_CODEPOINT + 1
    test = {
        "digit": lambda ch: ch.isdecimal() and (not ascii_only or ch.isascii()),
        "space": (lambda ch: ch in " \t\n\r\f\v") if ascii_only else str.isspace,
        "word": lambda ch: ch.isalnum() or ch == "_",
    }[kind]
    ranges = _ranges_of([c for c in range(limit) if test(chr(c))])
    return _complement(ranges) if negated else ranges


def _class_text(ranges: Ranges, negate: bool = False) -> str:
    """An RE2 character class matching exactly ``ranges`` (or every other character with
    ``negate``: written ``[^...]``, so that RE2 applies case folding before negating).
    Surrogates are left out: RE2 reads UTF-8, which cannot hold them."""
    parts = []
    for lo, hi in ranges:
        pieces = [(lo, hi)]
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            pieces = [(lo, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, hi)]
        for a, b in pieces:
            if a <= b:
                parts.append(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}")
    if not parts:
        return "(?s:.)" if negate else "[^\\x{0}-\\x{10ffff}]"
    return ("[^" if negate else "[") + "".join(parts) + "]"


@dataclass
class _Flags:
    ignorecase: bool
    dotall: bool
    multiline: bool
    ascii: bool

    def apply(self, add: int, remove: int) -> _Flags:
        def bit(flag: int, now: bool) -> bool:
            return True if add & flag else False if remove & flag else now

        return _Flags(
            bit(_c.SRE_FLAG_IGNORECASE, self.ignorecase), bit(_c.SRE_FLAG_DOTALL, self.dotall),
            bit(_c.SRE_FLAG_MULTILINE, self.multiline), bit(_c.SRE_FLAG_ASCII, self.ascii),
        )  # fmt: skip


@dataclass
class _Needs:
    """What the rewritten pattern needs of a string to be exact on RE2."""

    ascii_string: bool = False  # \b, \B (Unicode) or case-insensitive matching
    dollar: bool = False  # a non-multiline $ (written as the placeholder _DOLLAR)
    non_empty: bool = False  # \B: Python's never matches the empty string, RE2's does


_DOLLAR = "\x00DOLLAR\x00"  # placeholder: never produced otherwise (literals are written \x{..})


def _to_re2(pattern: str) -> tuple[str, _Needs]:
    """``pattern`` (Python syntax) rewritten for RE2, and what it needs of the string.

    Raises:
        _Unsupported: a construct without an exact RE2 equivalent.
        re.error, RecursionError: Python cannot parse the pattern either.
    """
    parsed = _sre_parse.parse(pattern)
    top = parsed.state.flags
    if top & (_c.SRE_FLAG_LOCALE | getattr(_c, "SRE_FLAG_TEMPLATE", 0)):
        raise _Unsupported("locale flag")
    flags = _Flags(False, False, False, False).apply(top, 0)
    needs = _Needs()
    return _emit(parsed, flags, needs), needs


def _literal(code: int, flags: _Flags, needs: _Needs) -> str:
    if flags.ignorecase:
        if code >= 0x80:
            raise _Unsupported("case-insensitive non-ASCII literal")
        needs.ascii_string = True
        return f"(?i:\\x{{{code:x}}})"
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        return _class_text(())  # RE2 never sees a surrogate: such a literal never matches
    return f"\\x{{{code:x}}}"


def _charset(items: list[Any], flags: _Flags, needs: _Needs) -> str:
    negate = False
    ranges: list[tuple[int, int]] = []
    for op, av in items:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            ranges.append((av, av))
        elif op is _c.RANGE:
            ranges.append(av)
        elif op is _c.CATEGORY:
            ranges.extend(_category(av, flags.ascii))
        else:
            raise _Unsupported(f"set item {op}")
        if flags.ignorecase and op in (_c.LITERAL, _c.RANGE) and (av if op is _c.LITERAL else av[1]) >= 0x80:
            raise _Unsupported("case-insensitive non-ASCII set")
    text = _class_text(_merge(ranges), negate)
    if flags.ignorecase:
        needs.ascii_string = True
        return f"(?i:{text})"
    return text


def _emit(items: Any, flags: _Flags, needs: _Needs) -> str:
    out: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            out.append(_literal(av, flags, needs))
        elif op is _c.NOT_LITERAL:
            out.append(_charset([(_c.NEGATE, None), (_c.LITERAL, av)], flags, needs))
        elif op is _c.ANY:
            out.append("(?s:.)" if flags.dotall else "[^\\n]")
        elif op is _c.IN:
            out.append(_charset(list(av), flags, needs))
        elif op is _c.BRANCH:
            out.append("(?:" + "|".join(_emit(b, flags, needs) for b in av[1]) + ")")
        elif op is _c.SUBPATTERN:
            _group, add, remove, sub = av
            out.append("(?:" + _emit(sub, flags.apply(add, remove), needs) + ")")
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            low, high, sub = av
            if low > 1000 or (high is not _c.MAXREPEAT and high > 1000):
                raise _Unsupported("repetition count over RE2's 1000")
            count = f"{{{low},}}" if high is _c.MAXREPEAT else f"{{{low},{high}}}"
            out.append("(?:" + _emit(sub, flags, needs) + ")" + count + ("?" if op is _c.MIN_REPEAT else ""))
        elif op is _c.AT:
            out.append(_anchor(av, flags, needs))
        else:  # GROUPREF, GROUPREF_EXISTS, ASSERT, ASSERT_NOT, ATOMIC_GROUP, POSSESSIVE_REPEAT ...
            raise _Unsupported(f"{op}")
    return "".join(out)


def _anchor(code: Any, flags: _Flags, needs: _Needs) -> str:
    if code is _c.AT_BEGINNING:
        return "(?m:^)" if flags.multiline else "\\A"
    if code is _c.AT_BEGINNING_STRING:
        return "\\A"
    if code is _c.AT_END:
        if flags.multiline:
            return "(?m:$)"
        needs.dollar = True
        return _DOLLAR
    if code is _c.AT_END_STRING:
        return "\\z"
    if code in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
        if not flags.ascii:
            needs.ascii_string = True
        if code is _c.AT_NON_BOUNDARY:
            needs.non_empty = True
        return "\\b" if code is _c.AT_BOUNDARY else "\\B"
    raise _Unsupported(f"anchor {code}")


@dataclass
class _Plan:
    """How one pattern is matched: ``python`` (a compiled ``re`` pattern, when RE2 is never
    exact) and the RE2 programs: ``at_end`` ($ = end of string) and ``before_newline``
    ($ = end of a line; exact when the only newline is the last character)."""

    python: Any
    needs: _Needs | None = None
    at_end: Any = None
    before_newline: Any = None


def _re2_compile(text: str) -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    return re2.compile(text, options)


@functools.lru_cache(maxsize=512)
def _plan(pattern: str) -> _Plan:
    python = re.compile(pattern)  # Python's verdict on the syntax; raises re.error like re.search
    try:
        text, needs = _to_re2(pattern)
        at_end = _re2_compile(text.replace(_DOLLAR, "\\z"))
        before_newline = _re2_compile(text.replace(_DOLLAR, "(?m:$)")) if needs.dollar else at_end
    except Exception:  # noqa: BLE001 - _Unsupported, RE2 refusing it (size, syntax), RecursionError ...
        return _Plan(python)
    return _Plan(python, needs, at_end, before_newline)


def search(pattern: Any, string: Any) -> bool:
    """``re.search(pattern, string) is not None``, on RE2 where that is exact (see the
    module docstring). Raises what ``re.search`` raises for a bad pattern or a non-string
    argument (``re.error``, ``TypeError``)."""
    if not isinstance(pattern, str) or not isinstance(string, str):
        return re.search(pattern, string) is not None
    plan = _plan(pattern)
    needs = plan.needs
    if needs is None or (needs.ascii_string and not string.isascii()) or (needs.non_empty and not string):
        return plan.python.search(string) is not None
    program = plan.at_end
    if needs.dollar and string.endswith("\n"):
        if "\n" in string[:-1]:
            return plan.python.search(string) is not None
        program = plan.before_newline
    try:
        return program.search(string) is not None
    except UnicodeError:  # lone surrogates: RE2 reads UTF-8
        return plan.python.search(string) is not None


class RegexModule:
    """Stands in for the ``re`` module inside jsonschema's keyword functions: only
    ``search`` is used there (a match is only tested for truth)."""

    @staticmethod
    def search(pattern: Any, string: Any, flags: int = 0) -> bool | None:
        if flags:
            return re.search(pattern, string, flags) is not None or None
        return search(pattern, string) or None


# ---- jsonschema ------------------------------------------------------------------------------
#: the keywords whose jsonschema functions match regular expressions (``additionalProperties``
#: and ``unevaluatedProperties`` apply the ``patternProperties`` patterns to decide which
#: properties are "additional" / "evaluated")
REGEX_KEYWORDS = ("pattern", "patternProperties", "additionalProperties", "unevaluatedProperties")
_SAFE_CLASSES: dict[type, type] = {}


def _rebound(func: Any, memo: dict[Any, Any]) -> Any:
    """A copy of one of jsonschema's functions whose module-level ``re`` is
    :class:`RegexModule`, and whose jsonschema helpers (``find_additional_properties``,
    ``find_evaluated_property_keys_by_schema``, recursively) are such copies too; the
    library's code itself is reused unchanged."""
    import types

    if func in memo:
        return memo[func]
    namespace = dict(func.__globals__)
    copy = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    memo[func] = copy
    names: set[str] = set()
    codes = [func.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in names:
        target = namespace.get(name)
        if target is re:
            namespace[name] = RegexModule
        elif isinstance(target, types.FunctionType) and target.__module__.startswith("jsonschema"):
            namespace[name] = _rebound(target, memo)
    return copy


def linear_time_validator(cls: type) -> type:
    """``cls`` (a jsonschema validator class) extended (:func:`jsonschema.validators.extend`)
    so that :data:`REGEX_KEYWORDS` match with :func:`search`; everything else is the
    library's. A subschema that names another dialect in ``$schema`` is validated by that
    dialect's class extended the same way (the library's ``evolve`` would switch to the
    plain class). Classes are built once.
    """
    if cls in _SAFE_CLASSES or cls in _SAFE_CLASSES.values():
        return _SAFE_CLASSES.get(cls, cls)
    import attrs
    from jsonschema.validators import extend, validator_for

    memo: dict[Any, Any] = {}
    keywords = {k: _rebound(cls.VALIDATORS[k], memo) for k in REGEX_KEYWORDS if k in cls.VALIDATORS}
    safe = extend(cls, validators=keywords)
    library_evolve = safe.evolve

    def evolve(self: Any, **changes: Any) -> Any:
        chosen = validator_for(changes.get("schema", self.schema), default=type(self))
        if chosen is type(self):
            return library_evolve(self, **changes)
        for f in attrs.fields(type(self)):
            if f.init:
                changes.setdefault(f.alias, getattr(self, f.name))
        return linear_time_validator(chosen)(**changes)

    safe.evolve = evolve
    _SAFE_CLASSES[cls] = safe
    return safe
