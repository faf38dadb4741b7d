"""Import an EvalScope ACEBench run as an evalkit replay — no model, no EvalScope installed.

    python -m evalkit.import_evalscope EVALSCOPE_OUTPUT_DIR [--out DIR] [--model NAME] [--data-dir DIR]

Reads the run directory EvalScope's ACEBench adapter (``evalscope eval --datasets acebench``;
the adapter of ACEBench's official protocol, 1.14.1 and the releases around it) writes:

- ``predictions/<model>/acebench_<category>.jsonl``: one object per sample and repeat,
  ``index`` (its position in EvalScope's dataset, repeats included),
  ``model_output.choices[0].message.content`` (a string, or a list of content parts whose
  ``text`` parts, joined by newlines, are the answer; a ``reasoning`` part is what EvalScope
  cut out of it) and ``messages``;
- ``reviews/<model>/acebench_<category>.jsonl``: one object per scored row, ``index`` and
  ``sample_score``: ``score.value.acc`` (and ``process_acc``), ``score.prediction`` (the
  answer as scored), ``generation_index`` (the repeat), ``sample_metadata`` (ACEBench's
  record ``id``, ``test_category``, ``language``, ``dialogue_id``; ``end_state`` /
  ``process`` for agent rollouts);
- ``reports/<model>/acebench.json``: the report, schema 2 (1.14: each metric an
  ``identity``, accuracy ``{"name": "accuracy", ...}``) or schema 1 (before: each metric a
  ``name``, ``acc``), told apart by their own fields (:func:`read_report`); category ``-``
  holds the groups and the weighted ``OVERALL``;
- ``configs/*.yaml``: the task config (``dataset_args.acebench.extra_params.language``).

Written to ``--out`` (default ``outputs/evalscope_import/<name of the run directory>``):

- ``replay.jsonl``: ``{"sample_id": "en/normal_atom_bool_3", "output": ...}`` for every
  normal and special sample whose ACEBench id is known (evalkit's ``model=replay`` file;
  with repeats, each row names its ``epoch``), and ``sample_ids.txt``, their ids
  (``run.sample_ids_file``: the replay run selects what EvalScope ran, a limited run
  included);
- ``import.json``: the mapping's counts; ``overall``: EvalScope's OVERALL (its report's,
  and the groups it covers) beside ``reproduced`` and what the replay gives;
  ``unmatched`` (rows whose id is missing, unknown to the data with ``--data-dir``, or in
  two category files), ``duplicates`` (a second row of an index: named, never imported),
  ``torn`` (the torn last line of a file an interrupted run left: skipped),
  ``not_rescorable`` (agent samples: rollouts, which a replay of strings cannot carry),
  ``empty`` (empty answers: EvalScope scored them 0, evalkit makes them failures);
  EvalScope's own figures (``evalscope_report``) and ``reproduced``: EvalScope's per-row
  verdicts aggregated as EvalScope aggregates them over normal + special only, the weights
  renormalised (as EvalScope renormalises over the groups evaluated) — the figure a replay
  of ``replay.jsonl`` scored with ``benchmark.scoring=evalscope`` gives (with empty answers,
  ``reproduced_without_empty``: the figure without them, which that run's
  ``partial_overall`` gives; with duplicated review rows, ``reproduced_with_duplicates``:
  every row counted, as EvalScope's report counts them; with repeats,
  ``reproduced_per_repeat``: each repeat's figure averaged, as evalkit's ``run.repeats``
  averages, which the replay gives); and the commands.

Exit code: 0 written, 2 the directory is not a readable EvalScope ACEBench run, holds no
review (nothing EvalScope scored) or nothing to replay (one line). Nothing of the EvalScope
directory is changed; its texts are stored as they are.

The directory is untrusted input, read through :mod:`evalkit.untrusted` with itself as the
root: a file reached through a link out of it, a FIFO, a device or a directory where a file
should be, an oversized file or line, a damaged line other than a torn last one, an
``index`` that is not a JSON integer from 0 to 2**53 - 1, or a verdict (``acc``,
``process_acc``) that is not a number in [0, 1] (NaN, Infinity) is refused in one line
naming the file (and line), exit 2. Rows are read a line at a time, and of each only the
answer text and the verdict's fields are kept. An ACEBench id that is not one line of
printable text is listed as unmatched, never written to ``sample_ids.txt``; ``import.json``
is strict JSON (no NaN or Infinity).
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
from evalkit.errors import DataError, EvalkitError, counted, printable, shell_line
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
    "benchmark.scoring=official it gives the official one. EvalScope's report rounds each category, group and "
    "its OVERALL to 4 decimals, so without agent categories the two OVERALLs agree to about 0.0001. "
    "EvalScope's console row 'OVERALL' is a plain mean over units, not the weighted OVERALL."
)


def _text(output: Any) -> str | None:
    """The answer text of an EvalScope ``ModelOutput`` dump as EvalScope scores it:
    ``completion`` when present, else the first choice's message content (a string, or its
    ``text`` parts joined by newlines, as EvalScope's ``message.text`` joins them: a
    reasoning part, which EvalScope cut out of the answer, is not text); ``None`` when there
    is none."""
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
        return "\n".join(p for p in parts if isinstance(p, str))
    return None


def _category_of(path: Path) -> str | None:
    """``acebench_normal_atom_bool.jsonl`` → ``normal_atom_bool`` (``None`` for another file)."""
    stem = path.name.removesuffix(".jsonl")
    if not stem.startswith(BENCHMARK + "_"):
        return None
    category = stem[len(BENCHMARK) + 1:]
    return category if category in ALL_CATEGORIES else None


#: the file stems of EvalScope's first ACEBench adapter (1.10: one file per family, samples
#: tagged ``sub_category``, its own prompt and a lenient scorer)
LEGACY_STEMS = tuple(f"{BENCHMARK}_{family}" for family in ("normal", "special", "agent"))


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
    nothing is opened).

    Raises:
        DataError: only files of EvalScope 1.10's first ACEBench adapter
            (``acebench_normal.jsonl``, ``…_special``, ``…_agent``), whose prompts and
            scorer are not ACEBench's (one line)."""
    out: dict[str, Path] = {}
    legacy = []
    for path in sorted((root / kind / model).glob(f"{BENCHMARK}_*.jsonl")):
        category = _category_of(path)
        if category is not None:
            out[category] = path
        elif path.name.removesuffix(".jsonl") in LEGACY_STEMS:
            legacy.append(path.name)
    if legacy and not out:
        raise DataError(f"{root / kind / model}: {', '.join(legacy)} are the files of EvalScope 1.10's first ACEBench "
                        "adapter (one file per family, samples tagged sub_category), whose prompt and scorer are not "
                        "ACEBench's; only runs of its later adapter, ACEBench's official protocol (files "
                        f"{BENCHMARK}_<category>.jsonl), can be replayed; not imported")  # fmt: skip
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

    Returns ``{"model", "language", "repeats", "samples": [{"sample_id", "epoch",
    "category", "output", "acc", "process_acc", "has_end_state"}], "unmatched": [{"file",
    "line", "index", "why"}], "duplicates": [{"file", "line", "index", "first_line",
    "same"}], "torn": [{"file", "line", "why"}], "extra_verdicts": [{"sample_id",
    "category", "acc"}], "report": {...} or None}``.

    A sample's id is ``<language>/<ACEBench record id>`` (the record id from the review's
    ``sample_metadata.id``; the language from its metadata, else ``language``, else the
    task config, else ``en``). Rows of one id are the repeats of a run with ``repeats``
    (each its own ``index``): their ``epoch`` is the review's ``generation_index`` when
    every row of the id has a distinct one, else their order by ``index``. A prediction
    without a review (or a review without an id) is unmatched, as is an id not in
    ``known_ids`` (when given) or found in two category files. A second row of an ``index``
    already read is listed in ``duplicates`` and not imported (the first row of each index
    is); a review duplicate's verdict goes to ``extra_verdicts``, which EvalScope's report
    counted. The last line of a file, torn by an interrupted run (no newline, not JSON), is
    skipped and listed in ``torn``. The answer is the prediction's text, else the review's
    ``prediction``.

    Raises:
        DataError: not such a directory, no review file (nothing EvalScope scored), files of
            EvalScope's first adapter only, a file that is not JSON Lines (but for a torn last
            line), outside ``root``, not a regular file or over a bound, an ``index`` or a
            verdict out of its range (one line naming the file, and the line).
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such directory")
    model_dir = _model_dir(root, model)
    default_language = language or _config_language(root) or "en"
    predictions = _files(root, "predictions", model_dir)
    reviews = _files(root, "reviews", model_dir)
    if not reviews:
        raise DataError(f"{root}: no reviews/{model_dir}/{BENCHMARK}_<category>.jsonl (EvalScope writes a category's "
                        "reviews once it has scored it); an import needs EvalScope's verdicts and the ACEBench ids "
                        "they carry; not imported")  # fmt: skip
    out: dict[str, Any] = {"samples": [], "unmatched": [], "duplicates": [], "torn": [], "extra_verdicts": []}
    taken: dict[str, str] = {}  # sample id -> the review file that holds it
    for category in [c for c in ALL_CATEGORIES if c in predictions or c in reviews]:
        review_file = f"reviews/{model_dir}/{BENCHMARK}_{category}.jsonl"
        pred_file = f"predictions/{model_dir}/{BENCHMARK}_{category}.jsonl"
        # a row at a time, and of each only what the import uses: the answer text; the review's fields
        outputs: dict[int, tuple[int, str | None]] = {}
        for lineno, index, row in _rows(root, predictions.get(category), pred_file, out):
            if index in outputs:
                out["duplicates"].append({"file": pred_file, "line": lineno, "index": index, "first_line": outputs[index][0],
                                          "same": _text(row.get("model_output")) == outputs[index][1]})  # fmt: skip
                continue
            outputs[index] = (lineno, _text(row.get("model_output")))
        by_index: dict[int, tuple[int, dict[str, Any]]] = {}
        for lineno, index, row in _rows(root, reviews.get(category), review_file, out):
            no_text = outputs.get(index, (0, None))[1] is None  # the review's prediction is the answer then
            review = _review(row, reviews[category], lineno, keep_prediction=no_text)
            if index in by_index:
                first = by_index[index][1]
                out["duplicates"].append({"file": review_file, "line": lineno, "index": index, "first_line": by_index[index][0],
                                          "same": (review["acc"], review["id"]) == (first["acc"], first["id"])})  # fmt: skip
                if isinstance(first["id"], str) and review["acc"] is not None:
                    lang = first["meta"].get("language") if first["meta"].get("language") in LANGUAGES else default_language
                    out["extra_verdicts"].append({"sample_id": f"{lang}/{first['id']}", "category": category, "acc": review["acc"]})
                continue
            by_index[index] = (lineno, review)
        for index, (lineno, _) in outputs.items():
            if index not in by_index:
                out["unmatched"].append({"file": pred_file, "line": lineno, "index": index, "why": "no review row holds its ACEBench id"})
        rows_of: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
        for index, (lineno, review) in sorted(by_index.items()):
            record_id, meta = review["id"], review["meta"]
            lang = meta.get("language") if meta.get("language") in LANGUAGES else default_language
            where = {"file": review_file, "line": lineno, "index": index}
            if not isinstance(record_id, str) or not record_id:
                out["unmatched"].append({**where, "why": "no sample_metadata.id"})
                continue
            if (problem := _id_problem(record_id)) is not None:
                out["unmatched"].append({**where, "id": record_id, "why": problem})
                continue
            sample_id = f"{lang}/{record_id}"
            if known_ids is not None and sample_id not in known_ids:
                out["unmatched"].append({**where, "sample_id": sample_id, "why": "not an id of evalkit's ACEBench data"})
                continue
            if taken.get(sample_id, review_file) != review_file:
                out["unmatched"].append({**where, "sample_id": sample_id, "why": f"id given twice (also in {taken[sample_id]})"})
                continue
            taken[sample_id] = review_file
            rows_of[sample_id].append((index, lineno, review))
        for sample_id, rows in rows_of.items():
            gens = [r["generation_index"] for _, _, r in rows]
            by_gen = all(isinstance(g, int) for g in gens) and len(set(gens)) == len(gens)
            for rank, (index, lineno, review) in enumerate(rows):
                output = outputs.get(index, (None, None))[1]
                meta = review["meta"]
                out["samples"].append({
                    "sample_id": sample_id, "epoch": review["generation_index"] if by_gen else rank,
                    "category": meta.get("test_category") if meta.get("test_category") in ALL_CATEGORIES else category,
                    "output": output if output is not None else review["prediction"], "acc": review["acc"],
                    "process_acc": review["process_acc"], "has_end_state": review["has_end_state"],
                })  # fmt: skip
    report_path = root / "reports" / model_dir / f"{BENCHMARK}.json"
    # lexists: a FIFO, a directory or a link where the report belongs is refused, never passed over
    out["report"] = read_report(report_path, root) if os.path.lexists(report_path) else None
    repeats = max((s["epoch"] for s in out["samples"]), default=0) + 1
    return {"model": model_dir, "language": default_language, "repeats": repeats, **out}


