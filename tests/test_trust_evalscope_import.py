"""``python -m evalkit.import_evalscope`` reads an EvalScope directory as untrusted input
(issue 43): through :mod:`evalkit.untrusted` with the directory as its root, a row at a time.

A FIFO where a file belongs, a link out of the directory, an ``index`` that is not a JSON
integer, a NaN or Infinity verdict or report figure are each refused in one line naming the
file (and line), exit 2; an id that is not one line of printable text is listed as unmatched,
never written to ``sample_ids.txt``; ``import.json`` is strict JSON; a 60 MB predictions file
is imported in a bounded amount of memory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.import_evalscope import main
from tests.conftest import REPO_ROOT
from tests.support.host import time_limit
from tests.test_evalscope import _evalscope_dir

MODEL = "qwen-plus"
PRED = f"predictions/{MODEL}/acebench_normal_atom_bool.jsonl"
REVIEW = f"reviews/{MODEL}/acebench_normal_atom_bool.jsonl"
REPORT = f"reports/{MODEL}/acebench.json"
CONFIG = "configs/task_config_1a2b.yaml"


def _two_rows(root: Path) -> Path:
    """An EvalScope directory of two normal_atom_bool samples, one passed and one failed by
    EvalScope (its reproduced overall: 0.5)."""
    return _evalscope_dir(root, {"normal_atom_bool": [
        {"id": "normal_atom_bool_1", "output": "[f(x=1)]", "acc": 1.0},
        {"id": "normal_atom_bool_2", "output": "[g()]", "acc": 0.0},
    ]})  # fmt: skip


def _edit_rows(path: Path, edit: Any) -> None:
    """Rewrite the JSON Lines file ``path``: ``edit(line number, row)`` returns the row's
    new text (a string, written as it is) or the row (dumped)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    texts = [edit(n, row) for n, row in enumerate(rows, 1)]
    path.write_text("".join((t if isinstance(t, str) else json.dumps(t)) + "\n" for t in texts))


def _import(root: Path, out: Path, capsys) -> tuple[int, str]:
    """``main`` on ``root``: its exit code and its stderr."""
    capsys.readouterr()
    code = main([str(root), "--out", str(out)])
    return code, capsys.readouterr().err


def _refused(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def _cli(*args: object, timeout_s: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "evalkit.import_evalscope", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO_ROOT, env=env, timeout=time_limit(timeout_s))  # fmt: skip


# ---- FIFOs: refused by name, never waited on ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", [PRED, REVIEW, REPORT, CONFIG])
def test_a_fifo_in_the_directory_is_refused_without_waiting(tmp_path: Path, name: str) -> None:
    """No writer ever opens the FIFO: a reader that waited would be killed by the timeout (a
    test failure), and one that passed it over (the report, the task config) would exit 0."""
    root = _two_rows(tmp_path / "es")
    (root / name).unlink()
    os.mkfifo(root / name)
    proc = _cli(root, "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"evalkit: error: {root / name}: a FIFO, not a regular file; not read"]
    assert not (tmp_path / "out" / "import.json").exists()


# ---- links out of the directory --------------------------------------------------------------


def test_a_predictions_file_linked_out_of_the_directory_is_refused(tmp_path: Path, capsys) -> None:
    root = _two_rows(tmp_path / "es")
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text(json.dumps({"index": 0, "model_output": {"completion": "TEXT FROM OUTSIDE"}}) + "\n")
    (root / PRED).unlink()
    (root / PRED).symlink_to(outside)
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / PRED}: leads outside {root}", "not read")
    assert not (tmp_path / "out" / "replay.jsonl").exists()


def test_a_reviews_folder_linked_out_of_the_directory_is_refused(tmp_path: Path, capsys) -> None:
    """A linked ``reviews/`` whose verdicts all pass once made the reproduced overall 1.0
    instead of the directory's own 0.5."""
    root = _two_rows(tmp_path / "es")
    forged = _two_rows(tmp_path / "forged")
    _edit_rows(forged / REVIEW, lambda _, row: {**row, "sample_score": {**row["sample_score"], "score": {
        **row["sample_score"]["score"], "value": {"acc": 1.0}}}})  # fmt: skip
    assert main([str(root), "--out", str(tmp_path / "own")]) == 0
    assert json.loads((tmp_path / "own" / "import.json").read_text())["reproduced"]["en"]["overall"] == 0.5
    shutil.rmtree(root / "reviews")
    (root / "reviews").symlink_to(forged / "reviews")
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / REVIEW}: leads outside {root}")
    assert not (tmp_path / "out" / "import.json").exists()


def test_a_link_inside_the_directory_is_still_read(tmp_path: Path, capsys) -> None:
    """Only a link leading out is refused: one to a file of the same directory is read."""
    root = _two_rows(tmp_path / "es")
    (root / PRED).rename(root / "kept.jsonl")
    (root / PRED).symlink_to(Path("..") / ".." / "kept.jsonl")
    code, err = _import(root, tmp_path / "out", capsys)
    assert code == 0, err
    replay = [json.loads(line) for line in (tmp_path / "out" / "replay.jsonl").read_text().splitlines()]
    assert [r["output"] for r in replay] == ["[f(x=1)]", "[g()]"]


