#!/usr/bin/env bash
# Runs a named suite of evaluations: one `python -m evalkit` run per entry of
# suites/SUITE.yaml (a list of {name, benchmark, subsets, overrides}; see smoke.yaml).
#
#   bash bash/run_suite.sh SUITE [--model M] [--dry-run] [hydra overrides...]
#   bash bash/run_suite.sh smoke --model reference tracking=none
#
# Each entry runs as
#   ${VENV:-.venv}/bin/python -m evalkit benchmark=B [model=M] [benchmark.subsets=[...]] <entry overrides> <extra overrides>
# SUITE is a name in suites/ or a path to a suite YAML. Where relative paths resolve (a
# dataset.path, run.output_root, EVALKIT_CONFIG_DIR, the suite file itself):
#   - a suite named by path (team.yaml, ./suites/team.yaml, /abs/team.yaml): against the
#     directory you run this script from — its entries run there (a team's own files);
#   - a suite named by name (smoke): against the repository root — its entries run there
#     (the project's suites read ../shared beside the checkout).
# A missing file's error line says which of the two applies. VENV (default .venv) is relative
# to the repository root. --dry-run prints the commands and runs nothing.
# Every entry is composed and validated first (an unknown model, a bad override, missing
# data: one line, exit 2, nothing runs; also with --dry-run).
# Every run gets EVALKIT_SUITE=<suite name> in its environment (config key run.suite: the
# MLflow tag `suite`; a run.suite=... override wins) and its own run directory in the
# suite's directory: run.dir=<output root>/suites/<suite>-<YYYYmmdd-HHMMSS>/<k>-<name>
# (<output root>: the last run.output_root=... of the entry and the command line, default
# outputs), so `bash bash/check_report.sh <suite dir>` checks this suite's runs only. An
# explicit run.dir=... or run.resume=... on the command line replaces it.
# A failing entry does not stop the suite; at the end the failed entries are named.
# Exit: 0 all entries complete; 1 some entry failed or was incomplete; 2 usage or suite
# file error; 130 interrupted.
set -euo pipefail

usage() {
  echo "usage: bash bash/run_suite.sh SUITE [--model M] [--dry-run] [hydra overrides...]" >&2
  exit 2
}

invoked=$PWD
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py="${VENV:-.venv}/bin/python"
[[ $py == /* ]] || py="$root/$py"  # the entries may run from the invoking directory

suite=""
model=""
dry_run=0
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) [[ $# -ge 2 ]] || usage; model=$2; shift 2 ;;
    --model=*) model=${1#--model=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage ;;
    -*) echo "evalkit: error: unknown option $1" >&2; usage ;;
    *)
      if [[ -z $suite ]]; then suite=$1; else extra+=("$1"); fi
      shift ;;
  esac
done
[[ -n $suite ]] || usage
if [[ ! -x $py ]]; then
  echo "evalkit: error: $py not found (run bash/setup.sh or set VENV)" >&2
  exit 2
fi
if [[ $suite == *.yaml || $suite == */* ]]; then
  suite_file=$suite  # the team's own suite: it and its entries' relative paths resolve where the script was run
  base=$invoked
else
  suite_file="suites/$suite.yaml"  # the project's: relative to the repository root, as its ../shared data paths
  base=$root
fi
cd "$base"
suite_name=$(basename "$suite_file" .yaml)
export EVALKIT_SUITE=$suite_name
stamp=$(date +%Y%m%d-%H%M%S)

# The suite file is parsed by Python (yaml): it prints, per entry, NUL-separated
# name, display command, argument count and the arguments.
plan=$(mktemp)
trap 'rm -f "$plan"' EXIT
"$py" - "$root" "$base" "$suite_file" "$model" "$py" "$stamp" "${extra[@]}" >"$plan" <<'PY' || exit 2
import os
import re
import shlex
import sys
from pathlib import Path

import yaml

root, base = Path(sys.argv[1]), Path(sys.argv[2])
del sys.argv[1:3]
sys.path.insert(0, str(root / "src"))
from evalkit.compose import compose, option_file, quote_numeric_groups, register_entry_points, resolve  # noqa: E402
from evalkit.errors import EvalkitError  # noqa: E402
from evalkit.sweep import redact_overrides  # noqa: E402

suite_file, model, py, stamp, extra = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]


def fail(msg):
    print(f"evalkit: error: {msg}", file=sys.stderr)
    sys.exit(2)


if not suite_file.is_file():
    names = sorted(p.stem for p in (root / "suites").glob("*.yaml"))
    fail(f"{suite_file}: no such suite (available: {', '.join(names) or 'none'})")
try:
    entries = yaml.safe_load(suite_file.read_text(encoding="utf-8"))
except (UnicodeDecodeError, yaml.YAMLError) as exc:
    fail(f"{suite_file}: not YAML ({type(exc).__name__})")
if not isinstance(entries, list) or not entries:
    fail(f"{suite_file}: expected a non-empty list of entries {{benchmark, subsets, overrides}}")
