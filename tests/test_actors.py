"""One name for the model under test: ``actor`` is a :class:`evalkit.types.Actor` value
wherever a record is written (``failed.jsonl``, the turns of a trajectory), and a single-turn
failure names the same actor as a rollout's (``agent``, never ``model``)."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

from evalkit.journal import read_failures
from evalkit.models.base import ModelCallError
from evalkit.types import Actor, Failure, Request, Sample

SRC = Path(__file__).resolve().parents[1] / "src" / "evalkit"
VALUES = {a.value for a in Actor}


def _strings(node: ast.AST) -> set[str]:
    """The string values an expression can take: literals, both branches of ``x if c else
    y``, and ``Actor.X`` / ``Actor.X.value``; ``{"?"}`` for anything else (a variable)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body) | _strings(node.orelse)
    if isinstance(node, ast.Attribute) and node.attr == "value":
        return _strings(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Actor":
        return {Actor[node.attr].value}
    return {"?"}


def actors_written() -> dict[str, set[str]]:
    """Every literal actor the source writes → the files: ``actor=`` keywords of any call,
    the actor argument of ``ActorModel(...)``,
    ``"actor": ...`` dict entries, and ``actor = ...`` assignments (variables are skipped)."""
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            values: set[str] = set()
            if isinstance(node, ast.Call):
                values = set().union(*(_strings(kw.value) for kw in node.keywords if kw.arg == "actor"))
                if getattr(node.func, "id", None) == "ActorModel" and len(node.args) > 2:  # (model, cache, actor, ...)
                    values |= _strings(node.args[2])
            elif isinstance(node, ast.Dict):
                values = set().union(*(_strings(v) for k, v in zip(node.keys, node.values)
                                       if isinstance(k, ast.Constant) and k.value == "actor"))  # fmt: skip
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "actor" for t in node.targets):
                values = _strings(node.value)
            for value in values - {"?"}:
                found.setdefault(value, set()).add(str(path.relative_to(SRC)))
    return found


def test_every_actor_written_is_an_actor_value():
    written = actors_written()
    assert "agent" in written and "user" in written
    assert {v: sorted(f) for v, f in written.items() if v not in VALUES} == {}


def test_a_single_turn_failure_names_the_agent_like_its_turns():
    """The engine's sample path with a model whose call fails: ``failed.jsonl``'s actor is
    ``agent``, the name the turns, prices and ``usage_by_actor`` give the model under test."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.solve import solve_unit
    from evalkit.engine.work import WorkItem

    class Failing:
        model_id = "failing"

        async def generate(self, request):
            raise ModelCallError(Failure("server_error", "HTTP 500", attempts=2))

    class Pair:
        def pair(self, sample):
            return Failing(), None

    sample = Sample("s0", "subset")
    unit = WorkItem(sample, Request("s0", "subset", messages=[{"role": "user", "content": "hi"}]))
    trajectory = asyncio.run(solve_unit(Generate(), unit, Pair(), None, {}, {}))
    assert (trajectory.failure.error_kind, trajectory.failure.actor) == ("server_error", "agent")


def test_failed_rows_of_old_runs_read_model_as_agent(tmp_path):
    path = tmp_path / "failed.jsonl"
    rows = [{"sample_id": "a", "epoch": 0, "error_kind": "timeout", "actor": "model"},
            {"sample_id": "b", "epoch": 0, "error_kind": "client_error", "actor": "user"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_failures(path)
    assert {k: r["actor"] for k, r in got.items()} == {("a", 0): "agent", ("b", 0): "user"}
