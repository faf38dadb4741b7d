"""Property-based tests (hypothesis): arbitrary and near-valid text fed to every answer
parser and checker (ACEBench decoder, executor and trajectory scorer; SOBHard readers,
normalisation and constraints; KE parser and scorer) never raises out of scoring, and the
scores stay in their documented ranges.

Real samples come from the shared fixtures (``tests.conftest.SHARED_DIR / "data"``),
loaded once per module. ``@example`` rows pin the inputs that found bugs.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.agent.dispatch import (
    Call,
    ExecutionError,
    Undecodable,
    decode_message,
    routes_to_executor,
)
from evalkit.benchmarks.acebench.categories import family
from evalkit.benchmarks.acebench.decoder import DecodeError, decode_calls
from evalkit.benchmarks.acebench.jsonsafe import json_safe
from evalkit.benchmarks.ke import KE
from evalkit.benchmarks.ke.parser import parse_answer, step_index
from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX
from evalkit.benchmarks.ke.settings import KESettings
from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.benchmarks.sobhard.benchmark import fenced
from evalkit.benchmarks.sobhard.constraints import CONSTRAINT_IDS
from evalkit.benchmarks.sobhard.normalize import extract_blocks, normalize_answer, select_body
from evalkit.benchmarks.sobhard.readers import READERS, ParseError, read_target
from evalkit.types import Trajectory
from tests.conftest import SHARED_DIR

DATA = SHARED_DIR / "data"
INTERNAL = "internal scoring error"


def _settings(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"shared test data not found at {path}; set EVALKIT_SHARED_DIR")
    return path


# ------------------------------------------------------------------------------------------
# data, loaded once per module
# ------------------------------------------------------------------------------------------
class _Ace:
    def __init__(self) -> None:
        self.normal: list[tuple[AceBench, Any]] = []
        self.special: list[tuple[AceBench, Any]] = []
        self.agent: list[tuple[AceBench, Any]] = []
        self.normal_refs: list[tuple[AceBench, Any, str]] = []  # references that score 1
        self.special_refs: list[tuple[AceBench, Any, str]] = []
        for language in ("en", "zh"):
            bench = AceBench(AceBenchSettings(data_dir=_require(DATA / "acebench"), language=language))
            for sample in bench.load():
                fam = family(sample.subset)
                getattr(self, fam).append((bench, sample))
                if fam == "agent":
                    continue
                ref = bench.reference_output(sample)
                if bench.score(sample, ref).scores["accuracy"] == 1.0:
                    getattr(self, f"{fam}_refs").append((bench, sample, ref))
        self.call_names = sorted({f["name"] for _, s in self.normal for f in s.data["prompt"]["function"]})
        self.param_names = sorted(
            {p for _, s in self.normal for f in s.data["prompt"]["function"] for p in (f.get("parameters") or {}).get("properties") or {}}
        )


@functools.cache
def ace() -> _Ace:
    return _Ace()


@functools.cache
def sob() -> tuple[SOBHard, list[Any], list[str]]:
    bench = SOBHard(SOBHardSettings(data_dir=_require(DATA / "sobhard")))
    samples = bench.load()
    answers = []
    path = DATA / "sobhard" / "answers.jsonl"
    if path.is_file():
        answers = [json.loads(line)["answer"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return bench, samples, [a for a in answers if isinstance(a, str)]


@functools.cache
def ke() -> tuple[KE, list[Any]]:
    d = _require(DATA / "ke")
    bench = KE(KESettings(pilot_path=d / "pilot.jsonl", icl_path=d / "icl_examples.jsonl"))
    return bench, bench.load()


# ------------------------------------------------------------------------------------------
# generic strategies
# ------------------------------------------------------------------------------------------
#: surrogate-free unicode (hypothesis' default alphabet excludes category Cs)
any_text = st.text(max_size=300)
SYNTAX = "[](){}<>'\"`~=,:;.-+*/\\#!$%^&|_ \t\n\r0123456789abcxyzTFN"
syntax_text = st.text(alphabet=st.sampled_from(SYNTAX) | st.characters(), max_size=200)
#: characters ``str.split()`` treats as whitespace (the ACEBench decoder deletes them all)
WHITESPACE = [chr(c) for c in range(0x3001) if chr(c).isspace()]
whitespace = st.text(alphabet=st.sampled_from(WHITESPACE), max_size=8)
identifier = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)

#: Python-ish argument values: literals plus the odd constructs the decoder must refuse or bound
ODD_VALUES = [
    "...", "-'a'", "+5", "-5", "~1", "not 1", "1/0", "2**99999", "9**5000", "'a'*10**9", "[1]*10**9",
    "1<<100000", "'%*d'%(5,1)", "'%99999d'%1", "a[1:2]", "f()", "g(x=1)", "g(**k)", "{**d}", "(1,)", "{1,2}",
    "lambda:0", "x if y else z", "f'{x}'", "b'x'", "1j", "-1j", "None", "True", "inf", "float('nan')",
    "{'a': {'b': {}}}", "{}", "{'a': 1}", "[[[[[]]]]]", "'''x'''", "r'\\x'", "0x" + "f" * 40, "1e999", "a.b.c",
    "(yield)", "await x", "*a", "x:=1", "[i for i in x]", "1 if 2 else 3", "'" + "a" * 50,
]
py_value = st.one_of(
    json_values.map(repr),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.sampled_from(ODD_VALUES),
    identifier,
)


@st.composite
def call_text(draw, names: st.SearchStrategy[str] | None = None) -> str:
    name = draw(names if names is not None else identifier)
    if draw(st.integers(0, 9)) == 0:
        name = f"{draw(identifier)}.{name}"
    args = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 9)) == 0:
            args.append(draw(py_value))  # a positional argument
        else:
            key = draw(st.deferred(lambda: st.sampled_from(ace().param_names)) | identifier)
            args.append(f"{key}={draw(py_value)}")
    return f"{name}({', '.join(args)})"


@st.composite
def call_list(draw) -> str:
    names = st.deferred(lambda: st.sampled_from(ace().call_names)) | identifier
    calls = draw(st.lists(call_text(names) | py_value, max_size=4))
    open_, close = draw(st.sampled_from([("[", "]"), ("(", ",)"), ("{", "}"), ("[", ""), ("", "]"), ("", "")]))
    body = open_ + ", ".join(calls) + close
    prefix = draw(st.sampled_from(["", " ", "\n", "</think>", "<think>x</think>\n", "```python\n", "Answer: "]))
    suffix = draw(st.sampled_from(["", "\n", " ", "\n```", "</think>", "."]))
    return prefix + body + suffix


@st.composite
def mutate(draw, base: str) -> str:
    """``base`` with a few random insertions and deletions."""
    s = base
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(s)))
        if s and draw(st.booleans()):
            j = draw(st.integers(i, min(len(s), i + 6)))
            s = s[:i] + s[j:]
        else:
            s = s[:i] + draw(st.text(alphabet=st.sampled_from(SYNTAX) | st.characters(), max_size=4)) + s[i:]
    return s


def deep(n: int, kind: str) -> str:
    return {"list": "[" * n, "obj": '{"a":' * n, "toml": "a = " + "[" * n, "yaml": "- " * n + "x"}[kind]


deep_nesting = st.builds(deep, st.integers(900, 1150), st.sampled_from(["list", "obj", "toml", "yaml"]))


def assert_json(value: Any) -> None:
    """``parsed`` must survive the journal's ``json.dumps`` (records contract)."""
    json.dumps(value, ensure_ascii=False, default=str)


