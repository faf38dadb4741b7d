"""The commands of docs/migrating-from-evalscope.md run verbatim, offline (issue 49): read from
the page, run by a shell in a working directory laid out as the page assumes
(``outputs/20251201_101010``: an EvalScope run as 1.14.1 writes it; ``../shared/data/acebench``:
the ACEBench data), ``RUN`` replaced by the replay's run directory. The replay gives the
import's reproduced OVERALL, and the page says how its figures are averaged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from tests.conftest import REPO_ROOT
from tests.support.host import time_limit
from tests.test_evalscope_import_reports import _write

GUIDE = REPO_ROOT / "docs" / "migrating-from-evalscope.md"


def guide_commands() -> list[str]:
    """Every command of the page: its indented lines that start ``python -m evalkit``, with
    their ``\\`` continuation lines joined, in the page's order."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    commands, i = [], 0
    while i < len(lines):
        if lines[i].startswith("    python -m evalkit"):
            parts = [lines[i].strip()]
            while parts[-1].endswith("\\"):
                i += 1
                parts[-1] = parts[-1][:-1].rstrip()
                parts.append(lines[i].strip())
            commands.append(" ".join(parts))
        i += 1
    return commands


def test_the_page_has_its_commands_and_says_how_figures_average() -> None:
    commands = guide_commands()
    assert [c.split()[2] for c in commands] == ["evalkit.import_evalscope", "evalkit", "evalkit.rescore",
                                                "evalkit.rescore", "evalkit.compare"]  # fmt: skip
    replay = commands[1]
    assert "benchmark.data_dir=../shared/data/acebench" in replay and "model.path=imports/q3/replay.jsonl" in replay
    text = GUIDE.read_text(encoding="utf-8")
    assert "**How every OVERALL here is averaged**" in text and "divided by the sum of the weights of the groups evaluated" in text
    for name in ("evalscope:think_block", "evalscope:first_block", "evalscope:whitespace_kept", "evalscope:kwargs_ignored",
                 "evalscope:no_arithmetic"):  # fmt: skip
        assert f"(`{name}`" in text, name
    assert not re.search(r"\b0\.(3402|4006|3694|4281)\b", text)  # the study's figures nobody could reproduce


@pytest.mark.slow
def test_the_guides_commands_run_verbatim_offline(acebench_dir: Path, tmp_path: Path) -> None:
    work, shared = tmp_path / "work", tmp_path / "shared" / "data"
    work.mkdir()
    shared.mkdir(parents=True)
    (shared / "acebench").symlink_to(acebench_dir)
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language="en", subsets=["normal_atom_bool", "special_irrelevant"]))
    samples = bench.load()
    reasoning = "The user asks for a check. Maybe [lookup(x=1)] first? No.\n</think>\n\n"
    forms = [  # (answer, EvalScope's verdict)
        (lambda r: r, 1.0),
        (lambda r: f"Sure:\n```python\n{r}\n```", 1.0),  # first block
        (lambda r: reasoning + r, 0.0),  # a bare </think>: the reasoning's call is decoded
        (lambda r: "[wrong_api(x=1)]", 0.0),
    ]
    rows: dict[str, list[dict]] = {"normal_atom_bool": [], "special_irrelevant": []}
    for i, s in enumerate([x for x in samples if x.subset == "normal_atom_bool"][:8]):
        answer, acc = forms[i % 4]
        rows[s.subset].append({"id": s.data["prompt"]["id"], "output": answer(bench.reference_output(s)), "acc": acc})
    for s in [x for x in samples if x.subset == "special_irrelevant"][:3]:
        rows[s.subset].append({"id": s.data["prompt"]["id"], "output": bench.reference_output(s), "acc": 1.0})
    _write(work / "outputs" / "20251201_101010", rows)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this interpreter, its environment
    (shim / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))}  # fmt: skip

    def sh(command: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=time_limit(600))
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    commands = guide_commands()
    imported = sh(commands[0])
    result = json.loads((work / "imports" / "q3" / "import.json").read_text())
    assert result["n_replay"] == 11 and "OVERALL  EvalScope" in imported.stdout
    sh(commands[1])
    (run,) = (work / "outputs" / "runs" / "acebench" / "replay").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metrics"]["overall"] == pytest.approx(result["overall"]["reproduced"], abs=1e-12)
    assert abs(summary["metrics"]["overall"] - result["overall"]["evalscope"]) < 1e-4  # EvalScope's report, rounded
    rescored = sh(commands[2].replace("RUN", str(run)))
    assert ("scoring rules: evalscope:same_as_official 4, official 3, evalscope:first_block 2, "
            "evalscope:think_block 2") in rescored.stdout
    sh(commands[3].replace("RUN", str(run)))
    official = json.loads((run / "rescored" / "official" / "summary.json").read_text())
    # the official rules pass the plain references and the bare-</think> answers: 4 of 8
    assert official["metrics"]["accuracy/normal_atom_bool"] == pytest.approx(4 / 8)
    sh(commands[4].replace("RUN", str(run)))
