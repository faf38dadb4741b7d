"""``import_evalscope`` on EvalScope output directories as EvalScope 1.14.1 writes them, and as
the versions around it do (issue 49): report schema 2 (``identity.name: "accuracy"``, no
``name``) and schema 1 (``name: "acc"``), each recognised by its own fields, EvalScope's
OVERALL shown beside the reproduced one; a torn last line skipped and named, duplicated
indices named (never overwritten), repeats imported as evalkit repeats, a folder without
reviews refused in one line; ``test_all`` taken as EvalScope takes it.

The directories are written here in EvalScope's layout, their reports aggregated by
EvalScope's rules (scores rounded to 4 digits, groups the mean of their categories, OVERALL
weighted 0.578 / 0.2676 / 0.1545 and renormalised over the groups evaluated)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.categories import ALL_CATEGORIES, GROUPS, OVERALL_WEIGHTS
from evalkit.import_evalscope import import_run, main, read_report

MODEL = "qwen3-8b"


def _round(x: float) -> float:
    return round(x, 4)


def _report(rows: dict[str, list[dict[str, Any]]], schema: int, name: str = "accuracy") -> dict[str, Any]:
    """The report EvalScope writes for ``rows`` (per category, every row counted; a
    multi-turn dialogue counts once, passed when all its rows pass)."""
    subsets = []
    for category, items in rows.items():
        if category.startswith("normal_multi_turn_"):
            dialogues: dict[str, list[bool]] = defaultdict(list)
            for item in items:
                dialogues[item["id"].rsplit("_", 1)[0]].append(item["acc"] == 1.0)
            score, num = sum(all(v) for v in dialogues.values()) / len(dialogues), len(dialogues)
        else:
            score, num = sum(i["acc"] for i in items) / len(items), len(items)
        subsets.append({"name": category, "score": _round(score), "num": num})
    by_name = {s["name"]: s for s in subsets}
    groups = []
    for group, members in GROUPS.items():
        present = [by_name[c] for c in members if c in by_name]
        if present:
            groups.append({"name": group, "score": _round(sum(s["score"] for s in present) / len(present)),
                           "num": sum(s["num"] for s in present)})  # fmt: skip
    weights = {g["name"]: (OVERALL_WEIGHTS[g["name"]], g["score"]) for g in groups if g["name"] in OVERALL_WEIGHTS}
    overall = _round(sum(w * s for w, s in weights.values()) / sum(w for w, _ in weights.values()))
    families = defaultdict(list)
    for s in subsets:
        families[s["name"].split("_")[0]].append(s)
    categories = [{"name": [f], "num": 0, "score": 0.0, "macro_score": 0.0, "subsets": subs} for f, subs in families.items()]
    categories.append({"name": ["-"], "num": 0, "score": 0.0, "macro_score": 0.0,
                       "subsets": groups + [{"name": "OVERALL", "score": overall, "num": sum(g["num"] for g in groups)}]})  # fmt: skip
    if schema == 2:
        identity = {"name": name, "aggregation": "mean", "dimensions": {}}
        process = {"identity": {"name": "process_acc", "aggregation": "mean", "dimensions": {}}, "legacy_name": None,
                   "num": 1, "score": 0.5, "macro_score": 0.5, "categories": [], "semantics": {"kind": "quality"}}  # fmt: skip
        return {"schema_version": 2, "name": f"{MODEL}@acebench", "dataset_name": "acebench", "model_name": MODEL,
                "metrics": [process, {"identity": identity, "legacy_name": None, "num": 10, "score": 0.42,
                                      "macro_score": 0.4, "categories": categories, "semantics": {"kind": "quality"}}],
                "analysis": "N/A", "perf_metrics": None, "primary_metric_identity": identity, "judge_summary": None,
                "execution_summary": {"requested": 10, "succeeded": 10, "errored": 0, "incomplete": False}, "num": 10}  # fmt: skip
    return {"name": f"{MODEL}@acebench", "dataset_name": "acebench", "model_name": MODEL, "score": 0.42,
            "metrics": [{"name": name, "num": 10, "score": 0.42, "categories": categories}]}  # fmt: skip


def _write(root: Path, rows: dict[str, list[dict[str, Any]]], schema: int = 2, repeats: int = 1, report: bool = True,
           name: str = "accuracy") -> Path:  # fmt: skip
    """An EvalScope output directory as its ACEBench adapter writes one: ``rows`` per category
    are ``{"id", "output", "acc"}`` in dataset order, each written ``repeats`` times (index
    ``i * repeats + k``, ``generation_index`` ``k``); reasoning cut out of an answer is a
    content part of its own, as EvalScope's message model stores it."""
    for kind in ("predictions", "reviews", "reports"):
        (root / kind / MODEL).mkdir(parents=True, exist_ok=True)
    (root / "configs").mkdir(exist_ok=True)
    (root / "configs" / "task_config_9f8e.yaml").write_text(
        "model: qwen3-8b\ndatasets: [acebench]\ndataset_args:\n  acebench:\n    extra_params: {language: en}\n")
    for category, items in rows.items():
        with open(root / "predictions" / MODEL / f"acebench_{category}.jsonl", "w") as pred, \
             open(root / "reviews" / MODEL / f"acebench_{category}.jsonl", "w") as rev:  # fmt: skip
            for i, item in enumerate(items):
                for k in range(repeats):
                    index = i * repeats + k
                    content = ([{"type": "reasoning", "reasoning": item["reasoning"]}, {"type": "text", "text": item["output"]}]
                               if item.get("reasoning") else item["output"])  # fmt: skip
                    meta = {"id": item["id"], "test_category": category, "language": "en",
                            "dialogue_id": item["id"].rsplit("_", 1)[0] if "multi_turn" in category else item["id"]}  # fmt: skip
                    pred.write(json.dumps({"index": index, "model": MODEL, "model_output": {"model": MODEL, "choices": [
                        {"message": {"role": "assistant", "content": content}, "stop_reason": "stop"}]},
                        "messages": [], "agent_trace": None, "metadata": meta}) + "\n")  # fmt: skip
                    acc = item["accs"][k] if "accs" in item else item["acc"]
                    rev.write(json.dumps({"index": index, "target": "{}", "messages": [], "agent_trace": None, "sample_score": {
                        "score": {"value": {"acc": acc}, "status": "success", "prediction": item["output"],
                                  "extracted_prediction": item["output"], "main_score_name": "acc"},
                        "sample_id": index, "group_id": i, "generation_index": k, "sample_metadata": meta}}) + "\n")  # fmt: skip
    if report:
        counted = {c: [{**i, "acc": a} for i in items for a in (i.get("accs") or [i["acc"]] * repeats)] for c, items in rows.items()}
        (root / "reports" / MODEL / "acebench.json").write_text(json.dumps(_report(counted, schema, name), indent=4))
    return root


