"""``benchmark.scoring=evalscope`` applies EvalScope 1.14.1's reasoning and decoding rules
(issue 49): the first ``<think>…</think>`` block cut wherever it stands and a bare
``</think>`` left in place, ``**mapping`` arguments ignored, no arithmetic; every rule on
which the two scorings differ is named in ``scoring_rule``, and ``rescore`` counts them.

The answers are reasoning-style outputs written here around real ACEBench samples; each
expected verdict is what EvalScope's ACEBench adapter gives that answer (its message model
cuts the reasoning, its parser decodes, its checker compares)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.checker import (
    EVALSCOPE_RULES,
    RULE_EVALSCOPE_ARITHMETIC,
    RULE_EVALSCOPE_BLOCK,
    RULE_EVALSCOPE_KWARGS,
    RULE_EVALSCOPE_SAME,
    RULE_EVALSCOPE_THINK,
    RULE_OFFICIAL,
    evalscope_think_cut,
)
from evalkit.benchmarks.acebench.decoder import DecodeError, decode_calls
from evalkit.rescore import rules_line, scoring_rule_counts

REASONING = "Okay, the user wants the right API. Let me fill the parameters from the question."
#: reasoning that mentions a call list of its own, as a model thinking aloud does
REASONING_WITH_CALL = REASONING + " Maybe [check_status(id=1)] first? No, the question is clear."


class _Benches:
    def __init__(self, data: Path):
        settings = AceBenchSettings(data_dir=data, language="en", subsets=["normal", "special"])
        self.official = AceBench(settings)
        self.evalscope = AceBench(settings.model_copy(update={"scoring": "evalscope"}))
        self.samples = {s.id: s for s in self.official.load()}
        self.evalscope._root, self.evalscope._templates = self.official._root, self.official._templates

    def ref(self, sample_id: str) -> str:
        return self.official.reference_output(self.samples[sample_id])

    def both(self, sample_id: str, output: str) -> tuple[float, float, str | None]:
        """(official accuracy, evalscope accuracy, evalscope scoring_rule)."""
        sample = self.samples[sample_id]
        a, b = self.official.score(sample, output), self.evalscope.score(sample, output)
        assert a.scoring_rule == RULE_OFFICIAL
        return a.scores["accuracy"], b.scores["accuracy"], b.scoring_rule


@pytest.fixture(scope="module")
def benches(acebench_dir: Path) -> _Benches:
    return _Benches(acebench_dir)


# ---- the reasoning cut ------------------------------------------------------------------------


@pytest.mark.parametrize("answer, cut", [
    ("<think>a</think>[f(x=1)]", "[f(x=1)]"),
    ("reasoning</think>[f(x=1)]", "reasoning</think>[f(x=1)]"),  # a bare closing tag stays
    ("[f(x=1)]\n<think>afterthought</think>\n", "[f(x=1)]"),  # after the call
    ("Here: <think>plan</think> [f(x=1)]", "Here:  [f(x=1)]"),  # between text and call
    ("[f(<think>hmm</think>x=1)]", "[f(x=1)]"),  # inside the call
    ("<think>a<think>b</think>c</think>[f()]", "c</think>[f()]"),  # nested: the first closing tag ends the block
    ("<think>a</think>[g()]<think>b</think>[f()]", "[g()]<think>b</think>[f()]"),  # only the first block
    ('<think signature="s" redacted="true">a</think>[f()]', "[f()]"),
    ('<think redacted="true" >a</think>[f()]', "[f()]"),
    ('<think signature="s>a</think>[f()]', '<think signature="s>a</think>[f()]'),  # unclosed attribute: no tag
    ("<thinking>a</thinking>[f()]", "<thinking>a</thinking>[f()]"),  # another tag
    ("<think>never closed [f()]", "<think>never closed [f()]"),
    ("b</think><think>c</think>[f()]", "b</think>[f()]"),  # a bare tag, then a block
])  # fmt: skip
def test_think_cut(answer: str, cut: str) -> None:
    assert evalscope_think_cut(answer) == cut


def _regex_cut(answer: str) -> str:
    """The reasoning cut written as one regular expression (the form EvalScope's message
    model states it in): the oracle of the linear scan."""
    pattern = r'<think(?:\s+signature="[^"]*")?(?:\s+redacted="true")?\s*>.*?</think>'
    match = re.search(pattern, answer, re.DOTALL)
    return answer if match is None else (answer[:match.start()] + answer[match.end():]).strip()


def test_think_cut_equals_the_regular_expression_on_random_answers() -> None:
    tokens = ["<think", ">", "</think>", " ", "\n", 'signature="', '"', 'redacted="true"', "x", "[f(a=1)]", "<", "/"]
    rng = random.Random(49)
    for _ in range(4000):
        answer = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 14)))
        assert evalscope_think_cut(answer) == _regex_cut(answer), answer


def test_think_cut_stays_linear_on_hostile_answers() -> None:
    """Many opening tags whose attribute quote never closes, and many without a closing
    tag: each scanned once (a regular expression would rescan the rest for each)."""
    answer = '<think signature="' * 50_000 + "x" * 10
    assert evalscope_think_cut(answer) == answer
    answer = "<think>" * 100_000
    assert evalscope_think_cut(answer) == answer


# ---- the decoder's switches ---------------------------------------------------------------------


@pytest.mark.parametrize("value, official, evalscope", [
    ("5-1+1", 5, "5 - 1 + 1"),
    ("--5", DecodeError, 5),
    ("+5", -5, 5),  # the official scorer negates any unary operator's constant
    ("-5", -5, -5),
    ("-(-5)", DecodeError, 5),
    ("2*3", 6, "2 * 3"),
    ("-True", -1, -1),
    ("not True", -1, True),
    ("-x", DecodeError, "x"),
    ("1+2j", 1 + 2j, 1 + 2j),
    ("{1, 2}", DecodeError, {1, 2}),
    ("a.b", DecodeError, "a.b"),
    ("x[1:2]", "x[1:2]", "x[1:2]"),
    ("...", "...", "..."),
])  # fmt: skip
def test_values_without_arithmetic(value: str, official: object, evalscope: object) -> None:
    answer = f"[f(v={value})]"
    if official is DecodeError:
        with pytest.raises(DecodeError):
            decode_calls(answer, keep_whitespace=True)
    else:
        assert decode_calls(answer, keep_whitespace=True) == [{"f": {"v": official}}]
    assert decode_calls(answer, keep_whitespace=True, drop_splat=True, source_values=True) == [{"f": {"v": evalscope}}]


def test_splat_is_a_parameter_named_none_officially_and_ignored_by_evalscope() -> None:
    answer = "[f(a=1, **{'extra': 2}, b=g(c=3, **k))]"
    assert decode_calls(answer) == [{"f": {"a": 1, None: {"extra": 2}, "b": {"g": {"c": 3, None: "k"}}}}]
    assert decode_calls(answer, drop_splat=True) == [{"f": {"a": 1, "b": {"g": {"c": 3}}}}]
    assert decode_calls(answer, drop_splat=True, source_values=True) == [{"f": {"a": 1, "b": {"g": {"c": 3}}}}]


def test_a_set_of_calls_is_a_call_list_officially_only() -> None:
    assert decode_calls("{f(a=1)}") == [{"f": {"a": 1}}]
    with pytest.raises(DecodeError, match="a list or a tuple"):
        decode_calls("{f(a=1)}", source_values=True)
    assert decode_calls("(f(a=1), g(b=2))", source_values=True) == [{"f": {"a": 1}}, {"g": {"b": 2}}]
    with pytest.raises(DecodeError, match="records no verdict"):
        decode_calls("[f(a={**x})]", source_values=True)


# ---- verdicts and rules on reasoning-style answers ------------------------------------------------

NUMBER = "en/normal_atom_number_1"  # [AutomationSystemCompatibilityCheck(systemID=2435, newDeviceModel='XR10')]


def _with(ref: str, value: str) -> str:
    assert "systemID=2435" in ref
    return ref.replace("systemID=2435", f"systemID={value}")


@pytest.mark.parametrize("name, build, want", [
    # name, answer from the reference, (official accuracy, evalscope accuracy, evalscope rule)
    ("think before", lambda r: f"<think>\n{REASONING}\n</think>\n\n{r}", (1.0, 1.0, RULE_EVALSCOPE_SAME)),
    ("empty think", lambda r: f"<think>\n\n</think>\n\n{r}", (1.0, 1.0, RULE_EVALSCOPE_SAME)),
    ("bare close, prose", lambda r: f"{REASONING}\n</think>\n\n{r}", (1.0, 1.0, RULE_EVALSCOPE_SAME)),
    ("bare close, call in the reasoning", lambda r: f"{REASONING_WITH_CALL}\n</think>\n\n{r}", (1.0, 0.0, RULE_EVALSCOPE_THINK)),
    ("think after the call", lambda r: f"{r}\n<think>{REASONING_WITH_CALL}</think>", (0.0, 1.0, RULE_EVALSCOPE_THINK)),
    ("think inside the call", lambda r: r.replace("systemID", f"<think>{REASONING}</think>systemID"), (0.0, 1.0, RULE_EVALSCOPE_THINK)),
    ("text, think, call", lambda r: f"Here it is.\n<think>{REASONING_WITH_CALL}</think>\n{r}", (1.0, 1.0, RULE_EVALSCOPE_SAME)),
    ("nested think", lambda r: f"<think>a<think>b [x(a=1)]</think> tail</think>\n{r}", (0.0, 1.0, RULE_EVALSCOPE_BLOCK)),
    ("two blocks", lambda r: f"<think>a</think>[wrong_api(a=1)]<think>b</think>\n{r}", (0.0, 0.0, RULE_EVALSCOPE_SAME)),
    ("splat", lambda r: r[:-2] + ", **{'extra': 1})]", (0.0, 1.0, RULE_EVALSCOPE_KWARGS)),
    ("splat after bare close", lambda r: f"{REASONING}</think>" + r[:-2] + ", **opts)]", (0.0, 1.0, RULE_EVALSCOPE_KWARGS)),
    ("N-1+1", lambda r: _with(r, "2435-1+1"), (1.0, 0.0, RULE_EVALSCOPE_ARITHMETIC)),
    ("--N", lambda r: _with(r, "--2435"), (0.0, 1.0, RULE_EVALSCOPE_ARITHMETIC)),
    ("+N", lambda r: _with(r, "+2435"), (1.0, 1.0, RULE_EVALSCOPE_SAME)),  # -2435 and 2435: a number's type is checked, not its value
    ("N*1 after reasoning", lambda r: f"<think>{REASONING}</think>" + _with(r, "2435*1"), (1.0, 0.0, RULE_EVALSCOPE_ARITHMETIC)),
    ("bare close, wrong call", lambda r: f"{REASONING}</think>[wrong_api(x=1)]", (0.0, 0.0, RULE_EVALSCOPE_SAME)),
])  # fmt: skip
def test_normal_answers(benches, name, build, want) -> None:
    assert benches.both(NUMBER, build(benches.ref(NUMBER))) == want, name


def test_multi_turn_answers(benches) -> None:
    """Multi-turn answers are read whole, whitespace deleted, by both rules: a bare
    ``</think>`` leaves the reasoning in front of the call list under EvalScope's."""
    sid = "en/normal_multi_turn_user_adjust_0_1"  # metrics=[{'type': 'views', 'value': 5000}, ...]
    ref = benches.ref(sid)
    assert benches.both(sid, f"<think>{REASONING}</think>\n{ref}") == (1.0, 1.0, RULE_OFFICIAL)
    assert benches.both(sid, f"{REASONING}\n</think>\n{ref}") == (1.0, 0.0, RULE_EVALSCOPE_THINK)
    assert benches.both(sid, f"{ref}<think>{REASONING}</think>") == (0.0, 1.0, RULE_EVALSCOPE_THINK)
    assert benches.both(sid, ref.replace("5000", "5001-1")) == (1.0, 0.0, RULE_EVALSCOPE_ARITHMETIC)
    assert benches.both(sid, "Calling: " + ref) == (0.0, 0.0, RULE_OFFICIAL)  # no first-block rule in multi-turn