def test_fixture_samples_loaded() -> None:
    """The strategies draw from non-empty pools (else the properties would test nothing)."""
    a = ace()
    assert a.normal and a.special and a.agent and a.call_names and a.param_names
    assert len(a.normal_refs) > len(a.normal) // 2 and len(a.special_refs) > len(a.special) // 2
    assert sob()[1] and sob()[2] and ke()[1]


# ------------------------------------------------------------------------------------------
# ACEBench
# ------------------------------------------------------------------------------------------
def ace_normal_text():
    refs = st.deferred(lambda: st.sampled_from([r for _, _, r in ace().normal_refs]))
    return st.one_of(any_text, syntax_text, call_list(), refs.flatmap(mutate), deep_nesting)


@pytest.mark.slow
@_settings(400)
@given(text=ace_normal_text())
@example(text="[f(a=9**5000)]")
@example(text="[f(a=" + "[" * 3000 + ")]")
@example(text="[f(a='%*d'%(99999999,1))]")
def test_ace_decoder_raises_only_decode_error(text: str) -> None:
    try:
        calls = decode_calls(text)
    except DecodeError:
        return
    assert isinstance(calls, list)
    for call in calls:
        assert isinstance(call, dict) and len(call) == 1
        assert isinstance(next(iter(call)), str) and isinstance(next(iter(call.values())), dict)
    assert_json(json_safe(calls))
    assert decode_calls(text) == calls or repr(decode_calls(text)) == repr(calls)  # NaN != NaN