def _rows(n_bool: int = 6, n_special: int = 4) -> dict[str, list[dict[str, Any]]]:
    return {
        "normal_atom_bool": [{"id": f"normal_atom_bool_{i}", "output": f"[f(x={i})]", "acc": float(i % 3 == 0)} for i in range(n_bool)],
        "special_irrelevant": [{"id": f"special_irrelevant_{i}", "output": "beyond the limitations of the function",
                                "acc": float(i != 1)} for i in range(n_special)],  # fmt: skip
    }


def _run(root: Path, out: Path, capsys, *extra: str) -> tuple[int, str, str, dict[str, Any] | None]:
    capsys.readouterr()
    code = main([str(root), "--out", str(out), *extra])
    captured = capsys.readouterr()
    result = json.loads((out / "import.json").read_text()) if (out / "import.json").exists() else None
    return code, captured.out, captured.err, result


# ---- reports: schema 2 (1.14.1) and schema 1, EvalScope's OVERALL beside the reproduced one ---------


@pytest.mark.parametrize("schema, name, fmt, metric", [
    (2, "accuracy", "schema 2", "accuracy:mean"),  # 1.14.1: identity.name, no name key
    (1, "acc", "schema 1", "acc"),
    (1, "mean_acc", "schema 1", "mean_acc"),
])  # fmt: skip
def test_each_report_schema_gives_evalscopes_overall_beside_the_reproduced_one(tmp_path, capsys, schema, name, fmt, metric) -> None:
    root = _write(tmp_path / "es", _rows(), schema=schema, name=name)
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0, err
    normal, special = 2 / 6, 3 / 4  # ids 0 and 3 of six pass; all but one of four
    want = (0.578 * normal + 0.2676 * special) / (0.578 + 0.2676)
    report = result["evalscope_report"]
    assert fmt in report["format"] and report["metric"] == metric
    assert report["overall"] == round((0.578 * round(normal, 4) + 0.2676 * 0.75) / (0.578 + 0.2676), 4)
    assert report["categories"] == {"normal_atom_bool": 0.3333, "special_irrelevant": 0.75}
    assert report["overall_groups"] == ["NORMAL", "SPECIAL"]
    assert result["overall"]["reproduced"] == pytest.approx(want, abs=1e-12)
    assert result["overall"]["evalscope"] == report["overall"] and abs(report["overall"] - want) < 1e-4  # its rounding
    line = next(x for x in out.splitlines() if "OVERALL" in x)
    assert f"EvalScope {report['overall']:.4f} (its report, over NORMAL + SPECIAL)" in line
    assert f"reproduced {want:.4f} (its verdicts over NORMAL + SPECIAL), what the evalscope-rules replay gives" in line


