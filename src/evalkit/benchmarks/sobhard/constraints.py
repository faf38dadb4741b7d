"""The 31 SOBHard constraints (spec §8) and the per-answer scoring context.

Each constraint has an id, a layer (``pack``, ``syn``, ``val``, ``family``), an
applicability predicate and a check returning ``(passed, detail)``. Registry order is the
order of ``failed_constraints`` (§8). A predicate that raises makes the constraint not
applicable; a check that raises fails with the exception as detail — a broken check never
aborts a run (§8 general rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from evalkit.benchmarks.sobhard.compare import Mismatch, compare, summarize
from evalkit.benchmarks.sobhard.normalize import Extraction, extract_blocks, normalize_answer, select_body
from evalkit.benchmarks.sobhard.operations import (
    ALLOWED_KEYWORDS,
    apply_diff,
    diff_documents,
    infer_schema,
    join_records,
    leaves_detail,
    reordered_lists,
    render_template,
    replay_patch,
    required_lists,
    scalar_leaves,
    schema_keywords,
    template_records,
)
from evalkit.benchmarks.sobhard.readers import TYPELESS, ParseError, read_target
from evalkit.benchmarks.sobhard.rules import check_program

#: families whose program is graded by the transform constraints (§8 #14)
PROGRAM_FAMILIES = frozenset({"transform", "repair", "extract", "merge", "patch"})
_ABSENT = object()


@dataclass
class Question:
    """What the scorer needs of one graded row, decoded once.

    ``family`` is ``categories.family``; ``work_family`` is the family whose constraints
    grade it (``task_meta.turn_family`` for session rows). ``gold`` is the reference parsed
    with the target reader (§1.2, §13.9).
    """

    id: str
    family: str
    work_family: str
    difficulty: str
    target: str
    fence_tag: str
    task_meta: dict[str, Any]
    checks: dict[str, Any]
    gold: Any
    meta_turn_index: int | None = None

    @property
    def coerce(self) -> bool:
        return self.target in TYPELESS

    def has(self, key: str) -> bool:
        return self.get(key) is not _ABSENT

    def get(self, key: str) -> Any:
        if key == "source":
            if "source" in self.checks:
                return self.checks["source"]
            return self.checks.get("source_canonical", _ABSENT)
        return self.checks.get(key, _ABSENT)

    @property
    def base(self) -> Any:
        """``checks.derived`` if present, else ``checks.source`` (§8 notation)."""
        derived = self.get("derived")
        return derived if derived is not _ABSENT else self.get("source")

    def gate_open(self, cid: str) -> bool:
        return (self.checks.get("gates") or {}).get(cid, True) is not False

    @property
    def program(self) -> list[dict[str, Any]]:
        return list(self.task_meta.get("program") or [])

    @property
    def turn_index(self) -> int:
        """``task_meta.session.turn_index`` [O], else ``meta.turn_index``; 0 outside sessions."""
        session = self.task_meta.get("session") or {}
        return int(session.get("turn_index") or self.meta_turn_index or 0)


@dataclass
class Context:
    """One answer being scored: normalised text, blocks, parsed body, cached comparisons."""

    q: Question
    raw: str | None
    pairing: str = "sequential"
    strict_json: bool = False
    grammar: str = "python_float"
    tolerant_leaves: bool = False
    text: str = ""
    ex: Extraction = field(default_factory=Extraction)
    body: str = ""
    parsed: Any = None
    parse_ok: bool = False
    parse_error: str | None = None
    _gold_mm: list[Mismatch] | None = None

    def __post_init__(self) -> None:
        self.text = normalize_answer(self.raw, self.pairing)
        self.ex = extract_blocks(self.text, self.pairing)
        self.body = select_body(self.ex, self.q.fence_tag, self.text).strip()
        try:
            self.parsed = read_target(self.q.target, self.body, self.strict_json)
            self.parse_ok = True
        except ParseError as exc:
            self.parse_error = str(exc)

    @property
    def answer(self) -> Any:
        """The parsed answer as compared: for schema_gen a top-level ``$schema`` is removed
        before every comparison (§8 general rules, §13.1)."""
        if self.q.work_family == "schema_gen" and isinstance(self.parsed, dict) and "$schema" in self.parsed:
            return {k: v for k, v in self.parsed.items() if k != "$schema"}
        return self.parsed

    @property
    def has_gold(self) -> bool:
        return self.q.gold is not _ABSENT

    def cmp(self, expected: Any, coerce: bool | None = None) -> list[Mismatch]:
        return compare(self.answer, expected, self.q.coerce if coerce is None else coerce, self.grammar)

    def gold_mismatches(self) -> list[Mismatch]:
        if self._gold_mm is None:
            self._gold_mm = self.cmp(self.q.gold)
        return self._gold_mm


Check = Callable[[Context], "tuple[bool, str | None]"]


@dataclass(frozen=True)
class Constraint:
    id: str
    layer: str
    applies: Callable[[Context], bool]
    check: Check


@dataclass
class Result:
    id: str
    layer: str
    passed: bool
    detail: str | None = None


def _ok(passed: bool, detail: str | None = None) -> tuple[bool, str | None]:
    return passed, (None if passed else detail)


def _empty_mm(mm: list[Mismatch]) -> tuple[bool, str | None]:
    return _ok(not mm, summarize(mm))


# ---- layer 1: packaging (§4.1) --------------------------------------------------------
def _fence_present(c: Context) -> tuple[bool, str | None]:
    return _ok(bool(c.ex.blocks), "no complete fenced block" + (" (unclosed fence)" if c.ex.unclosed else ""))


def _fence_exactly_one(c: Context) -> tuple[bool, str | None]:
    n = len(c.ex.blocks)
    return _ok(n == 1 and not c.ex.unclosed, f"{n} complete block(s)" + (", one unclosed fence" if c.ex.unclosed else ""))


def _fence_tag(c: Context) -> tuple[bool, str | None]:
    tags = [t for t, _ in c.ex.blocks]
    return _ok(all(t == c.q.fence_tag for t in tags), f"tags {tags}, expected {c.q.fence_tag!r}")


def _nothing_outside(c: Context) -> tuple[bool, str | None]:
    return _ok(not c.ex.outside, f"text outside the fence: {c.ex.outside[:80]!r}")


# ---- layer 2/3: target parse and values (§5, §6) --------------------------------------
def _parses(c: Context) -> tuple[bool, str | None]:
    return _ok(c.parse_ok, c.parse_error)


def _gold_kind(kind: str) -> Check:
    def check(c: Context) -> tuple[bool, str | None]:
        return _empty_mm([m for m in c.gold_mismatches() if m.kind == kind])

    return check


# ---- family constraints (§8) ----------------------------------------------------------
def _fam(*families: str) -> Callable[[Context], bool]:
    return lambda c: c.q.work_family in families


def _lossless(c: Context) -> tuple[bool, str | None]:
    return _empty_mm(c.cmp(c.q.get("source"), coerce=True))


def _keys_exact(c: Context) -> tuple[bool, str | None]:
    paths = c.q.task_meta.get("paths") or []
    got = set(c.answer)
    want = set(paths)
    extra = sorted(map(str, got - want))[:5]
    missing = sorted(map(str, want - got))[:5]
    return _ok(got == want, f"extra keys {extra}, missing {missing}")


def _is_object(c: Context) -> tuple[bool, str | None]:
    return _ok(isinstance(c.answer, dict), f"answer is a {type(c.answer).__name__}, not an object")


def _absent_null(c: Context) -> tuple[bool, str | None]:
    bad = [p for p in c.q.task_meta.get("absent") or [] if p not in c.answer or c.answer[p] is not None]
    return _ok(not bad, f"absent paths not null: {bad[:5]}")


def _data_intact(c: Context) -> tuple[bool, str | None]:
    return _empty_mm(c.cmp(c.q.base, coerce=True))


def _applies_program(c: Context) -> bool:
    return c.q.work_family in PROGRAM_FAMILIES and bool(c.q.program) and c.parse_ok


def _rule_applied(c: Context) -> tuple[bool, str | None]:
    reason = check_program(c.answer, c.q.program)
    return _ok(reason is None, reason)


def _list_order(c: Context) -> tuple[bool, str | None]:
    paths = reordered_lists(c.answer, c.q.gold)
    return _ok(not paths, f"lists reordered at {paths[:5]}")


def _values_unchanged(c: Context) -> tuple[bool, str | None]:
    got = scalar_leaves(c.answer, c.tolerant_leaves)
    want = scalar_leaves(c.q.gold, c.tolerant_leaves)
    if got == want:
        return True, None
    return False, leaves_detail(got, want)


def _template_count(c: Context) -> tuple[bool, str | None]:
    recs = c.q.base
    n = 1 if isinstance(recs, dict) else len(recs)
    a = c.answer
    if not isinstance(a, list) or not all(isinstance(s, str) for s in a):
        return False, "answer is not a list of strings"
    return _ok(len(a) == n, f"{len(a)} strings for {n} records")


def _no_placeholder(c: Context) -> tuple[bool, str | None]:
    left = [i for i, s in enumerate(c.answer) if isinstance(s, str) and "${" in s]
    return _ok(not left, f"'${{' left in element(s) {left[:5]}")


def _rendered_exact(c: Context) -> tuple[bool, str | None]:
    template = c.q.get("source_b")
    if not isinstance(template, str):
        return False, "checks.source_b is not a template string"
    expected = [render_template(template, r) for r in template_records(c.q.base)]
    return _empty_mm(c.cmp(expected))


def _applydiff(c: Context) -> tuple[bool, str | None]:
    derived = c.q.get("derived")
    expected = derived if derived is not _ABSENT else apply_diff(c.q.get("source"), c.q.get("source_b"))
    return _empty_mm(c.cmp(expected))


def _patch(c: Context) -> tuple[bool, str | None]:
    derived = c.q.get("derived")
    expected = derived if derived is not _ABSENT else replay_patch(c.q.get("source"), c.q.task_meta["ops"])
    return _empty_mm(c.cmp(expected))


def _merge_expected(c: Context) -> Any:
    derived = c.q.get("derived")
    if derived is not _ABSENT:
        return derived
    return join_records(c.q.get("source"), c.q.get("source_b"), c.q.task_meta["join"])


def _merge_exact(c: Context) -> tuple[bool, str | None]:
    return _empty_mm(c.cmp(_merge_expected(c)))


def _merge_count(c: Context) -> tuple[bool, str | None]:
    expected = _merge_expected(c)
    if not isinstance(c.answer, list):
        return False, "answer is not a list"
    return _ok(len(c.answer) == len(expected), f"{len(c.answer)} records, expected {len(expected)}")


def _diff_pair(c: Context) -> tuple[bool, str | None]:
    return _empty_mm(c.cmp(diff_documents(c.q.get("source"), c.q.get("source_b")), coerce=False))


def _diff_form(c: Context) -> tuple[bool, str | None]:
    a = c.answer
    keys = list(a) if isinstance(a, dict) else None
    return _ok(keys == ["added", "removed", "changed"], f"top level {keys if keys is not None else type(a).__name__}")


def _diff_sorted(c: Context) -> tuple[bool, str | None]:
    for name in ("added", "removed", "changed"):
        section = c.answer.get(name)
        if isinstance(section, dict):
            keys = [str(k) for k in section]
            for a, b in zip(keys, keys[1:]):
                if a > b:
                    return False, f"{name}: {a!r} before {b!r}"
    return True, None


def _required_sorted(c: Context) -> tuple[bool, str | None]:
    for req in required_lists(c.answer):
        text = [str(x) for x in req]
        if text != sorted(text):
            return False, f"required not in code-point order: {text[:6]}"
    return True, None


def _refuse_retrieval(uri: str) -> Any:
    """The ``retrieve`` of the registry a model-written schema is validated with: every
    reference outside the schema itself (``file:``, ``http(s):``, a relative URI against an
    ``$id``, a URN ...) is refused, so model text never reaches the file system or the
    network (hardening of spec §8 #28; the validator's default would fetch remote URIs)."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)


def _validates(c: Context) -> tuple[bool, str | None]:
    """#28: the answer, used as a JSON Schema, validates ``base``. The dialect comes from the
    schema's ``$schema`` (the validator's default draft otherwise, spec §8.4); references
    resolve only inside the schema (and to the validator's bundled meta-schemas).

    Hardening (issue 17): the validator class is the dialect's, extended so that
    ``pattern``, ``patternProperties`` (and the ``additionalProperties`` /
    ``unevaluatedProperties`` that consult them) match in linear time where RE2 gives
    Python's answer (:mod:`evalkit.benchmarks.sobhard.patterns`); a catastrophic pattern
    such as ``(.|.|.|.)*#`` no longer runs for hours."""
    import jsonschema
    from jsonschema.validators import validator_for
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    from evalkit.benchmarks.sobhard.patterns import linear_time_validator

    schema = c.parsed
    if not isinstance(schema, (dict, bool)):
        return False, f"answer is a {type(schema).__name__}, not a schema"
    try:
        cls = linear_time_validator(validator_for(schema))
        jsonschema.validate(instance=c.q.base, schema=schema, cls=cls, registry=Registry(retrieve=_refuse_retrieval))
    except jsonschema.ValidationError as exc:
        return False, f"does not validate the document: {exc.message[:200]} at {list(exc.absolute_path)[:6]}"
    except jsonschema.SchemaError as exc:
        return False, f"not a valid JSON Schema: {exc.message[:200]}"
    except Unresolvable as exc:
        ref = str(getattr(exc, "ref", "") or exc)
        return False, f"unresolvable $ref {ref[:120]!r}: only references inside the schema are followed"
    return True, None


def _type_mapping(c: Context) -> tuple[bool, str | None]:
    kind = c.q.task_meta.get("schema_kind") or "minimal"
    return _empty_mm(c.cmp(infer_schema(c.q.base, kind), coerce=False))


def _no_extra_keywords(c: Context) -> tuple[bool, str | None]:
    kind = c.q.task_meta.get("schema_kind") or "minimal"
    extra = sorted(schema_keywords(c.parsed) - ALLOWED_KEYWORDS[kind])
    return _ok(not extra, f"keywords not allowed for {kind}: {extra}")


def _no_restatement(c: Context) -> tuple[bool, str | None]:
    prev = c.q.get("prev_state")
    source = c.q.get("source")
    states = [("the previous state", source if prev is _ABSENT else prev)]
    if source is not _ABSENT:
        states.append(("the state the turn starts from", source))
    for name, state in states:
        if not c.cmp(state):
            return False, f"the answer equals {name}"
    return True, None


def _parsed(c: Context) -> bool:
    return c.parse_ok


def _pg(c: Context) -> bool:
    return c.parse_ok and c.has_gold


R = Constraint
CONSTRAINTS: tuple[Constraint, ...] = (
    R("pack.fence_present", "pack", lambda c: True, _fence_present),
    R("pack.fence_exactly_one", "pack", lambda c: True, _fence_exactly_one),
    R("pack.fence_tag_correct", "pack", lambda c: bool(c.ex.blocks), _fence_tag),
    R("pack.nothing_outside_fence", "pack", lambda c: True, _nothing_outside),
    R("syn.parses_target", "syn", lambda c: True, _parses),
    R("val.structure_match", "val", _pg, _gold_kind("structure")),
    R("val.numeric_within_tol", "val", _pg, _gold_kind("numeric")),
    R("val.strings_byte_exact", "val", _pg, _gold_kind("string")),
    R("convert.lossless_vs_source", "family",
      lambda c: _fam("convert")(c) and c.parse_ok and c.q.has("source") and c.q.gate_open("convert.lossless_vs_source"), _lossless),
    R("extract.keys_exact", "family", lambda c: _fam("extract")(c) and c.parse_ok and isinstance(c.answer, dict), _keys_exact),
    R("extract.is_object", "family", lambda c: _fam("extract")(c) and c.parse_ok, _is_object),
    R("extract.absent_paths_null", "family",
      lambda c: _fam("extract")(c) and c.parse_ok and isinstance(c.answer, dict) and bool(c.q.task_meta.get("absent")), _absent_null),
    R("repair.data_intact", "family",
      lambda c: _fam("repair")(c) and c.parse_ok and c.q.base is not _ABSENT and c.q.gate_open("repair.data_intact"), _data_intact),
    R("transform.rule_applied", "family", _applies_program, _rule_applied),
    R("transform.list_order_preserved", "family", lambda c: _applies_program(c) and c.has_gold, _list_order),
    R("transform.values_unchanged", "family", lambda c: _applies_program(c) and c.has_gold, _values_unchanged),
    R("template.record_count", "family", lambda c: _fam("template")(c) and c.parse_ok and c.q.base is not _ABSENT, _template_count),
    R("template.no_placeholder_left", "family",
      lambda c: _fam("template")(c) and c.parse_ok and isinstance(c.answer, list) and not c.q.task_meta.get("has_escape"), _no_placeholder),
    R("template.rendered_exact", "family",
      lambda c: _fam("template")(c) and c.parse_ok and c.q.has("source_b") and c.q.base is not _ABSENT, _rendered_exact),
    R("applydiff.result_exact", "family",
      lambda c: _fam("apply_diff")(c) and c.parse_ok and c.q.has("source") and c.q.has("source_b"), _applydiff),
    R("patch.ops_applied", "family",
      lambda c: _fam("patch")(c) and c.parse_ok and c.q.has("source") and bool(c.q.task_meta.get("ops")), _patch),
    R("merge.join_exact", "family",
      lambda c: _fam("merge")(c) and c.parse_ok and c.q.has("source") and c.q.has("source_b") and bool(c.q.task_meta.get("join")), _merge_exact),
    R("merge.record_count", "family",
      lambda c: _fam("merge")(c) and c.parse_ok and c.q.has("source") and c.q.has("source_b") and bool(c.q.task_meta.get("join")), _merge_count),
    R("diff.matches_pair", "family", lambda c: _fam("diff")(c) and c.parse_ok and c.q.has("source") and c.q.has("source_b"), _diff_pair),
    R("diff.top_level_form", "family", lambda c: _fam("diff")(c) and c.parse_ok, _diff_form),
    R("diff.sections_sorted", "family", lambda c: _fam("diff")(c) and c.parse_ok and isinstance(c.answer, dict), _diff_sorted),
    R("schema.required_sorted", "family", lambda c: _fam("schema_gen")(c) and c.parse_ok, _required_sorted),
    R("schema.validates_source", "family",
      lambda c: _fam("schema_gen")(c) and c.parse_ok and c.q.base is not _ABSENT and c.q.gate_open("schema.validates_source"), _validates),
    R("schema.type_mapping_exact", "family", lambda c: _fam("schema_gen")(c) and c.parse_ok and c.q.base is not _ABSENT, _type_mapping),
    R("schema.no_extra_keywords", "family", lambda c: _fam("schema_gen")(c) and c.parse_ok, _no_extra_keywords),
    R("session.no_restatement", "family",
      lambda c: c.q.family == "session" and c.parse_ok and c.q.turn_index > 1, _no_restatement),
)  # fmt: skip
CONSTRAINT_IDS = tuple(c.id for c in CONSTRAINTS)
LAYERS = {c.id: c.layer for c in CONSTRAINTS}


def evaluate(ctx: Context, registry: tuple[Constraint, ...] = CONSTRAINTS) -> list[Result]:
    """Every applicable constraint's verdict, in registry order. Never raises."""
    out: list[Result] = []
    for con in registry:
        try:
            applicable = bool(con.applies(ctx))
        except Exception:  # noqa: BLE001 - a predicate that raises: not applicable (§8)
            applicable = False
        if not applicable:
            continue
        try:
            passed, detail = con.check(ctx)
        except Exception as exc:  # noqa: BLE001 - a check that raises: failed, exception as detail (§8)
            passed, detail = False, f"check raised {type(exc).__name__}: {exc}"
        out.append(Result(con.id, con.layer, bool(passed), detail))
    return out