def test_special_answers(benches) -> None:
    """Special categories are the official substring tests on the answer as each rule cuts
    it: a bare ``</think>`` keeps, under EvalScope's rule, a phrase the reasoning mentions."""
    sid = "en/special_irrelevant_0"
    ref = benches.ref(sid)
    musing = "Should I say it is beyond the limitations of the function? "
    assert benches.both(sid, f"<think>{REASONING}</think>{ref}") == (1.0, 1.0, RULE_OFFICIAL)
    assert benches.both(sid, f"{REASONING}{musing}</think>[some_api(a=1)]") == (0.0, 1.0, RULE_EVALSCOPE_THINK)
    assert benches.both(sid, f"{ref}<think>{REASONING}</think>") == (0.0, 1.0, RULE_EVALSCOPE_THINK)
    assert benches.both(sid, f"<think>{musing}</think>[some_api(a=1)]") == (0.0, 0.0, RULE_OFFICIAL)


def test_every_rule_is_named_and_the_reasoning_rule_says_which(benches) -> None:
    assert len(set(EVALSCOPE_RULES)) == len(EVALSCOPE_RULES) == 7
    assert benches.official.reasoning_rule.startswith("acebench: the text after the first </think>")
    assert "bare </think> stays" in benches.evalscope.reasoning_rule