@_settings(400)
@given(pick=st.deferred(lambda: st.sampled_from(ace().normal)), text=ace_normal_text())
@example(pick=None, text="[f(a=9**5000)]")
def test_ace_normal_score_never_raises(pick, text: str) -> None:
    bench, sample = pick if pick is not None else ace().normal_refs[0][:2]
    if pick is None:  # pinned: the sample's own function with a huge int argument
        text = text.replace("f(", sample.data["prompt"]["function"][0]["name"] + "(")
    scored = bench.score(sample, text)
    assert scored.scores["accuracy"] in (0.0, 1.0)
    assert not (scored.detail or "").startswith(INTERNAL), scored.detail
    assert (scored.status == "format_error") == (scored.parsed is None)
    assert_json(scored.parsed)
    assert bench.score(sample, text) == scored


@_settings(200)
@given(pick=st.deferred(lambda: st.sampled_from(ace().normal_refs)), data=st.data())
def test_ace_normal_reference_survives_whitespace(pick, data) -> None:
    """Spec §3.1: every whitespace character is deleted before parsing, so whitespace
    anywhere in the (whitespace-escaped) reference rendering is harmless; so is a reasoning
    block ending in ``</think>`` before it."""
    bench, sample, ref = pick
    text = ref
    for _ in range(data.draw(st.integers(1, 5))):
        i = data.draw(st.integers(0, len(text)))
        text = text[:i] + data.draw(whitespace) + text[i:]
    text += data.draw(st.sampled_from(["\n", "\r\n", " \n\t", ""]))
    assert bench.score(sample, text).scores["accuracy"] == 1.0, text
    think = data.draw(st.text(max_size=30).filter(lambda t: "</think>" not in t))
    assert bench.score(sample, think + "</think>" + text).scores["accuracy"] == 1.0


@_settings(200)
@given(
    pick=st.deferred(lambda: st.sampled_from(ace().special)),
    text=st.one_of(any_text, syntax_text, st.deferred(lambda: st.sampled_from([r for _, _, r in ace().special_refs])).flatmap(mutate)),
)
def test_ace_special_score_never_raises(pick, text: str) -> None:
    bench, sample = pick
    scored = bench.score(sample, text)
    assert scored.scores["accuracy"] in (0.0, 1.0)
    assert not (scored.detail or "").startswith(INTERNAL), scored.detail
    assert bench.score(sample, text) == scored


@_settings(200)
@given(pick=st.deferred(lambda: st.sampled_from(ace().special_refs)), before=any_text, after=any_text)
def test_ace_special_reference_superstring_passes(pick, before: str, after: str) -> None:
    """Spec §4.3: special checks are substring tests, so text around a passing answer
    (with no ``</think>`` that would cut it) keeps it passing; whitespace included."""
    bench, sample, ref = pick
    text = before + ref + after
    if "</think>" in text:
        return
    assert bench.score(sample, text).scores["accuracy"] == 1.0
    assert bench.score(sample, ref + "\n  \t").scores["accuracy"] == 1.0


@_settings(400)
@given(text=st.one_of(any_text, syntax_text, call_list(), deep_nesting), strict=st.booleans())
@example(text="[f(a=9**5000)]", strict=True)
@example(text="f(a={'b': 1})", strict=False)
def test_ace_agent_executor_decoder(text: str, strict: bool) -> None:
    assert routes_to_executor(text) in (True, False)
    try:
        calls = decode_message(text, strict)
    except Undecodable:
        return
    for call in calls:
        assert isinstance(call, Call) and isinstance(call.name, str)
        assert_json(call.to_dict())
        try:
            kwargs = call.fresh_kwargs()
        except ExecutionError:
            continue
        assert set(kwargs) == set(call.arguments)


