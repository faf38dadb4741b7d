"""The core's contracts: what is recorded is what ran, one JSON Lines reading, request
identity, old run directories, the user simulator's own endpoint, and the import graph."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
import yaml

from evalkit.engine.journal import read_jsonl
from evalkit.rescore import rescore
from tests.conftest import REPO_ROOT

SRC = REPO_ROOT / "src" / "evalkit"


def _api(fake, *extra: str) -> list[str]:
    return [f"backend.api_base={fake.api_base}", "backend.retry_initial_wait_s=0.01", *extra]


# ------------------------------------------------------------------------------------------
# what is recorded is what ran
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_config_and_params_record_the_values_sent(fake_openai, ray_address, run_eval, tmp_path):
    """model=smollm2 on ACEBench: its dataset_args send max_tokens=256 (not the benchmark's
    1200 nor the model's 512); config.yaml and the MLflow params say 256 and name no layer
    whose value was not sent."""
    from mlflow.tracking import MlflowClient

    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    res = run_eval(
        ["model=smollm2", "backend=api", *_api(fake_openai), "tracking=mlflow", "benchmark.subsets=[normal_atom_bool]", "run.limit=2"],
        output_root=root,
    )  # fmt: skip
    assert {e["params"]["max_tokens"] for e in fake_openai.log} == {256}
    cfg = yaml.safe_load((res.run_dir / "config.yaml").read_text())
    assert cfg["config_format"] == 2
    assert cfg["generation"] == {"temperature": 0.0, "max_tokens": 256}
    assert "generation" not in cfg["model"] and "generation" not in cfg["benchmark"] and "dataset_args" not in cfg["model"]
    assert cfg["layers"]["benchmark.generation"]["max_tokens"] == 1200  # provenance only
    assert res.summary["generation_params"] == {"temperature": 0.0, "max_tokens": 256}
    run_id = json.loads((res.run_dir / "tracking.json").read_text())["mlflow_run_id"]
    params = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}").get_run(run_id).data.params
    assert params["generation.max_tokens"] == "256" and params["generation.temperature"] == "0.0"
    raw_layers = [k for k in params if k.startswith(("layers.", "model.generation", "benchmark.generation", "model.dataset_args"))]
    assert raw_layers == []
    assert {k: v for k, v in params.items() if k.endswith("max_tokens")} == {
        "generation.max_tokens": "256", "user.generation.max_tokens": "256"  # smollm2 plays its own user
    }


def test_rescore_uses_the_benchmark_settings_that_ran(run_eval):
    """A knob set through dataset_args (language=zh) is rescored under the same setting."""
    res = run_eval(["model=reference", "+model.dataset_args.acebench.language=zh", "benchmark.subsets=[normal_atom_bool]", "run.limit=5"])
    assert all(r["sample_id"].startswith("zh/") for r in read_jsonl(res.run_dir / "predictions.jsonl"))
    assert yaml.safe_load((res.run_dir / "config.yaml").read_text())["benchmark"]["language"] == "zh"
    result = rescore(res.run_dir)
    assert result["changed"] == []
    assert result["metrics"] == result["recorded"] and result["metrics"]["accuracy/normal_atom_bool"] == 1.0


def test_config_yaml_is_rewritten_on_resume(run_eval):
    first = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=2"])
    again = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=4", f"run.resume={first.run_dir}"])
    assert again.summary["n_scored"] == 4
    assert yaml.safe_load((first.run_dir / "config.yaml").read_text())["run"]["limit"] == 4


# ------------------------------------------------------------------------------------------
# JSON Lines: records split on \n only
# ------------------------------------------------------------------------------------------
def test_outputs_with_line_separators_replay_with_the_same_verdicts(run_eval, tmp_path):
    ref = run_eval(["model=reference", "benchmark.subsets=[normal_atom_bool]", "run.limit=4"])
    rows = sorted(read_jsonl(ref.run_dir / "predictions.jsonl"), key=lambda r: r["sample_id"])
    marks = ["\u2028", "\u2029", "\u0085", "\u2028\u2029"]
    outputs = [{"sample_id": r["sample_id"], "output": r["output"] + m} for r, m in zip(rows, marks)]
    outputs[1]["output"] = outputs[1]["output"].replace("(", "(\u2028", 1)  # inside the call: a different verdict
    replay = tmp_path / "outputs.jsonl"
    replay.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in outputs), encoding="utf-8")
    assert "\u2028" in replay.read_text(encoding="utf-8")
    first = run_eval(["model=replay", f"model.path={replay}", "benchmark.subsets=[normal_atom_bool]", "run.limit=4"])
    second = run_eval(
        ["model=replay", f"model.path={first.run_dir / 'predictions.jsonl'}", "benchmark.subsets=[normal_atom_bool]", "run.limit=4"]
    )

    def verdicts(run):
        return {r["sample_id"]: (r["output"], r["scores"], r["status"]) for r in read_jsonl(run.run_dir / "predictions.jsonl")}

    assert first.summary["n_scored"] == second.summary["n_scored"] == 4
    assert verdicts(first) == verdicts(second)
    assert {o["sample_id"]: o["output"] for o in outputs} == {k: v[0] for k, v in verdicts(first).items()}
    text = (first.run_dir / "predictions.jsonl").read_text(encoding="utf-8")
    assert "\u2028" not in text and "\\u2028" in text  # written escaped: any line reader accepts it


# ------------------------------------------------------------------------------------------
# request identity
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_extra_body_is_sent_and_part_of_the_request_identity(fake_openai, ray_address, run_eval, tmp_path):
    fake_openai.set_plan({"default": {"content": "[]"}})
    root = tmp_path / "out"
    base = ["model=openai_compatible", "model.provider_model=openai/fake", *_api(fake_openai),
            "benchmark.subsets=[normal_atom_bool]", "run.limit=3"]  # fmt: skip
    run_eval(base, output_root=root)
    assert len(fake_openai.log) == 3
    fake_openai.set_plan({"default": {"content": "[]"}})
    run_eval(base, output_root=root)
    assert fake_openai.log == []  # every answer from the response cache
    res = run_eval([*base, "+model.extra_body.top_k=5"], output_root=root)
    assert len(fake_openai.log) == 3 and {e["extra"].get("top_k") for e in fake_openai.log} == {5}
    assert yaml.safe_load((res.run_dir / "config.yaml").read_text())["model"]["extra_body"] == {"top_k": 5}


def test_request_hash_of_epoch_0_and_no_extra_body_is_unchanged():
    """Caches made before epochs and extra_body were part of the identity stay valid."""
    from evalkit.types import Request, canonical_json, sha256_hex

    req = Request("s1", "x", messages=[{"role": "user", "content": "hi"}], params={"max_tokens": 5})
    before = sha256_hex(canonical_json({"model": "m", "params": {"max_tokens": 5}, "messages": req.messages, "prompt": None}))
    assert req.request_hash("m") == before
    assert Request("s1", "x", messages=req.messages, params=req.params, epoch=1).request_hash("m") != before
    with_body = Request("s1", "x", messages=req.messages, params={"max_tokens": 5, "extra_body": {"top_k": 5}})
    assert with_body.request_hash("m") != before


# ------------------------------------------------------------------------------------------
# run directories written before config format 2
# ------------------------------------------------------------------------------------------
def _as_format_1(run_dir: Path) -> None:
    """Rewrite config.yaml the way evalkit wrote it before config format 2 (raw layers)."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg.pop("config_format")
    layers = cfg.pop("layers")
    gen = cfg.pop("generation")
    cfg["model"]["generation"] = layers.get("model.generation", gen)
    cfg["model"]["dataset_args"] = {"acebench": layers.get("model.dataset_args.acebench", {})}
    cfg["benchmark"]["generation"] = layers.get("benchmark.generation", {})
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def test_an_older_run_directory_is_refused_for_resume_and_still_rescored(run_eval):
    res = run_eval(["model=reference", "+model.dataset_args.acebench.language=zh", "benchmark.subsets=[normal_atom_bool]", "run.limit=3"])
    _as_format_1(res.run_dir)
    result = rescore(res.run_dir)
    assert result["changed"] == [] and result["metrics"] == result["recorded"]
    from evalkit.errors import RunDirError

    with pytest.raises(RunDirError, match="config format 1") as err:
        run_eval(["model=reference", "+model.dataset_args.acebench.language=zh", "benchmark.subsets=[normal_atom_bool]",
                  "run.limit=3", f"run.resume={res.run_dir}"])  # fmt: skip
    assert "\n" not in str(err.value)
    assert len(list(read_jsonl(res.run_dir / "predictions.jsonl"))) == 3  # nothing re-requested


# ------------------------------------------------------------------------------------------
# the user simulator is built from its own config
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_user_simulator_override_reaches_its_own_endpoint(fake_openai, ray_address, run_eval):
    from tests.support.fake_openai import FakeOpenAI

    user_server = FakeOpenAI().start()
    try:
        fake_openai.set_plan({"default": {"content": "finish conversation"}})
        user_server.set_plan({"default": {"content": "finish conversation"}})
        res = run_eval([
            "model=openai_compatible", "model.provider_model=openai/fake", *_api(fake_openai),
            "benchmark.user_model=openai_compatible", f"benchmark.user_overrides=['backend.api_base={user_server.api_base}','model.provider_model=openai/fake-user']",
            "benchmark.max_dialog_turns=4", "run.sample_ids=[en/agent_multi_turn_0,en/agent_multi_turn_1]", "run.cache=false",
        ])  # fmt: skip
        assert res.summary["status"] == "complete"
        assert len(user_server.log) >= 2 and {e["model"] for e in user_server.log} == {"fake-user"}
        assert {e["model"] for e in fake_openai.log} == {"fake"}
        turns = [t["actor"] for r in read_jsonl(res.run_dir / "predictions.jsonl") for t in r["trajectory"]["turns"]]
        assert turns.count("user") == len(user_server.log) and turns.count("agent") == len(fake_openai.log)
        assert res.summary["endpoints"] == {"agent": fake_openai.api_base, "user": user_server.api_base}
    finally:
        user_server.stop()


# ------------------------------------------------------------------------------------------
# the shape of the code: imports point one way, stage functions stay short
# ------------------------------------------------------------------------------------------
#: The layers of ``src/evalkit``, top first (the allow-list of docs/architecture.md). A module
#: belongs to the unit named by the longest prefix that matches it (``evalkit`` itself: the
#: package root only) and may import its own unit and the units of the layers *below* its
#: own, nothing else: the units of one layer never import each other.
LAYERS: list[tuple[str, list[str]]] = [
    ("entry point", ["evalkit.__main__", "evalkit.judge"]),
    ("command line", ["evalkit.cli"]),
    ("sweep", ["evalkit.sweep"]),
    ("commands", ["evalkit.job", "evalkit.compare", "evalkit.track", "evalkit.audit", "evalkit.import_evalscope",
                  "evalkit.catalog", "evalkit.qualify"]),
    ("command parts", ["evalkit.rescore", "evalkit.compose"]),
    ("engine", ["evalkit.engine"]),
    ("domain", ["evalkit.benchmarks", "evalkit.models", "evalkit.tracking", "evalkit.report"]),
    ("servers", ["evalkit.backends"]),
    ("specs", ["evalkit.specs"]),
    ("configuration", ["evalkit.config"]),
    ("run records", ["evalkit.journal", "evalkit.summary"]),
    ("sequential", ["evalkit.sequential"]),  # reads its interval as stats' gates do (issue 44)
    ("basics", ["evalkit.settings", "evalkit.types", "evalkit.jsonl", "evalkit.stats", "evalkit.providers", "evalkit.secrets",
                "evalkit.images"]),
    ("input", ["evalkit.untrusted"]),
    ("root", ["evalkit", "evalkit.errors"]),
]
#: imports the layers would allow that the design still refuses: (importer, imported) prefixes
REFUSED_BELOW = [("evalkit.engine", "evalkit.backends")]  # the engine sees only the model protocol


def _own_imports() -> dict[str, set[str]]:
    """``{module: {evalkit modules it imports}}``: absolute and relative imports, function-local
    ones included, each resolved to the longest module name that exists (a fresh copy)."""
    return {mod: set(targets) for mod, targets in _parsed_imports().items()}


@functools.lru_cache(maxsize=1)
def _parsed_imports() -> dict[str, frozenset[str]]:
    mods = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(("evalkit", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        mods[name] = path
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n != mod:
                    edges[mod].add(n)
    return {mod: frozenset(targets) for mod, targets in edges.items()}


def _unit(mod: str) -> tuple[int, str] | None:
    """``(layer index, unit)`` of a module (index 0 is the top layer), ``None`` if unplaced."""
    best = None
    for rank, (_, units) in enumerate(LAYERS):
        for unit in units:
            inside = mod == unit or (unit != "evalkit" and mod.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (rank, unit)
    return best


def _import_problems(edges: dict[str, set[str]]) -> list[str]:
    """Each import that is not allowed, as one line; every module must have a layer."""
    problems = [f"{m} is in no layer: place it in LAYERS" for m in sorted(edges) if _unit(m) is None]
    for mod, targets in sorted(edges.items()):
        here = _unit(mod)
        for target in sorted(targets):
            there = _unit(target)
            if here is None or there is None or here[1] == there[1]:
                continue
            if there[0] <= here[0]:
                where = "the same layer" if there[0] == here[0] else "a higher layer"
                problems.append(f"{mod} ({LAYERS[here[0]][0]}) imports {target} ({LAYERS[there[0]][0]}, {where})")
            problems += [
                f"{mod} imports {target} ({a} never imports {b})"
                for a, b in REFUSED_BELOW
                if here[1] == a and (target == b or target.startswith(b + "."))
            ]
    return problems


def test_imports_point_down_the_layers():
    """The allow-list: each module imports only its own unit and the layers below its own."""
    assert _import_problems(_own_imports()) == []


def test_the_layer_check_catches_a_sideways_and_an_upward_import():
    """The check itself: the imports this project removed would each be named again."""
    edges = _own_imports()
    edges["evalkit.config"] = edges["evalkit.config"] | {"evalkit.benchmarks", "evalkit.benchmarks.base"}
    edges["evalkit.models.factory"] = edges["evalkit.models.factory"] | {"evalkit.benchmarks.base"}
    edges["evalkit.engine.run"] = edges["evalkit.engine.run"] | {"evalkit.backends.llamacpp"}
    assert _import_problems(edges) == [
        "evalkit.config (configuration) imports evalkit.benchmarks (domain, a higher layer)",
        "evalkit.config (configuration) imports evalkit.benchmarks.base (domain, a higher layer)",
        "evalkit.engine.run imports evalkit.backends.llamacpp (evalkit.engine never imports evalkit.backends)",
        "evalkit.models.factory (domain) imports evalkit.benchmarks.base (domain, the same layer)",
    ]


def test_config_imports_no_benchmark():
    """``config`` validates ``benchmark.*`` through the lookup its caller passes in."""
    edges = _own_imports()
    assert not any(t.startswith("evalkit.benchmarks") for t in edges["evalkit.config"])
    assert not any(t.startswith("evalkit.benchmarks") for t in edges["evalkit.models.factory"])


#: the function-local own-module imports docs/architecture.md names: ``{importer: imported}``
LOCAL_IMPORTS = {
    "evalkit.models.factory": {"evalkit.models.litellm_client"},  # litellm, in a worker
    "evalkit.compare": {"evalkit.tracking.mlflow_tracking"},  # MLflow, for a run id only
    "evalkit.tracking.store": {"evalkit.tracking.http_bounds"},  # requests and urllib3, for a tracking server only
    "evalkit.engine.executor": {"evalkit.providers"},  # a Ray worker's price call
    "evalkit.config": {"evalkit.stats"},  # run.stop_when's gate parsed (numpy), only when set
    "evalkit.benchmarks.acebench.metrics": {"evalkit.stats"},  # numpy, in stat_plan
    "evalkit.benchmarks.ke.metrics": {"evalkit.stats"},
    "evalkit.benchmarks.sobhard.metrics": {"evalkit.stats"},
    "evalkit.benchmarks.sobhard.constraints": {"evalkit.benchmarks.sobhard.patterns"},
    "evalkit.benchmarks.sobhard.rules": {"evalkit.benchmarks.sobhard.operations"},
}


def test_own_module_imports_sit_at_the_top_but_the_documented_ones():
    local: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        mod = ".".join(("evalkit", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for stmt in tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               for n in ast.walk(stmt)}  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in top and (node.module or "").startswith("evalkit"):
                local.setdefault(mod, set()).add(str(node.module))
            if isinstance(node, ast.Import) and id(node) not in top:
                local.setdefault(mod, set()).update(a.name for a in node.names if a.name.startswith("evalkit"))
    undocumented = {m: t - LOCAL_IMPORTS.get(m, set()) for m, t in local.items() if t - LOCAL_IMPORTS.get(m, set())}
    assert undocumented == {}


def _doc_section(title: str) -> str:
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_architecture_doc_names_the_stages_the_code_runs():
    """The doc's stage table, run.py's stage line and each stage module's own docstring agree."""
    import evalkit.engine.run as run_module

    rows = [line.split("|")[1:3] for line in _doc_section("A run is a line of stages").splitlines() if line.startswith("| ")]
    table = [(stage.strip(), module.strip().strip("`")) for stage, module in rows[1:]]  # the header row aside
    line = next(ln for ln in run_module.__doc__.splitlines() if "→" in ln)
    assert [stage for stage, _ in table] == [s.strip() for s in line.split("→")]
    for number, (stage, module) in enumerate(table, start=1):
        assert module.startswith("engine/"), module
        doc = importlib.import_module("evalkit." + module.removesuffix(".py").replace("/", ".")).__doc__
        if module == "engine/run.py":
            assert f"* **{stage}**" in doc
        else:
            assert doc.startswith(f"Stage {number} of a run, *{stage}*"), (module, doc.splitlines()[0])
            assert f"* **{stage}** (:mod:`evalkit.{module.removesuffix('.py').replace('/', '.')}`)" in run_module.__doc__


def test_architecture_doc_lists_every_benchmark_method_and_attribute():
    from evalkit.benchmarks.base import Benchmark

    bullet = _doc_section("The protocols").split("- **Benchmark**")[1].split("\n- **")[0]
    methods_text, attributes_text = bullet.split("Class attributes:")
    attributes_text = attributes_text.split("Its")[0]
    documented_methods = set(re.findall(r"`(\w+)`", methods_text.replace("`score(sample, output)`", "")))
    methods = {n for n, v in vars(Benchmark).items() if inspect.isfunction(v) and not n.startswith("_")}
    attributes = {n for n, kind in Benchmark.__annotations__.items() if "ClassVar" in str(kind)}
    assert documented_methods == methods
    assert set(re.findall(r"`(\w+)`", attributes_text)) == attributes


def test_architecture_doc_lists_the_layers_the_test_checks():
    block = _doc_section("Which package may import which").split("\n\n")[2]
    layers: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line[4] != " ":
            name, _, rest = line[4:].partition("  ")
            layers.append((name.strip(), rest))
        else:
            layers[-1] = (layers[-1][0], layers[-1][1] + " " + line.strip())
    documented = []
    for name, rest in layers:
        units = [u.strip().removesuffix("/") for u in re.sub(r"\([^)]*\)", "", rest).split(",")]
        documented.append((name, ["evalkit" if u == "evalkit" else f"evalkit.{u}" for u in units]))
    assert documented == LAYERS


def test_import_graph_has_no_cycle():
    edges = _own_imports()
    for mod, targets in edges.items():
        pkg = mod.rsplit(".", 1)[0]
        edges[mod] = {t for t in targets if not (mod == t.rsplit(".", 1)[0] or t == pkg)}  # package ↔ own children
    state: dict[str, int] = {}

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for t in edges[mod]:
            assert state.get(t) != 1, f"import cycle: {' -> '.join(path + [t])}"
            if t not in state:
                visit(t, path + [t])
        state[mod] = 2

    for mod in edges:
        if mod not in state:
            visit(mod, [mod])


def test_no_orchestration_function_is_longer_than_60_lines():
    files = [*(SRC / "engine").rglob("*.py"), SRC / "cli.py", SRC / "sweep.py", *(SRC / "tracking").rglob("*.py")]
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long == []


def _import_graph_scan():
    """``perf/import_graph.py``'s scan (a script, loaded by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_graph", REPO_ROOT / "perf" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.scan


def test_the_whole_config_is_read_only_where_it_is_composed_and_turned_into_specs():
    """Issue 34 item 4: the stages, models, tracking and report take their own specs
    (:mod:`evalkit.specs`); ``EvalConfig`` is read by compose, job, the spec builder and config."""
    readers = set(_import_graph_scan()(REPO_ROOT / "src")["readers"])
    assert readers <= {"evalkit.compose", "evalkit.job", "evalkit.specs", "evalkit.config"}, readers
    assert {"evalkit.specs", "evalkit.config"} <= readers


def test_the_config_scan_counts_a_stage_that_reads_the_config(tmp_path):
    """The scan is not blind: a module reading ``plan.cfg.run`` or importing ``EvalConfig`` is a
    reader; one reading a composed ``cfg: DictConfig`` or a spec is not."""
    pkg = tmp_path / "evalkit"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("class EvalConfig:\n    run: int\n    model: int\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "stage.py").write_text("def f(plan):\n    return plan.cfg.run.limit\n")
    (pkg / "engine" / "typed.py").write_text("from evalkit.config import EvalConfig\n")
    (pkg / "engine" / "spec.py").write_text("from evalkit import config\ndef f(plan):\n    return plan.specs.run.limit\n")
    (pkg / "sweep.py").write_text("def f(cfg: DictConfig):\n    return cfg.run.dir\n")
    out = _import_graph_scan()(tmp_path)
    assert out["readers"] == ["evalkit.engine.stage", "evalkit.engine.typed"] and out["importers"] == ["evalkit.engine.typed"]
    assert out["nodes"] == 3 and out["arrows"] == 1  # evalkit.config, evalkit.engine, evalkit.sweep; engine → config


def test_every_deadline_is_awaited_through_within():
    """``asyncio.wait_for`` (before Python 3.12) loses a cancellation that meets its answer:
    a Ctrl-C did not end a batch run. Every deadline goes through ``errors.within``."""
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "asyncio.wait_for(" in p.read_text(encoding="utf-8"))
    assert users == ["errors.py"], users
