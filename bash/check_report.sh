#!/usr/bin/env bash
# Validates every summary.json below a run or sweep directory against the schema
# src/evalkit/report/summary.schema.json (JSON Schema 2020-12, checked with jsonschema),
# plus rules a schema cannot state for every benchmark: a complete run's metrics hold its
# `headline` metric, n_scored + n_failed == n_samples (samples, with repeats too) and
# n_scored_rows + n_failed_rows == n_requested (sample × epoch), the counts as
# evalkit.summary.Summary defines them (a version-1 summary is read as version 2). Every sweep_summary.json
# (a sweep's, see docs/sweeps-and-suites.md) is checked against sweep_summary.schema.json, and its
# jobs that left no run (status error / lost / interrupted) are FAILs of the sweep.
# A run directory is one holding evalkit's config.yaml or a summary.json: one with config.yaml
# but no summary.json (the run crashed, was killed or is still running) is a FAIL.
# Copies that MLflow keeps as artifacts (<artifact root>/<run id>/artifacts/[sweep_]summary.json,
# config.yaml, e.g. <output root>/mlartifacts/...) are not runs and are skipped below the directory given.
#
#   bash bash/check_report.sh outputs/runs/acebench        # or one run, or a sweep dir
#
# One line per run:  OK <dir> | FAIL <dir>: <field>: <reason> | INCOMPLETE <dir>: n_failed=N
#                  | FAIL <dir>: summary.json: missing (...)
# One line per sweep: OK <sweep dir>: sweep of N jobs, all complete
#                   | FAIL <sweep dir>: job K (<swept overrides>): <status>: <error> (per job)
# Exit: 0 all OK; 1 any FAIL or INCOMPLETE; 2 usage error (no directory, no run or sweep below it).
# Python: ${VENV:-.venv}/bin/python (relative paths are taken from the repository root).
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  echo "usage: bash bash/check_report.sh RUN_OR_SWEEP_DIR" >&2
  exit 2
