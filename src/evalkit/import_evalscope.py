"""Import an EvalScope ACEBench run as an evalkit replay — no model, no EvalScope installed.

    python -m evalkit.import_evalscope EVALSCOPE_OUTPUT_DIR [--out DIR] [--model NAME] [--data-dir DIR]

Reads the run directory EvalScope (1.x, ``evalscope eval --datasets acebench``) writes:

- ``predictions/<model>/acebench_<category>.jsonl``: one object per sample, ``index`` (the
  sample's position in EvalScope's dataset), ``model_output.choices[0].message.content``
  (a string, or a list of content parts whose ``text`` parts are the answer) and
  ``messages``;
- ``reviews/<model>/acebench_<category>.jsonl``: one object per scored sample, ``index`` and
  ``sample_score``: ``score.value.acc`` (and ``process_acc``), ``score.prediction`` (the
  answer as scored), ``sample_metadata`` (ACEBench's record ``id``, ``test_category``,
  ``language``, ``dialogue_id``; ``end_state`` / ``process`` for agent rollouts);
- ``reports/<model>/acebench.json``: the report; metric ``acc``, category ``-`` holds the
  groups and the weighted ``OVERALL`` (EvalScope's console row "OVERALL" is a plain mean
  over units, not this);
- ``configs/*.yaml``: the task config (``dataset_args.acebench.extra_params.language``).

Written to ``--out`` (default ``outputs/evalscope_import/<name of the run directory>``):

- ``replay.jsonl``: ``{"sample_id": "en/normal_atom_bool_3", "output": ...}`` for every
  normal and special sample whose ACEBench id is known (evalkit's ``model=replay`` file),
  and ``sample_ids.txt``, their ids (``run.sample_ids_file``: the replay run selects what
  EvalScope ran, a limited run included);
- ``import.json``: the mapping's counts; ``unmatched`` (rows whose id is missing, unknown to
  the data with ``--data-dir``, or given twice), ``not_rescorable`` (agent samples: rollouts,
  which a replay of strings cannot carry), ``empty`` (empty answers: EvalScope scored them 0,
  evalkit makes them failures); EvalScope's own figures (the report's weighted OVERALL and
  categories) and ``reproduced``: EvalScope's per-sample verdicts aggregated by ACEBench's
  rules over normal + special only, the weights renormalised (as EvalScope renormalises over
  the groups evaluated) — the figure a replay of ``replay.jsonl`` scored with
  ``benchmark.scoring=evalscope`` gives (with empty answers, ``reproduced_without_empty``:
  the figure without them, which that run's ``partial_overall`` gives); and the commands.

Exit code: 0 written, 2 the directory is not a readable EvalScope ACEBench run (one line).
Nothing of the EvalScope directory is changed; its texts are stored as they are.

The directory is untrusted input, read through :mod:`evalkit.untrusted` with itself as the
root: a file reached through a link out of it, a FIFO, a device or a directory where a file
should be, an oversized file or line, an ``index`` that is not a JSON integer from 0 to
2**53 - 1, or a verdict (``acc``, ``process_acc``) that is not a number in [0, 1] (NaN,
Infinity) is refused in one line naming the file (and line), exit 2. Rows are read a line at
a time, and of each only the answer text and the verdict's fields are kept. An ACEBench id
that is not one line of printable text is listed as unmatched, never written to
``sample_ids.txt``; ``import.json`` is strict JSON (no NaN or Infinity).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from evalkit.benchmarks.acebench.benchmark import AceBench
from evalkit.benchmarks.acebench.categories import ALL_CATEGORIES, GROUPS, LANGUAGES, family
from evalkit.benchmarks.acebench.metrics import dialogue_id, group_scores, overall_score
from evalkit.benchmarks.acebench.settings import AceBenchSettings
from evalkit.errors import DataError, EvalkitError, printable, shell_line
from evalkit.untrusted import MAX_YAML_BYTES, iter_records, load_yaml, read_json, read_text

#: the largest EvalScope report (``reports/<model>/acebench.json``, a few KiB) read, in bytes
MAX_REPORT_BYTES = 16 * 2**20
#: an ``index`` is a JSON integer from 0 to this (2**53 - 1: the largest every JSON reader
#: holds exactly); EvalScope's are positions in a dataset of a few thousand samples
MAX_INDEX = 2**53 - 1

BENCHMARK = "acebench"
#: the note every import carries about the OVERALL it reproduces
OVERALL_NOTE = (
    "EvalScope's weighted OVERALL covers the groups it evaluated, agent included; a replay cannot "
    "carry agent rollouts, so 'reproduced' is EvalScope's own verdicts aggregated over normal + special "
    "only, the weights 0.578 / 0.2676 renormalised (as EvalScope renormalises over the groups evaluated). "
    "A replay of replay.jsonl with benchmark.scoring=evalscope gives this figure; with the default "
    "benchmark.scoring=official it gives the official one. EvalScope's console row 'OVERALL' is a plain "
    "mean over units, not the weighted OVERALL."
)


def _text(output: Any) -> str | None:
    """The answer text of an EvalScope ``ModelOutput`` dump: ``completion`` when present, else
    the first choice's message content (a string, or the ``text`` of its text parts joined);
    ``None`` when there is none."""
    if not isinstance(output, dict):
        return None
    if isinstance(output.get("completion"), str):
        return output["completion"]
    choices = output.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def _category_of(path: Path) -> str | None:
    """``acebench_normal_atom_bool.jsonl`` → ``normal_atom_bool`` (``None`` for another file)."""
    stem = path.name.removesuffix(".jsonl")
    if not stem.startswith(BENCHMARK + "_"):
        return None
    category = stem[len(BENCHMARK) + 1:]
    return category if category in ALL_CATEGORIES else None


def _model_dir(root: Path, model: str | None) -> str:
    """The model's folder name under ``predictions/`` or ``reviews/``: ``model`` when given,
    else the only one holding ACEBench files.

    Raises:
        DataError: none, or several without ``--model``."""
    found = sorted({p.parent.name for kind in ("predictions", "reviews")
                    for p in (root / kind).glob(f"*/{BENCHMARK}_*.jsonl")})  # fmt: skip
    if model is not None:
        if model not in found:
            raise DataError(f"{root}: no ACEBench files for model {model!r} (found: {', '.join(found) or 'none'})")
        return model
    if not found:
        raise DataError(f"{root}: not an EvalScope ACEBench output directory "
                        f"(no predictions/<model>/{BENCHMARK}_<category>.jsonl or reviews/…)")  # fmt: skip
    if len(found) > 1:
        raise DataError(f"{root}: ACEBench files of several models ({', '.join(found)}); choose one with --model")
    return found[0]


def _config_language(root: Path) -> str | None:
    """``dataset_args.acebench.extra_params.language`` of the run's task config, if any (a
    config that is not YAML or lacks the key is passed over).

    Raises:
        DataError: a config file that cannot be read: outside ``root``, not a regular file,
            over :data:`~evalkit.untrusted.MAX_YAML_BYTES` or not UTF-8 (one line)."""
    for path in sorted((root / "configs").glob("*.yaml")) if (root / "configs").is_dir() else []:
        text = read_text(path, MAX_YAML_BYTES, root=root, what="a YAML file")
        try:
            cfg = load_yaml(text, printable(str(path)))
            language = cfg["dataset_args"][BENCHMARK]["extra_params"]["language"]
        except (EvalkitError, KeyError, TypeError):
            continue
        if language in LANGUAGES:
            return str(language)
    return None


def _files(root: Path, kind: str, model: str) -> dict[str, Path]:
    """``{category: path}`` of ``<kind>/<model>/acebench_<category>.jsonl`` (names only:
    nothing is opened)."""
    out: dict[str, Path] = {}
    for path in sorted((root / kind / model).glob(f"{BENCHMARK}_*.jsonl")):
        category = _category_of(path)
        if category is not None:
            out[category] = path
    return out


def _shown(value: Any) -> str:
    """``value`` of a row as its JSON text, short and printable (a container by its kind)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if value is None:
        return "null"
    if isinstance(value, str):
        return printable(json.dumps(value[:40]), 44)
    text = json.dumps(value)  # NaN / Infinity as the file spells them; an int has at most 4300 digits
    return printable(text, 40) if len(text) <= 40 else f"{text[:20]}… ({len(text):,} characters)"


