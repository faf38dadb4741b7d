"""Target notation readers (spec §5).

A reader takes the answer body (or the reference text) and returns the parsed document
or raises :class:`ParseError`. Library parsers are used where the prompt's convention is
theirs: ``json`` (JSON, JSON Lines), PyYAML ``SafeLoader`` (YAML 1.1, as the prompts state
for YAML answers) and ``tomllib`` (TOML 1.0). ``.properties`` and SQL INSERT are read by
small home-made readers because the stated conventions deliberately differ from what the
libraries do (see their docstrings). A parser missing from the environment is a
:class:`MissingParserError` — fatal at load time, never a zero (§5.7).

Hostile answers (issue 17; hardening [P] of §5, none of it changes a verdict of the
fixtures): a body longer than :data:`MAX_BODY_CHARS` is a parse failure before any reader
runs; YAML documents are refused when an alias refers to its own ancestor (a cycle) or
when aliases expand the document beyond :data:`MAX_YAML_UNITS`, and a YAML number scalar
longer than :data:`MAX_NUMBER_CHARS` is refused before it is converted (see
:func:`read_yaml`). Every refusal is a :class:`ParseError`, so ``syn.parses_target``
fails with the reason as its detail.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from evalkit.errors import DataError
from evalkit.untrusted import bounded_yaml_loader

#: typeless targets: values are read as strings and number-strings compare numerically (§6)
TYPELESS = frozenset({"properties", "sqlinsert", "ini", "csv", "tsv"})
#: fence tag per target notation (§1.2); ``meta.fence_tag`` wins when present
FENCE_TAGS = {"json": "json", "jsonl": "jsonl", "yaml": "yaml", "toml": "toml", "properties": "properties", "sqlinsert": "sql"}
TARGETS = tuple(FENCE_TAGS)

#: longest answer body any reader is given (characters). The largest reference of the
#: fixtures (test and shots splits) has 12,981 characters, 4,797 for YAML; the spec's
#: "long" tier starts at 8,000 (§16.5) and a 32k-token generation is about 130,000
#: characters. A longer body is a parse failure. It bounds the work of every later
#: check: the pure-Python YAML parser reads flow-style text at about 80,000 characters
#: a second here (3.3 s for a full body).
MAX_BODY_CHARS = 256 * 1024
#: largest size a YAML document may have once its aliases are expanded, in units of one
#: per node plus one per scalar character (an alias counts its target's full size every
#: time it is used). Without aliases a document has about one unit per character of its
#: text, so this is the size of the longest body one could write out in full
#: (:data:`MAX_BODY_CHARS`); the largest reference of the fixtures has 8,533 units, the
#: largest YAML one 3,962. It refuses "billion laughs" alias bombs before anything is built.
MAX_YAML_UNITS = MAX_BODY_CHARS
#: longest YAML scalar converted to an int or a float (characters, ``_`` and signs
#: included): Python's own limit on decimal int text (``sys.int_info.default_max_str_digits``),
#: applied to every notation YAML 1.1 has (``0b``, ``0x``, octal and sexagesimal ``1:2:3``,
#: whose conversion is quadratic in its length: 2 MB took 271 s). The longest number of
#: the fixtures' references and answers has 15 characters.
MAX_NUMBER_CHARS = 4300


class ParseError(ValueError):
    """The body does not parse in the target notation (``syn.parses_target`` fails)."""


class MissingParserError(DataError):
    """The environment lacks a parser for a notation the dataset uses (§5.7)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def read_json(body: str, strict: bool = False) -> Any:
    """Standard JSON, the whole body one value; empty is a failure. ``strict`` rejects
    ``NaN``/``Infinity`` (hardening; the observed reader accepts them). Duplicate keys
    keep the last value."""
    if not body:
        raise ParseError("empty body")
    try:
        if strict:
            return json.loads(body, parse_constant=_reject_constant)
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: deep nesting
        raise ParseError(f"JSON: {exc}") from None


def read_jsonl(body: str, strict: bool = False) -> list[Any]:
    """JSON Lines: each non-blank trimmed line one JSON value; the document is their list
    (an empty body reads as ``[]``)."""
    out = []
    for n, line in enumerate(body.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line, parse_constant=_reject_constant) if strict else json.loads(line))
        except (ValueError, RecursionError) as exc:  # RecursionError: deep nesting
            raise ParseError(f"JSON Lines line {n}: {exc}") from None
    return out


