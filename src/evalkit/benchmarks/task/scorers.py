"""Answer extraction and the scorer library of YAML tasks (:mod:`evalkit.benchmarks.task.settings`
states each rule). Every function takes model text, which is untrusted: none executes it,
and each is linear in its size (the regular expressions here have no nested repetition;
the task's own patterns run in the bounded scoring process)."""

from __future__ import annotations

import functools
import json
import math
import re
import string
from collections import Counter
from typing import Any

from evalkit.benchmarks.sobhard.patterns import linear_time_validator
from evalkit.benchmarks.task.settings import Extract, ScorerSpec

LETTERS = string.ascii_uppercase
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_MC_FORMS = (
    re.compile(r"(?i:answer|option|choice)\s*(?i:is)?\s*[:：]?\s*\(?([A-Z])\)?(?![A-Za-z])"),
    re.compile(r"\(([A-Z])\)"),
    re.compile(r"(?m)^\s*([A-Z])[.)]?\s*$"),
    re.compile(r"(?m)^\s*([A-Z])[.)](?:\s|$)"),
)


def extract(rule: Extract, output: str) -> str | None:
    """The answer in ``output`` by ``rule`` (``None``: nothing to score)."""
    text = output.strip()
    if rule.kind == "none":
        return text or None
    if rule.kind == "last_line":
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else None
    if rule.kind == "regex":
        found = None
        for found in re.finditer(rule.pattern or "", text):
            pass
        return found.group(rule.group).strip() if found is not None and found.group(rule.group) is not None else None
    if rule.kind == "json_field":
        return _json_field(text, rule.field or "")
    return _mc_letter(text)


#: how many ``{`` a JSON object is looked for at (each try is linear in the text)
JSON_TRIES = 16


def _json_field(text: str, field: str) -> str | None:
    """``field`` of the first JSON object in ``text`` (a fenced or bare object), looked for at
    the first :data:`JSON_TRIES` opening braces."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(JSON_TRIES):
        if start < 0:
            break
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict) and field in value:
            found = value[field]
            return found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)
        return None
    return None


def _mc_letter(text: str) -> str | None:
    for form in _MC_FORMS:
        found = form.findall(text)
        if found:
            return found[-1].upper()
    return None


def normalise(text: str, steps: list[str]) -> str:
    """``text`` stripped, then each step of ``steps`` in the order lower, strip_punctuation,
    remove_articles, collapse_whitespace (SQuAD's ``normalize_answer`` is all four)."""
    text = text.strip()
    if "lower" in steps:
        text = text.lower()
    if "strip_punctuation" in steps:
        text = text.translate(_PUNCT)
    if "remove_articles" in steps:
        text = _ARTICLES.sub(" ", text)
    if "collapse_whitespace" in steps:
        text = " ".join(text.split())
    return text


def first_number(text: str) -> float | None:
    """The first number in ``text`` (thousands separators dropped), or ``None``."""
    found = _NUMBER.search(text.replace("$", ""))
    if found is None:
        return None
    try:
        return float(found.group(0).replace(",", ""))
    except ValueError:
        return None


def token_f1(answer: str, target: str) -> float:
    """SQuAD's token F1 of two normalised texts (both empty: 1)."""
    a, t = answer.split(), target.split()
    if not a or not t:
        return float(a == t)
    common = sum((Counter(a) & Counter(t)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(t)
    return 2 * precision * recall / (precision + recall)


def target_letter(target: Any, choices: list[str] | None) -> str | None:
    """The letter of a multiple-choice target: a 0-based index, a choice's text, an upper-case
    letter, or an index written as digits (in that order)."""
    if isinstance(target, int) and not isinstance(target, bool) and choices and 0 <= target < len(choices):
        return LETTERS[target]
    text = str(target).strip()
    if choices and text in choices:
        return LETTERS[choices.index(text)]
    if len(text) == 1 and text in LETTERS:
        return text
    if text.isdigit() and choices and int(text) < len(choices):
        return LETTERS[int(text)]
    return None


def score_one(scorer: ScorerSpec, answer: str, target: Any, choices: list[str] | None, pattern: str | None) -> float:
    """The score of one scorer (0 or 1, or graded for token_f1). ``pattern``: the regex
    scorer's pattern rendered for this sample."""
    kind = scorer.kind
    if kind == "exact_match":
        return float(normalise(answer, scorer.normalise) == normalise(str(target), scorer.normalise))
    if kind == "includes":
        return float(normalise(str(target), scorer.normalise) in normalise(answer, scorer.normalise))
    if kind == "regex":
        return float(re.search(pattern or "", answer) is not None)
    if kind == "numeric":
        got, want = first_number(answer), first_number(str(target))
        return float(got is not None and want is not None and math.isclose(got, want, rel_tol=scorer.rel_tol, abs_tol=scorer.abs_tol))
    if kind == "multiple_choice":
        want_letter = target_letter(target, choices)
        return float(want_letter is not None and answer.strip().upper() == want_letter)
    if kind == "token_f1":
        steps = scorer.normalise or ["lower", "strip_punctuation", "remove_articles", "collapse_whitespace"]
        return token_f1(normalise(answer, steps), normalise(str(target), steps))
    return _json_schema(answer, scorer.schema_)


def _json_schema(answer: str, schema: Any) -> float:
    """1 when ``answer`` is JSON that validates against the task's ``schema``."""
    try:
        instance = json.loads(answer)
    except (ValueError, RecursionError):
        return 0.0
    return float(schema_errors(instance, schema) is None)


def schema_errors(instance: Any, schema: Any) -> str | None:
    """``None`` when ``instance`` validates against ``schema``, else the first error's
    message (at most 200 characters); the validator matches patterns in linear time and
    follows no reference out of the schema. The validator of a schema is built (and the
    schema checked) once: a judge's verdicts are read against one schema each."""
    import jsonschema
    from referencing.exceptions import Unresolvable

    try:
        key = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        key = None
    try:
        validator = _validator(key) if key is not None else _build_validator(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    except (Unresolvable, RecursionError) as exc:
        return type(exc).__name__
    return None if error is None else error.message[:200]


def _build_validator(schema: Any) -> Any:
    """A validator of ``schema`` (checked first, as :func:`jsonschema.validate` does) that
    matches patterns in linear time and retrieves no reference."""
    from jsonschema.validators import validator_for
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str) -> Any:
        raise NoSuchResource(ref=uri)

    cls = linear_time_validator(validator_for(schema))
    cls.check_schema(schema)
    return cls(schema, registry=Registry(retrieve=refuse))


@functools.lru_cache(maxsize=64)
def _validator(key: str) -> Any:
    return _build_validator(json.loads(key))