def test_a_report_without_an_accuracy_metric_or_overall_is_named(tmp_path, capsys) -> None:
    root = _write(tmp_path / "es", _rows(), schema=2, name="exact_match")
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0, err
    assert result["evalscope_report"]["format"] == "not recognised" and result["overall"]["evalscope"] is None
    assert "EvalScope: none (no accuracy metric (accuracy or acc or mean_acc) in the report (its metrics: exact_match, process_acc))" in out
    report = root / "reports" / MODEL / "acebench.json"
    data = json.loads(report.read_text())
    data["metrics"] = [{"name": "acc", "categories": [{"name": ["normal"], "subsets": [{"name": "normal_atom_bool", "score": 0.5, "num": 2}]}]}]
    report.write_text(json.dumps(data))
    assert read_report(report)["why"] == "the report holds no OVERALL (category '-', subset 'OVERALL')"
    report.unlink()
    code, out, err, result = _run(root, tmp_path / "out2", capsys)
    assert code == 0 and f"EvalScope: none (no report (reports/{MODEL}/acebench.json))" in out


def test_the_reasoning_part_is_not_the_answer_and_text_parts_join_by_newline(tmp_path, capsys) -> None:
    rows = _rows(2, 1)
    rows["normal_atom_bool"][0]["reasoning"] = "the user asks [g(y=2)]"
    root = _write(tmp_path / "es", rows)
    pred = root / "predictions" / MODEL / "acebench_normal_atom_bool.jsonl"
    lines = pred.read_text().splitlines()
    second = json.loads(lines[1])
    second["model_output"]["choices"][0]["message"]["content"] = [{"type": "text", "text": "Here:"}, {"type": "text", "text": "[f(x=1)]"}]
    pred.write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    assert _run(root, tmp_path / "out", capsys)[0] == 0
    replay = [json.loads(x) for x in (tmp_path / "out" / "replay.jsonl").read_text().splitlines()]
    assert [r["output"] for r in replay[:2]] == ["[f(x=0)]", "Here:\n[f(x=1)]"]


# ---- what an interrupted or repeated run leaves ----------------------------------------------------


@pytest.mark.parametrize("kind", ["predictions", "reviews"])
def test_a_torn_last_line_is_skipped_and_named(tmp_path, capsys, kind) -> None:
    root = _write(tmp_path / "es", _rows())
    path = root / kind / MODEL / "acebench_normal_atom_bool.jsonl"
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:57])  # a seventh row cut mid-write: no newline
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0, err
    name = f"{kind}/{MODEL}/acebench_normal_atom_bool.jsonl"
    assert result["torn"] == [{"file": name, "line": 7, "why": "torn last line (no newline, not a JSON row), as an "
                                                               "interrupted run leaves it; skipped"}]  # fmt: skip
    assert f"torn last lines skipped: {name}:7" in out and result["n_replay"] == 10
    # cut inside a multi-byte character, too
    path.write_bytes(text.encode() + '{"index": 6, "x": "é'.encode()[:-1])
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0 and result["torn"][0]["line"] == 7, err


def test_a_damaged_line_that_is_not_the_last_is_still_refused(tmp_path, capsys) -> None:
    root = _write(tmp_path / "es", _rows())
    path = root / "reviews" / MODEL / "acebench_normal_atom_bool.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + [lines[2][:40]] + lines[3:]) + "\n")
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 2 and err.count("\n") == 1 and f"{path}:3: not JSON" in err