# ---- rescore counts the rules -------------------------------------------------------------------


def test_rule_counts_and_line() -> None:
    rows = [{"scoring_rule": r} for r in [RULE_EVALSCOPE_THINK] * 3 + [RULE_EVALSCOPE_SAME] * 5 + [RULE_EVALSCOPE_KWARGS]]
    rows.append({"scores": {}})  # a row without a rule (another benchmark) is not counted
    counts = scoring_rule_counts(rows)
    assert list(counts.items()) == [(RULE_EVALSCOPE_SAME, 5), (RULE_EVALSCOPE_THINK, 3), (RULE_EVALSCOPE_KWARGS, 1)]
    assert rules_line(counts) == ("scoring rules: evalscope:same_as_official 5, evalscope:think_block 3, "
                                  "evalscope:kwargs_ignored 1")  # fmt: skip
    assert rules_line({}) == ""


@pytest.mark.slow
def test_rescore_counts_each_rule_of_a_reasoning_run(run_eval, benches, tmp_path, capsys) -> None:
    from evalkit import rescore

    atoms = [sid for sid in benches.samples if "normal_atom_number" in sid][:12]
    forms = [
        lambda r: f"{REASONING_WITH_CALL}\n</think>\n\n{r}",  # think_block under evalscope
        lambda r: f"{r}\n<think>{REASONING}</think>",  # think_block
        lambda r: r[:-2] + ", **{'extra': 1})]",  # kwargs_ignored
        lambda r: f"<think>{REASONING}</think>\n{r}",  # same
    ]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps({"sample_id": sid, "output": forms[i % 4](benches.ref(sid))}) + "\n"
                              for i, sid in enumerate(atoms)))  # fmt: skip
    (tmp_path / "ids.txt").write_text("\n".join(atoms) + "\n")
    run = run_eval(["model=replay", f"model.path={replay}", "benchmark.subsets=[normal_atom_number]",
                    f"run.sample_ids_file={tmp_path / 'ids.txt'}"]).run_dir  # fmt: skip
    capsys.readouterr()
    assert rescore.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 0
    out = capsys.readouterr().out
    assert "scoring rules: evalscope:think_block 6, evalscope:kwargs_ignored 3, evalscope:same_as_official 3" in out
    summary = json.loads((run / "rescored" / "evalscope" / "summary.json").read_text())
    assert summary["scoring_rules"] == {"evalscope:think_block": 6, "evalscope:kwargs_ignored": 3, "evalscope:same_as_official": 3}
    rows = [json.loads(line) for line in (run / "rescored" / "evalscope" / "predictions.jsonl").read_text().splitlines()]
    assert {r["reasoning_rule"] for r in rows} == {benches.evalscope.reasoning_rule}
    # official: 6 of 12 pass (reasoning before the call); evalscope: 9 (all but the call-in-the-reasoning form)
    assert json.loads((run / "summary.json").read_text())["metrics"]["accuracy/normal_atom_number"] == pytest.approx(6 / 12)
    assert summary["metrics"]["accuracy/normal_atom_number"] == pytest.approx(9 / 12)
