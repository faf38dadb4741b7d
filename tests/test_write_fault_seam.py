"""The run directory's test-only write-fault seam (``evalkit.jsonl.before_write``, used by
``perf/chaos.py``): off in every production run, and what it does when a test installs it."""

from __future__ import annotations

import ast
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src" / "evalkit"


def test_nothing_in_evalkit_sets_the_seam():
    """Only tests/support/write_faults.py assigns ``before_write``: no module of the package
    does (an assignment, augmented or annotated, to that name or attribute, or a setattr
    naming it), so no configuration, environment variable or code path of a production
    run can turn it on."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for t in targets:
                name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else None
                if name == "before_write" and not (path.name == "jsonl.py" and isinstance(node, ast.AnnAssign) and node.value.value is None):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and any(
                isinstance(a, ast.Constant) and a.value == "before_write" for a in node.args
            ):
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert found == []


def test_the_seam_is_off_in_a_plain_process():
    """A process started without the chaos script's PYTHONPATH has no seam, even with the
    control file's variable set (only tests/support/chaos_site/ reads it)."""
    code = "import evalkit.jsonl as j; print(j.before_write is None)"
    env = {**os.environ, "EVALKIT_CHAOS_WRITE_FAULT_FILE": "/nonexistent"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def test_installed_seam_fails_writes_while_the_control_file_exists(tmp_path: Path, monkeypatch):
    """Installed (as the chaos script's driver does), a journal append, a side file and the
    summary fail with EIO while the control file exists (said as RunDirWriteError), write
    nothing, and work again once it is gone (a new appender: a failed one writes no more)."""
    import evalkit.jsonl as jsonl
    from evalkit.errors import RunDirWriteError
    from evalkit.jsonl import JsonlAppender, write_unit_file
    from tests.support.write_faults import install

    monkeypatch.setattr(jsonl, "before_write", None)
    control = tmp_path / "on"
    install(control)
    journal = tmp_path / "predictions.jsonl"
    with JsonlAppender(journal) as out:
        out.append({"sample_id": "a"})
        control.touch()
        with pytest.raises(RunDirWriteError) as err:
            out.append({"sample_id": "b"})
        assert err.value.__cause__.errno == errno.EIO
        with pytest.raises(RunDirWriteError) as err:
            write_unit_file(tmp_path, "large", "x.json", b"{}")
        assert err.value.__cause__.errno == errno.EIO
        control.unlink()
    with JsonlAppender(journal) as out:  # an appender that failed writes no more: the run stops (a resume opens a new one)
        out.append({"sample_id": "c"})
    assert [json.loads(x)["sample_id"] for x in journal.read_text().splitlines()] == ["a", "c"]
    assert not (tmp_path / "large" / "x.json").exists()


@pytest.mark.slow  # two interpreters that import evalkit
def test_the_chaos_site_hook_installs_the_seam_only_with_its_variable(tmp_path: Path):
    site = str(REPO_ROOT / "tests" / "support" / "chaos_site")
    code = "import evalkit.jsonl as j; print(j.before_write is not None)"
    env = {**os.environ, "PYTHONPATH": site}
    env.pop("EVALKIT_CHAOS_WRITE_FAULT_FILE", None)
    off = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    on = subprocess.run([sys.executable, "-c", code], cwd="/", env={**env, "EVALKIT_CHAOS_WRITE_FAULT_FILE": str(tmp_path / "on")},
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (off.stdout.strip(), on.stdout.strip()) == ("False", "True"), (off.stderr, on.stderr)