# ---- index: a JSON integer from 0 to 2**53 - 1 -----------------------------------------------


@pytest.mark.parametrize("index, shown", [
    ([0], "a JSON array"),  # unhashable: once a traceback
    ({"i": 0}, "a JSON object"),
    (True, "true"),  # Python takes true for 1 and 1.0 for 1: a row would pair with another's
    (1.0, "1.0"),
    (-1, "-1"),
    (2**53, str(2**53)),
    ("0", '"0"'),
    (None, "null"),
])  # fmt: skip
@pytest.mark.parametrize("name", [PRED, REVIEW])
def test_an_index_that_is_not_a_json_integer_is_refused_naming_file_and_line(tmp_path, capsys, name, index, shown) -> None:
    root = _two_rows(tmp_path / "es")
    _edit_rows(root / name, lambda n, row: {**row, "index": index} if n == 2 else row)
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / name}:2: index is {shown}, not a JSON integer from 0 to 9,007,199,254,740,991")


def test_a_missing_or_enormous_index_is_refused(tmp_path: Path, capsys) -> None:
    root = _two_rows(tmp_path / "es")
    _edit_rows(root / REVIEW, lambda n, row: {k: v for k, v in row.items() if k != "index"} if n == 1 else row)
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / REVIEW}:1: index is missing")
    root = _two_rows(tmp_path / "es2")
    _edit_rows(root / PRED, lambda n, row: json.dumps(row).replace('"index": 1', '"index": ' + "9" * 4000) if n == 2 else row)
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / PRED}:2: index is 99999999999999999999… (4,000 characters)")


# ---- NaN and Infinity: refused, never written -------------------------------------------------


@pytest.mark.parametrize("field", ["acc", "process_acc"])
@pytest.mark.parametrize("text, shown", [
    ("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "Infinity"),
    ("1.5", "1.5"), ("-0.5", "-0.5"),
])  # fmt: skip
def test_a_verdict_that_is_not_a_number_from_0_to_1_is_refused(tmp_path, capsys, field, text, shown) -> None:
    root = _two_rows(tmp_path / "es")

    def edit(n: int, row: dict) -> Any:
        if n != 1:
            return row
        row["sample_score"]["score"]["value"][field] = "@"
        return json.dumps(row).replace('"@"', text)

    _edit_rows(root / REVIEW, edit)
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{root / REVIEW}:1: sample_score.score.value.{field} is {shown}, not a number from 0 to 1")
    assert not (tmp_path / "out" / "import.json").exists()


@pytest.mark.parametrize("text, reason", [
    ("NaN", "NaN is not a number a record may hold"),
    ("-Infinity", "-Infinity is not a number a record may hold"),
    ("1e999", "1e999 overflows to infinity, not a number a record may hold"),
])  # fmt: skip
def test_a_report_with_nan_or_infinity_is_refused(tmp_path, capsys, text: str, reason: str) -> None:
    root = _two_rows(tmp_path / "es")
    report = root / REPORT
    report.write_text(report.read_text().replace('"OVERALL", "score": null', f'"OVERALL", "score": {text}'))
    code, err = _import(root, tmp_path / "out", capsys)
    _refused(code, err, f"{report}: {reason}; not read")
    assert not (tmp_path / "out" / "import.json").exists()


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} in import.json")

    return json.loads(text, parse_constant=refuse)


def test_import_json_is_strict_json_when_unused_fields_hold_nan(tmp_path: Path, capsys) -> None:
    """NaN where the import reads nothing (a prediction's messages, a review's other fields)
    is left there; what is written is strict JSON, its figures EvalScope's verdicts."""
    root = _two_rows(tmp_path / "es")
    _edit_rows(root / PRED, lambda n, row: json.dumps({**row, "messages": [{"role": "user", "content": "@"}]}).replace('"@"', "NaN"))
    _edit_rows(root / REVIEW, lambda n, row: json.dumps({**row, "extra": "@"}).replace('"@"', "Infinity"))
    code, err = _import(root, tmp_path / "out", capsys)
    assert code == 0, err
    result = _strict((tmp_path / "out" / "import.json").read_text())
    assert result["reproduced"]["en"]["overall"] == 0.5 and result["n_replay"] == 2


# ---- ids: one line of printable text each ------------------------------------------------------

#: why an id with a newline, a control character, a line separator or a lone surrogate is unmatched
ONE_LINE = "holds a character that is not printable"