@st.composite
def trajectories(draw) -> Any:
    _, sample = draw(st.deferred(lambda: st.sampled_from(ace().agent)))
    answer = sample.data["answer"]
    gt = answer.get("ground_truth")
    end_state = draw(st.one_of(
        json_values,
        st.just(gt),
        st.lists(json_values, max_size=4),
        st.just(gt).map(lambda g: [dict(e) for e in g] if isinstance(g, list) else g).flatmap(
            lambda g: st.permutations(g) if isinstance(g, list) else st.just(g)
        ),
        st.just(gt).map(lambda g: list(g[:-1]) if isinstance(g, list) else g),
        st.just(gt).map(lambda g: [{k: {"x": 1} for k in e} if isinstance(e, dict) else e for e in g] if isinstance(g, list) else g),
    ))  # fmt: skip
    stones = answer.get("mile_stone") or []
    trace = draw(st.one_of(json_values, st.just(stones), st.lists(st.sampled_from(stones) | st.text(max_size=20), max_size=6) if stones else st.just([])))
    data = draw(st.one_of(
        st.fixed_dictionaries({"end_state": st.just(end_state), "process_trace": st.just(trace)}),
        st.dictionaries(st.sampled_from(["end_state", "process_trace", "x"]), json_values, max_size=3),
        json_values,
    ))  # fmt: skip
    traj = draw(st.one_of(st.just({"data": data}), st.dictionaries(st.text(max_size=5), json_values, max_size=2), st.none(), st.just({})))
    return sample, traj


@_settings(300)
@given(case=trajectories())
def test_ace_score_sample_of_any_trajectory_never_raises(case) -> None:
    sample, traj = case
    bench = ace().agent[0][0] if sample.id.startswith("en/") else next(b for b, s in ace().agent if s.id.startswith("zh/"))
    scored = bench.score_sample(sample, Trajectory.from_dict(traj))
    acc, proc = scored.scores["accuracy"], scored.scores["process_acc"]
    assert acc in (0.0, 1.0) and 0.0 <= proc <= 1.0
    if acc == 1.0:
        assert proc == 1.0
    assert_json(scored.parsed)
    if isinstance(traj, dict) and isinstance(traj.get("data"), dict):
        assert not (scored.detail or "").startswith(INTERNAL), scored.detail
        if traj["data"].get("end_state") == sample.data["answer"].get("ground_truth") and traj["data"]["end_state"]:
            assert acc == 1.0


# ------------------------------------------------------------------------------------------
# SOBHard
# ------------------------------------------------------------------------------------------
FENCE_TAG = st.sampled_from(["", "json", "jsonl", "yaml", "toml", "properties", "sql", "python", "JSON", "c++"])


@st.composite
def fence_block(draw, body: st.SearchStrategy[str]) -> str:
    char = draw(st.sampled_from("`~"))
    n = draw(st.integers(3, 6))
    close = char * draw(st.integers(2, 7)) if draw(st.integers(0, 4)) else ""
    indent = draw(st.sampled_from(["", " ", "  \t"]))
    return f"{indent}{char * n}{draw(FENCE_TAG)}\n{draw(body)}\n{close}"


fragments = st.one_of(
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    json_values.map(lambda v: json.dumps(v, indent=2)),
    st.lists(json_values, max_size=4).map(lambda vs: "\n".join(json.dumps(v) for v in vs)),
    st.dictionaries(identifier, st.text(max_size=10) | st.integers().map(str), max_size=4).map(
        lambda d: "\n".join(f"{k}: {v}" for k, v in d.items())
    ),
    st.dictionaries(identifier, json_values, max_size=3).map(lambda d: "\n".join(f"{k} = {json.dumps(v)}" for k, v in d.items())),
    st.dictionaries(identifier, st.text(max_size=10), min_size=1, max_size=3).map(
        lambda d: f"INSERT INTO records ({', '.join(d)}) VALUES ({', '.join(repr(v) for v in d.values())});"
    ),
    st.sampled_from(["a: 0b" + "1" * 20000, "a = " + "1" * 5000, "a = 0x" + "f" * 5000, "a: !!python/object:os.system x",
                     "- &a [*a]", "a: 1e999", "? [a]\n: 1", "{}", "[]", "null", "---\n...", "%YAML 1.1\n---\nx"]),
    deep_nesting,
    syntax_text,
)  # fmt: skip


@_settings(500)
@given(target=st.sampled_from(sorted(READERS)), body=st.one_of(any_text, fragments), strict=st.booleans())
@example(target="json", body="[" * 3000, strict=False)
@example(target="jsonl", body='{"a":' * 3000, strict=True)
@example(target="toml", body="a = " + "[" * 3000, strict=False)
@example(target="toml", body="a = " + "1" * 5000, strict=False)
def test_sob_readers_raise_only_parse_error(target: str, body: str, strict: bool) -> None:
    try:
        read_target(target, body, strict)
    except ParseError:
        pass


@_settings(300)
@given(text=st.one_of(any_text, st.lists(st.one_of(fence_block(fragments), any_text, st.just("<think>x</think>")), max_size=4).map("\n".join)),
       pairing=st.sampled_from(["sequential", "commonmark"]))  # fmt: skip