def test_a_duplicated_review_index_is_named_never_overwritten(tmp_path, capsys) -> None:
    """EvalScope's report counts every review row: a second row of index 1 (failed where the
    first passed) moves its category; the import keeps the first row, names the second, and
    gives both figures."""
    rows = _rows()
    rows["normal_atom_bool"][1]["acc"] = 1.0  # ids 0, 1, 3 pass: 3/6
    root = _write(tmp_path / "es", rows)
    path = root / "reviews" / MODEL / "acebench_normal_atom_bool.jsonl"
    lines = path.read_text().splitlines()
    again = json.loads(lines[1])
    again["sample_score"]["score"]["value"]["acc"] = 0.0
    path.write_text("\n".join(lines + [json.dumps(again)]) + "\n")
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0, err
    assert result["duplicates"] == [{"file": f"reviews/{MODEL}/acebench_normal_atom_bool.jsonl", "line": 7, "index": 1,
                                     "first_line": 2, "same": False}]  # fmt: skip
    assert result["reproduced"]["en"]["categories"]["normal_atom_bool"] == pytest.approx(3 / 6)
    assert result["reproduced_with_duplicates"]["en"]["categories"]["normal_atom_bool"] == pytest.approx(3 / 7)
    assert "1 duplicated index, not imported (the first row of each is)" in out and "acebench_normal_atom_bool.jsonl:7 (index 1, first at line 2)" in out
    replay = [json.loads(x) for x in (tmp_path / "out" / "replay.jsonl").read_text().splitlines()]
    assert [r["sample_id"] for r in replay].count("en/normal_atom_bool_1") == 1


def test_repeats_become_evalkit_repeats(tmp_path, capsys) -> None:
    rows = _rows(3, 2)
    rows["normal_atom_bool"][1]["accs"] = [1.0, 0.0]  # the second repeat of id 1 fails
    rows["normal_multi_turn_user_adjust"] = [
        {"id": "normal_multi_turn_user_adjust_0_0", "output": "[a(x=1)]", "accs": [1.0, 1.0]},
        {"id": "normal_multi_turn_user_adjust_0_1", "output": "[b(x=1)]", "accs": [1.0, 0.0]},  # dialogue 0 fails in repeat 1
        {"id": "normal_multi_turn_user_adjust_1_0", "output": "[c(x=1)]", "accs": [1.0, 1.0]},
    ]  # fmt: skip
    for item in rows["normal_multi_turn_user_adjust"]:
        item["acc"] = item["accs"][0]
    root = _write(tmp_path / "es", rows, repeats=2)
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 0, err
    assert result["repeats"] == 2 and result["unmatched"] == [] and result["n_replay"] == 16
    replay = [json.loads(x) for x in (tmp_path / "out" / "replay.jsonl").read_text().splitlines()]
    assert [(r["sample_id"], r["epoch"]) for r in replay if "atom" in r["sample_id"]][:4] == [
        ("en/normal_atom_bool_0", 0), ("en/normal_atom_bool_0", 1), ("en/normal_atom_bool_1", 0), ("en/normal_atom_bool_1", 1)]
    ids = (tmp_path / "out" / "sample_ids.txt").read_text().splitlines()
    assert len(ids) == len(set(ids)) == 8 and ids.index("en/normal_atom_bool_1") == ids.index("en/normal_atom_bool_0") + 1
    assert "run.repeats=2" in result["commands"]["evalscope_rules"]
    # EvalScope pools the repeats: bool 3 of 6 rows pass (id 0 twice, id 1 once); multi-turn:
    # dialogue 0 fails (a turn of repeat 1), dialogue 1 passes: 1/2
    pooled = result["reproduced"]["en"]["categories"]
    assert pooled["normal_atom_bool"] == pytest.approx(3 / 6) and pooled["normal_multi_turn_user_adjust"] == pytest.approx(1 / 2)
    # evalkit averages the repeats: multi-turn 2/2 in repeat 0, 1/2 in repeat 1
    normal = lambda bool_, turn: (bool_ + turn) / 2  # NORMAL: the mean of its categories  # noqa: E731
    overall = lambda n, s: (0.578 * n + 0.2676 * s) / (0.578 + 0.2676)  # noqa: E731
    special = 1 / 2
    want = (overall(normal(2 / 3, 1.0), special) + overall(normal(1 / 3, 0.5), special)) / 2
    assert result["reproduced_per_repeat"]["en"]["overall"] == pytest.approx(want, abs=1e-12)
    assert result["overall"]["replay"] == pytest.approx(want, abs=1e-12)
    assert result["overall"]["reproduced"] == pytest.approx(overall(normal(1 / 2, 1 / 2), special), abs=1e-12)
    assert "the evalscope-rules replay gives" in out and "counts a multi-turn dialogue once" in result["note"]


