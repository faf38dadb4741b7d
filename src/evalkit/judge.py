"""Judge a finished run's answers with LLM judges, without asking the model under test again.

    python -m evalkit.judge RUN judge=<model config> [judge_overrides=[...]] [run.KEY=VALUE ...]
                            [tracking=... | tracking.KEY=VALUE ...] [backend.concurrency=N]

**What runs.** A new run of RUN's benchmark (its ``config.yaml``: the task, its
scorers and selection — ``run.limit``, ``run.sample_ids``, ``run.repeats``, ``run.seed``,
``shots``) whose model is ``model=replay model.path=RUN``: each request is answered with the
answer RUN journaled for that sample and epoch (read through :mod:`evalkit.journal`; an
answer whose judges failed in RUN, a ``judge_error`` row of its ``failed.jsonl``, is replayed
too), and the judges named by ``judge=`` rate it. It goes through the engine like any run:
model workers, response cache, retries, budget (``run.max_cost_usd``, ``run.max_total_tokens``
count the judges' calls), ``failed.jsonl`` (``judge_error``), intervals, MLflow. The model
under test is never asked: a replay sends nothing.

**Where its results go.** A new run directory beside RUN, ``<RUN>.judged-<judge>[+<judge>…]``
(``run.dir=...`` chooses another). Its ``config.yaml`` records ``model.path`` = RUN and its
``summary.json`` ``replayed_run`` = RUN. Called again with the same judges, the command
resumes that directory (``run.resume``): only the answers not yet judged are judged.

**Input.** RUN is untrusted: it is read without following a symbolic link (RUN itself, its
``config.yaml``, ``summary.json``, journal and side files), and no place it names is used:
the judged run's response cache and MLflow store are the project default (``outputs/`` here)
or what ``run.output_root``, ``run.cache_dir`` and ``tracking.*`` say, and a selection by
``run.sample_ids_file`` must be given again. Nothing is written into RUN: a ``run.dir``, ``run.resume``, output root,
cache or local MLflow store that is RUN or inside it is refused. Only the overrides above are
accepted: what was asked comes from RUN, except ``benchmark.module``: a run directory never
makes evalkit import a module (the benchmark is built in, a YAML task or an entry point's).

``run.dry_run=true`` estimates what the judges would be sent (as a run's dry run: nothing is
sent or written, and no API key is needed).

Exit codes: 0 complete (or a dry run), 1 incomplete (failures in ``failed.jsonl``; call again to resume), 2 a
bad RUN or override (one line on stderr, nothing written), 130 interrupted.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

from evalkit.benchmarks import get_benchmark_class
from evalkit.cli import console_logging, finished_quietly, report_crash, report_error
from evalkit.compose import check_benchmark, compose, compose_judges, to_plain
from evalkit.config import EvalConfig, validate
from evalkit.errors import ConfigError, EvalkitError, RunDirError, interrupted_line, printable
from evalkit.job import dry_run, outcome_line, run_validated
from evalkit.track import read_run

#: ``run.*`` keys of RUN that the judged run keeps (what was asked), unless given again; no
#: path read from RUN is used (``output_root``, ``cache_dir``, ``sample_ids_file``)
SELECTION = ("limit", "repeats", "seed", "sample_ids", "ci_level", "bootstrap_resamples")
#: override keys the command accepts (their first part); the rest of the config is RUN's
ACCEPTED = ("judge", "judge_overrides", "run", "tracking", "backend")

USAGE = "usage: python -m evalkit.judge RUN judge=<model config> [judge_overrides=[...]] [run.KEY=VALUE ...] [tracking.KEY=VALUE ...]"


def judged_config(run: Path, overrides: Sequence[str]) -> EvalConfig:
    """The validated config of the run judging RUN's answers (see the module docstring).

    Raises:
        RunDirError: RUN is not a finished run directory (or is a link) — one line.
        ConfigError: an override outside :data:`ACCEPTED`, no judge, a benchmark without an
            ``llm_judge`` scorer, or any config error of the judged run — one line.
    """
    run = Path(run).absolute()
    if run.is_symlink() or not run.is_dir():
        raise RunDirError(f"{printable(str(run), 300)}: not a run directory (a symbolic link is never followed)")
    recorded, _ = read_run(run)
    for ov in overrides:
        key = ov.lstrip("+~").partition("=")[0]
        if key.split(".")[0] not in ACCEPTED or "=" not in ov:
            raise ConfigError(f"{printable(ov, 200)}: evalkit.judge takes judge=, judge_overrides=, run.*, tracking and backend.* "
                              "overrides; what was asked (benchmark, model, shots, generation) comes from RUN")  # fmt: skip
    bench = recorded.get("benchmark") if isinstance(recorded.get("benchmark"), dict) else {}
    bench = {k: v for k, v in bench.items() if k != "module"}  # a run directory never makes evalkit import a module
    scorers = bench.get("scorers") if isinstance(bench.get("scorers"), list) else []
    if not any(isinstance(sc, dict) and sc.get("kind") == "llm_judge" for sc in scorers):
        raise ConfigError(f"{printable(str(run), 300)}: its benchmark {printable(bench.get('name'), 100)} has no llm_judge scorer; "
                          "nothing to judge")  # fmt: skip
    composed = compose(["model=replay", f"model.path={run}", *overrides])
    OmegaConf.set_struct(composed, False)
    composed.pop("benchmark")
    raw = to_plain(composed)
    if not raw.get("judge"):
        raise ConfigError("judge: name the judge: python -m evalkit.judge RUN judge=<model config name> (or a panel judge=[a,b])")
    raw["judge"] = compose_judges(raw.pop("judge"), raw.pop("judge_overrides", None))
    names = [re.sub(r"[^A-Za-z0-9._-]", "_", str(j["model"].get("name"))) for j in raw["judge"]]  # a directory name's part
    raw["benchmark"], raw["shots"] = bench, recorded.get("shots") or raw.get("shots")
    given = {ov.lstrip("+~").partition("=")[0] for ov in overrides}
    was = recorded.get("run") if isinstance(recorded.get("run"), dict) else {}
    raw["run"].update({k: was[k] for k in SELECTION if k in was and f"run.{k}" not in given})
    if was.get("sample_ids_file") and "run.sample_ids_file" not in given and "run.sample_ids" not in given:
        raise ConfigError(f"{printable(str(run), 300)}: its samples were chosen by run.sample_ids_file; give it again "
                          "(run.sample_ids_file=FILE): a path read from a run directory is not followed")  # fmt: skip
    if "run.dir" not in given and "run.resume" not in given:
        target = run.parent / f"{run.name}.judged-{'+'.join(names)}"
        if target.is_symlink():
            raise RunDirError(f"{printable(str(target), 300)}: a symbolic link; evalkit never writes through links (remove it)")
        raw["run"]["resume" if target.exists() else "dir"] = str(target)
    cfg = validate(raw, get_benchmark_class)
    check_benchmark(cfg, run / "config.yaml")  # the task checked whole before anything starts
    _refuse_writes_into(run, cfg)
    return cfg


def _refuse_writes_into(run: Path, cfg: EvalConfig) -> None:
    """RUN is read, never written: a ConfigError when the judged run's directory, output root,
    cache or MLflow store (a local path, ``sqlite:///`` or ``file:`` URI) is RUN or inside it
    (``run.resume=RUN`` would append to RUN's own journal and replace its summary)."""
    inside = run.resolve()
    places = {"run.dir": cfg.run.dir, "run.resume": cfg.run.resume, "run.output_root": cfg.run.output_root,
              "run.cache_dir": cfg.run.cache_dir, "tracking.tracking_uri": cfg.tracking.tracking_uri,
              "tracking.artifact_root": cfg.tracking.artifact_root}  # fmt: skip
    for key, value in places.items():
        if not value:
            continue
        local = re.sub(r"^(sqlite:///|file://)", "", str(value))
        if "://" in local:
            continue  # a remote store
        where = Path(local).resolve()
        if where == inside or inside in where.parents:
            raise ConfigError(f"{key}={printable(str(value), 300)}: inside the run judged; evalkit.judge never writes into RUN "
                              "(run it from another directory or name another place)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Judge RUN (``argv``: RUN and the overrides); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or "=" in args[0]:
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 2)[2], file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        cfg = judged_config(Path(args[0]), args[1:])
        if cfg.run.dry_run:  # what the judges would be sent, estimated: nothing sent or written, no key needed
            print(dry_run(cfg).line)
            return 0
        print(f"evalkit: judging the answers of {printable(args[0], 300)} with {', '.join(j.model.name for j in cfg.judge)} "
              f"→ {cfg.run.resume or cfg.run.dir}" + (" (resumed)" if cfg.run.resume else ""), file=sys.stderr)  # fmt: skip
        result = run_validated(cfg)
    except EvalkitError as exc:
        return report_error(exc)
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: one line naming the log that holds the traceback
        return report_crash(exc)
    print(outcome_line(result))
    code = 0 if result.typed is not None and result.typed.complete else 1
    finished_quietly(code, result.run_dir)
    return code


if __name__ == "__main__":
    console_logging()
    sys.exit(main())