@pytest.mark.parametrize("bad, why", [
    ("normal_atom_bool_1\nen/normal_atom_bool_9", ONE_LINE),  # once a second line of sample_ids.txt
    ("normal_atom_bool_1\r", ONE_LINE),
    ("normal\u2028atom", ONE_LINE),  # a line separator
    ("normal\x1b[2Jatom", ONE_LINE),
    ("normal\ud800atom", ONE_LINE),  # a lone surrogate: UTF-8 cannot write it
    ("normal_atom_bool_1 ", "begins or ends with white space, which sample_ids.txt's reader strips"),
])  # fmt: skip
def test_an_id_that_is_not_one_printable_line_is_unmatched_never_written(tmp_path, capsys, bad: str, why: str) -> None:
    root = _two_rows(tmp_path / "es")
    _edit_rows(root / REVIEW, lambda n, row: {**row, "sample_score": {**row["sample_score"], "sample_metadata": {
        **row["sample_score"]["sample_metadata"], "id": bad}}} if n == 1 else row)  # fmt: skip
    code, err = _import(root, tmp_path / "out", capsys)
    assert code == 0, err
    out = tmp_path / "out"
    assert (out / "sample_ids.txt").read_text(encoding="utf-8").splitlines() == ["en/normal_atom_bool_2"]
    assert [json.loads(line)["sample_id"] for line in (out / "replay.jsonl").read_text().splitlines()] == ["en/normal_atom_bool_2"]
    unmatched = _strict((out / "import.json").read_text())["unmatched"]
    assert [(u["line"], u["index"], u["id"]) for u in unmatched] == [(1, 0, bad)]
    assert why in unmatched[0]["why"]


def test_an_answer_with_a_lone_surrogate_is_written_as_it_was_read(tmp_path: Path, capsys) -> None:
    """JSON may escape a lone surrogate (``\\ud800``), which UTF-8 cannot encode: the replay
    file keeps its escape (it once ended in a UnicodeEncodeError traceback)."""
    root = _two_rows(tmp_path / "es")
    _edit_rows(root / PRED, lambda n, row: json.dumps(row).replace("[f(x=1)]", "[f(x='\\ud800')]"))
    code, err = _import(root, tmp_path / "out", capsys)
    assert code == 0, err
    replay = [json.loads(line) for line in (tmp_path / "out" / "replay.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["output"] for r in replay] == ["[f(x='\ud800')]", "[g()]"]


# ---- a large predictions file: a row at a time --------------------------------------------------

#: a generous bound on the import's peak memory for a 60 MB predictions file: a row at a time
#: it peaked at 65 MB, holding every row at 455 MB (the same host, the same file)
MAX_PEAK_RSS_MB = 300


def _large_dir(root: Path, megabytes: int) -> int:
    """An EvalScope directory whose predictions file is ``megabytes`` MB of rows as EvalScope
    writes them, each with the tools' JSON schemas (many small objects, which Python holds in
    about ten times their bytes); returns the number of rows."""
    for kind in ("predictions", "reviews"):
        (root / kind / MODEL).mkdir(parents=True)
    tools = [{"name": f"tool_{t}", "description": "d", "parameters": {"type": "object", "properties": {
        f"p{k}": {"type": "string", "description": "x"} for k in range(6)}, "required": ["p0"]}} for t in range(20)]  # fmt: skip
    tools_text = json.dumps(tools)
    row_bytes = len(tools_text) + 200
    n = megabytes * 10**6 // row_bytes
    with open(root / PRED, "w") as pred, open(root / REVIEW, "w") as rev:
        for i in range(n):
            answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": f"[f(x={i})]"}}]})
            pred.write(f'{{"index": {i}, "model": "{MODEL}", "messages": [{{"role": "user", "content": "q{i}"}}], '
                       f'"tools": {tools_text}, "model_output": {answer}}}\n')  # fmt: skip
            rev.write(json.dumps({"index": i, "sample_score": {"score": {"value": {"acc": float(i % 2)}}, "sample_metadata": {
                "id": f"normal_atom_bool_{i}", "language": "en", "test_category": "normal_atom_bool"}}}) + "\n")  # fmt: skip
    return n


@pytest.mark.slow
def test_a_60_mb_predictions_file_is_imported_in_bounded_memory(tmp_path: Path) -> None:
    root = tmp_path / "es"
    n = _large_dir(root, 60)
    assert (root / PRED).stat().st_size >= 59 * 10**6
    # the import runs as the only child of a fresh interpreter, whose RUSAGE_CHILDREN is its peak alone
    probe = ("import resource, subprocess, sys; "
             "rc = subprocess.run([sys.executable, '-m', 'evalkit.import_evalscope', *sys.argv[1:]]).returncode; "
             "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", probe, str(root), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, cwd=REPO_ROOT, env=env, timeout=time_limit(300))  # fmt: skip
    code, peak_kib = map(int, proc.stdout.split()[-2:])
    assert code == 0, proc.stderr
    assert peak_kib / 1024 < MAX_PEAK_RSS_MB, f"peak RSS {peak_kib / 1024:.0f} MB for a 60 MB predictions file"
    result = _strict((tmp_path / "out" / "import.json").read_text())
    assert result["n_replay"] == n and result["reproduced"]["en"]["overall"] == pytest.approx((n // 2) / n)
    with open(tmp_path / "out" / "replay.jsonl") as fh:
        assert json.loads(fh.readline()) == {"sample_id": "en/normal_atom_bool_0", "output": "[f(x=0)]"}