# ---- refused in one line -----------------------------------------------------------------------


def test_a_folder_without_reviews_is_refused_in_one_line(tmp_path, capsys) -> None:
    root = _write(tmp_path / "es", _rows())
    for path in (root / "reviews" / MODEL).iterdir():
        path.unlink()
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 2 and result is None and err.count("\n") == 1 and "Traceback" not in err
    assert f"no reviews/{MODEL}/acebench_<category>.jsonl" in err and "not imported" in err


def test_a_run_with_nothing_to_replay_is_refused_in_one_line(tmp_path, capsys) -> None:
    root = _write(tmp_path / "es", {"agent_multi_step": [{"id": "agent_multi_step_0", "output": "[...]", "acc": 1.0}]})
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 2 and result is None and err.count("\n") == 1
    assert "nothing to replay" in err and "1 agent samples" in err


def test_the_first_adapters_files_are_refused_in_one_line(tmp_path, capsys) -> None:
    root = tmp_path / "es"
    for kind in ("predictions", "reviews"):
        (root / kind / MODEL).mkdir(parents=True)
        (root / kind / MODEL / "acebench_normal.jsonl").write_text(json.dumps({"index": 0, "sample_score": {
            "score": {"value": {"acc": 1.0}}, "sample_metadata": {"id": "normal_atom_bool_1", "sub_category": "normal_atom_bool"}}}) + "\n")  # fmt: skip
    code, out, err, result = _run(root, tmp_path / "out", capsys)
    assert code == 2 and err.count("\n") == 1 and "acebench_normal.jsonl are the files of EvalScope 1.10's first ACEBench adapter" in err


# ---- test_all ------------------------------------------------------------------------------------


def test_test_all_is_every_category() -> None:
    settings = AceBenchSettings(subsets=["test_all"])
    assert settings.subsets == list(ALL_CATEGORIES) and settings.subsets_expanded == {"test_all": list(ALL_CATEGORIES)}
    assert AceBenchSettings(subsets=["TEST_ALL", "normal_atom_bool"]).subsets == list(ALL_CATEGORIES)


# ---- the replay gives the reproduced figure, repeats included ----------------------------------------


@pytest.mark.slow
def test_a_replay_of_an_import_with_repeats_gives_the_per_repeat_figure(run_eval, acebench_dir, tmp_path, capsys) -> None:
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language="en", subsets=["normal_atom_bool", "special_irrelevant"]))
    samples = bench.load()
    rows: dict[str, list[dict[str, Any]]] = {"normal_atom_bool": [], "special_irrelevant": []}
    for s in [x for x in samples if x.subset == "normal_atom_bool"][:4] + [x for x in samples if x.subset == "special_irrelevant"][:2]:
        ref = bench.reference_output(s)
        rows[s.subset].append({"id": s.data["prompt"]["id"], "output": ref, "acc": 1.0})
    rows["normal_atom_bool"][1]["output"] = "[wrong_api(x=1)]"
    rows["normal_atom_bool"][1]["acc"] = 0.0
    root = _write(tmp_path / "es", rows, repeats=2)
    out = tmp_path / "imported"
    result = import_run(root, out, data_dir=acebench_dir)
    run = run_eval(["model=replay", f"model.path={out / 'replay.jsonl'}", "benchmark.scoring=evalscope", "run.repeats=2",
                    "benchmark.subsets=[normal_atom_bool,special_irrelevant]", f"run.sample_ids_file={out / 'sample_ids.txt'}"]).run_dir  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    assert summary["repeats"] == 2 and summary["n_scored_rows"] == 12
    assert summary["metrics"]["overall"] == pytest.approx(result["overall"]["replay"], abs=1e-12)
    assert summary["metrics"]["overall"] == pytest.approx(result["overall"]["reproduced"], abs=1e-12)  # no multi-turn: the same