def _bounded_loader() -> type:
    """PyYAML's ``SafeLoader`` with the bounds of :func:`read_yaml`: evalkit's one bounded
    YAML loader (:func:`evalkit.untrusted.bounded_yaml_loader`) with SOBHard's own bounds (no
    alias count or depth limit beyond Python's recursion limit: the spec's answers may use
    them freely within :data:`MAX_YAML_UNITS`). PyYAML is imported only when a YAML answer
    is read, as :func:`probe` expects."""
    return bounded_yaml_loader(MAX_YAML_UNITS, None, None, MAX_NUMBER_CHARS)


def read_yaml(body: str, strict: bool = False) -> Any:
    """YAML 1.1 safe loading (PyYAML ``SafeLoader``); empty body is a failure; one document.

    Bounds (issue 17, hardening [P]), each a :class:`ParseError` before anything is built:
    a node that is its own ancestor through an alias (``&a [*a]``: a cycle, which would
    send every later walk of the document round forever); a document whose size with
    every alias expanded is over :data:`MAX_YAML_UNITS` (alias bombs: 9 levels of 9
    aliases are about 420 bytes of text and 387 million strings written out); an int or
    float scalar longer than :data:`MAX_NUMBER_CHARS` characters. Merge keys (``<<: *a``)
    count as aliases. The checks run on PyYAML's node graph between composing and
    constructing, each node visited once. Documents within the bounds load exactly as with
    ``SafeLoader``; a sexagesimal float beyond the float range (``OverflowError`` in
    PyYAML) is a parse failure too.
    """
    import yaml

    if not body:
        raise ParseError("empty body")
    try:
        loader = _bounded_loader()(body)  # a SafeLoader with bounds; model text, not a file
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ParseError(f"YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # unhashable keys; 1:2:…:3.5 over float range
        raise ParseError(f"YAML: {exc}") from None


def read_toml(body: str, strict: bool = False) -> dict[str, Any]:
    """TOML 1.0 via ``tomllib``; the top level is a table; duplicate keys are an error."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(body)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:  # ValueError: int over the digit limit
        raise ParseError(f"TOML: {exc}") from None


def read_properties(body: str, strict: bool = False) -> dict[str, str]:
    """The ``.properties`` convention the prompts state (§5): per line, trimmed; blank lines
    and lines starting with ``#`` or ``!`` skipped; split at the first ``=``; key and value
    trimmed; a line without ``=`` or with an empty key is a failure; at least one entry; a
    repeated key keeps the last value.

    Home-made on purpose: Java ``Properties`` (and ``jproperties``) also split on ``:`` and
    whitespace, decode ``\\`` escapes and join continuation lines, none of which the stated
    convention has (a Windows path or ``\\n`` in a value must survive byte for byte).
    """
    out: dict[str, str] = {}
    for n, line in enumerate(body.split("\n"), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        if "=" not in line:
            raise ParseError(f"properties line {n}: no '='")
        key, value = line.split("=", 1)
        key = key.strip()
        if not key:
            raise ParseError(f"properties line {n}: empty key")
        out[key] = value.strip()
    if not out:
        raise ParseError("properties: no entry")
    return out


_INSERT_RE = re.compile(r"^INSERT\s+INTO\s+records\s*\(([^)]*)\)\s*VALUES\s*\((.*)\)\s*;$", re.IGNORECASE | re.DOTALL)


def _sql_values(text: str, n: int) -> list[str | None]:
    values: list[str | None] = []
    i, size = 0, len(text)
    while True:
        while i < size and text[i] in " \t":
            i += 1
        if i < size and text[i] == "'":
            i += 1
            buf = []
            while True:
                j = text.find("'", i)
                if j < 0:
                    raise ParseError(f"SQL line {n}: unterminated string")
                buf.append(text[i:j])
                if j + 1 < size and text[j + 1] == "'":
                    buf.append("'")
                    i = j + 2
                    continue
                i = j + 1
                break
            values.append("".join(buf))
        elif text[i : i + 4].upper() == "NULL" and (i + 4 == size or text[i + 4] in " \t,"):
            values.append(None)
            i += 4
        else:
            raise ParseError(f"SQL line {n}: a value must be a quoted string or NULL at {text[i:i + 20]!r}")
        while i < size and text[i] in " \t":
            i += 1
        if i == size:
            return values
        if text[i] != ",":
            raise ParseError(f"SQL line {n}: expected ',' at {text[i:i + 20]!r}")
        i += 1


def read_sqlinsert(body: str, strict: bool = False) -> list[dict[str, str | None]]:
    """The SQL INSERT dialect the prompts state (§5): one statement per non-blank trimmed
    line, ``INSERT INTO records (<cols>) VALUES (<vals>);`` (keywords in any case);
    columns split on ``,`` and trimmed, none blank or repeated, the same list in the same
    order on every line; values single-quoted strings (``''`` is a quote) or bare
    ``NULL``; anything else (an unquoted number) is a failure.

    Home-made on purpose: SQL parsers (sqlglot, sqlparse) accept numbers, multi-line
    statements, identifiers in quotes and expressions, which this dialect rejects.
    """
    rows: list[dict[str, str | None]] = []
    columns: list[str] | None = None
    for n, line in enumerate(body.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        m = _INSERT_RE.match(line)
        if not m:
            raise ParseError(f"SQL line {n}: not an INSERT INTO records (...) VALUES (...); statement")
        cols = [c.strip() for c in m.group(1).split(",")]
        if any(not c for c in cols):
            raise ParseError(f"SQL line {n}: blank column name")
        if len(set(cols)) != len(cols):
            raise ParseError(f"SQL line {n}: repeated column")
        if columns is None:
            columns = cols
        elif cols != columns:
            raise ParseError(f"SQL line {n}: columns differ from the first statement")
        values = _sql_values(m.group(2), n)
        if len(values) != len(cols):
            raise ParseError(f"SQL line {n}: {len(values)} values for {len(cols)} columns")
        rows.append(dict(zip(cols, values)))
    if not rows:
        raise ParseError("SQL: no statement")
    return rows


READERS: dict[str, Callable[..., Any]] = {
    "json": read_json,
    "jsonl": read_jsonl,
    "yaml": read_yaml,
    "toml": read_toml,
    "properties": read_properties,
    "sqlinsert": read_sqlinsert,
}


def read_target(target: str, body: str, strict_json: bool = False) -> Any:
    """Parse ``body`` (trimmed first) in ``target``. Raises :class:`ParseError` (also for
    a body over :data:`MAX_BODY_CHARS` characters), or ``KeyError`` for a notation without
    a reader (callers probe with :func:`probe`)."""
    reader = READERS[target]
    body = body.strip()
    if len(body) > MAX_BODY_CHARS:
        raise ParseError(f"answer body of {len(body):,} characters is over the {MAX_BODY_CHARS:,}-character limit")
    return reader(body, strict_json)


def probe(targets: set[str], need_jsonschema: bool = False) -> None:
    """Check once, at load, that every target reader works here (§5.7).

    Raises:
        MissingParserError: an unknown notation or a missing library (PyYAML, tomllib /
            tomli, jsonschema for schema_gen questions), with the fix in the message.
    """
    for target in sorted(targets):
        if target not in READERS:
            raise MissingParserError(f"SOBHard: no reader for target notation {target!r} (known: {', '.join(READERS)})")
        try:
            if target == "yaml":
                import yaml  # noqa: F401
            elif target == "toml":
                try:
                    import tomllib  # noqa: F401
                except ModuleNotFoundError:
                    import tomli  # noqa: F401
        except ModuleNotFoundError as exc:
            raise MissingParserError(
                f"SOBHard: the {target} reader needs {exc.name!r}, which is not installed "
                f"(pip install {'pyyaml' if target == 'yaml' else 'tomli'}); refusing to score {target} answers as unparseable"
            ) from None
    if need_jsonschema:
        try:
            import jsonschema  # noqa: F401
        except ModuleNotFoundError:
            raise MissingParserError(
                "SOBHard: schema_gen questions need 'jsonschema' (pip install jsonschema); "
                "refusing to pass schema.validates_source without a validator"
            ) from None
