"""Loading and validating the KE pilot and ICL files (spec §2).

Both files are private JSONL; their paths come from config (``benchmark.pilot_path``,
``benchmark.icl_path``) and nothing is shipped with evalkit. Every schema (§2.2) or packing
(§2.3) violation is a :class:`~evalkit.errors.DataError` naming the file, line and sample.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from evalkit.errors import DataError
from evalkit.untrusted import MAX_JSONL_BYTES, read_objects, sha256_file
from evalkit.types import sha256_hex

log = logging.getLogger("evalkit")

_STEP_ID = re.compile(r"step_[0-9]+", re.ASCII)
GOLD_RATIO_TOL = 0.005  # §2.2 (plus float slack: 1/8 stored as 0.12 differs by 0.005000000000000004)
_FLOAT_SLACK = 1e-9
MIN_GOLD = 2  # §2.3
MIN_NOISE = 3  # §2.3
WRITE_CONFIRMATION = "file_write_confirmation"
DOCUMENTED_FIELDS = frozenset(
    {"sample_id", "difficulty", "user_task", "trajectory_steps", "gold_step_ids", "label_stats", "final_output"}
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Step(_Model):
    """One trajectory step (§2.2). Extra fields are allowed and preserved."""

    step_id: str
    thought: str
    obs_type: str
    observation: str
    label: Literal["gold", "noise", "uncertain"]

    @field_validator("step_id")
    @classmethod
    def _step_id(cls, v: str) -> str:
        if not _STEP_ID.fullmatch(v):
            raise ValueError(f"step_id {v!r} is not 'step_' + digits")
        return v


class LabelStats(_Model):
    """``{n_gold, n_noise, n_uncertain, gold_ratio}`` (§2.2; never used for scoring)."""

    n_gold: int
    n_noise: int
    n_uncertain: int
    gold_ratio: float = 0.0

    @field_validator("gold_ratio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class FinalOutput(_Model):
    """``{type, summary}`` (§2.2; not used by the prompt or the scorer)."""

    type: str
    summary: str


class KESample(_Model):
    """One KE sample with the §2.2 schema and §2.3 packing invariants."""

    sample_id: str
    difficulty: Literal["easy", "medium", "hard"]
    user_task: str
    trajectory_steps: list[Step]
    gold_step_ids: list[str]
    label_stats: LabelStats
    final_output: FinalOutput

    @model_validator(mode="after")
    def _invariants(self) -> "KESample":
        if not self.sample_id:
            raise ValueError("sample_id is empty")
        if not self.user_task.strip():
            raise ValueError("user_task is empty (§2.2)")
        steps = self.trajectory_steps
        ids = [s.step_id for s in steps]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate step_id {dup[0]}")
        ints = [int(i[5:]) for i in ids]
        if len(set(ints)) != len(ints):
            raise ValueError("two step_ids have the same number (e.g. step_4 and step_004)")
        gold_labels = [s.step_id for s in steps if s.label == "gold"]
        if self.gold_step_ids != gold_labels:
            raise ValueError(
                f"gold_step_ids {self.gold_step_ids} != the steps labelled gold in trajectory order {gold_labels}"
            )
        n_noise = sum(s.label == "noise" for s in steps)
        n_unc = sum(s.label == "uncertain" for s in steps)
        st = self.label_stats
        if (st.n_gold, st.n_noise, st.n_uncertain) != (len(gold_labels), n_noise, n_unc):
            raise ValueError(
                f"label_stats (n_gold={st.n_gold}, n_noise={st.n_noise}, n_uncertain={st.n_uncertain}) do not match "
                f"the labels ({len(gold_labels)}, {n_noise}, {n_unc})"
            )
        if abs(st.gold_ratio - len(gold_labels) / len(steps)) > GOLD_RATIO_TOL + _FLOAT_SLACK:
            raise ValueError(f"label_stats.gold_ratio {st.gold_ratio} != n_gold/n_steps {len(gold_labels)}/{len(steps)}")
        # packing (§2.3)
        if len(gold_labels) < MIN_GOLD:
            raise ValueError(f"packing: n_gold={len(gold_labels)} < {MIN_GOLD}")
        if n_noise < MIN_NOISE:
            raise ValueError(f"packing: n_noise={n_noise} < {MIN_NOISE}")
        bad = [s.step_id for s in steps if s.obs_type == WRITE_CONFIRMATION and s.label == "gold"]
        if bad:
            raise ValueError(f"packing: {bad[0]} is a {WRITE_CONFIRMATION} labelled gold")
        return self


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"{loc}: {msg}" if loc else msg


@dataclass
class KEFile:
    """A parsed JSONL file: validated sample dicts (extra fields kept), raw-byte digest."""

    path: Path
    samples: list[dict[str, Any]]
    sha256: str
    extra_fields: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [s["sample_id"] for s in self.samples]


def read_ke_file(path: Path, role: str) -> KEFile:
    """Read and validate one KE JSONL file (``role``: ``pilot`` or ``icl`` for messages).

    Returns the samples as plain dicts exactly as stored (validation does not rewrite them).

    Raises:
        DataError: missing file; a line that is not a JSON object; a schema or packing
            violation or a duplicate ``sample_id`` (message names file, line and sample).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"benchmark.{role}_path: {role} file {path} does not exist")
    digest = sha256_file(path, MAX_JSONL_BYTES, what=f"a KE {role} file")
    samples: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    extras: set[str] = set()
    for lineno, obj in read_objects(path):
        sid = obj.get("sample_id")
        name = f"sample {sid}" if isinstance(sid, str) else "sample without a string sample_id"
        try:
            KESample.model_validate(obj)
        except ValidationError as exc:
            raise DataError(f"{path}:{lineno}: {name}: {_describe(exc)}") from None
        if sid in seen:
            raise DataError(f"{path}:{lineno}: sample {sid}: duplicate sample_id (first on line {seen[sid]})")
        seen[sid] = lineno
        extras |= set(obj) - DOCUMENTED_FIELDS
        samples.append(obj)
    return KEFile(path=path, samples=samples, sha256=digest, extra_fields=sorted(extras))