def test_sob_normalization_never_raises(text: str, pairing: str) -> None:
    norm = normalize_answer(text, pairing)
    assert norm == norm.strip() and "\r" not in norm
    base = text.replace("\r", "").lstrip("\ufeff")
    assert normalize_answer("\ufeff" + base.replace("\n", "\r\n") + " \n", pairing) == normalize_answer(base, pairing)
    ex = extract_blocks(norm, pairing)
    assert isinstance(select_body(ex, "json", norm), str)


@_settings(300)
@given(tag=st.from_regex(r"[A-Za-z0-9_+\-]{0,8}", fullmatch=True), body=any_text)
def test_sob_fenced_round_trip(tag: str, body: str) -> None:
    """A body wrapped by ``fenced`` comes back as the only block under CommonMark pairing."""
    body = body.replace("\r", "")
    ex = extract_blocks(fenced(tag, body), "commonmark")
    assert ex.blocks == [(tag, body[:-1] if body.endswith("\n") else body)]
    assert not ex.unclosed and ex.outside == ""


def sob_text():
    answers = st.deferred(lambda: st.sampled_from(sob()[2]))
    return st.one_of(
        any_text,
        syntax_text,
        fragments,
        st.lists(st.one_of(fence_block(fragments), fragments, any_text), max_size=3).map("\n".join),
        answers,
        answers.flatmap(mutate),
        fence_block(st.just("[" * 1100)),
    )


@pytest.mark.slow
@_settings(400)
@given(pick=st.deferred(lambda: st.sampled_from(sob()[1])), text=sob_text())
@example(pick=None, text="```json\n" + "[" * 3000 + "\n```")
@example(pick=None, text="```yaml\na: 0b" + "1" * 20000 + "\n```")
@example(pick=None, text="```json\n" + "[" * 990 + "]" * 990 + "\n```")
def test_sob_score_never_raises(pick, text: str) -> None:
    bench, samples, _ = sob()
    targets = ("json", "yaml")
    if pick is None:  # pinned examples: every sample of the notation named in the fence
        picks = [s for s in samples if bench._questions[s.id].target in targets and text.startswith(f"```{bench._questions[s.id].target}")]
    else:
        picks = [pick]
    assert picks
    for sample in picks:
        scored = bench.score(sample, text)
        assert not (scored.detail or "").startswith(INTERNAL), scored.detail
        assert len(CONSTRAINT_IDS) == 31
        assert set(scored.failed_checks) <= set(CONSTRAINT_IDS)
        assert set(scored.checks) <= set(CONSTRAINT_IDS)
        assert scored.failed_checks == [cid for cid, ok in scored.checks.items() if not ok]
        for name, value in scored.scores.items():
            assert 0.0 <= value <= 1.0, (name, value)
            if name != "constraint_pass_rate":
                assert value in (0.0, 1.0)
        if scored.scores["sample_pass"] == 1.0:
            assert not scored.failed_checks and scored.checks
        assert (scored.status == "ok") == (scored.parsed is not None or scored.checks.get("syn.parses_target") is True)
        assert_json(scored.parsed)
        assert bench.score(sample, text) == scored


@_settings(150)
@given(pick=st.deferred(lambda: st.sampled_from(sob()[1])), lead=whitespace, trail=whitespace, crlf=st.booleans(), bom=st.booleans())
def test_sob_reference_survives_normalisation(pick, lead: str, trail: str, crlf: bool, bom: bool) -> None:
    """Spec §4: BOM, CRLF/CR line endings and surrounding whitespace are normalised away."""
    bench, _, _ = sob()
    ref = bench.reference_output(pick)
    text = ref.replace("\n", "\r\n") if crlf else ref
    text = ("\ufeff" if bom else "") + lead.lstrip("\ufeff") + text + trail
    base = bench.score(pick, ref)
    assert base.scores["sample_pass"] == 1.0
    assert bench.score(pick, text).scores == base.scores


#: pieces of Python regular expressions: Unicode classes, anchors, case folding, the
#: constructs RE2 lacks, and Cyrillic / odd case-folding characters
REGEX_ATOMS = [
    "a", "A", "k", "s", "я", "Я", "ё", "é", "ß", "\u0130", ".", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b", "\\B",
    "^", "$", "\\A", "\\Z", "[a-z]", "[^a-z]", "[\\w-]", "[^\\W\\d]", "[а-я]", "[^\\s]", "[\\u0130-\\u0131]", "#", "\\n",
    "(a)\\1", "(?=a)", "(?<!b)a", "a{2,3}", "a{1001}", "\\.", "[.]", "(?>a+)", "a++", "(?P<n>x)(?P=n)",
]  # fmt: skip
REGEX_SUBJECT = ["a", "A", "b", "k", "K", "s", "S", "z", "0", "9", "_", " ", "\t", "\n", "\r", "\x0b", "\x1c", ".", "-", "#",
                 "\u212a", "\u017f", "я", "Я", "ё", "٣", "\u2003", "\xa0", "\u0130", "\u0131", "é", "É", "ß", "\ud800"]  # fmt: skip


