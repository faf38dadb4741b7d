"""``run.stop_when``: a run that stops once its gate against a baseline run is decided
(issue 37, items 1, 2 and 4). The statistics are :mod:`evalkit.sequential`'s; this module
ties them to a run:

* **the gate population and its order** (:class:`GateSetup`, at *prepare*): the baseline
  run's journal gives each unit's baseline score of the headline; the headline is split into
  strata — the disjoint base metrics of a linear headline (ACEBench's weighted OVERALL, with
  their weights), or the samples' categories of a plain mean (weights ∝ sizes); units the
  baseline did not score are left out (they cannot be paired; said once). The selection
  (after ``run.sample_ids``) is put in the seeded stratified order
  (:func:`evalkit.sequential.stratified_order`, seed ``run.seed``), *then* ``run.limit`` caps
  it — the cap is ``n_cap``, the population ``N`` is the whole ordered selection;
* **the monitor** (:class:`Monitor`, at *execute*): each journaled answer (or failure) is
  handed to it; it walks the order and feeds each unit whose every work item is resolved to
  the confidence sequence, in order (answers that arrive early wait for the ones before
  them); a failed unit is skipped, never scored as 0. After each unit from
  ``run.min_samples`` on it looks: :func:`evalkit.sequential.decide`. Once decided it stops
  the dispatch (:meth:`Monitor.gated`: no new unit is submitted; those in flight finish and
  are journaled — paid once);
* **resume**: the monitor is rebuilt from the journal by the same walk (same order, same
  martingale, same looks: each look is at a fixed position of the order, so a rebuilt
  monitor decides where the first one did); a decided run has nothing pending;
* **the record** (:func:`annotate`): the selection narrowed to the units dispatched, the
  summary's ``status`` ``decided`` (complete) and ``sequential``: the gate, verdict, why,
  ``n_used``, ``n_answered``, ``n_cap`` (what a fixed-n run would have used), the interval at
  the decision and every look (``looks``, also an MLflow metric with steps and the plot in
  ``report.md``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalkit import stats
from evalkit.config import RunSettings
from evalkit.engine.work import WorkList
from evalkit.errors import ConfigError, RunDirError
from evalkit.journal import damaged_journal, read_failures, read_journal
from evalkit.sequential import ConfidenceSequence, Look, decide, stratified_order
from evalkit.summary import read_summary
from evalkit.types import Failure, Trajectory

log = logging.getLogger("evalkit")
status = logging.getLogger("evalkit.status")

#: default ``run.min_samples``: no verdict before this many paired units
MIN_SAMPLES = 20
#: the console's running verdict is printed every this many units (and at the decision)
SAY_EVERY = 10


def _unit_values(bench: Any, samples: list[Any], epochs: list[list[dict[str, Any]]], columns: list[str]) -> dict[str, tuple[str, float]]:
    """``{unit id: (column, value)}``: each unit's mean over its epochs of the one column of
    ``columns`` that covers it (the benchmark's :meth:`stat_plan`)."""
    plan = bench.stat_plan(samples, epochs)
    out: dict[str, tuple[str, float]] = {}
    if plan is None:
        return out
    for name in columns:
        col = plan.columns.get(name)
        if col is None:
            continue
        covered, means = col.unit_means()
        for uid, ok, v in zip(plan.units, covered, means):
            if ok:
                out[uid] = (name, float(v))
    return out


@dataclass
class GateSetup:
    """The gate of a ``run.stop_when`` run, fixed before any answer (see the module
    docstring). Built from the config and the benchmark; :meth:`order` is the selection's
    ordering hook (:func:`evalkit.engine.plan.select_samples`).

    Raises (at construction and :meth:`order`):
        ConfigError: the baseline run is of another benchmark, has no scored samples in the
            selection, or its headline is neither a mean nor a linear combination of
            disjoint means (one line)."""

    bench: Any
    run: RunSettings
    kind: str = field(init=False)
    margin: float = field(init=False)
    headline: str = field(init=False)
    columns: list[str] = field(init=False)
    weights: dict[str, float] = field(init=False)
    base: dict[str, tuple[str, float]] = field(init=False)
    unit_of: dict[str, str] = field(init=False, default_factory=dict)
    order_units: list[str] = field(init=False, default_factory=list)
    stratum_of: dict[str, str] = field(init=False, default_factory=dict)
    n_cap: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        run = self.run
        self.kind, self.margin = stats.parse_gate(run.stop_when)
        self.baseline = Path(str(run.baseline))
        self.min_samples = run.min_samples if run.min_samples is not None else MIN_SAMPLES
        self.level = run.ci_level

    def order(self, samples: list[Any]) -> list[Any]:
        """The selection in the gate's order, units the baseline did not score left out;
        ``run.limit`` then caps it (in units; a unit's samples stay together)."""
        linear, journal = self._baseline(samples)
        self._map_units(samples, journal)
        kept = [s for s in samples if s.id in self.unit_of]
        dropped = len(samples) - len(kept)
        if dropped:
            log.warning("run.stop_when: %d selected sample(s) not scored in the baseline %s are left out (they cannot be paired)",
                        dropped, self.baseline)  # fmt: skip
        if not kept:
            raise ConfigError(f"run.baseline: {self.baseline} scored none of the selected samples: nothing to pair")
        unit_ids = self._strata(kept, linear)
        keys = sorted(set(self.stratum_of.values()))
        codes = [keys.index(self.stratum_of[u]) for u in unit_ids]
        order = stratified_order(codes, {i: self.weights.get(k, 0.0) for i, k in enumerate(keys)}, int(self.run.seed))
        self.order_units = [unit_ids[i] for i in order]
        self.population = len(self.order_units)
        rank = {u: i for i, u in enumerate(self.order_units)}
        ordered = sorted(kept, key=lambda s: rank[self.unit_of[s.id]])  # stable: a unit's samples keep their order
        if self.run.limit is not None:
            self.order_units = self.order_units[: self.run.limit]
            capped = set(self.order_units)
            ordered = [s for s in ordered if self.unit_of[s.id] in capped]
        self.n_cap = len(self.order_units)
        return ordered

    def _baseline(self, samples: list[Any]) -> tuple[dict[str, float] | None, Any]:
        """Read the baseline run: its headline, how the headline splits (a column, or the
        ``{column: weight}`` of a linear one) and each unit's baseline value — from its
        journal's rows, never its summary's figures.

        Raises:
            ConfigError: ``run.baseline: …`` in one line — the baseline is of another
                benchmark, a row of its journal cannot count (a score that is not a finite
                number: NaN, Infinity, a string, a bool) or lies outside the benchmark's
                range, or the journal holds fewer rows than its summary counts."""
        bench = self.bench
        summary = read_summary(self.baseline / "summary.json", ConfigError)
        if summary.benchmark != bench.name:
            raise ConfigError(f"run.baseline: {self.baseline} is a {summary.benchmark} run, this run is {bench.name}")
        self.headline = summary.headline or bench.headline_metric
        journal = read_journal(self.baseline / "predictions.jsonl", skip_lines=summary.stale_lines)
        try:  # the gate's numbers come from these rows: every one finite and in the benchmark's range
            journal.raise_invalid()
            journal.check_scores(bench.score_bounds)
        except RunDirError as exc:
            raise ConfigError(f"run.baseline: {exc}") from None
        damage = damaged_journal(journal.path, len(journal.rows), summary.n_scored_rows, "n_scored_rows")
        if damage:
            raise ConfigError(f"run.baseline: {damage}")
        chosen = {sid for sid, _ in journal.rows}
        base_samples = [s for s in samples if s.id in chosen]
        if not base_samples:
            raise ConfigError(f"run.baseline: {self.baseline} scored none of the selected samples: nothing to pair")
        epochs = journal.epochs(base_samples, summary.repeats)
        plan = bench.stat_plan(base_samples, epochs)
        if plan is None or not plan.units:
            raise ConfigError(f"run.stop_when: benchmark {bench.name} has no statistics plan to gate on")
        linear = None
        if self.headline in plan.columns:
            self.columns = [self.headline]
        else:
            linear = stats.linear_weights(plan, self.headline)
            if not linear:
                raise ConfigError(f"run.stop_when: the headline {self.headline} of {bench.name} is not a mean or a weighted "
                                  "mean of disjoint means; it cannot be gated sequentially")  # fmt: skip
            self.columns = list(linear)
        self.base = _unit_values(bench, base_samples, epochs, self.columns)
        return linear, journal

    def _map_units(self, samples: list[Any], journal: Any) -> None:
        """Which unit each sample belongs to: the plan's unit ids are sample ids, or a unit
        groups samples (a dialogue), found by building each sample's plan alone."""
        ids, units = {s.id for s in samples}, set(self.base)
        self.unit_of = {s.id: s.id for s in samples if s.id in units}
        if units <= ids:
            return
        base_rows = {sid: row for (sid, epoch), row in journal.rows.items() if epoch == 0}
        for s in samples:
            if s.id not in self.unit_of and s.id in base_rows:
                one = self.bench.stat_plan([s], [[base_rows[s.id]]])
                if one is not None and len(one.units) == 1 and one.units[0] in units:
                    self.unit_of[s.id] = one.units[0]

    def _strata(self, kept: list[Any], linear: dict[str, float] | None) -> list[str]:
        """The units (in selection order), each one's stratum and the strata's weights: the
        linear headline's base metrics and weights, else the categories weighted by size."""
        first: dict[str, Any] = {}
        for s in kept:
            first.setdefault(self.unit_of[s.id], s)
        unit_ids = list(first)
        if linear:
            self.stratum_of = {u: self.base[u][0] for u in unit_ids}
            self.weights = {k: float(v) for k, v in linear.items()}
            return unit_ids
        self.stratum_of = {u: str(first[u].subset) for u in unit_ids}
        sizes: dict[str, int] = {}
        for u in unit_ids:
            sizes[self.stratum_of[u]] = sizes.get(self.stratum_of[u], 0) + 1
        self.weights = {k: n / len(unit_ids) for k, n in sizes.items()}
        return unit_ids


class Monitor:
    """The running gate of one run (see the module docstring): rebuilt from the journal at
    start, fed each journaled row or failure, deciding at fixed positions of the order."""

    def __init__(self, setup: GateSetup, plan: Any, run_dir: Path) -> None:
        self.setup, self.plan = setup, plan
        keys = sorted(set(setup.stratum_of[u] for u in setup.order_units) | set(setup.weights))
        self.keys = keys
        sizes_all: dict[str, int] = {}
        for u, k in setup.stratum_of.items():
            sizes_all[k] = sizes_all.get(k, 0) + 1
        self.cs = ConfidenceSequence([max(1, sizes_all.get(k, 0)) for k in keys], [setup.weights.get(k, 0.0) for k in keys], setup.level)
        self.index = {k: i for i, k in enumerate(keys)}
        self.samples_of: dict[str, list[Any]] = {}
        for s in plan.samples:
            self.samples_of.setdefault(setup.unit_of[s.id], []).append(s)
        self.repeats = plan.specs.run.repeats
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.failed: set[tuple[str, int]] = set()
        self.t = 0  # units of the order consumed
        self.used = 0  # of them, paired into the sequence (failures skipped)
        self.skipped: list[str] = []
        self.looks: list[dict[str, Any]] = []
        self.decision: dict[str, Any] | None = None
        self.last: Look | None = None
        self._events: set[Any] = set()
        self.rank = {u: i for i, u in enumerate(setup.order_units)}
        journal = read_journal(run_dir / "predictions.jsonl", plan.request_hashes())
        self.rows.update(journal.rows)
        self.failed.update(read_failures(run_dir / "failed.jsonl", [k for k in plan.request_hashes() if k not in journal.rows]))
        self._advance(quiet=True)

    # ---- fed by the journaler ------------------------------------------------------------
    def row(self, row: dict[str, Any]) -> None:
        self.rows[(row["sample_id"], row.get("epoch", 0))] = row
        self.failed.discard((row["sample_id"], row.get("epoch", 0)))
        self._advance()
        self._changed()

    def failure(self, key: tuple[str, int]) -> None:
        self.failed.add(key)
        self._advance()
        self._changed()

    @property
    def decided(self) -> bool:
        return self.decision is not None

    def gated(self, pending: Sequence[Any]) -> "Gated":
        """``pending`` as dispatched while the gate is undecided (nothing once decided)."""
        return Gated(pending, self)

    def executor(self, executor: Any, ahead: int) -> "GatedExecutor":
        """``executor`` whose submissions wait until the monitor has consumed the order to
        within ``ahead`` units (one batch: ``backend.concurrency``) of theirs, so that at most
        one batch is sent beyond the decision even when answers outrun their scoring; a unit
        still waiting when the gate is decided is never sent (:meth:`on_result` drops it)."""
        return GatedExecutor(executor, self, ahead)

    def on_result(self, on_result: Any) -> Any:
        """The journaler's ``on_result``, dropping the units the gate left unsent."""

        async def journal(unit: Any, trajectory: Any) -> None:
            if trajectory is not _NOT_SENT:
                await on_result(unit, trajectory)

        return journal

    def _changed(self) -> None:
        for event in list(self._events):
            event.set()

    def _value(self, unit: str) -> float | None:
        samples = self.samples_of[unit]
        epochs = [[self.rows[(s.id, e)] for s in samples if (s.id, e) in self.rows] for e in range(self.repeats)]
        got = _unit_values(self.setup.bench, samples, epochs, self.setup.columns).get(unit)
        return None if got is None else got[1]

    def _advance(self, quiet: bool = False) -> None:
        setup = self.setup
        while not self.decided and self.t < len(setup.order_units):
            unit = setup.order_units[self.t]
            keys = [(s.id, e) for s in self.samples_of.get(unit, []) for e in range(self.repeats)]
            if not all(k in self.rows or k in self.failed for k in keys):
                return
            self.t += 1
            value = self._value(unit) if all(k in self.rows for k in keys) else None
            if value is None or unit not in setup.base:
                self.skipped.append(unit)
                continue
            d = value - setup.base[unit][1]
            d = 0.0 if abs(d) < stats.DELTA_TOL else d
            self.cs.add(self.index[setup.stratum_of[unit]], d)
            self.used += 1
            if self.used < setup.min_samples and self.t < len(setup.order_units):
                continue
            look = self.cs.interval()
            self.last = look
            self.looks.append(look.record())
            verdict, why = decide(look, setup.kind, setup.margin, setup.n_cap, setup.min_samples, setup.population, float(np.abs(self.cs.w).sum()))
            if self.t == len(setup.order_units) and verdict == "CONTINUE":
                verdict, why = "INCONCLUSIVE", f"run.limit reached ({setup.n_cap} units) undecided" if setup.n_cap < setup.population \
                    else "every unit drawn, undecided"  # fmt: skip
            if verdict != "CONTINUE":
                self.decision = {"verdict": verdict, "why": why, "n_used": self.used, "position": self.t}
            if not quiet and (self.decided or self.used % SAY_EVERY == 0):
                status.info("%s", self.line())

    def line(self) -> str:
        """The one-line running verdict (console)."""
        s, look = self.setup, self.last
        name = f"{s.kind}:{s.margin:g}" if s.kind != "superior" else s.kind
        if look is None:
            return f"gate {name}: {self.used} paired units, no look yet (run.min_samples={s.min_samples})"
        verdict = self.decision["verdict"] if self.decision else "continue"
        return (f"gate {name}: {verdict} — {s.headline} Δ {look.delta:+.4f}, anytime {int(round(100 * s.level))}% "
                f"[{look.low:+.4f}, {look.high:+.4f}] at n={self.used} of {s.n_cap}")  # fmt: skip

    def record(self, n_answered: int) -> dict[str, Any]:
        """The summary's ``sequential`` block."""
        s = self.setup
        name = f"{s.kind}:{s.margin:g}" if s.kind != "superior" else s.kind
        look = self.last.record() if self.last else None
        decision = self.decision or {"verdict": "CONTINUE", "why": "undecided (the run stopped before its gate was decided)",
                                     "n_used": self.used, "position": self.t}  # fmt: skip
        return {"gate": name, "verdict": decision["verdict"], "why": decision["why"], "baseline": str(s.baseline),
                "headline": s.headline, "level": s.level, "n_used": decision["n_used"], "n_answered": n_answered,
                "n_cap": s.n_cap, "population": s.population, "min_samples": s.min_samples, "skipped": len(self.skipped),
                "interval": look, "looks": self.looks, "seed": int(s.run.seed),
                "method": "anytime-valid confidence sequence: hedged betting capital for sampling without replacement "
                          "(Waudby-Smith & Ramdas 2020/2024), one per stratum, multiplied and projected on the weighted "
                          f"headline; simultaneous over all looks at {int(round(100 * s.level))}%"}  # fmt: skip


class Gated(Sequence[Any]):
    """A pending work list that ends once the monitor has decided: the dispatcher
    (:func:`evalkit.engine.scheduling.run_units`) takes units from it one at a time, so no
    unit is submitted after the decision; units already in flight finish and are journaled."""

    def __init__(self, pending: Sequence[Any], monitor: Monitor) -> None:
        self.pending, self.monitor = pending, monitor

    def __len__(self) -> int:
        return len(self.pending)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [] if self.monitor.decided else list(self.pending[i])
        return self.pending[i]

    def __iter__(self) -> Iterator[Any]:
        for item in self.pending:
            if self.monitor.decided:
                return
            yield item


#: what a unit left unsent by a decided gate "returns" (dropped before the journal, by identity)
_NOT_SENT: Any = Trajectory(failure=Failure("internal", "not sent: the run's gate was decided (run.stop_when)"))


class GatedExecutor:
    """An executor whose :meth:`submit` first waits for the monitor (see
    :meth:`Monitor.executor`); everything else is the wrapped executor's."""

    def __init__(self, executor: Any, monitor: Monitor, ahead: int) -> None:
        self._executor, self._monitor, self._ahead = executor, monitor, max(1, int(ahead))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._executor, name)

    async def submit(self, unit: Any) -> Any:
        import asyncio

        m = self._monitor
        rank = m.rank.get(m.setup.unit_of.get(unit.sample.id, ""), 0)
        event = asyncio.Event()
        m._events.add(event)
        try:
            while not m.decided and rank >= m.t + self._ahead:
                event.clear()
                await event.wait()
        finally:
            m._events.discard(event)
        if m.decided:  # the executor's early stop (issue 34's protocol): nothing more is dispatched
            drain = getattr(self._executor, "drain", None)
            if drain is not None and not getattr(self._executor, "draining", False):
                drain()
            return _NOT_SENT
        return await self._executor.submit(unit)

    def close(self) -> None:
        self._executor.close()