@dataclass
class KEData:
    """Pilot + ICL and the graded set (§2.1): graded = pilot minus the ICL ids, pilot order."""

    pilot: KEFile
    icl: KEFile
    graded: list[dict[str, Any]]

    def fingerprints(self) -> dict[str, Any]:
        """§2.4: ``{pilot_sha256, icl_sha256, graded_ids_sha256, n_pilot, n_icl, n_graded}``."""
        ids = sorted(s["sample_id"] for s in self.graded)
        return {
            "pilot_sha256": self.pilot.sha256,
            "icl_sha256": self.icl.sha256,
            "graded_ids_sha256": sha256_hex("\n".join(ids)),
            "n_pilot": len(self.pilot.samples),
            "n_icl": len(self.icl.samples),
            "n_graded": len(self.graded),
        }


def load_ke(pilot_path: Path, icl_path: Path, expected_graded: int | None = None, n_icl: int = 3) -> KEData:
    """Load both files and derive the graded set (§2.1).

    The ICL file is required for 0-shot too, so a 0-shot run can never grade the ICL items.

    Raises:
        DataError: a missing file; any error of :func:`read_ke_file`; an ICL file without
            exactly ``n_icl`` examples; an ICL id absent from the pilot (names the sample);
            ``expected_graded`` set and different from the graded count.
    """
    if icl_path is None:
        raise DataError("benchmark.icl_path: the ICL file is required, even for 0-shot (spec §2.1)")
    pilot = read_ke_file(pilot_path, "pilot")
    icl = read_ke_file(icl_path, "icl")
    if len(icl.samples) != n_icl:
        raise DataError(f"{icl.path}: expected {n_icl} ICL examples, found {len(icl.samples)}")
    by_id = {s["sample_id"]: s for s in pilot.samples}
    for ex in icl.samples:
        sid = ex["sample_id"]
        if sid not in by_id:
            raise DataError(
                f"{icl.path}: ICL sample {sid} is not in the pilot {pilot.path} (the graded set would not exclude it)"
            )
        if by_id[sid] != ex:
            log.warning("KE: ICL sample %s differs from its pilot copy; examples are rendered from %s", sid, icl.path)
    icl_ids = set(icl.ids)
    graded = [s for s in pilot.samples if s["sample_id"] not in icl_ids]
    if expected_graded is not None and len(graded) != expected_graded:
        raise DataError(
            f"benchmark.expected_graded: {expected_graded} expected, but pilot {len(pilot.samples)} minus "
            f"ICL {len(icl_ids)} gives {len(graded)} graded items"
        )
    extras = sorted(set(pilot.extra_fields) | set(icl.extra_fields))
    if extras:
        log.info("KE: undocumented sample fields kept as-is: %s", ", ".join(extras))
    return KEData(pilot=pilot, icl=icl, graded=graded)
