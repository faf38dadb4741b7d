"""Offline audit of historical KE run directories (KE spec §10) — no model, no network.

    python -m evalkit.audit DIR [DIR ...] [--pilot PILOT.jsonl --icl ICL.jsonl] [--json OUT]

Each DIR is a run directory (legacy layout or an evalkit run) or a folder of run
directories. Runs are checked against the current pilot and ICL files (for evalkit runs
they default to the paths in the run's ``config.yaml``): coverage of the graded set, empty
returns, gold alignment, recomputed scores versus the recorded ones, and summary
consistency. Prints a verdict table; ``--json OUT`` (``-`` = stdout) writes the full result.
Nothing inside an audited directory is ever written. Exit code: 0 every run passes,
1 some run is flagged, 2 usage or data error (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from evalkit.benchmarks.ke.audit import audit_dirs, expand_dirs, verdict_table
from evalkit.benchmarks.ke.data import load_ke
from evalkit.benchmarks.ke.settings import KESettings
from evalkit.errors import EvalkitError, RunDirError
from evalkit.untrusted import read_run_yaml


def _paths_from_config(run_dirs: list[Path]) -> tuple[Path | None, Path | None]:
    """Pilot/ICL paths recorded in the first evalkit run's ``config.yaml`` (or ``None``)."""
    for d in run_dirs:
        cfg_path = d / "config.yaml"
        if cfg_path.is_file():
            recorded = read_run_yaml(cfg_path)  # bounded (evalkit.untrusted.load_yaml)
            bench = (recorded.get("benchmark") if isinstance(recorded, dict) else None) or {}
            if bench.get("name") == "ke" and bench.get("pilot_path") and bench.get("icl_path"):
                s = KESettings.model_construct(**{k: bench.get(k) for k in ("pilot_path", "icl_path", "data_dir")})
                return s.resolve(Path(bench["pilot_path"])), s.resolve(Path(bench["icl_path"]))
    return None, None


def run_audit(dirs: list[Path], pilot: Path | None = None, icl: Path | None = None) -> dict[str, Any]:
    """Audit ``dirs`` (run directories or folders of them) against ``pilot`` / ``icl``.

    Returns the dict of :func:`evalkit.benchmarks.ke.audit.audit_dirs`.

    Raises:
        RunDirError: a directory is not a run; DataError: the pilot/ICL files are invalid;
        EvalkitError: no pilot/ICL given and none recorded in an evalkit run.
    """
    run_dirs = expand_dirs([Path(d) for d in dirs])
    if pilot is None or icl is None:
        cfg_pilot, cfg_icl = _paths_from_config(run_dirs)
        pilot, icl = pilot or cfg_pilot, icl or cfg_icl
    if pilot is None or icl is None:
        raise EvalkitError("--pilot and --icl are required (no evalkit run among the directories records them)")
    return audit_dirs(run_dirs, load_ke(Path(pilot), Path(icl)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.audit", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run directories or folders of run directories")
    parser.add_argument("--pilot", type=Path, default=None, help="the KE pilot JSONL")
    parser.add_argument("--icl", type=Path, default=None, help="the KE ICL examples JSONL")
    parser.add_argument("--json", dest="json_out", default=None, help="write the full audit as JSON (- = stdout)")
    args = parser.parse_args(argv)
    try:
        if args.json_out not in (None, "-"):
            out = Path(args.json_out).resolve()
            for d in args.dirs:
                if out.is_relative_to(Path(d).resolve()):
                    raise RunDirError(f"--json {args.json_out}: refusing to write inside an audited directory ({d})")
        result = run_audit(args.dirs, args.pilot, args.icl)
    except EvalkitError as exc:
        print(f"evalkit.audit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    headers, rows = verdict_table(result)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.json_out == "-":
        print(text)
    else:
        print(tabulate(rows, headers=headers, tablefmt="github"))
        for name, a in result["runs"].items():
            if a["flags"]:
                print(f"- {name}: flagged {', '.join(_why(a, f) for f in a['flags'])}; "
                      f"empty responses: {a['empty_responses'] or 'none'}; "
                      f"under the current protocol {a['under_current_protocol']['status']} — not comparable")  # fmt: skip
        if args.json_out:
            Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    return 1 if any(a["verdict"] != "pass" for a in result["runs"].values()) else 0


def _why(audit: dict, flag: str) -> str:
    """``flag (what was found)`` for the text verdict of one run."""
    cov = audit.get("coverage") or {}
    details = {
        "coverage": ", ".join(f"{len(cov.get(k) or [])} {k}" for k in ("missing", "extra", "duplicates") if cov.get(k)),
        "summary_inconsistent": "; ".join(audit.get("summary_issues") or []),
        "gold_mismatch": f"{len(audit.get('gold_mismatches') or [])} items",
        "score_mismatch": f"{len(audit.get('score_mismatches') or [])} items",
        "mode_unknown": f"{len(audit.get('mode_unknown') or [])} items",
    }
    detail = details.get(flag)
    return f"{flag} ({detail})" if detail else flag


if __name__ == "__main__":
    sys.exit(main())
