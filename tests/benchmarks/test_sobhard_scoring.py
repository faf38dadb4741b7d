"""SOBHard scoring: every expected verdict of the fixtures, reference and echo models,
normalisation, readers, comparison, the raising-check rule and balance_score."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from evalkit.benchmarks.sobhard.compare import compare
from evalkit.benchmarks.sobhard.constraints import CONSTRAINT_IDS, CONSTRAINTS, Constraint
from evalkit.benchmarks.sobhard.metrics import balance_score, stat_plan
from evalkit.benchmarks.sobhard.normalize import extract_blocks, normalize_answer
from evalkit.benchmarks.sobhard.operations import diff_documents, infer_schema, render_template, replay_patch
from evalkit.benchmarks.sobhard.readers import ParseError, read_properties, read_sqlinsert, read_yaml
from evalkit.benchmarks.sobhard.settings import CELLS
from tests.conftest import SHARED_DIR



def _answers() -> list[dict]:
    """The fixture answers (read at collection time to parametrize; same root as the
    ``shared_data_dir`` fixture)."""
    path = SHARED_DIR / "data" / "sobhard" / "answers.jsonl"
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


ANSWERS = _answers()


@pytest.fixture(scope="module")
def sob(shared_data_dir: Path) -> tuple[SOBHard, dict]:
    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    return bench, {s.id: s for s in bench.load()}


def test_constraint_registry_has_31_in_four_layers():
    layers = [c.layer for c in CONSTRAINTS]
    assert len(CONSTRAINT_IDS) == 31 == len(set(CONSTRAINT_IDS))
    assert (layers.count("pack"), layers.count("syn"), layers.count("val"), layers.count("family")) == (4, 1, 3, 23)


@pytest.mark.parametrize("case", ANSWERS, ids=[f"{a['id']}-{a['case']}" for a in ANSWERS])
def test_fixture_verdict(sob, case):
    bench, samples = sob
    scored = bench.score(samples[str(case["id"])], case["answer"])
    expect = case["expect"]
    got = {
        "sample_pass": scored.scores["sample_pass"] == 1.0,
        "format_pass": scored.scores["format_pass"] == 1.0,
        "content_pass": scored.scores["content_pass"] == 1.0,
        "task_pass": scored.scores["task_pass"] == 1.0,
        "failed_constraints": scored.failed_checks,
    }
    assert got == expect, scored.detail
    assert sorted(k for k, ok in scored.checks.items() if not ok) == sorted(expect["failed_constraints"])


def test_every_row_has_a_fixture_answer(sob):
    _, samples = sob
    assert len(ANSWERS) == 118
    assert {str(a["id"]) for a in ANSWERS} == set(samples)


def test_reference_scores_one_on_every_row(sob):
    bench, samples = sob
    for sid, sample in samples.items():
        scored = bench.score(sample, bench.reference_output(sample))
        assert scored.failed_checks == [], (sid, scored.detail)
        assert set(scored.scores.values()) == {1.0}, sid


def test_echo_baseline_scores_zero_on_every_row(sob):
    bench, samples = sob
    for sid, sample in samples.items():
        scored = bench.score(sample, bench.baseline_output("echo", sample))
        assert scored.scores["sample_pass"] == 0.0, sid
        assert scored.failed_checks, sid


def test_empty_answer_scores_zero_everywhere_even_where_constraints_pass(sob):
    bench, samples = sob
    scored = bench.score(samples["1"], "\ufeff  \r\n ")
    assert set(scored.scores.values()) == {0.0}
    assert scored.checks["pack.nothing_outside_fence"] is True  # vacuous, yet no credit


def test_check_that_raises_fails_with_the_exception_as_detail(sob):
    bench, samples = sob

    def boom(ctx):
        raise RuntimeError("verifier exploded")

    registry = CONSTRAINTS + (Constraint("test.boom", "family", lambda c: True, boom),
                              Constraint("test.bad_predicate", "family", lambda c: 1 / 0, boom))  # fmt: skip
    scored = bench.score(samples["1"], bench.reference_output(samples["1"]), registry=registry)
    assert scored.failed_checks == ["test.boom"]
    assert "test.bad_predicate" not in scored.checks  # a predicate that raises: not applicable
    assert "RuntimeError: verifier exploded" in scored.detail
    assert scored.scores["sample_pass"] == 0.0 and scored.scores["task_pass"] == 0.0


# ---- balance_score (§10.2) ------------------------------------------------------------
def test_balance_all_ones():
    assert balance_score((c, 1.0) for c in CELLS) == pytest.approx(1.0)


def test_balance_even_060():
    pairs = [(c, 1.0) for c in CELLS for _ in range(3)] + [(c, 0.0) for c in CELLS for _ in range(2)]
    assert balance_score(pairs) == pytest.approx(0.6)


def test_balance_one_dead_cell_of_33():
    pairs = [(c, 0.0 if i == 0 else 1.0) for i, c in enumerate(CELLS)]
    assert balance_score(pairs) == pytest.approx(0.01 ** (1 / 33))
    assert round(balance_score(pairs), 3) == 0.870


def test_balance_empty_cells_skipped_and_no_items_zero():
    assert balance_score([("diff/easy", 1.0), ("diff/easy", 0.0)]) == pytest.approx(0.5)
    assert balance_score([]) == 0.0


def test_aggregate_breakdowns_and_constraint_rates():
    cats = {
        "a": {"family": "diff", "difficulty": "easy", "source_format": "json", "target_format": "yaml", "length_tier": "short", "prompt_style": "spec"},
        "b": {"family": "diff", "difficulty": "hard", "source_format": "csv", "target_format": "yaml", "length_tier": "long", "prompt_style": "spec"},
    }
    one = {"sample_pass": 1.0, "constraint_pass_rate": 1.0, "format_pass": 1.0, "content_pass": 1.0, "task_pass": 1.0}
    zero = {"sample_pass": 0.0, "constraint_pass_rate": 0.5, "format_pass": 1.0, "content_pass": 0.0, "task_pass": 0.0}
    records = [
        {"sample_id": "a", "subset": "diff/easy", "scores": one, "checks": {"pack.fence_present": True, "diff.matches_pair": True}},
        {"sample_id": "b", "subset": "diff/hard", "scores": zero, "checks": {"pack.fence_present": True, "diff.matches_pair": False}},
    ]
    m = stat_plan([], [records], cats).point()
    assert m["sample_pass_rate"] == 0.5 and m["constraint_pass_rate"] == 0.75
    assert m["balance_score"] == pytest.approx(math.sqrt(0.01))
    assert m["sample_pass_rate/target/yaml"] == 0.5 and m["sample_pass_rate/source/csv"] == 0.0
    assert m["sample_pass_rate/length/short"] == 1.0 and m["sample_pass_rate/register/spec"] == 0.5
    assert m["sample_pass_rate/cell/diff/hard"] == 0.0 and m["content_pass_rate/family/diff"] == 0.5
    assert m["constraint/diff.matches_pair"] == 0.5 and m["constraint/pack.fence_present"] == 1.0
    assert "constraint/schema.validates_source" not in m


# ---- normalisation and fences (§4) ----------------------------------------------------
def test_reasoning_removed_outside_fences_only():
    text = "<THINK>plan</THINK>\n```yaml\nnote: <think>keep</think>\n```\n</reasoning>"
    assert normalize_answer(text) == "```yaml\nnote: <think>keep</think>\n```"


def test_mismatched_reasoning_tags_are_not_paired():
    assert normalize_answer("<think>a</thinking>b") == "ab"


def test_fence_rules():
    ex = extract_blocks("````json\n```\n````")
    assert ex.blocks == [("json", "")] and ex.unclosed  # sequential pairing (observed): 3rd line opens
    ex = extract_blocks("````json\n```\n````", pairing="commonmark")
    assert ex.blocks == [("json", "```")] and ex.outside == ""
    ex = extract_blocks("```json title\n{}\n```")
    assert ex.blocks == [] and ex.unclosed and ex.outside == "```json title\n{}"  # a tag with a space is not a fence
    ex = extract_blocks("```json\n{}")
    assert ex.blocks == [] and ex.unclosed and ex.outside == "{}"


# ---- readers (§5) and comparison (§6) -------------------------------------------------
def test_properties_reader_convention():
    assert read_properties("# c\n! c\n a = b=c \nk=1\nk=2") == {"a": "b=c", "k": "2"}
    for bad in ("novalue", " = v", "# only a comment"):
        with pytest.raises(ParseError):
            read_properties(bad)


def test_sql_reader_convention():
    rows = read_sqlinsert("insert into records (a, b) values ('it''s', NULL);\n\nINSERT INTO records (a, b) VALUES ('x', 'y');")
    assert rows == [{"a": "it's", "b": None}, {"a": "x", "b": "y"}]
    for bad in ("INSERT INTO records (a) VALUES (1);", "INSERT INTO records (a, a) VALUES ('1', '2');",
                "INSERT INTO records (a) VALUES ('1');\nINSERT INTO records (b) VALUES ('1');",
                "INSERT INTO records (a, b) VALUES ('1');", "INSERT INTO other (a) VALUES ('1');"):  # fmt: skip
        with pytest.raises(ParseError):
            read_sqlinsert(bad)


def test_yaml_reader_is_yaml_11():
    assert read_yaml("a: yes\nb: '004'\nc: 004") == {"a": True, "b": "004", "c": 4}
    with pytest.raises(ParseError):
        read_yaml("")


def test_compare_rules():
    assert compare(True, 1) and compare(1, True)[0].kind == "structure"
    assert not compare(3000, 3000.0)
    assert not compare(33.94 * (1 + 1e-9), 33.94) and compare(33.94 * (1 + 1e-3), 33.94)[0].kind == "numeric"
    assert not compare({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert compare([1, 2], [2, 1])[0].kind == "numeric"
    assert not compare("200000.0002", "200000", coerce=True) and compare("200000", 200000)[0].kind == "structure"
    assert compare("abc", "abd")[0].kind == "string"


# ---- operations (§8.3, §8.4) ----------------------------------------------------------
def test_patch_replay_uses_current_indices():
    doc = {"a": [1, 2, 3]}
    ops = [{"op": "delete", "path": "a[0]"}, {"op": "set", "path": "a[0]", "value": 9}, {"op": "insert", "path": "a[2]", "value": 7}]
    assert replay_patch(doc, ops) == {"a": [9, 3, 7]} and doc == {"a": [1, 2, 3]}


def test_diff_paths_sorted_by_code_point():
    d = diff_documents([{"x": i} for i in range(11)], [{"x": i + 1} for i in range(11)])
    assert list(d) == ["added", "removed", "changed"]
    assert list(d["changed"])[:3] == ["[0].x", "[10].x", "[1].x"]
    assert d["changed"]["[10].x"] == {"было": 10, "стало": 11}


def test_template_escape_and_missing_path():
    assert render_template("$${x} ${a.b} ${zz} ${n} ${t", {"a": {"b": True}, "n": None}) == "${x} true  null ${t"


def test_schema_inference_kinds():
    doc = [{"b": "x", "a": 1}, {"b": "y"}]
    assert infer_schema(doc, "union")["items"] == {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"],
    }  # fmt: skip
    assert infer_schema(["b", "a", "b"], "full") == {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 3, "maxItems": 3}
    assert infer_schema([1, "a"], "oneOf")["items"] == {"oneOf": [{"type": "integer"}, {"type": "string"}]}


def test_hardened_variants_give_the_same_fixture_verdicts(shared_data_dir: Path):
    """Spec §16.1: no fixture verdict depends on fence pairing, number grammar, strict JSON
    or tolerant leaves (checked both ways)."""
    settings = SOBHardSettings(data_dir=shared_data_dir / "sobhard", fence_pairing="commonmark", strict_json=True,
                               numeric_strings="strict", leaf_compare="tolerant")  # fmt: skip
    bench = SOBHard(settings)
    samples = {s.id: s for s in bench.load()}
    wrong = []
    for case in ANSWERS:
        scored = bench.score(samples[str(case["id"])], case["answer"])
        if scored.failed_checks != case["expect"]["failed_constraints"]:
            wrong.append((case["id"], case["case"], scored.failed_checks))
    assert wrong == []


def test_missing_parser_is_fatal_at_load(shared_data_dir: Path, monkeypatch):
    import sys

    from evalkit.benchmarks.sobhard.readers import MissingParserError, probe

    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ModuleNotFoundError
    with pytest.raises(MissingParserError, match="yaml reader needs 'yaml'"):
        SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard")).load()
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    with pytest.raises(MissingParserError, match="jsonschema"):
        probe({"json"}, need_jsonschema=True)
    with pytest.raises(MissingParserError, match="no reader for target notation 'csv'"):
        probe({"csv"})
