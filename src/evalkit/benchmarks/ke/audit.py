"""Offline audit of historical KE run directories (spec §10). Read-only: never writes,
renames, prunes or zero-fills anything inside a run directory.

Two directory layouts are read:

* **legacy** (the old evaluation code; fixture ``history/``): ``predictions.jsonl`` rows
  ``{sample_id, gold_step_ids, pred_step_ids, response, precision, recall, f1, f05}`` and
  ``summary.json`` ``{run_name, model, mode, n_shots, n_items, n_succeeded, n_failed,
  scores: {precision, recall, f1, f05}, ...}``;
* **evalkit** (this project's runs): ``config.yaml``, ``predictions.jsonl`` rows with
  ``output`` / ``raw_output`` / ``parsed`` / ``scores``, ``failed.jsonl`` and ``summary.json``
  with ``metrics`` (withheld when incomplete).

Checks A1–A5 of §10 give the flags ``coverage``, ``empty_response_scored``,
``gold_mismatch``, ``score_mismatch``, ``summary_inconsistent``; plus ``mode_unknown``
(a response whose parse depends on an unrecorded mode) and ``data_mismatch`` (an evalkit run
whose recorded pilot/ICL digests differ from the files audited against).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.benchmarks.ke.data import KEData
from evalkit.benchmarks.ke.metrics import SCORE_NAMES, item_scores, macro_means, scores_of
from evalkit.benchmarks.ke.parser import MODES, PARSER_VERSION, parse_answer, step_index
from evalkit.benchmarks.ke.prompts import ANSWER_PREFIX
from evalkit.errors import RunDirError
from evalkit.journal import FAILED, read_failures, read_run_journal
from evalkit.untrusted import read_objects, read_run_text, read_run_yaml
from evalkit.summary import read_summary, read_summary_record

TOL = 1e-6  # §10 A4/A5


@dataclass
class _Record:
    sample_id: Any
    response: str | None
    mode: str | None
    pred: list[str] | None
    scores: dict[str, float] | None
    gold: list[str] | None


@dataclass
class _Run:
    name: str
    layout: str  # legacy | evalkit
    records: list[_Record]
    failed_ids: list[str]
    summary: dict[str, Any] | None
    mode: str | None
    claims: dict[str, Any] = field(default_factory=dict)
    claimed_scores: dict[str, float] | None = None
    not_recorded: list[str] = field(default_factory=list)
    recorded_data: dict[str, Any] = field(default_factory=dict)
    #: ids of rows left out as later duplicates by the journal reader (an evalkit run)
    duplicate_ids: list[Any] = field(default_factory=list)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [row for _, row in read_objects(path, RunDirError)]


def is_run_dir(path: Path) -> bool:
    """True when ``path`` holds a ``predictions.jsonl`` (either layout)."""
    return (Path(path) / "predictions.jsonl").is_file()


def read_run(run_dir: Path) -> _Run:
    """Read one run directory in either layout (read-only).

    Raises:
        RunDirError: no ``predictions.jsonl``, unparsable files, or an evalkit run of
            another benchmark.
    """
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise RunDirError(f"{run_dir}: not a run directory (no predictions.jsonl)")
    summary_path = run_dir / "summary.json"
    if (run_dir / "config.yaml").is_file():  # evalkit's own: its summary read and validated as every reader does
        return _read_evalkit(run_dir, read_summary(summary_path).record() if summary_path.exists() else None)
    summary = None
    if summary_path.exists() or summary_path.is_symlink():
        summary = read_summary_record(summary_path)  # no link followed, bounded; a legacy run's fields as written
        if not isinstance(summary, dict):
            raise RunDirError(f"{summary_path}: not a summary (a JSON {type(summary).__name__}, not an object)")
    return _read_legacy(run_dir, _read_jsonl(run_dir / "predictions.jsonl"), summary)


def _read_legacy(run_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any] | None) -> _Run:
    s = summary or {}
    mode = s.get("mode") if s.get("mode") in MODES else None
    records = [
        _Record(
            sample_id=r.get("sample_id"),
            response=r.get("response"),
            mode=r.get("mode") if r.get("mode") in MODES else mode,
            pred=r.get("pred_step_ids") if isinstance(r.get("pred_step_ids"), list) else None,
            scores=scores_of(r),
            gold=r.get("gold_step_ids") if isinstance(r.get("gold_step_ids"), list) else None,
        )
        for r in rows
    ]
    claimed = s.get("scores")
    claimed_scores = {k: float(claimed[k]) for k in SCORE_NAMES if k in claimed} if isinstance(claimed, dict) else None
    run = _Run(
        name=run_dir.name, layout="legacy", records=records, failed_ids=[], summary=summary, mode=mode,
        claims={"n_succeeded": s.get("n_succeeded"), "n_failed": s.get("n_failed")},
        claimed_scores=claimed_scores,
    )  # fmt: skip
    for key, present in (
        ("data_fingerprint", "data" in s or "data_fingerprint" in s),
        ("prompt_hash", "prompt" in s or "prompt_hash" in s),
        ("code_hash", "code" in s or "code_version" in s),
    ):
        if not present:
            run.not_recorded.append(key)
    return run


def _read_evalkit(run_dir: Path, summary: dict[str, Any] | None) -> _Run:
    """An evalkit run, its journal read by the journal's one reader (:mod:`evalkit.journal`:
    the rows the engine counted, each capped row's whole output read back from its side
    file); a damaged line is an error here (an audit does not guess)."""
    cfg = read_run_yaml(run_dir / "config.yaml") or {}
    bench = (cfg.get("benchmark") or {}).get("name")
    if bench != "ke":
        raise RunDirError(f"{run_dir}: an evalkit run of benchmark {bench!r}, not ke")
    journal = read_run_journal(run_dir, (summary or {}).get("stale_lines") or ())
    if journal.unreadable:
        raise RunDirError(f"{journal.path}:{journal.unreadable[0]}: not a JSON object (the journal is damaged)")
    records = []
    for r in map(journal.full, journal.rows.values()):
        output = r.get("output")
        if "raw_output" in r:  # completion mode: the engine prepended the answer prefix
            response, mode = r.get("raw_output"), "completion"
        elif isinstance(output, str) and output.startswith(ANSWER_PREFIX) and output[len(ANSWER_PREFIX) :].strip():
            response, mode = output[len(ANSWER_PREFIX) :], "completion"
        else:
            response, mode = output, "chat"
        records.append(
            _Record(sample_id=r.get("sample_id"), response=response, mode=mode,
                    pred=r.get("parsed") if isinstance(r.get("parsed"), list) else None,
                    scores=scores_of(r), gold=r.get("gold_step_ids") if isinstance(r.get("gold_step_ids"), list) else None)
        )  # fmt: skip
    failed = read_failures(run_dir / FAILED)
    failed_ids = list(dict.fromkeys(sid for sid, epoch in failed if (sid, epoch) not in journal.rows))
    s = summary or {}
    metrics = s.get("metrics") or {}
    claimed_scores = None
    if s.get("status") == "complete" and all(f"{k}_macro" in metrics for k in SCORE_NAMES):
        claimed_scores = {k: float(metrics[f"{k}_macro"]) for k in SCORE_NAMES}
    modes = {r.mode for r in records}
    run = _Run(
        name=f"{run_dir.parent.name}/{run_dir.name}", layout="evalkit", records=records, failed_ids=failed_ids, summary=summary,
        mode=modes.pop() if len(modes) == 1 else None,
        claims={"n_succeeded": s.get("n_scored"), "n_failed": s.get("n_failed"), "status": s.get("status")},
        claimed_scores=claimed_scores, recorded_data=dict(s.get("data_files_fingerprint") or {}),
        duplicate_ids=[sid for (sid, _), _ in journal.duplicates],
    )  # fmt: skip
    for key, present in (
        ("data_fingerprint", bool(s.get("data_files_fingerprint"))),
        ("prompt_hash", bool(s.get("prompt_hash"))),
        ("code_hash", bool(s.get("code_version"))),
    ):
        if not present:
            run.not_recorded.append(key)
    return run


def _blank(text: Any) -> bool:
    return text is None or (isinstance(text, str) and not text.strip())


def _close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= TOL


def audit_run(run_dir: Path, data: KEData) -> dict[str, Any]:
    """Audit one run directory against the current pilot/ICL (spec §10, checks A1–A5).

    Returns ``{verdict: pass|flagged, flags, coverage: {missing, extra, duplicates},
    empty_responses, gold_mismatches, score_mismatches, summary_issues, summary_claims:
    {n_succeeded, n_failed}, under_current_protocol: {n_succeeded, n_failed, status,
    f1_macro | partial_f1_macro}, comparable, layout, mode, recomputed, recorded_scores,
    not_recorded, mode_unknown, parser_version}``. Id lists keep file order.

    Raises:
        RunDirError: see :func:`read_run`.
    """
    run = read_run(run_dir)
    graded = {s["sample_id"]: s for s in data.graded}
    pilot = {s["sample_id"]: s for s in data.pilot.samples}
    flags: list[str] = []

    # A1 coverage (recorded failures of an evalkit run count as accounted for)
    ids = [r.sample_id for r in run.records]
    seen: set[Any] = set()
    duplicates: list[Any] = []
    for sid in ids + run.duplicate_ids:
        if sid in seen and sid not in duplicates:
            duplicates.append(sid)
        seen.add(sid)
    covered = seen | set(run.failed_ids)
    missing = [sid for sid in graded if sid not in covered]
    extra = []
    for sid in ids + run.failed_ids:
        if sid not in graded and sid not in extra:
            extra.append(sid)
    if missing or extra or duplicates:
        flags.append("coverage")

    # A2 empty returns scored
    empty = [r.sample_id for r in run.records if _blank(r.response)]
    if empty:
        flags.append("empty_response_scored")

    # A3 gold alignment
    gold_mismatches = [
        r.sample_id for r in run.records
        if r.sample_id in pilot and r.gold is not None and set(r.gold) != set(pilot[r.sample_id]["gold_step_ids"])
    ]  # fmt: skip
    if gold_mismatches:
        flags.append("gold_mismatch")
    not_recorded = list(run.not_recorded)
    if run.records and all(r.gold is None for r in run.records):
        not_recorded.append("gold_step_ids")
    data_mismatch = [
        k for k, now in (("pilot_sha256", data.pilot.sha256), ("icl_sha256", data.icl.sha256))
        if run.recorded_data.get(k) not in (None, now)
    ]  # fmt: skip

    # A4 recomputation (empty response -> [] scored 0, as the old code did)
    score_mismatches: list[Any] = []
    mode_unknown: list[Any] = []
    recomputed_items: list[dict[str, float]] = []
    first_of: dict[Any, dict[str, float]] = {}
    for r in run.records:
        sample = pilot.get(r.sample_id)
        if sample is None:
            continue
        index = step_index(s["step_id"] for s in sample["trajectory_steps"])
        if _blank(r.response):
            pred: list[str] | None = []
        elif r.mode is not None:
            pred = parse_answer(r.response, r.mode, index).pred
        else:
            chat = parse_answer(r.response, "chat", index).pred
            comp = parse_answer(r.response, "completion", index).pred
            pred = chat if chat == comp else None
        if pred is None:
            mode_unknown.append(r.sample_id)
            continue
        sc = item_scores(pred, sample["gold_step_ids"])
        if r.sample_id in graded and r.sample_id not in first_of:
            first_of[r.sample_id] = sc
        recomputed_items.append(sc)
        stored_ok = (r.pred is None or set(r.pred) == set(pred)) and (
            r.scores is not None and all(_close(r.scores[k], sc[k]) for k in SCORE_NAMES)
        )
        if not stored_ok:
            score_mismatches.append(r.sample_id)
    if score_mismatches:
        flags.append("score_mismatch")

    # A5 summary consistency
    issues: list[str] = []
    n_graded = len(graded)
    recomputed = {k[: -len("_macro")]: v for k, v in macro_means(recomputed_items).items()}
    if run.summary is None:
        issues.append("summary.json missing")
    else:
        n_succ, n_fail = run.claims.get("n_succeeded"), run.claims.get("n_failed")
        if n_succ != len(run.records):
            issues.append(f"n_succeeded={n_succ} but {len(run.records)} records")
        if not isinstance(n_succ, int) or not isinstance(n_fail, int) or n_succ + n_fail != n_graded:
            issues.append(f"n_succeeded + n_failed = {n_succ} + {n_fail} != {n_graded} graded items")
        if run.claimed_scores is not None:
            if mode_unknown:
                issues.append("summary scores not recomputable (mode unknown for some items)")
            else:
                for k in SCORE_NAMES:
                    if k not in run.claimed_scores or k not in recomputed or not _close(run.claimed_scores[k], recomputed[k]):
                        issues.append(f"scores.{k}={run.claimed_scores.get(k)} but recomputed {recomputed.get(k)}")
        elif run.layout == "legacy":
            issues.append("summary has no scores")
        if run.layout == "evalkit" and run.claims.get("status") == "complete" and (run.failed_ids or missing):
            issues.append("status complete but items failed or missing")
    if issues:
        flags.append("summary_inconsistent")
    if mode_unknown:
        flags.append("mode_unknown")
    if data_mismatch:
        flags.append("data_mismatch")

    # the run under today's protocol (§7): empty or missing items are failures
    ok_ids = {r.sample_id for r in run.records if r.sample_id in graded and not _blank(r.response)}
    n_ok = len(ok_ids)
    status = "complete" if n_ok == n_graded else "incomplete"
    now: dict[str, Any] = {"n_succeeded": n_ok, "n_failed": n_graded - n_ok, "status": status}
    ok_scores = [first_of[sid] for sid in graded if sid in ok_ids and sid in first_of]
    if ok_scores:
        f1 = macro_means(ok_scores)["f1_macro"]
        now["f1_macro" if status == "complete" and not mode_unknown else "partial_f1_macro"] = f1

    verdict = "pass" if not flags else "flagged"
    return {
        "run_name": run.name,
        "verdict": verdict,
        "flags": flags,
        "coverage": {"missing": missing, "extra": extra, "duplicates": duplicates},
        "empty_responses": empty,
        "gold_mismatches": gold_mismatches,
        "score_mismatches": score_mismatches,
        "summary_issues": issues,
        "summary_claims": {"n_succeeded": run.claims.get("n_succeeded"), "n_failed": run.claims.get("n_failed")},
        "under_current_protocol": now,
        "comparable": verdict == "pass" and status == "complete",
        "layout": run.layout,
        "n_records": len(run.records),
        "mode": run.mode or "not recorded",
        "mode_unknown": mode_unknown,
        "data_mismatch": data_mismatch,
        "recorded_scores": run.claimed_scores,
        "recomputed": recomputed,
        "not_recorded": not_recorded,
        "parser_version": PARSER_VERSION,
    }


def expand_dirs(paths: list[Path]) -> list[Path]:
    """Run directories named by ``paths``: a path holding ``predictions.jsonl`` is a run;
    otherwise every run directory below it (e.g. ``outputs/runs/ke`` holds
    ``<model>/<stamp>-<pid>/``), sorted by path.

    Raises:
        RunDirError: a path that does not exist or holds no run.
    """
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            raise RunDirError(f"{p}: no such directory")
        if is_run_dir(p):
            out.append(p)
            continue
        subs = sorted(f.parent for f in p.rglob("predictions.jsonl") if f.is_file())
        if not subs:
            raise RunDirError(f"{p}: neither a run directory nor a folder holding run directories")
        out.extend(subs)
    return out


def audit_dirs(run_dirs: list[Path], data: KEData) -> dict[str, Any]:
    """``{"runs": {run name: audit_run(...)}, ...}`` for every directory. Names are the
    directory basename (legacy) or ``<model dir>/<basename>`` (evalkit); a repeated name is
    keyed by the full path."""
    runs: dict[str, Any] = {}
    for d in run_dirs:
        result = audit_run(d, data)
        key = result["run_name"] if result["run_name"] not in runs else str(d)
        runs[key] = result
    return {"parser_version": PARSER_VERSION, "pilot_sha256": data.pilot.sha256, "icl_sha256": data.icl.sha256,
            "n_graded": len(data.graded), "runs": runs}  # fmt: skip


def verdict_table(result: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of the printed verdict table."""
    headers = ["run", "layout", "mode", "verdict", "flags", "records", "empty", "now", "recorded F1", "comparable"]
    rows = []
    for name, a in result["runs"].items():
        now = a["under_current_protocol"]
        rec = a["recorded_scores"] or {}
        rows.append([
            name, a["layout"], a["mode"], a["verdict"], ",".join(a["flags"]) or "-",
            a["n_records"],
            len(a["empty_responses"]), f"{now['status']} ({now['n_succeeded']}/{now['n_succeeded'] + now['n_failed']})",
            f"{100 * rec['f1']:.2f}%" if "f1" in rec else "—", "yes" if a["comparable"] else "no",
        ])  # fmt: skip
    return headers, rows