@st.composite
def python_regex(draw) -> str:
    def group(depth: int) -> str:
        parts = []
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.integers(0, 4)) == 0:
                inner = "|".join(group(depth + 1) for _ in range(draw(st.integers(1, 3))))
                parts.append("(" + inner + ")" + draw(st.sampled_from(["", "*", "+", "?", "{1,2}", "*?"])))
            else:
                parts.append(draw(st.sampled_from(REGEX_ATOMS)) + draw(st.sampled_from(["", "", "*", "+", "?"])))
        return "".join(parts)

    return draw(st.sampled_from(["", "", "(?i)", "(?m)", "(?s)", "(?a)", "(?im)", "(?x)"])) + group(0)


@pytest.mark.slow
@_settings(600)
@given(pattern=python_regex(), string=st.lists(st.sampled_from(REGEX_SUBJECT), max_size=8).map("".join))
@example(pattern="\\B", string="")
@example(pattern="a$", string="a\n")
@example(pattern="a$", string="a\nb\na\n")
@example(pattern="\\bя", string=" я")
def test_schema_regex_search_agrees_with_python_re(pattern: str, string: str) -> None:
    """Issue 17: the linear-time matcher of schema patterns (RE2 where exact, else ``re``)
    answers exactly as ``re.search`` does, Unicode classes and ``$`` included."""
    from evalkit.benchmarks.sobhard.patterns import search

    try:
        expected = re.search(pattern, string) is not None
    except re.error:
        with pytest.raises(re.error):
            search(pattern, string)
        return
    assert search(pattern, string) is expected


REASONING_PIECES = ["<think>", "</think>", "<THINK >", "</Think\n>", "<thinking>", "</thinking>", "<reason>", "</reasoning>",
                    "<thin\u212a>", "</thin\u212a>", "x", " ", "\n", "<", ">", "/", "<thought>", "</thought>", "<scratchpad>",
                    "</SCRATCHPAD>", "<reasoning>", "</reason>"]  # fmt: skip