def _rows(root: Path, path: Path | None, name: str, out: dict[str, Any]) -> Any:
    """``(line, index, row)`` of a JSON Lines file of the directory, a row at a time (none
    when ``path`` is ``None``); a torn last line is skipped and listed in ``out["torn"]``."""
    if path is None:
        return
    torn: list[int] = []
    for lineno, row in iter_records(path, root=root, torn_last=torn):
        yield lineno, _index(row, path, lineno), row
    for lineno in torn:
        out["torn"].append({"file": name, "line": lineno, "why": "torn last line (no newline, not a JSON row), "
                                                                 "as an interrupted run leaves it; skipped"})  # fmt: skip


def _review(row: dict[str, Any], path: Path, lineno: int, keep_prediction: bool) -> dict[str, Any]:
    """What the import keeps of a review row: ``id`` (``sample_metadata.id`` as written),
    ``meta`` (its ``language``, and its ``test_category``: EvalScope's later adapter writes
    that key, its first one ``sub_category``), ``acc`` and ``process_acc`` (:func:`_verdict`),
    ``has_end_state``, ``generation_index`` (``sample_score.generation_index``: the repeat,
    when a JSON integer from 0 to :data:`MAX_INDEX`, else ``None``), and ``prediction``
    (``score.prediction`` when a string and ``keep_prediction``: the prediction row has no
    answer text; else ``None``).

    Raises:
        DataError: a verdict outside [0, 1] (one line naming file and line)."""
    score = (row.get("sample_score") or {}) if isinstance(row.get("sample_score"), dict) else {}
    meta = score.get("sample_metadata") if isinstance(score.get("sample_metadata"), dict) else {}
    inner = score.get("score") if isinstance(score.get("score"), dict) else {}
    value = inner.get("value") if isinstance(inner.get("value"), dict) else {}
    prediction = inner.get("prediction")
    kept = {k: meta.get(k) for k in ("language", "test_category") if isinstance(meta.get(k), str)}
    if "test_category" not in kept and isinstance(meta.get("sub_category"), str):
        kept["test_category"] = meta["sub_category"]
    generation = score.get("generation_index")
    valid_generation = isinstance(generation, int) and not isinstance(generation, bool) and 0 <= generation <= MAX_INDEX
    return {
        "id": meta.get("id"), "meta": kept,
        "acc": _verdict(value, "acc", path, lineno), "process_acc": _verdict(value, "process_acc", path, lineno),
        "has_end_state": meta.get("end_state") is not None,
        "generation_index": generation if valid_generation else None,
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


#: the names EvalScope's ACEBench reports give the accuracy metric: ``accuracy`` (report
#: schema 2, ``identity.name``), ``acc`` (report schema 1, ``name``) and ``mean_acc`` (schema
#: 1 with the aggregation in the name)
ACCURACY_NAMES = ("accuracy", "acc", "mean_acc")
#: the groups EvalScope's weighted OVERALL combines (those evaluated, weights renormalised)
OVERALL_GROUPS = ("NORMAL", "SPECIAL", "AGENT")


def read_report(path: Path, root: Path | None = None) -> dict[str, Any]:
    """What the import takes from EvalScope's ``reports/<model>/acebench.json``, read inside
    ``root``: ``{"format", "metric", "overall", "overall_groups", "groups", "categories",
    "score", "why"}``.

    The report is recognised by its own fields: schema 2 (``schema_version: 2``, each metric
    an ``identity`` ``{"name", "aggregation", "dimensions"}``: EvalScope 1.14) or schema 1
    (each metric a ``name``: the releases before). Its accuracy is the metric whose name is
    one of :data:`ACCURACY_NAMES` (the report's ``primary_metric_identity`` /
    ``primary_metric_name`` first, then aggregation ``mean``); ``overall`` and the groups are
    the subsets of its category ``-`` (``OVERALL``, ``ATOM``…; ``overall_groups``: those of
    :data:`OVERALL_GROUPS` it holds), ``categories`` the per-category subsets, ``score`` the
    report's top-level score (schema 1) or the metric's (schema 2). ``why`` says what is
    missing when ``overall`` is ``None`` (``format`` is ``"not recognised"`` when no metric
    is an accuracy of either schema).

    Raises:
        DataError: outside ``root``, not a regular file, over :data:`MAX_REPORT_BYTES`, not
            JSON, or holding NaN or Infinity (one line naming the file)."""
    data = read_json(path, MAX_REPORT_BYTES, root=root, what="an EvalScope report")
    out: dict[str, Any] = {"format": "not recognised", "metric": None, "overall": None, "overall_groups": [],
                           "groups": {}, "categories": {}, "score": None, "why": None}  # fmt: skip
    metrics = data.get("metrics") if isinstance(data, dict) else None
    metrics = [m for m in metrics if isinstance(m, dict)] if isinstance(metrics, list) else []
    metric = _accuracy_metric(data, metrics)
    if metric is None:
        names = sorted({str(_metric_name(m)) for m in metrics})
        out["why"] = (f"no accuracy metric ({' or '.join(ACCURACY_NAMES)}) in the report"
                      + (f" (its metrics: {printable(', '.join(names), 200)})" if names else ""))  # fmt: skip
        return out
    if isinstance(metric.get("identity"), dict):
        identity = metric["identity"]
        out["format"] = "EvalScope report schema 2 (metrics by identity)"
        out["metric"] = f"{printable(identity.get('name'), 40)}:{printable(identity.get('aggregation'), 40)}"
        out["score"] = _number(metric.get("score"))
    else:
        out["format"] = "EvalScope report schema 1 (metrics by name)"
        out["metric"] = printable(metric.get("name"), 40)
        out["score"] = _number(data.get("score"))
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
    out["overall_groups"] = [g for g in OVERALL_GROUPS if out["groups"].get(g) is not None]
    if out["overall"] is None:
        out["why"] = "the report holds no OVERALL (category '-', subset 'OVERALL')"
    return out


def _metric_name(metric: dict[str, Any]) -> Any:
    """A report metric's name: ``identity.name`` (schema 2), else ``name`` (schema 1)."""
    identity = metric.get("identity")
    return identity.get("name") if isinstance(identity, dict) else metric.get("name")


def _accuracy_metric(data: Any, metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report's accuracy metric (see :func:`read_report`), or ``None``: the one the
    report names primary, else one of aggregation ``mean`` without dimensions, else the
    first by :data:`ACCURACY_NAMES`."""
    candidates = [m for m in metrics if _metric_name(m) in ACCURACY_NAMES]
    if not candidates:
        return None
    data = data if isinstance(data, dict) else {}
    for m in candidates:
        identity = m.get("identity")
        if (isinstance(identity, dict) and identity == data.get("primary_metric_identity")) or \
                (not isinstance(identity, dict) and m.get("name") == data.get("primary_metric_name")):  # fmt: skip
            return m
    plain = [m for m in candidates if isinstance(m.get("identity"), dict) and m["identity"].get("aggregation") == "mean"
             and not m["identity"].get("dimensions")]  # fmt: skip
    return (plain or sorted(candidates, key=lambda m: ACCURACY_NAMES.index(_metric_name(m))))[0]


def reproduced_overall(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """EvalScope's per-sample verdicts (``acc``) aggregated as EvalScope aggregates them, over
    normal and special categories only: per category the mean over its rows — every repeat
    of a sample one row, a multi-turn dialogue counting 1 when all its turns of all its
    repeats pass (EvalScope groups a dialogue's rows by its id, repeats included) — then
    ACEBench's groups and weighted OVERALL, per language: ``{"<lang>": {"categories",
    "groups", "overall"}}`` and, with both languages, ``overall`` = their mean (as evalkit's
    language=all). Samples without a verdict are left out."""
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


def overall_of(reproduced: dict[str, Any], language: str) -> float | None:
    """The one OVERALL of :func:`reproduced_overall`'s result: the languages' mean with
    both, else the language's own."""
    return reproduced.get("overall", (reproduced.get(language) or {}).get("overall"))


def per_repeat_overall(samples: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    """What a replay run of ``repeats`` repeats gives: :func:`reproduced_overall` of each
    repeat's rows on its own, then the mean over the repeats of every figure (evalkit's
    ``run.repeats`` rule); ``{"<lang>": {"overall"}, "overall"?}``."""
    each = [reproduced_overall([s for s in samples if s["epoch"] == e]) for e in range(repeats)]
    out: dict[str, Any] = {}
    for lang in sorted({k for r in each for k in r if k != "overall"}):
        values = [r[lang]["overall"] for r in each if r.get(lang, {}).get("overall") is not None]
        out[lang] = {"overall": sum(values) / len(values) if values else None}
    values = [r["overall"] for r in each if r.get("overall") is not None]
    if values:
        out["overall"] = sum(values) / len(values)
    return out


def import_run(root: Path, out_dir: Path, model: str | None = None, language: str | None = None,
               data_dir: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Write ``replay.jsonl`` and ``import.json`` into ``out_dir`` (see the module docstring);
    returns the ``import.json`` object.

    Raises:
        DataError: the EvalScope directory cannot be read, ``data_dir`` is not ACEBench
            data, or nothing of the run can be replayed (one line).
        OSError: ``out_dir`` cannot be written.
    """
    known = _known_ids(data_dir) if data_dir is not None else None
    run = read_evalscope_run(root, model, language, known)
    repeats = run["repeats"]
    replay, agent, empty = [], [], []
    for s in run["samples"]:
        key = s["sample_id"] if repeats == 1 else f"{s['sample_id']}@{s['epoch']}"
        row = {"sample_id": s["sample_id"], **({"epoch": s["epoch"]} if repeats > 1 else {}), "output": s["output"]}
        if family(s["category"]) == "agent":
            if s["epoch"] == 0:
                agent.append({"sample_id": s["sample_id"], "why": "agent rollout: a replay of strings cannot carry its trajectory"
                              + ("; EvalScope recorded its end state, kept in its reviews" if s["has_end_state"] else
                                 "; EvalScope's files hold no trajectory of it")})  # fmt: skip
        elif s["output"] is None or not s["output"].strip():
            empty.append(key)
            if s["output"] is not None:
                replay.append(row)
        else:
            replay.append(row)
    if not replay:
        raise DataError(f"{root}: nothing to replay: no normal or special sample of the run has both a review with its "
                        f"ACEBench id and an answer ({len(run['unmatched'])} unmatched rows, {len(agent)} agent samples); "
                        "not imported")  # fmt: skip
    languages = sorted({s["sample_id"].split("/", 1)[0] for s in run["samples"]}) or [run["language"]]
    lang_setting = languages[0] if len(languages) == 1 else "all"
    categories = sorted({s["category"] for s in run["samples"] if family(s["category"]) != "agent"}, key=ALL_CATEGORIES.index)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "replay.jsonl", "w", encoding="utf-8") as fh:
        for row in replay:  # ASCII: a lone surrogate in an answer is written as its escape, as it was read
            fh.write(json.dumps(row) + "\n")
    ids = list(dict.fromkeys(r["sample_id"] for r in replay))
    (out_dir / "sample_ids.txt").write_text("".join(f"{sid}\n" for sid in ids), encoding="utf-8")
    words = ["python", "-m", "evalkit", "benchmark=acebench", "model=replay", f"model.path={out_dir / 'replay.jsonl'}",
             f"benchmark.language={lang_setting}", f"benchmark.subsets=[{','.join(categories)}]",
             f"run.sample_ids_file={out_dir / 'sample_ids.txt'}",
             *([f"run.repeats={repeats}"] if repeats > 1 else []),
             *([f"benchmark.data_dir={data_dir}"] if data_dir is not None else [])]  # fmt: skip
    base = shell_line(*words)
    samples = run["samples"]
    reproduced = reproduced_overall(samples)
    with_duplicates = reproduced_overall(samples + [{**v, "epoch": 0} for v in run["extra_verdicts"]])
    report = run["report"] or {}
    figure = overall_of(reproduced, lang_setting)
    replay_figure = overall_of(per_repeat_overall(samples, repeats), lang_setting) if repeats > 1 else figure
    result = {
        "source": str(root), "model": run["model"], "language": lang_setting, "repeats": repeats,
        "n_rows": len(samples) + len(run["unmatched"]), "n_replay": len(replay),
        "overall": {
            "evalscope": report.get("overall"),
            "evalscope_groups": report.get("overall_groups", []),
            "evalscope_missing": None if report.get("overall") is not None else (report.get("why") or "no report "
                                 f"(reports/{run['model']}/{BENCHMARK}.json)"),
            "reproduced": figure, "reproduced_groups": ["NORMAL", "SPECIAL"],
            "replay": replay_figure,
        },  # fmt: skip
        "unmatched": run["unmatched"],
        "duplicates": run["duplicates"],
        "torn": run["torn"],
        "not_rescorable": agent,
        "empty": empty,
        "evalscope_report": run["report"],
        "reproduced": reproduced,
        # what evalkit's partial_ figures give: the empty answers are failures there, left out
        **({"reproduced_without_empty": reproduced_overall([s for s in samples if
            (s["sample_id"] if repeats == 1 else f"{s['sample_id']}@{s['epoch']}") not in empty])} if empty else {}),
        **({"reproduced_with_duplicates": with_duplicates} if run["extra_verdicts"] else {}),
        **({"reproduced_per_repeat": per_repeat_overall(samples, repeats)} if repeats > 1 else {}),
        "note": _note(run, empty, repeats, categories),
        "commands": {
            "evalscope_rules": base + " benchmark.scoring=evalscope",
            "official_rules": base,
            "rescore_official": "python -m evalkit.rescore <RUN_DIR> --set benchmark.scoring=official",
        },
    }  # fmt: skip
    # strict JSON (a NaN or Infinity is refused here, never written) and ASCII (a lone surrogate in a name is escaped)
    (out_dir / "import.json").write_text(json.dumps(result, indent=2, allow_nan=False), encoding="utf-8")
    return result


def _note(run: dict[str, Any], empty: list[str], repeats: int, categories: list[str]) -> str:
    """The note of ``import.json``: how 'reproduced' relates to EvalScope's figures and to
    the replay's."""
    note = OVERALL_NOTE
    if empty:
        note += (f" {len(empty)} empty answers: EvalScope scored them 0; evalkit makes an empty answer a failure (the "
                 "run is incomplete and withholds its headline), so the figure matches only once they are counted as "
                 "0; 'reproduced_without_empty' is the figure without them, which the replay run's partial_overall gives.")  # fmt: skip
    if run["extra_verdicts"]:
        note += (f" {len(run['extra_verdicts'])} review rows repeat an index already read ('duplicates'): the first row "
                 "of each index is imported; EvalScope's report counted every row, which "
                 "'reproduced_with_duplicates' does.")  # fmt: skip
    if repeats > 1:
        pooled = any(c.startswith("normal_multi_turn_") for c in categories)
        note += (f" The run has {repeats} repeats: replay.jsonl holds each as its epoch and the commands ask for "
                 f"run.repeats={repeats}. EvalScope pools the repeats of a category into one mean"
                 + (", and counts a multi-turn dialogue once, passed only when every turn of every repeat passes; "
                    "evalkit averages each repeat's figures ('reproduced_per_repeat', what the replay gives)."
                    if pooled else "; evalkit averages each repeat's figures, the same mean here "
                    "('reproduced_per_repeat')."))  # fmt: skip
    if run["torn"]:
        note += f" {len(run['torn'])} torn last lines were skipped ('torn'): the rows an interrupted run left unfinished."
    return note


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
    print(f"imported {result['n_replay']} answers of {printable(result['model'])} ({result['language']}"
          + (f", {result['repeats']} repeats" if result["repeats"] > 1 else "")
          + f") → {printable(str(out_dir / 'replay.jsonl'))}")  # fmt: skip
    print("  " + overall_line(result))
    print(f"  unmatched rows: {len(result['unmatched'])}; agent samples not rescorable: {len(result['not_rescorable'])}; "
          f"empty answers: {len(result['empty'])} (all listed in {printable(str(out_dir / 'import.json'))})")  # fmt: skip
    if result["torn"]:
        print("  torn last lines skipped: " + printable(", ".join(f"{t['file']}:{t['line']}" for t in result["torn"][:10])))
    if result["duplicates"]:
        shown = ", ".join(f"{d['file']}:{d['line']} (index {d['index']}, first at line {d['first_line']})" for d in result["duplicates"][:5])
        print(f"  {counted(len(result['duplicates']), 'duplicated index', 'duplicated indices')}, not imported (the first "
              f"row of each is): {printable(shown, 600)}")  # fmt: skip
    print(f"  note: {result['note']}")
    print(f"  EvalScope's rules: {printable(result['commands']['evalscope_rules'])}")
    print(f"  official rules:    {printable(result['commands']['official_rules'])}")
    if args.data_dir is None:
        print("  (the commands use the ACEBench data evalkit downloads; offline, add benchmark.data_dir=DIR, "
              "or import with --data-dir DIR)")  # fmt: skip
    return 0


def overall_line(result: dict[str, Any]) -> str:
    """One line holding EvalScope's OVERALL (its report's) beside the reproduced one (its
    verdicts, aggregated over what a replay carries), each saying what it covers."""
    fig = result["overall"]
    if fig["evalscope"] is not None:
        left = f"EvalScope {fig['evalscope']:.4f} (its report, over {' + '.join(fig['evalscope_groups']) or 'its groups'})"
    else:
        left = f"EvalScope: none ({printable(fig['evalscope_missing'], 200)})"
    if fig["reproduced"] is None:
        return f"OVERALL  {left}  |  reproduced: none (no normal or special verdict)"
    right = f"reproduced {fig['reproduced']:.4f} (its verdicts over NORMAL + SPECIAL)"
    if fig["replay"] is not None and fig["replay"] != fig["reproduced"]:
        right += f"; the evalscope-rules replay gives {fig['replay']:.4f} (the mean of its repeats)"
    else:
        right += ", what the evalscope-rules replay gives"
    return f"OVERALL  {left}  |  {right}"


if __name__ == "__main__":
    sys.exit(main())