def start(plan: Any, run_dir: Path) -> Monitor | None:
    """The run's monitor (``None`` without ``run.stop_when``), rebuilt from its journal."""
    setup = getattr(plan, "gate", None)
    if setup is None:
        return None
    monitor = Monitor(setup, plan, run_dir)
    plan.monitor = monitor
    if monitor.decided:
        status.info("%s (decided already: nothing more is sent)", monitor.line())
    return monitor


def narrow(plan: Any, run_dir: Path) -> None:
    """Before *finalize*: a decided run's selection becomes the units dispatched (the order
    up to its furthest answered or failed unit), so that its summary is complete over them."""
    monitor = getattr(plan, "monitor", None)
    if monitor is None and getattr(plan, "gate", None) is not None:
        monitor = start(plan, run_dir)
    if monitor is None or not monitor.decided:
        return
    setup = monitor.setup
    resolved = {sid for sid, _ in monitor.rows} | {sid for sid, _ in monitor.failed}
    last = max((i for i, u in enumerate(setup.order_units) if any(s.id in resolved for s in monitor.samples_of.get(u, []))), default=-1)
    keep_units = set(setup.order_units[: max(last + 1, monitor.decision["position"])])
    keep = [s for s in plan.samples if setup.unit_of[s.id] in keep_units]
    ids = {s.id for s in keep}
    plan.samples = keep
    plan.units = WorkList(keep, plan.units.build, plan.units.is_rollout, plan.specs.run.repeats)
    plan.hashes = {k: h for k, h in plan.hashes.items() if k[0] in ids}


