"""Moving from EvalScope (issue 36): family names in ``benchmark.subsets``,
``benchmark.scoring=evalscope`` with a ``scoring_rule`` per sample, the run's ``instrument``,
``rescore --set`` writing a run directory ``compare`` reads, and ``import_evalscope`` on
output directories generated here in EvalScope's layout (nothing of EvalScope is installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.categories import GROUPS, NORMAL_CATEGORIES, SPECIAL_CATEGORIES
from evalkit.benchmarks.acebench.checker import (
    RULE_EVALSCOPE_BLOCK,
    RULE_EVALSCOPE_SAME,
    RULE_EVALSCOPE_WHITESPACE,
    RULE_OFFICIAL,
    first_bracket_block,
    score_normal,
    score_normal_evalscope,
)

class _Loaded:
    """ACEBench en, normal and special categories, with its samples by id."""

    def __init__(self, bench: AceBench):
        self.bench = bench
        self.samples = bench.load()
        self.by_id = {s.id: s for s in self.samples}


@pytest.fixture(scope="module")
def acebench_en(acebench_dir: Path) -> _Loaded:
    return _Loaded(AceBench(AceBenchSettings(data_dir=acebench_dir, language="en", subsets=["normal", "special"])))


# ---- 1. family and group names ----------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    (["normal"], list(NORMAL_CATEGORIES)),
    (["NORMAL"], list(NORMAL_CATEGORIES)),
    (["Special"], list(SPECIAL_CATEGORIES)),
    (["agent"], ["agent_multi_step", "agent_multi_turn"]),
    (["multi_turn"], ["normal_multi_turn_user_adjust", "normal_multi_turn_user_switch"]),
    (["ATOM", "normal_atom_bool", "special_irrelevant"], list(GROUPS["ATOM"]) + ["special_irrelevant"]),
])  # fmt: skip
def test_subset_family_and_group_names_expand_and_are_recorded(given: list[str], expected: list[str]) -> None:
    settings = AceBenchSettings(subsets=given)
    assert settings.subsets == expected
    families = [g for g in given if g not in expected]
    assert settings.subsets_expanded is not None and sorted(settings.subsets_expanded) == sorted(families)
    # what config.yaml records reads back the same (a resumed or rescored run)
    again = AceBenchSettings(**settings.model_dump(mode="json"))
    assert again.subsets == expected and again.subsets_expanded == settings.subsets_expanded


def test_plain_category_lists_record_no_expansion_and_bad_names_still_refused() -> None:
    assert AceBenchSettings(subsets=["normal_atom_bool"]).subsets_expanded is None
    with pytest.raises(ValueError, match="or a family or group: atom, single_turn, multi_turn, normal"):
        AceBenchSettings(subsets=["norml"])
    with pytest.raises(ValueError, match="duplicate"):
        AceBenchSettings(subsets=["normal", "NORMAL"])


def test_subsets_normal_loads_exactly_the_normal_categories(acebench_dir: Path) -> None:
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, subsets=["normal"]))
    assert {s.subset for s in bench.load()} == set(NORMAL_CATEGORIES)


def test_compose_expands_subsets_from_the_command_line(acebench_dir: Path, tmp_path: Path) -> None:
    from evalkit.compose import compose, resolve

    _, cfg = resolve(compose(["benchmark=acebench", "model=reference", f"benchmark.data_dir={acebench_dir}",
                              "benchmark.subsets=[special]", f"run.output_root={tmp_path}", "tracking=none"]))  # fmt: skip
    assert cfg.benchmark.subsets == list(SPECIAL_CATEGORIES)
    assert cfg.record()["benchmark"]["subsets_expanded"] == {"special": list(SPECIAL_CATEGORIES)}


# ---- 2. the two scoring rules -------------------------------------------------------------------


def test_first_bracket_block() -> None:
    assert first_bracket_block("text ] then [a(x=[1])] and [b()]") == "[a(x=[1])]"
    assert first_bracket_block("no list here") is None
    assert first_bracket_block("[unclosed") is None


#: a schema whose object parameter holds a list: the official scorer compares the list's text
#: after deleting whitespace ("['NewYork']"), EvalScope keeps it ("['New York']")
_TRIP = [{"name": "plan", "description": "", "parameters": {"type": "dict", "required": ["trip"], "properties": {
    "trip": {"type": "dict", "properties": {"cities": {"type": "array", "items": {"type": "string"}}}}}}}]  # fmt: skip
_TRIP_GOLD = {"plan": {"trip": {"cities": ["New York"]}}}


def test_whitespace_rule_passes_what_the_official_scorer_fails() -> None:
    answer = "[plan(trip={'cities': ['New York']})]"
    official, _ = score_normal(_TRIP, answer, _TRIP_GOLD)
    verdict, calls, rule = score_normal_evalscope(_TRIP, answer, _TRIP_GOLD, "normal_atom_object_deep")
    assert not official.passed and "NewYork" in official.detail
    assert verdict.passed and rule == RULE_EVALSCOPE_WHITESPACE
    assert calls == [{"plan": {"trip": {"cities": ["New York"]}}}]


def test_evalscope_rules_on_real_samples(acebench_en) -> None:
    bench = acebench_en.bench
    sample = acebench_en.by_id["en/normal_atom_bool_3"]
    reference = bench.reference_output(sample)
    wrapped = f"Sure, here is the call:\n```python\n{reference}\n```\nAnything else?"
    wrong = reference.replace("True", "Flase").replace("False", "Ture") if "True" in reference or "False" in reference else "[nothing()]"
    evalscope = AceBench(bench.settings.model_copy(update={"scoring": "evalscope"}))
    evalscope._root, evalscope._templates = bench._root, bench._templates  # the same data, loaded once
    cases = {  # answer: (official accuracy, evalscope accuracy, evalscope scoring_rule)
        reference: (1.0, 1.0, RULE_EVALSCOPE_SAME),
        wrapped: (0.0, 1.0, RULE_EVALSCOPE_BLOCK),
        wrong: (0.0, 0.0, RULE_EVALSCOPE_SAME),
    }
    for answer, (want_official, want_evalscope, want_rule) in cases.items():
        got_official, got_evalscope = bench.score(sample, answer), evalscope.score(sample, answer)
        assert (got_official.scores["accuracy"], got_official.scoring_rule) == (want_official, RULE_OFFICIAL), answer
        assert (got_evalscope.scores["accuracy"], got_evalscope.scoring_rule) == (want_evalscope, want_rule), answer
    assert bench.score(sample, wrapped).status == "format_error" and evalscope.score(sample, wrapped).status == "ok"


def test_multi_turn_and_special_are_scored_as_upstream_under_both(acebench_en) -> None:
    bench = acebench_en.bench
    evalscope = AceBench(bench.settings.model_copy(update={"scoring": "evalscope"}))
    evalscope._root, evalscope._templates = bench._root, bench._templates
    turn = next(s for s in acebench_en.samples if s.subset == "normal_multi_turn_user_adjust")
    wrapped = "Calling: " + bench.reference_output(turn)
    special = next(s for s in acebench_en.samples if s.subset == "special_irrelevant")
    for sample, answer in ((turn, wrapped), (turn, bench.reference_output(turn)), (special, bench.reference_output(special)), (special, "no")):
        a, b = bench.score(sample, answer), evalscope.score(sample, answer)
        assert a.scores == b.scores and a.scoring_rule == b.scoring_rule == RULE_OFFICIAL
    assert bench.score(turn, wrapped).scores["accuracy"] == 0.0


def test_instrument_and_headline_label() -> None:
    from evalkit.report.summary import headline_text, instrument
    from evalkit.summary import Summary

    assert instrument(AceBench(AceBenchSettings(scoring="evalscope"))) == {"scoring": "evalscope"}
    assert instrument(AceBench(AceBenchSettings())) == {"scoring": "official"}
    base = dict(status="complete", benchmark="acebench", model="m", n_samples=1, n_scored=1, n_failed=0,
                n_scored_rows=1, n_failed_rows=0, headline="overall", metrics={"overall": 0.5})  # fmt: skip
    assert headline_text(Summary(**base, instrument={"scoring": "evalscope"})).endswith(", scored by evalscope rules")
    assert "scored by" not in headline_text(Summary(**base))


# ---- 3. rescore --set, compare --------------------------------------------------------------


def _replay_file(path: Path, acebench_en, wrap_every: int = 4) -> tuple[Path, list[str]]:
    """Reference answers of the ATOM categories, every ``wrap_every``-th in prose (which only
    EvalScope's rules pass); returns the file and the wrapped ids."""
    wrapped = []
    with open(path, "w", encoding="utf-8") as fh:
        atoms = [s for s in acebench_en.samples if s.subset in GROUPS["ATOM"]]
        for i, s in enumerate(atoms):
            out = acebench_en.bench.reference_output(s)
            if i % wrap_every == 0:
                out, _ = f"Here you go:\n{out}\nDone.", wrapped.append(s.id)
            fh.write(json.dumps({"sample_id": s.id, "output": out}) + "\n")
    return path, wrapped


@pytest.mark.slow
def test_rescore_set_writes_a_run_compare_reads_and_names_the_scoring_change(run_eval, acebench_en, tmp_path, capsys) -> None:
    from evalkit import compare, rescore

    replay, wrapped = _replay_file(tmp_path / "replay.jsonl", acebench_en)
    run = run_eval(["model=replay", f"model.path={replay}", "benchmark.subsets=[atom]"]).run_dir
    assert rescore.main([str(run)]) == 0 and not (run / "rescored").exists()  # the old mode writes nothing
    assert rescore.main([str(run), "--set", "benchmark.scoring=evalscope"]) == 0
    new = run / "rescored" / "evalscope"
    summary = json.loads((new / "summary.json").read_text())
    assert summary["instrument"] == {"scoring": "evalscope"} and summary["metrics"]["overall"] == pytest.approx(1.0)
    assert json.loads((run / "summary.json").read_text())["metrics"]["overall"] == pytest.approx(1 - len(wrapped) / 300)
    assert yaml.safe_load((new / "config.yaml").read_text())["benchmark"]["scoring"] == "evalscope"
    result = compare.compare([run, new], resamples=200)
    pair_flips = result["flips"][0]
    assert pair_flips["a_better"] == []
    assert [e["sample_id"] for e in pair_flips["b_better"]] == wrapped
    assert {e["why"] for e in pair_flips["b_better"]} == {f"{RULE_OFFICIAL} → {RULE_EVALSCOPE_BLOCK}"}
    text = compare.render(result)
    assert "instrument differs (scoring: 'official' vs 'evalscope')" in text
    assert "is not a model difference" in text and "overall: a difference" not in text
    # and back: the rescored run rescored with the official rules is the original
    capsys.readouterr()
    assert rescore.main([str(new), "--set", "benchmark.scoring=official"]) == 0
    back = json.loads((new / "rescored" / "official" / "summary.json").read_text())
    assert back["metrics"] == pytest.approx(json.loads((run / "summary.json").read_text())["metrics"])
    assert rescore.main([str(run), "--set", "benchmark.language=zh"]) == 2
    assert "only benchmark.scoring" in capsys.readouterr().err


# ---- 4. import of an EvalScope output directory ------------------------------------------------


def _evalscope_dir(root: Path, rows: dict[str, list[dict[str, Any]]], model: str = "qwen-plus",
                   overall: float | None = None, language: str = "en") -> Path:  # fmt: skip
    """An EvalScope 1.x output directory: ``rows`` per category are ``{"id", "output", "acc"}``
    (``id`` None: no metadata id; ``review`` False: a prediction without a review)."""
    for kind in ("predictions", "reviews", "reports", "configs"):
        (root / kind / (model if kind in ("predictions", "reviews", "reports") else "")).mkdir(parents=True, exist_ok=True)
    (root / "configs" / "task_config_1a2b.yaml").write_text(yaml.safe_dump(
        {"model": model, "datasets": ["acebench"], "dataset_args": {"acebench": {"extra_params": {"language": language}}}}))  # fmt: skip
    subsets = []
    for category, items in rows.items():
        with open(root / "predictions" / model / f"acebench_{category}.jsonl", "w") as pred, \
             open(root / "reviews" / model / f"acebench_{category}.jsonl", "w") as rev:  # fmt: skip
            for index, item in enumerate(items):
                content = item["output"] if not item.get("parts") else [{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": item["output"]}]
                pred.write(json.dumps({"index": index, "model": model, "messages": [], "model_output": {
                    "model": model, "choices": [{"message": {"role": "assistant", "content": content}, "stop_reason": "stop"}]}}) + "\n")  # fmt: skip
                if item.get("review", True):
                    meta = {"test_category": category, "language": language, **({"id": item["id"]} if item["id"] else {})}
                    rev.write(json.dumps({"index": index, "input": "…", "target": "{}", "sample_score": {
                        "score": {"value": {"acc": item["acc"]}, "prediction": item["output"], "extracted_prediction": item["output"]},
                        "sample_id": index, "sample_metadata": meta}}) + "\n")  # fmt: skip
        subsets.append({"name": category, "score": round(sum(i["acc"] for i in items) / len(items), 4), "num": len(items)})
    report = {"name": "acebench", "model_name": model, "score": 0.378, "metrics": [{"name": "acc", "categories": [
        {"name": ["default"], "subsets": subsets},
        {"name": "-", "subsets": [{"name": "OVERALL", "score": overall, "num": 0}]}]}]}  # fmt: skip
    (root / "reports" / model / "acebench.json").write_text(json.dumps(report))
    return root


def _import_fixture(tmp_path: Path, acebench_en, empty: bool = False) -> tuple[Path, dict[str, float]]:
    """EvalScope rows for normal_atom_bool (its verdicts by EvalScope's rules: prose-wrapped
    references pass), special_irrelevant, agent_multi_step, plus an unmatched row of each
    kind and an empty answer; returns the directory and the ids' EvalScope accuracies."""
    bench = acebench_en.bench
    atom = [s for s in acebench_en.samples if s.subset == "normal_atom_bool"][:8]
    special = [s for s in acebench_en.samples if s.subset == "special_irrelevant"][:4]
    rows: dict[str, list[dict[str, Any]]] = {"normal_atom_bool": [], "special_irrelevant": [], "agent_multi_step": []}
    accs: dict[str, float] = {}
    for i, s in enumerate(atom):
        ref = bench.reference_output(s)
        out, acc = [(ref, 1.0), (f"Sure:\n```\n{ref}\n```", 1.0), ("[wrong_call(x=1)]", 0.0), ("I cannot.", 0.0)][i % 4]
        rows["normal_atom_bool"].append({"id": s.data["prompt"]["id"], "output": out, "acc": acc, "parts": i == 1})
        accs[s.id] = acc
    for i, s in enumerate(special):
        out = bench.reference_output(s) if i < 3 else "[some_call()]"
        rows["special_irrelevant"].append({"id": s.data["prompt"]["id"], "output": out, "acc": 1.0 if i < 3 else 0.0})
        accs[s.id] = 1.0 if i < 3 else 0.0
    rows["normal_atom_bool"] += [
        {"id": None, "output": "[x()]", "acc": 0.0},  # a review without the record id
        {"id": "normal_atom_bool_999999", "output": "[x()]", "acc": 0.0},  # not in the data
        {"id": "normal_atom_bool_9998", "output": "[x()]", "acc": 0.0, "review": False},  # no review
    ]
    rows["agent_multi_step"].append({"id": "agent_multi_step_0", "output": "[...]", "acc": 1.0})
    if empty:  # EvalScope scored an empty answer 0
        s = [s for s in acebench_en.samples if s.subset == "normal_atom_bool"][8]
        rows["normal_atom_bool"].append({"id": s.data["prompt"]["id"], "output": "", "acc": 0.0})
        accs[s.id] = 0.0
    root = _evalscope_dir(tmp_path / "evalscope_out" / "20251201_101010", rows, overall=0.6123)
    return root, accs


def test_import_maps_ids_and_lists_what_it_cannot_replay(acebench_en, acebench_dir, tmp_path) -> None:
    from evalkit.import_evalscope import import_run

    root, accs = _import_fixture(tmp_path, acebench_en, empty=True)
    out = tmp_path / "imported"
    result = import_run(root, out, data_dir=acebench_dir)
    assert result["empty"] == [list(accs)[-1]] and "empty answers: EvalScope scored them 0" in result["note"]
    replay = [json.loads(line) for line in (out / "replay.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in replay) == sorted(accs)  # en/normal_atom_bool_<n>, en/special_irrelevant_<n>
    assert (out / "sample_ids.txt").read_text().split() == [r["sample_id"] for r in replay]
    assert replay[1]["output"].startswith("Sure:")  # text parts of a content list, stored as they are
    whys = sorted(u["why"] for u in result["unmatched"])
    assert whys == ["no review row holds its ACEBench id", "no sample_metadata.id", "not an id of evalkit's ACEBench data"]
    assert [n["sample_id"] for n in result["not_rescorable"]] == ["en/agent_multi_step_0"]
    assert result["evalscope_report"]["overall"] == 0.6123 and result["language"] == "en"
    normal = sum(v for k, v in accs.items() if "atom" in k) / 9
    special = sum(v for k, v in accs.items() if "special" in k) / 4
    want = (0.578 * normal + 0.2676 * special) / (0.578 + 0.2676)
    assert result["reproduced"]["en"]["overall"] == pytest.approx(want, abs=1e-12)
    without = (0.578 * (normal * 9 / 8) + 0.2676 * special) / (0.578 + 0.2676)  # the empty answer left out
    assert result["reproduced_without_empty"]["en"]["overall"] == pytest.approx(without, abs=1e-12)
    assert "renormalised" in result["note"] and "model=replay" in result["commands"]["evalscope_rules"]
    assert json.loads((out / "import.json").read_text())["unmatched"] == result["unmatched"]


def test_import_refuses_a_directory_without_acebench_files(tmp_path, capsys) -> None:
    from evalkit.import_evalscope import main

    (tmp_path / "predictions" / "m").mkdir(parents=True)
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not an EvalScope ACEBench output directory" in capsys.readouterr().err


@pytest.mark.slow
def test_imported_run_reproduces_evalscope_both_ways(run_eval, acebench_en, acebench_dir, tmp_path) -> None:
    from evalkit import rescore
    from evalkit.import_evalscope import import_run

    root, accs = _import_fixture(tmp_path, acebench_en)
    out = tmp_path / "imported"
    result = import_run(root, out, data_dir=acebench_dir)
    run = run_eval(["model=replay", f"model.path={out / 'replay.jsonl'}", "benchmark.scoring=evalscope",
                    "benchmark.subsets=[normal_atom_bool,special_irrelevant]", f"run.sample_ids_file={out / 'sample_ids.txt'}"]).run_dir  # fmt: skip
    rows = {json.loads(line)["sample_id"]: json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()}
    assert {sid: r["scores"]["accuracy"] for sid, r in rows.items()} == accs  # EvalScope's verdict on every sample
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metrics"]["overall"] == pytest.approx(result["reproduced"]["en"]["overall"], abs=1e-12)
    assert rescore.main([str(run), "--set", "benchmark.scoring=official"]) == 0
    official = json.loads((run / "rescored" / "official" / "summary.json").read_text())
    assert official["metrics"]["accuracy/normal_atom_bool"] == pytest.approx(2 / 8)  # the prose-wrapped answers fail


def test_evalscope_rules_stay_bounded_on_hostile_answers() -> None:
    """The decoder's bounds hold for the first block too: an oversized or too deeply nested
    block is a format error with its reason, never a crash."""
    huge = "text " + "[" + "a(x=1)," * 60_000 + "]"
    verdict, calls, _ = score_normal_evalscope(_TRIP, huge, _TRIP_GOLD, "normal_atom_bool")
    assert calls is None and "character limit" in verdict.detail
    deep = "see " + "[" * 100_000 + "]" * 100_000
    verdict, calls, _ = score_normal_evalscope(_TRIP, deep, _TRIP_GOLD, "normal_atom_bool")
    assert calls is None and verdict.detail.startswith("wrong_output_format")


def test_instrument_change_names_only_keys_both_runs_record() -> None:
    from types import SimpleNamespace

    from evalkit.compare import instrument_change
    from evalkit.summary import Summary

    def run(**instrument: str) -> Any:
        return SimpleNamespace(summary=Summary(status="complete", benchmark="acebench", model="m", n_samples=1, n_scored=1,
                                               n_failed=0, n_scored_rows=1, n_failed_rows=0, instrument=instrument))  # fmt: skip

    assert instrument_change(run(scoring="official"), run(scoring="evalscope")) == "scoring: 'official' vs 'evalscope'"
    assert instrument_change(run(scoring="official"), run(scoring="official")) == ""
    assert instrument_change(run(), run(scoring="official")) == ""  # a run from before the instrument was recorded
