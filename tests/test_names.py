"""Each of evalkit's names means one thing (issue 26 item 16): ``execute`` is the run's
execute stage (one model call is ``call_model``), ``Budget`` the run's spend limits (ACEBench's
decoder bounds its arithmetic with an ``ArithmeticAllowance``), and a *job* one run of one
config (a run's registration on the model workers is ``registration``)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "evalkit"


def _defined(kind: type, name: str) -> list[str]:
    """The modules defining a function (or class) ``name`` at any depth."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kind) and node.name == name:
                out.append(str(path.relative_to(SRC)))
    return out


def test_execute_is_the_run_stage_only():
    assert _defined((ast.FunctionDef, ast.AsyncFunctionDef), "execute") == ["engine/run.py"]  # type: ignore[arg-type]


def test_budget_is_the_runs_spend_only():
    assert _defined(ast.ClassDef, "Budget") == ["engine/budget.py"]


def test_the_engine_calls_nothing_a_job():
    """A job is one run of one config (evalkit.job, a sweep's jobs); the engine's own
    arguments, attributes and variables never take the word."""
    named = []
    for path in sorted((SRC / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.arg for a in node.args.args] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
            if isinstance(node, ast.Attribute) and node.attr in ("job", "jobs"):
                names.append(node.attr)
            if isinstance(node, ast.Name) and node.id in ("job", "jobs"):
                names.append(node.id)
            named += [f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}" for n in names if n in ("job", "jobs")]
    assert named == []