def annotate(plan: Any, summary: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The summary of a ``run.stop_when`` run: ``sequential`` added; ``status`` ``decided``
    when the gate was decided and every dispatched unit is scored; the running interval's
    plot ``plots/sequential.png``."""
    monitor = getattr(plan, "monitor", None)
    if monitor is None:
        return summary
    summary["sequential"] = monitor.record(len(plan.samples))
    if monitor.decided and summary.get("status") == "complete":
        summary["status"] = "decided"
    try:
        plot(summary["sequential"], run_dir / "plots" / "sequential.png")
    except Exception:  # noqa: BLE001 - a figure must never cost the run its summary
        log.exception("the sequential plot failed")
    return summary


def plot(record: dict[str, Any], path: Path) -> Path | None:
    """The running interval (every look: Δ and its anytime-valid bounds against n) with the
    gate's margin; ``None`` when there was no look."""
    looks = record.get("looks") or []
    if not looks:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [lk["n"] for lk in looks]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.fill_between(n, [lk["low"] for lk in looks], [lk["high"] for lk in looks], alpha=0.3, step="post", label="anytime interval")
    ax.plot(n, [lk["delta"] for lk in looks], lw=1, label="Δ")
    kind, _, margin = str(record["gate"]).partition(":")
    for y in ([-float(margin)] if kind == "noninferior" else [0.0] if kind == "superior" else [-float(margin), float(margin)]):
        ax.axhline(y, color="k", ls="--", lw=0.8)
    ax.set_xlabel("paired units")
    ax.set_ylabel(f"Δ {record.get('headline', '')}")
    ax.set_title(f"{record['gate']}: {record['verdict']} at n={record['n_used']}", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def interval_entry(record: dict[str, Any]) -> dict[str, Any] | None:
    """A decided run's interval as a paired entry for ``compare`` / :func:`evalkit.stats.gate`
    (labelled: the anytime-valid interval, not a fixed-n one); ``stopped``: the run's gate,
    verdict and why, so that ``compare --gate`` of the same gate reads a FUTILE stop as FUTILE."""
    look = record.get("interval")
    if not look:
        return None
    return {"delta": look["delta"], "low": look["low"], "high": look["high"], "n": look["n"], "p": None,
            "test": "anytime-valid confidence sequence (run.stop_when)", "method": record.get("method"),
            "stopped": {k: record.get(k) for k in ("gate", "verdict", "why")}}  # fmt: skip