def _index(row: dict[str, Any], path: Path, lineno: int) -> int:
    """A row's ``index``: a JSON integer from 0 to :data:`MAX_INDEX` (``true`` and ``1.0``,
    which Python takes for ``1``, are not).

    Raises:
        DataError: anything else, a missing one included (one line naming file and line)."""
    index = row.get("index")
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index <= MAX_INDEX:
        return index
    raise DataError(f"{printable(str(path))}:{lineno}: index is {'missing' if 'index' not in row else _shown(index)}, "
                    f"not a JSON integer from 0 to {MAX_INDEX:,} (EvalScope's position of the sample); not imported")


def _verdict(value: dict[str, Any], key: str, path: Path, lineno: int) -> float | None:
    """``sample_score.score.value.<key>`` as a float in [0, 1]; ``None`` when it is not a
    number (no verdict, as a missing one).

    Raises:
        DataError: a number outside [0, 1]: NaN, Infinity, ``1e999``, a negative or a huge
            one (one line naming file and line)."""
    number = value.get(key)
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        return None
    if not 0 <= number <= 1:  # NaN compares false
        raise DataError(f"{printable(str(path))}:{lineno}: sample_score.score.value.{key} is {_shown(number)}, "
                        "not a number from 0 to 1; not imported")  # fmt: skip
    return float(number)