@_settings(600)
@given(text=st.lists(st.sampled_from(REASONING_PIECES) | any_text, max_size=14).map("".join))
def test_sob_reasoning_blocks_as_the_pairing_regex(text: str) -> None:
    """The linear-time removal of paired reasoning blocks gives what the spec's regex
    ``<(names)\\s*>.*?</\\1\\s*>`` (case-insensitive, dot-all) gives (§4 step 5)."""
    from evalkit.benchmarks.sobhard.normalize import _NAMES, _strip_paired

    paired = re.compile(rf"<({_NAMES})\s*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
    assert _strip_paired(text) == paired.sub("", text)


# ------------------------------------------------------------------------------------------
# KE
# ------------------------------------------------------------------------------------------
step_number = st.one_of(st.integers(0, 40), st.integers(0, 10**6), st.integers(4301, 5000).map(lambda n: "9" * n))


def _step(n: Any, style: str) -> str:
    digits = n if isinstance(n, str) else (f"{n:03d}" if style != "bare" else str(n))
    return {"plain": "step_", "bare": "step_", "upper": "STEP_", "md": "step\\_", "glued": "xstep_"}[style] + digits


step_mention = st.builds(_step, step_number, st.sampled_from(["plain", "bare", "upper", "md", "glued"]))
ke_text = st.one_of(
    any_text,
    syntax_text,
    st.lists(step_mention | st.sampled_from(["<think>", "</think>", "\nTask: x\n", "\nTrajectory Steps:\n", " ", "\n- "]) | st.text(max_size=10),
             max_size=12).map(lambda parts: "".join(p if p.startswith(("<", "\n", " ")) else p + ", " for p in parts)),
    st.builds(lambda tail: ANSWER_PREFIX + tail, st.one_of(st.from_regex(r"[ \t]*[0-9]{1,4}[^\n]{0,20}", fullmatch=True), any_text)),
)  # fmt: skip


@_settings(400)
@given(pick=st.deferred(lambda: st.sampled_from(ke()[1])), text=ke_text, mode=st.sampled_from(["chat", "completion"]))
@example(pick=None, text="step_" + "1" * 5000, mode="chat")
def test_ke_parser(pick, text: str, mode: str) -> None:
    sample = pick if pick is not None else ke()[1][0]
    ids = [s["step_id"] for s in sample.data["trajectory_steps"]]
    result = parse_answer(text, mode, ids)
    assert result.failed == (not text.strip())
    assert len(result.pred) == len(set(result.pred))
    assert set(result.unknown_ids) <= set(result.pred)
    for sid in result.pred:
        assert sid in ids or sid in result.unknown_ids
        assert re.fullmatch(r"step_[0-9]{3,}", sid)
    assert parse_answer(text, mode, step_index(ids)) == result


@_settings(400)
@given(pick=st.deferred(lambda: st.sampled_from(ke()[1])), text=ke_text)
@example(pick=None, text="step_000, step_" + "1" * 5000)
def test_ke_score_never_raises(pick, text: str) -> None:
    bench, samples = ke()
    sample = pick if pick is not None else samples[0]
    scored = bench.score(sample, text)
    assert not (scored.detail or "").startswith(INTERNAL), scored.detail
    if scored.status == "format_error":
        assert scored.scores == {} and not text.strip()
    else:
        assert set(scored.scores) == {"precision", "recall", "f1", "f05"}
        for value in scored.scores.values():
            assert 0.0 <= value <= 1.0 and not math.isnan(value)
        assert scored.scores["f1"] <= max(scored.scores["precision"], scored.scores["recall"]) + 1e-12
    assert bench.score(sample, text) == scored


@_settings(200)
@given(pick=st.deferred(lambda: st.sampled_from(ke()[1])), data=st.data())
def test_ke_gold_in_any_order_scores_one(pick, data) -> None:
    """§6 compares sets: the gold ids in any order, repeated, with any separators score 1."""
    bench, _ = ke()
    gold = list(pick.data["gold_step_ids"])
    ids = data.draw(st.permutations(gold)) + data.draw(st.lists(st.sampled_from(gold), max_size=3))
    seps = data.draw(st.lists(st.sampled_from([", ", "\n- ", " ", ";", "\n"]), min_size=len(ids), max_size=len(ids)))
    text = "".join(i + s for i, s in zip(ids, seps)) + data.draw(whitespace)
    assert bench.score(pick, text).scores == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "f05": 1.0}


# ------------------------------------------------------------------------------------------
# hostile answers (issue 17): YAML aliases, repetition expressions, many ids, deep nesting.
# Each property runs in a child process with 2 GiB of address space and a time limit
# (tests/support/bounded.py); inside, every answer must score without an internal error,
# with scores in range and a record under the size bounds of evalkit.benchmarks.bounds.
# ------------------------------------------------------------------------------------------
def assert_bounded_record(scored: Any) -> None:
    import dataclasses

    from evalkit.benchmarks.bounds import DETAIL_MAX_CHARS, PARSED_MAX_BYTES

    assert not (scored.detail or "").startswith(INTERNAL), scored.detail
    assert scored.detail is None or len(scored.detail) <= DETAIL_MAX_CHARS
    for value in scored.scores.values():
        assert 0.0 <= value <= 1.0
    record = json.dumps(dataclasses.asdict(scored), ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
    assert len(record) <= PARSED_MAX_BYTES + 4 * DETAIL_MAX_CHARS + 4096


def _alias_bomb(levels: int, width: int) -> str:
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    return "\n".join(lines + [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)])


yaml_hostile = st.one_of(
    st.builds(_alias_bomb, st.integers(1, 10), st.integers(1, 12)),
    st.sampled_from(["&a [*a]", "&a {x: *a}", "&a {<<: *a}", "a: &x [1, [2, {k: *x}]]", "&a [&b [*a, *b]]",
                     "a: &a {k: 1}\nb: {<<: [*a, *a, *a]}", "s: &s xxxxxxxxxx\nl: [*s, *s, *s]"]),
    st.builds(lambda n, tail: "a: " + ":".join(["59"] * n) + tail, st.integers(1, 3000), st.sampled_from(["", ".5", ":1"])),
    st.builds(lambda p, n: "- " + p + "1" * n, st.sampled_from(["0b", "0x", "0", "", "+", "-0x"]), st.integers(1, 6000)),
    st.builds(lambda s, n: "s: &s " + "x" * s + "\nl: [" + ", ".join(["*s"] * n) + "]", st.integers(1, 3000), st.integers(1, 400)),
    deep_nesting,
)  # fmt: skip