out = []
seen = set()
suite_dirs = set()
plans = []
for i, entry in enumerate(entries, 1):
    where = f"{suite_file}: entry {i}"
    if not isinstance(entry, dict):
        fail(f"{where}: expected a mapping {{benchmark, subsets, overrides}}")
    unknown = sorted(set(entry) - {"name", "benchmark", "subsets", "overrides"})
    if unknown:
        fail(f"{where}: unknown key {unknown[0]!r} (allowed: name, benchmark, subsets, overrides)")
    bench = entry.get("benchmark")
    # conf/benchmark/, EVALKIT_CONFIG_DIR's benchmark/ or an installed entry point (issue 32)
    if not isinstance(bench, str) or not (option_file("benchmark", bench) or bench in register_entry_points()):
        fail(f"{where}: benchmark {bench!r} is not one of conf/benchmark/*.yaml, EVALKIT_CONFIG_DIR's benchmark/*.yaml "
             "or an installed entry point")
    subsets = entry.get("subsets")
    if subsets is not None and (not isinstance(subsets, list) or not subsets or not all(isinstance(s, str) and s for s in subsets)):
        fail(f"{where}: subsets must be null or a non-empty list of names")
    overrides = entry.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        fail(f"{where}: overrides must be a list of Hydra overrides key=value")
    name = str(entry.get("name") or bench)
    if name in seen:
        name = f"{name}#{i}"
    seen.add(name)
    args = ["-m", "evalkit", f"benchmark={bench}"]
    args += [f"model={model}"] if model else []
    args += [f"benchmark.subsets=[{','.join(subsets)}]"] if subsets else []
    args += overrides + extra
    keys = [a.lstrip("+~").partition("=")[0] for a in args]
    if "run.dir" not in keys and "run.resume" not in keys:
        roots = [a.partition("=")[2] for a in args if a.lstrip("+").startswith("run.output_root=")]
        suite_dir = Path(roots[-1] if roots else "outputs") / "suites" / f"{suite_file.stem}-{stamp}"
        args.append(f"run.dir={suite_dir / (f'{i}-' + re.sub(r'[^A-Za-z0-9_.#-]', '_', name))}")
        suite_dirs.add(str(suite_dir))
    plans.append((where, name, args))
    # the printed command never shows a secret (backend.api_key=*** ), the run gets the value
    out += [name, shlex.join([py, *redact_overrides(args)]), str(len(args)), *args]

# every entry is composed and validated as `python -m evalkit` would, before any runs: an
# unknown model or key, a wrong value or missing data is one line and exit 2, nothing run
for where, name, args in plans:
    overrides = [a for a in quote_numeric_groups(args[2:]) if not a.startswith("run.dir=")]
    try:
        resolve(compose(overrides))
    except EvalkitError as exc:
        hint = ""
        if "does not exist" in str(exc) and base != root:  # a team's suite: its paths are the invoking directory's
            hint = (f" (relative paths — in {suite_file}, its tasks and the command line — resolve against the directory "
                    f"bash/run_suite.sh is run from, here {base}: run it from the directory they are relative to, "
                    "or make them absolute)")
        elif "does not exist" in str(exc) and "EVALKIT_SHARED_DIR" not in os.environ:
            hint = " (the project's suites read ../shared/data beside the repository; set EVALKIT_SHARED_DIR=/path/to/shared)"
        fail(f"{where} ({name}): {exc}{hint}")
out = [" ".join(sorted(suite_dirs))] + out  # first token: the suite's directory (if one)
sys.stdout.write("".join(tok + "\0" for tok in out))
PY

tokens=()
mapfile -d '' -t tokens <"$plan"

suite_dir=${tokens[0]}
failed=()
n_entries=0
i=1
while [[ $i -lt ${#tokens[@]} ]]; do
  name=${tokens[i]}
  display=${tokens[i + 1]}
  count=${tokens[i + 2]}
  args=("${tokens[@]:i+3:count}")
  i=$((i + 3 + count))
  n_entries=$((n_entries + 1))
  if [[ $dry_run -eq 1 ]]; then
    echo "$display"
    continue
  fi
  echo "==> [$n_entries] $name: $display"
  rc=0
  "$py" "${args[@]}" || rc=$?
  if [[ $rc -eq 130 ]]; then
    echo "run_suite: interrupted during $name" >&2
    exit 130
  fi
  if [[ $rc -ne 0 ]]; then
    failed+=("$name (exit $rc)")
  fi
done

[[ $dry_run -eq 1 ]] && exit 0
if [[ ${#failed[@]} -gt 0 ]]; then
  list=""
  for f in "${failed[@]}"; do list+="${list:+, }$f"; done
  echo "run_suite: $suite: ${#failed[@]} of $n_entries entries failed: $list${suite_dir:+ → $suite_dir}" >&2
  exit 1
fi
echo "run_suite: $suite: all $n_entries entries complete${suite_dir:+ → $suite_dir}"