fi
target=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-.venv}
[[ $venv == /* ]] || venv="$root/$venv"
py="$venv/bin/python"
if [[ ! -x $py ]]; then
  echo "evalkit: error: $py not found (run bash/setup.sh or set VENV)" >&2
  exit 2
fi

exec "$py" - "$root/src/evalkit/report/summary.schema.json" "$target" <<'PY'
import json
import sys
from pathlib import Path

import jsonschema
from pydantic import ValidationError

from evalkit.summary import Summary

schema_path, target = Path(sys.argv[1]), Path(sys.argv[2])
sweep_schema_path = schema_path.with_name("sweep_summary.schema.json")
if not target.is_dir():
    print(f"evalkit: error: {target}: no such directory", file=sys.stderr)
    sys.exit(2)
schema = json.loads(schema_path.read_text(encoding="utf-8"))
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def mlflow_copy(path):
    """True for a summary.json that MLflow stored as an artifact (``<run id>/artifacts/``
    below the directory given): a copy of a run, not a run."""
    parts = path.relative_to(target).parts[:-1]
    return any(
        parts[i + 1] == "artifacts" and len(parts[i]) == 32 and all(c in "0123456789abcdef" for c in parts[i])
        for i in range(len(parts) - 1)
    )


files = sorted(p for p in target.rglob("summary.json") if not mlflow_copy(p))
sweeps = sorted(p for p in target.rglob("sweep_summary.json") if not mlflow_copy(p))
# run directories by their config.yaml (written when the run starts): no summary.json is a FAIL
unfinished = sorted(p.parent for p in target.rglob("config.yaml") if not mlflow_copy(p) and not (p.parent / "summary.json").exists())
if not files and not sweeps and not unfinished:
    print(f"evalkit: error: {target}: no summary.json or run config.yaml below it", file=sys.stderr)
    sys.exit(2)


def field_of(err):
    """Dotted path of the offending field; for a missing property, the property itself."""
    parts = [str(p) for p in err.absolute_path]
    if err.validator == "required" and isinstance(err.instance, dict):
        missing = [k for k in err.validator_value if k not in err.instance]
        if missing:
            parts.append(missing[0])
    return ".".join(parts) or "(root)"


def sweep_problems(sweep):
    """(sweep-level problem) or [(job, reason) of every job that left no run]."""
    checker = jsonschema.Draft202012Validator(json.loads(sweep_schema_path.read_text(encoding="utf-8")))
    errors = sorted(checker.iter_errors(sweep), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        return f"{field_of(errors[0])}: {errors[0].message}", []
    jobs = sweep["jobs"]
    n_complete = sum(j["status"] == "complete" for j in jobs)
    if (sweep["n_jobs"], sweep["n_complete_jobs"], sweep["n_failed_jobs"]) != (len(jobs), n_complete, len(jobs) - n_complete):
        return f"n_jobs: the counts do not match the {len(jobs)} jobs listed", []
    lost = [j for j in jobs if j["status"] not in ("complete", "incomplete", "untracked")]
    return None, lost


def problems(summary):
    if not isinstance(summary, dict):
        return [("(root)", "not a JSON object")]
    found = [(field_of(e), e.message) for e in sorted(validator.iter_errors(summary), key=lambda e: list(map(str, e.absolute_path)))]
    if found:
        return found
    head = summary["headline"]
    if summary["status"] == "complete" and head not in summary["metrics"]:
        found.append((f"metrics.{head}", f"headline metric {head!r} missing from a complete run's metrics"))
    try:  # the counts as evalkit.summary.Summary defines them (a version-1 summary's read as version 2)
        typed = Summary.model_validate(summary)
    except ValidationError as exc:
        err = exc.errors()[0]
        return [(".".join(map(str, err["loc"])) or "(root)", err["msg"])]
    if typed.n_scored + typed.n_failed != typed.n_samples:
        found.append(("n_scored", f"n_scored + n_failed = {typed.n_scored + typed.n_failed} != n_samples = {typed.n_samples} (samples)"))
    rows = typed.n_scored_rows + typed.n_failed_rows
    if typed.n_requested is not None and rows != typed.n_requested:
        found.append(("n_scored_rows", f"n_scored_rows + n_failed_rows = {rows} != n_requested = {typed.n_requested} (sample × epoch)"))
    return found


bad = False
for run_dir in sorted({p.parent for p in files} | set(unfinished)):
    path = run_dir / "summary.json"
    if run_dir in unfinished:
        print(f"FAIL {run_dir}: summary.json: missing (the run crashed, was killed or is still running; "
              f"see {run_dir / 'evalkit.log'}, resume with run.resume={run_dir})")
        bad = True
        continue
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"FAIL {run_dir}: summary.json: cannot be read as JSON ({type(exc).__name__}: {exc})")
        bad = True
        continue
    found = problems(summary)
    if found:
        field, reason = found[0]
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        print(f"FAIL {run_dir}: {field}: {reason}{more}")
        bad = True
    elif summary["status"] != "complete":
        ids = summary.get("failed_ids") or []
        shown = f" ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})" if ids else ""
        print(f"INCOMPLETE {run_dir}: n_failed={summary['n_failed']}{shown}")
        bad = True
    else:
        print(f"OK {run_dir}")
for path in sweeps:
    sweep_dir = path.parent
    try:
        sweep = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"FAIL {sweep_dir}: sweep_summary.json: cannot be read as JSON ({type(exc).__name__}: {exc})")
        bad = True
        continue
    problem, lost = sweep_problems(sweep) if isinstance(sweep, dict) else ("(root): not a JSON object", [])
    if problem:
        print(f"FAIL {sweep_dir}: sweep_summary.json: {problem}")
        bad = True
    for job in lost:
        label = " ".join(job["point"] or job["overrides"])
        print(f"FAIL {sweep_dir}: job {job['num']} ({label}): {job['status']}: {job['error'] or 'no reason recorded'}")
        bad = True
    if not problem and sweep["status"] == "complete":
        print(f"OK {sweep_dir}: sweep of {sweep['n_jobs']} jobs, all complete")
sys.exit(1 if bad else 0)
PY