@st.composite
def sob_hostile_text(draw) -> str:
    """One to three hostile YAML fragments, one under the other (mixed kinds often make the
    document invalid, which must fail cleanly too), in a fence, after reasoning-tag noise."""
    body = "\n".join(draw(st.lists(yaml_hostile, min_size=1, max_size=3)))
    tag = draw(st.sampled_from(["yaml", "json", ""]))
    noise = draw(st.sampled_from(["", "<think>" * 3000, "<think>x</think>\n", "<reason>" * 500 + "</reason>"]))
    return f"{noise}\n```{tag}\n{body}\n```"


@_settings(120)
@given(pick=st.deferred(lambda: st.sampled_from(sob()[1])), text=sob_hostile_text())
@example(pick=None, text="```yaml\na: " + ":".join(["59"] * 200) + ".5\n```")  # OverflowError in PyYAML
def _sob_hostile(pick, text: str) -> None:
    bench, samples, _ = sob()
    assert_bounded_record(bench.score(pick if pick is not None else samples[14], text))


_COUNTS = st.sampled_from(["0", "1", "2", "7", "1024", "2**20", "10**9", "-1", "True"])


def _expr(leaf: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(lambda e, n: f"[{e}]*{n}", inner, _COUNTS),
            st.builds(lambda e, n: f"({e})*{n}", inner, _COUNTS),
            st.builds(lambda a, b: f"{a}+{b}", inner, inner),
            st.builds(lambda a, b: f"[{a},{b}]", inner, inner),
            st.builds(lambda e: f"{{'k':{e}}}", inner),
            st.builds(lambda e, n: f"'%s%s'%(({e},)*2)" if n == "2" else f"'%s'%({e},)", inner, _COUNTS),
        ),
        max_leaves=6,
    )


ace_repetition = _expr(st.sampled_from(["0", "'x'", "'xyz'*100", "[0]", "{'k':0}", "2**65535", "b'x'", "(1,)", "1.5", "'ж'"]))


@st.composite
def ace_hostile_text(draw) -> str:
    name = draw(st.deferred(lambda: st.sampled_from(ace().call_names)))
    params = draw(st.lists(st.deferred(lambda: st.sampled_from(ace().param_names)), min_size=1, max_size=3, unique=True))
    return "[" + name + "(" + ", ".join(f"{p}={draw(ace_repetition)}" for p in params) + ")]"


@_settings(150)
@given(pick=st.deferred(lambda: st.sampled_from(ace().normal)), text=ace_hostile_text())
@example(pick=None, text="[f(a=['x'*1048576]*1048576)]")
def _ace_hostile(pick, text: str) -> None:
    bench, sample = pick if pick is not None else ace().normal_refs[0][:2]
    scored = bench.score(sample, text)
    assert scored.scores["accuracy"] in (0.0, 1.0)
    assert_bounded_record(scored)


@st.composite
def ke_hostile_text(draw) -> str:
    count = draw(st.sampled_from([1, 50, 9_999, 10_000, 10_001, 30_000]))
    start = draw(st.integers(0, 10**6))
    style = draw(st.sampled_from(["step_{}", "STEP_{:07d}", "step\\_{}", "- step_{}: why\n"]))
    ids = [style.format(start + i) for i in range(count)]
    if draw(st.booleans()):
        ids.append("step_" + "9" * draw(st.integers(1, 200_000)))
    prefix = draw(st.sampled_from(["", "<think>" * 100, "</think>", ANSWER_PREFIX]))
    return prefix + ", ".join(ids * draw(st.integers(1, 2)))


@_settings(60)
@given(pick=st.deferred(lambda: st.sampled_from(ke()[1])), text=ke_hostile_text())
def _ke_hostile(pick, text: str) -> None:
    bench, _ = ke()
    assert_bounded_record(bench.score(pick, text))


def run_property(name: str) -> None:
    """Runs in the bounded child: the hypothesis property ``name`` of this module."""
    globals()[name]()


@pytest.mark.parametrize("prop", ["_sob_hostile", "_ace_hostile", "_ke_hostile"])
def test_hostile_answers_score_within_budget(prop: str) -> None:
    """Every hostile answer of the strategies above is scored within 2 GiB and the time
    limit, never raises, and its record is under the size bounds."""
    from tests.support.bounded import run_bounded

    run_bounded(run_property, prop, timeout=120)