def _id_problem(record_id: str) -> str | None:
    """Why an ACEBench record id cannot be one line of ``sample_ids.txt`` (which is split on
    newlines, each line stripped), or ``None`` when it can."""
    if not record_id.isprintable():
        return "its ACEBench id holds a character that is not printable (a newline, another control character, " \
               "a line separator or a lone surrogate), and sample_ids.txt holds one id per line"
    if record_id != record_id.strip():
        return "its ACEBench id begins or ends with white space, which sample_ids.txt's reader strips"
    return None


def read_evalscope_run(root: Path, model: str | None = None, language: str | None = None,
                       known_ids: set[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Read an EvalScope ACEBench output directory into evalkit's terms.

    Returns ``{"model", "language", "samples": [{"sample_id", "category", "output",
    "acc", "process_acc", "end_state"}], "unmatched": [{"file", "line", "index", "why"}],
    "report": {...} or None}``. A sample's id is ``<language>/<ACEBench record id>`` (the
    record id from the review's ``sample_metadata.id``; the language from its metadata,
    else ``language``, else the task config, else ``en``). A prediction without a review
    (or a review without an id) is unmatched, as is an id not in ``known_ids`` (when given)
    or given twice. The answer is the prediction's text, else the review's ``prediction``.

    Raises:
        DataError: not such a directory, a file that is not JSON Lines, outside ``root``, not
            a regular file or over a bound, an ``index`` or a verdict out of its range (one
            line naming the file, and the line).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such directory")
    model_dir = _model_dir(root, model)
    default_language = language or _config_language(root) or "en"
    predictions = _files(root, "predictions", model_dir)
    reviews = _files(root, "reviews", model_dir)
    samples: list[dict[str, Any]] = []
    unmatched: list[dict[str, Any]] = []
    seen: set[str] = set()
    for category in [c for c in ALL_CATEGORIES if c in predictions or c in reviews]:
        review_file = f"reviews/{model_dir}/{BENCHMARK}_{category}.jsonl"
        pred_file = f"predictions/{model_dir}/{BENCHMARK}_{category}.jsonl"
        # a row at a time, and of each only what the import uses: the answer text; the review's fields
        outputs: dict[int, tuple[int, str | None]] = {}
        for lineno, row in iter_records(predictions[category], root=root) if category in predictions else ():
            outputs[_index(row, predictions[category], lineno)] = (lineno, _text(row.get("model_output")))
        by_index: dict[int, tuple[int, dict[str, Any]]] = {}
        for lineno, row in iter_records(reviews[category], root=root) if category in reviews else ():
            index = _index(row, reviews[category], lineno)
            no_text = outputs.get(index, (0, None))[1] is None  # the review's prediction is the answer then
            by_index[index] = (lineno, _review(row, reviews[category], lineno, keep_prediction=no_text))
        for index, (lineno, _) in outputs.items():
            if index not in by_index:
                unmatched.append({"file": pred_file, "line": lineno, "index": index, "why": "no review row holds its ACEBench id"})
        for index, (lineno, review) in by_index.items():
            record_id, meta = review["id"], review["meta"]
            lang = meta.get("language") if meta.get("language") in LANGUAGES else default_language
            where = {"file": review_file, "line": lineno, "index": index}
            if not isinstance(record_id, str) or not record_id:
                unmatched.append({**where, "why": "no sample_metadata.id"})
                continue
            if (problem := _id_problem(record_id)) is not None:
                unmatched.append({**where, "id": record_id, "why": problem})
                continue
            sample_id = f"{lang}/{record_id}"
            if known_ids is not None and sample_id not in known_ids:
                unmatched.append({**where, "sample_id": sample_id, "why": "not an id of evalkit's ACEBench data"})
                continue
            if sample_id in seen:
                unmatched.append({**where, "sample_id": sample_id, "why": "id given twice"})
                continue
            seen.add(sample_id)
            output = outputs.get(index, (None, None))[1]
            if output is None:
                output = review["prediction"]
            samples.append({
                "sample_id": sample_id, "category": meta.get("test_category") if meta.get("test_category") in ALL_CATEGORIES else category,
                "output": output, "acc": review["acc"], "process_acc": review["process_acc"],
                "has_end_state": review["has_end_state"],
            })  # fmt: skip
    report_path = root / "reports" / model_dir / f"{BENCHMARK}.json"
    # lexists: a FIFO, a directory or a link where the report belongs is refused, never passed over
    report = read_report(report_path, root) if os.path.lexists(report_path) else None
    return {"model": model_dir, "language": default_language, "samples": samples, "unmatched": unmatched, "report": report}


def _review(row: dict[str, Any], path: Path, lineno: int, keep_prediction: bool) -> dict[str, Any]:
    """What the import keeps of a review row: ``id`` (``sample_metadata.id`` as written),
    ``meta`` (its ``language`` and ``test_category``), ``acc`` and ``process_acc``
    (:func:`_verdict`), ``has_end_state``, and ``prediction`` (``score.prediction`` when a
    string and ``keep_prediction``: the prediction row has no answer text; else ``None``).

    Raises:
        DataError: a verdict outside [0, 1] (one line naming file and line)."""
    score = (row.get("sample_score") or {}) if isinstance(row.get("sample_score"), dict) else {}
    meta = score.get("sample_metadata") if isinstance(score.get("sample_metadata"), dict) else {}
    inner = score.get("score") if isinstance(score.get("score"), dict) else {}
    value = inner.get("value") if isinstance(inner.get("value"), dict) else {}
    prediction = inner.get("prediction")
    return {
        "id": meta.get("id"),
        "meta": {k: meta.get(k) for k in ("language", "test_category") if isinstance(meta.get(k), str)},
        "acc": _verdict(value, "acc", path, lineno), "process_acc": _verdict(value, "process_acc", path, lineno),
        "has_end_state": meta.get("end_state") is not None,
        "prediction": prediction if keep_prediction and isinstance(prediction, str) else None,
    }  # fmt: skip


def _number(value: Any) -> float | None:
    """A finite number as a float; ``None`` for anything else (an int too large for a float
    included)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def read_report(path: Path, root: Path | None = None) -> dict[str, Any]:
    """``{"overall": weighted OVERALL or None, "groups": {ATOM…: score}, "categories":
    {category: score}, "score": the report's top-level score}`` of EvalScope's
    ``reports/<model>/acebench.json`` (metric ``acc``; the groups and ``OVERALL`` are the
    subsets of category ``-``), read inside ``root``.

    Raises:
        DataError: outside ``root``, not a regular file, over :data:`MAX_REPORT_BYTES`, not
            JSON, or holding NaN or Infinity (one line naming the file)."""
    data = read_json(path, MAX_REPORT_BYTES, root=root, what="an EvalScope report")
    out: dict[str, Any] = {"overall": None, "groups": {}, "categories": {}, "score": _number(data.get("score")) if isinstance(data, dict) else None}
    metrics = data.get("metrics") if isinstance(data, dict) else None
    for metric in metrics if isinstance(metrics, list) else []:
        if not isinstance(metric, dict) or metric.get("name") != "acc":
            continue
        for cat in metric.get("categories") or []:
            if not isinstance(cat, dict):
                continue
            name = cat.get("name")
            name = "-".join(map(str, name)) if isinstance(name, list) else name
            for sub in cat.get("subsets") or []:
                if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                    continue
                score = _number(sub.get("score"))
                if name == "-" and sub["name"] == "OVERALL":
                    out["overall"] = score
                elif name == "-":
                    out["groups"][sub["name"]] = score
                elif sub["name"] in ALL_CATEGORIES:
                    out["categories"][sub["name"]] = score
    return out


def reproduced_overall(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """EvalScope's per-sample verdicts (``acc``) aggregated by ACEBench's rules over normal
    and special categories only (multi-turn: a dialogue counts 1 when all its turns pass),
    per language: ``{"<lang>": {"categories", "groups", "overall"}}`` and, with both
    languages, ``overall`` = their mean (as evalkit's language=all). Samples without a
    verdict are left out."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    dialogues: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for s in samples:
        if s["acc"] is None or family(s["category"]) == "agent":
            continue
        lang, record_id = s["sample_id"].split("/", 1)
        if s["category"].startswith("normal_multi_turn_"):
            dialogues[(lang, s["category"], dialogue_id(record_id))].append(s["acc"] >= 1.0)
        else:
            per[lang][s["category"]].append(s["acc"])
    for (lang, category, _), passed in dialogues.items():
        per[lang][category].append(1.0 if all(passed) else 0.0)
    out: dict[str, Any] = {}
    for lang, cats in sorted(per.items()):
        accuracy = {c: sum(v) / len(v) for c, v in cats.items() if v}
        groups = {g: float(v) for g, v in group_scores(accuracy).items()}
        overall = overall_score(groups)
        out[lang] = {"categories": accuracy, "groups": groups, "overall": None if overall is None else float(overall)}
    overalls = [v["overall"] for v in out.values() if v["overall"] is not None]
    if len(overalls) > 1:
        out["overall"] = sum(overalls) / len(overalls)
    return out


def import_run(root: Path, out_dir: Path, model: str | None = None, language: str | None = None,
               data_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Write ``replay.jsonl`` and ``import.json`` into ``out_dir`` (see the module docstring);
    returns the ``import.json`` object.

    Raises:
        DataError: the EvalScope directory cannot be read, or ``data_dir`` is not ACEBench data.
        OSError: ``out_dir`` cannot be written.
    """
    known = _known_ids(data_dir) if data_dir is not None else None
    run = read_evalscope_run(root, model, language, known)
    replay, agent, empty = [], [], []
    for s in run["samples"]:
        if family(s["category"]) == "agent":
            agent.append({"sample_id": s["sample_id"], "why": "agent rollout: a replay of strings cannot carry its trajectory"
                          + ("; EvalScope recorded its end state, kept in its reviews" if s["has_end_state"] else
                             "; EvalScope's files hold no trajectory of it")})  # fmt: skip
        elif s["output"] is None or not s["output"].strip():
            empty.append(s["sample_id"])
            if s["output"] is not None:
                replay.append({"sample_id": s["sample_id"], "output": s["output"]})
        else:
            replay.append({"sample_id": s["sample_id"], "output": s["output"]})
    languages = sorted({s["sample_id"].split("/", 1)[0] for s in run["samples"]}) or [run["language"]]
    lang_setting = languages[0] if len(languages) == 1 else "all"
    categories = sorted({s["category"] for s in run["samples"] if family(s["category"]) != "agent"}, key=ALL_CATEGORIES.index)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "replay.jsonl", "w", encoding="utf-8") as fh:
        for row in replay:  # ASCII: a lone surrogate in an answer is written as its escape, as it was read
            fh.write(json.dumps(row) + "\n")
    (out_dir / "sample_ids.txt").write_text("".join(f"{r['sample_id']}\n" for r in replay), encoding="utf-8")
    words = ["python", "-m", "evalkit", "benchmark=acebench", "model=replay", f"model.path={out_dir / 'replay.jsonl'}",
             f"benchmark.language={lang_setting}", f"benchmark.subsets=[{','.join(categories)}]",
             f"run.sample_ids_file={out_dir / 'sample_ids.txt'}",
             *([f"benchmark.data_dir={data_dir}"] if data_dir is not None else [])]  # fmt: skip
    base = shell_line(*words)
    result = {
        "source": str(root), "model": run["model"], "language": lang_setting,
        "n_rows": len(run["samples"]) + len(run["unmatched"]), "n_replay": len(replay),
        "unmatched": run["unmatched"],
        "not_rescorable": agent,
        "empty": empty,
        "evalscope_report": run["report"],
        "reproduced": reproduced_overall(run["samples"]),
        # what evalkit's partial_ figures give: the empty answers are failures there, left out
        **({"reproduced_without_empty": reproduced_overall([s for s in run["samples"] if s["sample_id"] not in empty])} if empty else {}),
        "note": OVERALL_NOTE + (f" {len(empty)} empty answers: EvalScope scored them 0; evalkit makes an empty answer "
                                "a failure (the run is incomplete and withholds its headline), so the figure matches "
                                "only once they are counted as 0; 'reproduced_without_empty' is the figure without them, "
                                "which the replay run's partial_overall gives." if empty else ""),  # fmt: skip
        "commands": {
            "evalscope_rules": base + " benchmark.scoring=evalscope",
            "official_rules": base,
            "rescore_official": "python -m evalkit.rescore <RUN_DIR> --set benchmark.scoring=official",
        },
    }
    # strict JSON (a NaN or Infinity is refused here, never written) and ASCII (a lone surrogate in a name is escaped)
    (out_dir / "import.json").write_text(json.dumps(result, indent=2, allow_nan=False), encoding="utf-8")
    return result


def _known_ids(data_dir: Path) -> set[str]:
    """Every sample id of evalkit's ACEBench data in ``data_dir`` (both languages present)."""
    try:
        bench = AceBench(AceBenchSettings(data_dir=data_dir, language="all"))
        return {s.id for s in bench.load()}
    except (ValueError, EvalkitError, OSError) as exc:
        raise DataError(f"--data-dir {data_dir}: {printable(exc, 300)}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.import_evalscope", description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="EvalScope's output directory of the run (holds predictions/, reviews/, reports/)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default outputs/evalscope_import/<name>)")
    parser.add_argument("--model", default=None, help="the model folder to import, when the run holds several")
    parser.add_argument("--language", choices=LANGUAGES, default=None, help="language of rows whose metadata lacks one")
    parser.add_argument("--data-dir", type=Path, default=None, help="evalkit's ACEBench data: ids not in it are listed as unmatched")
    args = parser.parse_args(argv)
    out_dir = args.out or Path("outputs") / "evalscope_import" / (args.source.resolve().name or "run")
    try:
        result = import_run(args.source, out_dir, args.model, args.language, args.data_dir)
    except EvalkitError as exc:
        print(f"evalkit: error: {printable(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"evalkit: error: {out_dir}: cannot write ({type(exc).__name__}: {printable(exc, 200)})", file=sys.stderr)
        return 2
    report = result["evalscope_report"] or {}
    rep = result["reproduced"]
    figure = rep.get("overall", (rep.get(result["language"]) or {}).get("overall"))
    print(f"imported {result['n_replay']} answers of {printable(result['model'])} ({result['language']}) → {printable(str(out_dir / 'replay.jsonl'))}")
    print(f"  unmatched rows: {len(result['unmatched'])}; agent samples not rescorable: {len(result['not_rescorable'])}; "
          f"empty answers: {len(result['empty'])} (all listed in {printable(str(out_dir / 'import.json'))})")  # fmt: skip
    if report.get("overall") is not None:
        print(f"  EvalScope's weighted OVERALL (reports/…/acebench.json): {report['overall']:.4f}")
    if figure is not None:
        print(f"  its verdicts over normal + special, renormalised: overall = {figure:.4f} (what the evalscope-rules replay gives)")
    print(f"  note: {result['note']}")
    print(f"  EvalScope's rules: {printable(result['commands']['evalscope_rules'])}")
    print(f"  official rules:    {printable(result['commands']['official_rules'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
