"""A task written in YAML (``kind: task``): dataset, Jinja2 prompt, answer extraction, scorers
and metrics, with no Python (:mod:`evalkit.benchmarks.task.settings` states each field).

Like the built-in benchmarks, a task gets intervals, paired compare, repeats, budgets,
MLflow traces and the failure protocol: it is one more :class:`Benchmark`. Its runs,
MLflow runs and comparisons go by the task's own name (``benchmark.name``)."""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import logging
import random
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from evalkit.benchmarks.base import Benchmark, Generate, Selection, Solver, score_means_plan
from evalkit.benchmarks.bounds import safe_score
from evalkit.benchmarks.task.judge import ORDERS, judge_variables, panel_score
from evalkit.benchmarks.task.scorers import LETTERS, score_one, target_letter
from evalkit.benchmarks.task.settings import Dataset, TaskSettings
from evalkit.benchmarks.task.solver import JudgedGenerate, answer_of, judge_messages
from evalkit.benchmarks.task.template import RenderJob, check_renders, is_constant, render, template_variables
from evalkit.errors import ConfigError, DataError
from evalkit.images import Image, ImageFacts, ImageStore, Limits, Text, load_image, message, read_source, text_of, undecoded
from evalkit.untrusted import MAX_JSONL_BYTES, MAX_LINE_BYTES, iter_parquet, iter_records, open_file
from evalkit.stats import BINARY, Column
from evalkit.types import PackedSamples, Request, Sample, SampleScore, Trajectory

log = logging.getLogger("evalkit")


def _is_path(value: Any) -> bool:
    """True when an image value of a row is a path to a file (read again when needed), not
    its bytes (a ``data:`` URI, a binary cell, a Hugging Face cell holding bytes)."""
    if isinstance(value, dict):
        value = value.get("bytes") if value.get("bytes") is not None else value.get("path")
    return isinstance(value, str) and not value.startswith("data:")


def _reloader(value: Any, base: Path | None, limits: Limits, where: str, max_side: int | None) -> Callable[[], Image]:
    """How an image file of the data is read and cleaned again (as the first time)."""
    return lambda: load_image(read_source(value, base, limits, where), limits, where, max_side)


class TaskBenchmark(Benchmark):
    """The benchmark of every YAML task; ``name`` is the task's."""

    name = "task"
    settings_model = TaskSettings
    supported_shots = None
    reasoning_rule = "none: the task's extraction rule (benchmark.extract) reads the answer as returned"
    aggregation_rules = (
        ("kappa/*", "Cohen's κ of the score (≥ 0.5 counts as a positive verdict) against the human label: "
                    "(observed − chance agreement) / (1 − chance agreement), chance from both rates"),
        ("agreement/*", "share of samples where the score (≥ 0.5 positive) and the human label agree"),
        ("label_rate", "share of samples the human label calls positive"),
        ("positive/*", "share of samples with a label whose score is ≥ 0.5"),
        ("*/weighted", "weighted mean of the category means (benchmark.metrics.weights, renormalised over the categories scored)"),
        ("*/*", "mean over the samples of that category"),
        ("*", "mean over the samples"),
    )

    def __init__(self, settings: TaskSettings):
        super().__init__(settings)
        self.settings: TaskSettings = settings
        self.name = settings.name  # type: ignore[misc]  (the task's own name, not the class's)
        first = settings.scorers[0].score_name
        self.primary_score = first  # type: ignore[misc]
        self.headline_metric = settings.metrics.headline or (f"{first}/weighted" if settings.metrics.weights else first)  # type: ignore[misc]
        self._digests: dict[str, str] = {}
        self._system: str | None = None  # the system prompt, when its template reads no variable (_render_system)
        self._pools: dict[str, list[dict[str, Any]]] = {}
        self._bases: dict[str, Path | None] = {}  # where -> the folder image paths are relative to
        self._images: dict[str, list[ImageFacts]] = {}  # sample id -> its images, checked (dataset.fields.images)
        self._demo_images: dict[str, list[ImageFacts]] = {}  # demonstration id -> its images
        #: the images' bytes, at most dataset.image_limits.max_held_bytes of them at once
        self.image_store = ImageStore(settings.dataset.image_limits.max_held_bytes)

    def __getstate__(self) -> dict[str, Any]:
        # demonstrations and images are not needed to score (a worker never builds a request)
        return {**self.__dict__, "_pools": {}, "_images": {}, "_demo_images": {}, "image_store": None}

    def sends_images(self) -> bool:
        """True when the task's requests carry images (``dataset.fields.images``)."""
        return self.settings.dataset.fields.images is not None

    def _check_images(self, samples: list[Sample], where: str) -> dict[str, list[Image]]:
        """Every image of ``samples`` read, checked and cleaned (:func:`load_image`), each
        sample's image column then replaced by its images' SHA-256 digests (so the data
        fingerprint covers their bytes, not their names); a fingerprint over them all is kept
        as ``<where>#images``. ``{}`` without ``dataset.fields.images``.

        Raises:
            DataError: one line naming the row (sample id), the image and why.
        """
        col = self.settings.dataset.fields.images
        if col is None:
            return {}
        limits, base, max_side = self.settings.dataset.image_limits.limits(), self._bases.get(where), self.settings.prompt.image_max_side
        out: dict[str, list[ImageFacts]] = {}
        digest = hashlib.sha256()
        seen: dict[bytes, ImageFacts] = {}
        store, before = self.image_store, self.image_store.total
        for n, sample in enumerate(samples):
            value = sample.data.get(col)
            values = [] if value is None else value if isinstance(value, list) else [value]
            at = f"{where}: row {n + 1} (sample {sample.id[:80]!r}), column {col!r}"
            if len(values) > limits.max_per_sample:
                raise DataError(f"{at}: {len(values)} images, over the limit of {limits.max_per_sample} (image_limits.max_per_sample)")
            images = []
            for i, v in enumerate(values):
                here = at if len(values) == 1 else f"{at}[{i}]"
                data = read_source(v, base, limits, here)
                key = hashlib.sha256(data).digest()
                if key not in seen:  # a file is read again when needed (at most max_held_bytes held); inline bytes are kept
                    reload = _reloader(v, base, limits, here, max_side) if _is_path(v) else None
                    seen[key] = store.register(load_image(data, limits, here, max_side), reload)
                images.append(seen[key])
                digest.update(key)
                del data
            digest.update(b"\n")
            out[sample.id] = images
            sample.data[col] = [im.sha256 for im in images]
        self._digests[f"{where}#images"] = digest.hexdigest()
        if store.total > store.max_bytes and before <= store.max_bytes:
            log.warning("task %s: its images are %.1f MiB, over dataset.image_limits.max_held_bytes (%.1f MiB): the run "
                        "holds at most that much at once and reads an image file again when a request needs it",
                        self.name, store.total / 2**20, store.max_bytes / 2**20)  # fmt: skip
        return out

    # ---- data -----------------------------------------------------------------------------
    def _stream(self, ds: Dataset, path: Path | None, split: str, reading: "_Reading") -> Iterator[dict[str, Any]]:
        """The rows of a local file or of a pinned hub split (as plain JSON values) that pass
        ``dataset.filter``, one at a time (a file is read a row at a time: a caller that
        stops early never reads the rest); ``reading`` counts the rows read and hashes them
        (:meth:`_Reading.record` keeps the fingerprint).

        Raises:
            DataError: unreadable data, more rows than ``max_rows``, a row that is not text."""
        if path is not None:
            raw: Iterator[dict[str, Any]] = _file_rows(Path(path).expanduser(), ds.max_rows)
            self._bases[reading.where] = Path(path).expanduser().parent
            label = f"benchmark.dataset.path: {path}"
        else:
            raw = iter(_read_hub(ds.hub or "", split, ds.revision or "", ds.max_rows, ds.fields.images))
            label = f"benchmark.dataset.hub: {ds.hub}"
        for row in raw:
            reading.rows += 1
            row, line = _plain_row(row, reading.rows, label)
            reading.digest.update(line)
            if all(row.get(k) == v for k, v in ds.filter.items()):
                reading.passed += 1
                yield row
        reading.whole = True

    def _read(self, ds: Dataset, path: Path | None, split: str) -> list[dict[str, Any]]:
        """Every row of a local file or of a pinned hub split (as plain JSON values), filtered
        (:meth:`_stream`, read whole); its fingerprint kept."""
        reading = _Reading(str(path) if path is not None else f"{ds.hub}@{ds.revision}:{split}")
        rows = list(self._stream(ds, path, split, reading))
        reading.record(self._digests)
        return rows

    def _select(self, selection: Selection | None, where: str, prefix: str = "") -> tuple[Sequence[Sample], "_Reading"]:
        """The samples of the dataset that ``selection`` keeps (every one for ``None``), read
        a row at a time: with ``selection.first`` and no ids, reading stops once that many are
        kept; rows left out are never held. Their images are not checked here (callers do).
        Records the fingerprint of the rows read and :attr:`example_id`. ``prefix``: put in
        front of a malformed row's one line (``benchmark.dataset: `` for :meth:`check`).

        Raises:
            DataError: unreadable or malformed data (a row without the input or target
                column, a duplicate id among the rows read, ...)."""
        ds = self.settings.dataset
        ids = selection.ids if selection is not None else None
        first = selection.first if selection is not None and ids is None else None
        reading = _Reading(str(ds.path) if ds.path is not None else f"{ds.hub}@{ds.revision}:{ds.split}")
        rows = self._stream(ds, ds.path, ds.split, reading)
        made = _iter_samples(rows, ds, ds.split, where, prefix)
        # packed as read (issue 46: a million rows in about 0.2 KB each); a task with images
        # keeps Sample objects (their checked digests are written into each sample's data)
        kept: list[Sample] | PackedSamples = PackedSamples() if ds.fields.images is None else []
        try:
            for sample in made:
                reading.subsets.add(sample.subset)
                if self.example_id is None:
                    self.example_id = sample.id
                if ids is None or sample.id in ids:
                    kept.append(sample)
                    if first is not None and len(kept) >= first:
                        break
        finally:
            made.close()
            rows.close()
        reading.record(self._digests)
        return kept, reading

    def load_selection(self, selection: Selection | None = None) -> Sequence[Sample]:
        """The samples ``selection`` keeps (:meth:`_select`), their images read and checked;
        their templates not yet rendered (:meth:`check_selection`, on what the run sends).

        Raises:
            DataError: unreadable or malformed data, an image over a bound."""
        ds = self.settings.dataset
        where = str(ds.path) if ds.path is not None else f"{ds.hub}@{ds.revision}:{ds.split}"
        samples, _ = self._select(selection, str(ds.path or ds.hub))
        self._images = self._check_images(samples, where)
        return samples

    def check_selection(self, samples: list[Sample]) -> None:
        """The prompts of the samples a run sends, each rendered once in the bounded child
        (:meth:`check_templates`).

        Raises:
            DataError: a template that fails or is over a bound on a sample."""
        self.check_templates(samples)

    def load(self) -> Sequence[Sample]:
        """The dataset's samples, each of whose prompts is first rendered once in the bounded
        child (:meth:`check_templates`).

        Raises:
            DataError: unreadable data, or a template that fails or is over a bound on a
                sample (one line naming the task and the sample).
        """
        samples = self.load_selection(None)
        self.check_selection(samples)
        return samples

    def render_jobs(self, samples: list[Sample]) -> list[RenderJob]:
        """Every render a sample's request needs in the driver (:meth:`build` with a
        demonstration drawn from the sample itself): the system prompt, the template, the
        answer template, and each ``llm_judge`` scorer's rubric and system prompt about an
        empty answer (both orders of a pairwise scorer); a prompt template that reads no
        variable once in all (it renders the same for every sample)."""
        p, jobs, fixed = self.settings.prompt, [], set()
        for sample in samples:
            for template in (p.system, p.template, p.answer_template):
                if template and template not in fixed:  # a template that reads no variable: rendered once
                    jobs.append((template, sample.data, p.max_chars, sample.id))
                    if is_constant(template, p.max_chars):
                        fixed.add(template)
            for scorer in self.settings.scorers:
                if scorer.kind != "llm_judge":
                    continue
                orders = ORDERS if scorer.judge_setting("mode") == "pairwise" else (None,)
                for order in orders:
                    variables = judge_variables(sample.data, "", scorer.judge_setting("against"), order)
                    jobs += [(t, variables, p.max_chars, sample.id) for t in (scorer.system, scorer.rubric) if t]
        return jobs

    def check_templates(self, samples: list[Sample]) -> None:
        """Each of :meth:`render_jobs` rendered once in a child process with a time and memory
        limit the kernel and this process enforce
        (:func:`~evalkit.benchmarks.task.template.check_renders`), so a template that would
        loop or exhaust memory on some sample is one line before any request is built; the
        renders per sample then stay in process. ``samples`` are those a run sends (the
        selection: :meth:`check_selection`; every sample for :meth:`load`), each rendered, so
        a 2,000-sample ``run.limit`` of a million-row file renders 2,000 (issue 46), bounded
        per render (steps, characters) and as a
        whole (time: :data:`~evalkit.benchmarks.task.template.CHECK_BASE_S` plus
        ``CHECK_PER_RENDER_S`` per render; memory: ``CHECK_MEMORY_MB``), and cheap — about
        33 µs a render, 3.3 s for 20,000 rows with a judge's rubric (100,000 renders) on a
        loaded 2-core host (issue 32) — so every sample sent is rendered, none sampled.

        The samples go to the child :data:`CHECK_CHUNK` at a time, one child each (a render
        job holds its sample's data: a million samples' jobs at once would hold a million
        dicts; issue 46 item 3).

        Raises:
            DataError: one line naming the task (and the sample, for a failing render).
        """
        read = iter(samples)
        while chunk := list(itertools.islice(read, CHECK_CHUNK)):
            check_renders(self.render_jobs(chunk), f"task {self.name}")

    def data_fingerprints(self) -> dict[str, str]:
        return dict(self._digests)

    def check(self, selection: Selection | None = None) -> None:
        """The task file checked against its data before anything starts (issue 32), each
        mistake one line naming the key: the extraction and scorer patterns compile and have
        the group asked for; the data can be read and is not empty (the line names the file);
        ``metrics.weights`` names only categories the data has (did-you-mean when one is
        close; known only when the data was read whole: not under a ``run.limit`` that stops
        early); every variable of the prompt and judge templates is a column of the selected
        rows (``jinja2.meta.find_undeclared_variables``; a row lacking one is rendered, which
        fails where the template needs it); the first selected sample's prompt and judge
        messages render in the bounded sandbox (a rubric it refuses is named here, not per
        sample). ``selection``: the run's (``run.sample_ids`` / ``run.limit``,
        :class:`~evalkit.benchmarks.base.Selection`): only the rows it needs are read and
        checked (issue 46); ``None``: every row.

        Raises:
            ConfigError: a pattern, group or weight naming its key.
            DataError: unreadable, empty or malformed data, a template field absent from the
                rows, a template the sandbox refuses — naming the key and file or sample.
        """
        s = self.settings
        _check_patterns(s)
        ds = s.dataset
        where = str(ds.path or f"{ds.hub}@{ds.revision}:{ds.split}")
        samples, reading = self._select(selection, where, prefix="benchmark.dataset: ")
        if not reading.passed:
            why = "no row passes benchmark.dataset.filter" if ds.filter else "it is empty (no rows)"
            raise DataError(f"benchmark.dataset.path: {where}: {why}" if ds.path is not None
                            else f"benchmark.dataset.hub: {where}: {why}")  # fmt: skip
        try:  # every image read and checked under the limits now, before anything starts
            self._images = self._check_images(samples, str(ds.path) if ds.path is not None else where)
        except DataError as exc:
            raise DataError(f"benchmark.dataset.fields.images: {exc}") from None
        if s.metrics.weights:
            if not ds.fields.category:
                raise ConfigError("benchmark.metrics.weights: weights are per category, but benchmark.dataset.fields.category "
                                  "names no column")  # fmt: skip
            seen = sorted(reading.subsets)
            for cat in s.metrics.weights if reading.whole else ():
                if cat not in seen:
                    import difflib

                    near = difflib.get_close_matches(cat, seen, n=1, cutoff=0.6)
                    hint = f"; did you mean {near[0]!r}?" if near else ""
                    raise ConfigError(f"benchmark.metrics.weights.{cat}: no sample of {where} has category {cat!r} "
                                      f"(column {ds.fields.category!r}: {', '.join(seen)}){hint}")  # fmt: skip
        if samples:  # none: the selection's ids are not in the data (run.sample_ids says so, naming one)
            self._check_templates(samples, where)

    def _check_templates(self, samples: list[Sample], where: str) -> None:
        """Every template's variables against the rows, then the first sample rendered
        (:meth:`check`)."""
        s = self.settings
        templates = [("benchmark.prompt.template", s.prompt.template, set()), ("benchmark.prompt.system", s.prompt.system, set())]
        templates.append(("benchmark.prompt.answer_template", s.prompt.answer_template, set()))
        for i, sc in enumerate(s.scorers):
            if sc.kind == "llm_judge":
                extra = {"output", "answer_a", "answer_b"}
                templates += [(f"benchmark.scorers.{i}.rubric", sc.rubric, extra), (f"benchmark.scorers.{i}.system", sc.system, extra)]
        for key, text, extra in templates:
            if not text:
                continue
            names = template_variables(text, s.prompt.max_chars, key) - extra
            for name in sorted(names):
                lacking = [x for x in samples if name not in x.data]
                if len(lacking) == len(samples):
                    columns = sorted(k for k in samples[0].data if k not in ("letters",))
                    raise DataError(f"{key}: {{{{ {name} }}}} is not a column of {where} (its rows have: {', '.join(columns)})")
                if lacking:
                    try:
                        render(text, {**lacking[0].data, **{k: "" for k in extra}}, s.prompt.max_chars, lacking[0].id)
                    except DataError as exc:
                        raise DataError(f"{key}: {exc} ({where} has no column {name!r} in that row)") from None
        first = samples[0]
        for i, sc in enumerate(s.scorers):
            if sc.kind != "llm_judge":
                continue
            try:
                for order in (ORDERS if sc.judge_setting("mode") == "pairwise" else (None,)):
                    judge_messages(s, sc, first, "", order)
            except DataError as exc:
                raise DataError(f"benchmark.scorers.{i}.rubric: {exc}") from None
        try:
            self.build(first, 0)
        except DataError as exc:  # its class kept: a TemplateRefused stays one
            raise type(exc)(f"benchmark.prompt: {exc}") from None

    def prompt_fingerprint(self) -> str | None:
        p = self.settings.prompt
        text = json.dumps([p.system, p.template, p.answer_template], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    # ---- prompting ------------------------------------------------------------------------
    def _pool(self) -> list[dict[str, Any]]:
        """The demonstrations' samples (``fewshot.path``, else ``fewshot.split`` of the source,
        else the dataset itself), read once."""
        if "pool" not in self._pools:
            ds, shots = self.settings.dataset, self.settings.fewshot
            if shots.path is not None:
                rows = self._read(ds, shots.path, ds.split)
            elif shots.split is not None and ds.hub is not None:
                rows = self._read(ds, None, shots.split)
            else:
                rows = self._read(ds, ds.path, ds.split)
            where = str(shots.path or ds.path or ds.hub)
            demos = _samples(rows, ds, "shot", where)
            key = str(shots.path) if shots.path is not None else (str(ds.path) if ds.path is not None
                                                                  else f"{ds.hub}@{ds.revision}:{shots.split or ds.split}")  # fmt: skip
            self._demo_images = self._check_images(demos, key)
            self._pools["pool"] = [s.data for s in demos]
        return self._pools["pool"]

    def build(self, sample: Sample, shots: int) -> Request:
        p = self.settings.prompt
        messages: list[dict[str, Any]] = []
        if p.system:
            messages.append({"role": "system", "content": self._render_system(sample)})
        images: dict[str, int] = {}  # digest -> bytes, of the request's images in order (their bytes in image_store)
        if shots:
            pool = [d for d in self._pool() if d["id"] != sample.id and d["input"] != sample.data["input"]]
            if len(pool) < shots:
                raise DataError(f"task {self.name}: shots={shots} but only {len(pool)} demonstrations to draw from")
            seed = self.settings.seed if self.settings.seed is not None else 0
            for demo in random.Random(f"{seed}/{sample.id}").sample(pool, shots):
                messages.append(self._user_turn(render(p.template, demo, p.max_chars, sample.id), self._demo_images.get(demo["id"]), images))
                messages.append({"role": "assistant", "content": render(p.answer_template, demo, p.max_chars, sample.id)})
        messages.append(self._user_turn(render(p.template, sample.data, p.max_chars, sample.id), self._sample_images(sample), images))
        if sum(len(text_of(m["content"])) for m in messages) > p.max_chars:
            raise DataError(f"task {self.name}: sample {sample.id!r}: the prompt is over prompt.max_chars={p.max_chars} characters")
        limit = self.settings.dataset.image_limits.max_request_bytes
        if sum(images.values()) > limit:
            raise DataError(f"task {self.name}: sample {sample.id!r}: the request's images have {sum(images.values())} "
                            f"bytes, over the limit of {limit} (dataset.image_limits.max_request_bytes)")  # fmt: skip
        for scorer in self.settings.scorers:  # a judge's template that cannot render: one line now, not a failure per sample
            if scorer.kind != "llm_judge" or scorer.judge_setting("mode") != "pairwise":
                continue
            other = sample.data.get(scorer.judge_setting("against"))  # missing, empty or blank: any answer beats it
            if other is None or not str(other).strip():
                raise DataError(f"task {self.name}: sample {sample.id!r}: no field {scorer.judge_setting('against')!r} "
                                f"to judge the answer against, or it is empty (scorer {scorer.score_name}: against)")  # fmt: skip
        self.judge_prompts(sample)
        return Request(sample.id, sample.subset, messages=messages, images=self.image_store.images(list(images)) if images else {})

    def _render_system(self, sample: Sample) -> str:
        """The system prompt of ``sample``: rendered once and kept when its template reads no
        variable (:func:`~evalkit.benchmarks.task.template.is_constant`: the same text for
        every sample), else rendered for the sample.

        Raises:
            DataError: as :func:`~evalkit.benchmarks.task.template.render`."""
        p = self.settings.prompt
        if self._system is not None:
            return self._system
        text = render(p.system or "", sample.data, p.max_chars, sample.id)
        if is_constant(p.system or "", p.max_chars):
            self._system = text
        return text

    def _sample_images(self, sample: Sample) -> list[ImageFacts] | None:
        """The checked images of ``sample`` (``None`` for a task without images).

        Raises:
            DataError: a task with images whose sample was not loaded by this instance."""
        if not self.sends_images():
            return None
        if sample.id not in self._images:
            raise DataError(f"task {self.name}: sample {sample.id!r}: its images were not loaded (load() or check() first)")
        return self._images[sample.id]

    @staticmethod
    def _user_turn(text: str, pictures: list[ImageFacts] | None, images: dict[str, int]) -> dict[str, Any]:
        """A user turn: the rendered ``text`` alone (a task without images), else the text
        part then each image part in order; the images' digests (and sizes) are added to
        ``images``."""
        if pictures is None:
            return {"role": "user", "content": text}
        images.update({im.sha256: im.bytes for im in pictures})
        return message("user", [Text(text), *pictures])

    # ---- solving --------------------------------------------------------------------------
    def solver(self) -> Solver:
        """:class:`~evalkit.benchmarks.task.solver.JudgedGenerate` for a task with
        ``llm_judge`` scorers (the judges asked on the workers), else one ``generate``."""
        return JudgedGenerate(self.settings) if self.settings.needs_judge() else Generate()

    def judge_prompts(self, sample: Sample) -> list[list[dict[str, Any]]]:
        """Each ``llm_judge`` scorer's judge messages about an empty answer (both orders of a
        pairwise scorer): the calls each judge makes per sample."""
        out = []
        for scorer in self.settings.scorers:
            if scorer.kind == "llm_judge":
                orders = ORDERS if scorer.judge_setting("mode") == "pairwise" else (None,)
                out += [judge_messages(self.settings, scorer, sample, "", order) for order in orders]
        return out

    # ---- scoring --------------------------------------------------------------------------
    def score(self, sample: Sample, output: str) -> SampleScore:
        """The verdict on ``output`` alone (:meth:`score_sample` without judgements)."""
        return self.score_sample(sample, Trajectory(final_output=output))

    def score_sample(self, sample: Sample, trajectory: Trajectory) -> SampleScore:
        """Each scorer's score of the extracted answer; an ``llm_judge`` scorer's from the
        judges' verdicts in ``trajectory.data["judgements"]`` (their panel's score, and
        ``<name>_invalid``: the judges whose verdict was invalid, excluded;
        :func:`~evalkit.benchmarks.task.judge.panel_score`)."""
        names = self._score_names()

        def compute() -> SampleScore:
            answer = answer_of(self.settings, trajectory.final_output)
            if answer is None:
                return SampleScore(scores={n: 0.0 for n in names}, status="format_error",
                                   detail=f"no answer extracted ({self.settings.extract.kind})")  # fmt: skip
            target, choices = sample.data["target"], sample.data.get("choices")
            records = trajectory.data.get("judgements")
            records = records if isinstance(records, list) else []
            scores, detail = {}, None
            for scorer in self.settings.scorers:
                if scorer.kind == "llm_judge":
                    value, invalid = panel_score(scorer, records)
                    scores[scorer.score_name], scores[f"{scorer.score_name}_invalid"] = value or 0.0, float(invalid)
                    detail = detail or (None if value is not None else f"{scorer.score_name}: no valid verdict")
                    continue
                pattern = (scorer.pattern or "").replace("{{ target }}", _escaped(target)) if scorer.kind == "regex" else None
                scores[scorer.score_name] = score_one(scorer, answer, target, choices, pattern)
            return SampleScore(scores=scores, parsed=answer[:200], status="ok" if detail is None else "format_error", detail=detail)

        return safe_score(compute, {n: 0.0 for n in names})

    def score_bounds(self, name: str) -> tuple[float, float]:
        """A judge scorer's ``<name>_invalid`` counts the panel's judges without a valid
        verdict (``[0, ∞)``, finite); every other score is in :data:`score_range` ([0, 1])."""
        judged = {f"{s.score_name}_invalid" for s in self.settings.scorers if s.kind == "llm_judge"}
        return (0.0, float("inf")) if name in judged else self.score_range

    def _score_names(self) -> list[str]:
        """Every per-sample score: each scorer's, and ``<name>_invalid`` of each judge scorer."""
        names = [s.score_name for s in self.settings.scorers]
        return names + [f"{s.score_name}_invalid" for s in self.settings.scorers if s.kind == "llm_judge"]

    def stat_plan(self, samples: list[Sample], epochs: list[list[dict[str, Any]]]) -> Any:
        """Each score's mean overall and per category (:func:`score_means_plan`), plus
        ``<score>/weighted`` with ``metrics.weights``."""
        plan = score_means_plan(samples, epochs)
        names = [s.score_name for s in self.settings.scorers]
        derives = []
        if self.settings.metrics.weights:
            derives.append(_weighted(names, self.settings.metrics.weights))
        if self.settings.dataset.fields.label:
            derives.append(_agreement(plan, samples, epochs, names))
        if derives:
            plan.derive = lambda base: {k: v for derive in derives for k, v in derive(base).items()}
        return plan

    # ---- built-in models ------------------------------------------------------------------
    def reference_output(self, sample: Sample) -> str:
        """The reference answer as a model would write it: the task's ``prompt.answer_template``
        rendered with the sample (how its demonstrations answer) when the task sets one, else
        by its extraction rule: ``Answer: <letter>`` (mc_letter), ``{"<field>": <target>}``
        (json_field), else the target. A task whose extraction and scorers do not take their
        own reference answer is mis-specified: its reference run says so
        (:func:`evalkit.job.reference_shortfall`)."""
        target, rule, p = sample.data["target"], self.settings.extract, self.settings.prompt
        if p.answer_template != type(p).model_fields["answer_template"].default:
            return render(p.answer_template, sample.data, p.max_chars, sample.id)
        if rule.kind == "mc_letter":
            return f"Answer: {target_letter(target, sample.data.get('choices'))}"
        if rule.kind == "json_field":
            return json.dumps({rule.field: target}, ensure_ascii=False)
        return str(target)


def _check_patterns(s: TaskSettings) -> None:
    """The extraction pattern and each regex scorer's compile (a scorer's ``{{ target }}``
    stands for an escaped literal), and ``extract.group`` is a group of its pattern.

    Raises:
        ConfigError: naming the key, the pattern and why.
    """

    checks = []
    if s.extract.kind == "regex":
        checks.append(("benchmark.extract.pattern", s.extract.pattern or "", s.extract.group))
    checks += [(f"benchmark.scorers.{i}.pattern", (sc.pattern or "").replace("{{ target }}", "x"), None)
               for i, sc in enumerate(s.scorers) if sc.kind == "regex"]  # fmt: skip
    for key, pattern, group in checks:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{key}: {pattern[:100]!r} does not compile ({exc})") from None
        if group is not None and group > compiled.groups:
            raise ConfigError(f"benchmark.extract.group: group {group}, but {key} {pattern[:100]!r} has "
                              f"{compiled.groups} group{'s' if compiled.groups != 1 else ''}")  # fmt: skip


def _escaped(target: Any) -> str:
    return re.escape(str(target))


def _weighted(names: list[str], weights: dict[str, float]) -> Any:
    import numpy as np

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name in names:
            parts = [(w, base[f"{name}/{c}"]) for c, w in weights.items() if f"{name}/{c}" in base]
            if not parts and name in base:
                out[f"{name}/weighted"] = base[name]
            elif parts:
                values = np.stack([v for _, v in parts])
                w = np.array([w for w, _ in parts])[:, None] * ~np.isnan(values)
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[f"{name}/weighted"] = np.nansum(values * w, axis=0) / w.sum(axis=0)
        return out

    return derive


def _agreement(plan: Any, samples: list[Sample], epochs: list[list[dict[str, Any]]], names: list[str]) -> Any:
    """Add the columns ``label_rate``, ``positive/<score>`` (score ≥ 0.5) and
    ``agreement/<score>`` to ``plan`` (over the scored units with a label), and return the
    derive of ``kappa/<score>``: Cohen's κ of two raters on a 0/1 verdict,
    (p_o − p_e) / (1 − p_e) with p_e = p·q + (1 − p)(1 − q) (``nan`` when p_e is 1)."""
    import numpy as np

    label = {s.id: s.data.get("label") for s in samples}
    pos = {sid: i for i, sid in enumerate(plan.units)}
    shape = (max(len(epochs), 1), len(plan.units))
    wanted = ["label_rate"] + [f"{kind}/{n}" for n in names for kind in ("positive", "agreement")]
    columns = {name: Column(np.zeros(shape), np.zeros(shape, dtype=bool), BINARY) for name in wanted}
    for e, rows in enumerate(epochs):
        for r in rows:
            i, lab = pos.get(r.get("sample_id")), label.get(r.get("sample_id"))
            if i is None or lab is None:
                continue
            columns["label_rate"].values[e, i], columns["label_rate"].mask[e, i] = lab, True
            for n in names:
                value = (r.get("scores") or {}).get(n)
                if isinstance(value, (int, float)):
                    for kind, v in (("positive", value >= 0.5), ("agreement", (value >= 0.5) == bool(lab))):
                        columns[f"{kind}/{n}"].values[e, i], columns[f"{kind}/{n}"].mask[e, i] = float(v), True
    plan.columns.update(columns)

    def derive(base: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for n in names:
            p, q, po = base[f"positive/{n}"], base["label_rate"], base[f"agreement/{n}"]
            pe = p * q + (1 - p) * (1 - q)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"kappa/{n}"] = np.where(pe < 1, (po - pe) / np.where(pe < 1, 1 - pe, 1), np.nan)
        return out

    return derive


def _label(value: Any, at: str) -> float | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "1.0"):
        return 1.0
    if text in ("0", "false", "no", "0.0"):
        return 0.0
    raise DataError(f"{at}: label {str(value)[:40]!r} is not 0/1, true/false or yes/no")


#: the samples whose renders one bounded child checks (:meth:`TaskBenchmark.check_templates`):
#: a child's start-up (about 0.1–0.3 s) per chunk against about 1 KB per render job held
CHECK_CHUNK = 20_000


def _samples(rows: list[dict[str, Any]], ds: Dataset, split: str, where: str) -> list[Sample]:
    """Samples from dataset rows by the field mapping (:func:`_iter_samples`, all held)."""
    return list(_iter_samples(rows, ds, split, where))


def _iter_samples(rows: Iterable[dict[str, Any]], ds: Dataset, split: str, where: str, prefix: str = "") -> Iterator[Sample]:
    """Samples from dataset rows by the field mapping, one at a time (``rows`` read as they
    are needed). ``prefix``: put in front of each error's line.

    Raises:
        DataError: a row without the input or target column, choices that are not a list of
            strings, or a duplicate id (among the rows read so far) — one line naming the file
            and row.
    """
    f = ds.fields
    seen: set[str] = set()
    for n, row in enumerate(rows):
        at = f"{prefix}{where}: row {n + 1}"
        for col in (f.input, f.target):
            if row.get(col) is None:
                raise DataError(f"{at}: no column {col!r} (dataset.fields maps input={f.input!r}, target={f.target!r})")
        sid = str(row[f.id]) if f.id and row.get(f.id) is not None else f"{split}-{n}"
        if sid in seen:
            raise DataError(f"{at}: duplicate id {sid[:80]!r}")
        seen.add(sid)
        choices = _choices(row.get(f.choices) if f.choices else None, at)
        data = {**row, "id": sid, "input": str(row[f.input]), "target": row[f.target], "choices": choices,
                "letters": list(LETTERS[: len(choices or [])]), "label": _label(row.get(f.label), at) if f.label else None}  # fmt: skip
        subset = str(row.get(f.category)) if f.category and row.get(f.category) is not None else "all"
        yield Sample(id=sid, subset=subset, data=data)


def _choices(value: Any, at: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise DataError(f"{at}: choices must be a list (or a JSON array in a CSV cell)") from None
    if not isinstance(value, list) or not all(isinstance(c, (str, int, float)) for c in value) or len(value) > len(LETTERS):
        raise DataError(f"{at}: choices must be a list of at most {len(LETTERS)} strings")
    return [str(c) for c in value]


def _jsonable(value: Any) -> Any:
    """A cell JSON cannot hold: bytes (a Parquet binary or ``Image`` column) as a base64
    ``data:`` URI (what :func:`evalkit.images.read_source` reads), others as text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return "data:application/octet-stream;base64," + base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


class _Reading:
    """What a streamed read of one source saw (:meth:`TaskBenchmark._stream`): ``rows`` read,
    ``passed`` (through ``dataset.filter``), the ``subsets`` of the samples made, whether it
    read the source ``whole``, and the SHA-256 of the rows read as plain JSON lines."""

    def __init__(self, where: str):
        self.where, self.rows, self.passed, self.whole = where, 0, 0, False
        self.subsets: set[str] = set()
        self.digest = hashlib.sha256()

    def record(self, digests: dict[str, str]) -> None:
        """The fingerprint put in ``digests`` (the data files' fingerprints of ``summary.json``):
        under ``where`` when read whole, else under ``where[:N]`` (its first N rows: what a
        ``run.limit`` read)."""
        digests[self.where if self.whole else f"{self.where}[:{self.rows}]"] = self.digest.hexdigest()


def _plain_row(row: dict[str, Any], n: int, where: str) -> tuple[dict[str, Any], bytes]:
    """A row as plain JSON values (bytes as ``data:`` URIs), and its line of the data
    fingerprint (sorted keys, UTF-8, ``\\n``-terminated: the fingerprint is the SHA-256 of
    the rows' lines in order).

    Raises:
        DataError: the row (number ``n``) holds a lone surrogate (a JSON ``\\ud800`` escape
            with no pair): it is not text that UTF-8 can store, hash or send — one line naming
            ``where`` and the row.
    """
    line = json.dumps(row, sort_keys=True, ensure_ascii=False, default=_jsonable) + "\n"
    try:
        raw = line.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{where}: row {n} holds a lone surrogate (an unpaired \\ud800-\\udfff escape), "
                        "which is not text; fix the row's encoding") from None  # fmt: skip
    return json.loads(line), raw


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


#: the most columns a task's row may have: a prompt names a handful; every column of every row
#: is sent to the bounded renderer, so 100,000 columns once took 1.8 GB before any bound named it
MAX_COLUMNS = 1000


def _short_lines(fh: Any, path: Path) -> Any:
    """The lines of the text file ``fh``, each at most :data:`evalkit.untrusted.MAX_LINE_BYTES`
    characters (a line is read no further than that: a 300 MB CSV field is never held whole).

    Raises:
        DataError: a longer line (one line naming the file and the bound)."""
    for n, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), ""), 1):
        if len(line) > MAX_LINE_BYTES:
            raise DataError(f"benchmark.dataset.path: {path}:{n}: a line longer than {MAX_LINE_BYTES:,} characters; "
                            "not a row evalkit reads")  # fmt: skip
        yield line


def _narrow(rows: Any, path: Path) -> Any:
    """``rows`` as they come, each checked to have at most :data:`MAX_COLUMNS` columns.

    Raises:
        DataError: a row over the bound (one line naming the file, the row and the bound)."""
    for n, row in enumerate(rows, 1):
        if isinstance(row, dict) and len(row) > MAX_COLUMNS:
            raise DataError(f"benchmark.dataset.path: {path}: row {n} has {len(row):,} columns, over the {MAX_COLUMNS:,} "
                            "a task's row may have")  # fmt: skip
        yield row


def _file_rows(path: Path, max_rows: int) -> Iterator[dict[str, Any]]:
    """The rows of a ``.jsonl``, ``.csv`` or ``.parquet`` file, one at a time (JSONL and CSV a
    line at a time, Parquet a batch at a time; at most ``max_rows``: the row after them is an
    error, met only by a reader that gets that far).

    Raises:
        DataError: the file is missing or unreadable, or holds more rows than ``max_rows``.
    """
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a regular file (a folder, a FIFO or a device)"
        raise DataError(f"benchmark.dataset.path: {path} {what}")
    try:
        if path.suffix == ".jsonl":
            source: Iterator[dict[str, Any]] = (obj for _, obj in iter_records(path))
        elif path.suffix == ".csv":
            source = _csv_rows(path)
        else:  # one row past the bound is read, so that "more than max_rows" is known without the rest
            source = iter_parquet(path, max_rows=max_rows + 1)
        for n, row in enumerate(_narrow(source, path), 1):
            if n > max_rows:
                raise DataError(f"benchmark.dataset.path: {path} has more than dataset.max_rows={max_rows} rows")
            yield row
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's failure is one line
        raise DataError(f"benchmark.dataset.path: {path} cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None


def _csv_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a CSV file, a line at a time (:func:`_short_lines`)."""
    with io.TextIOWrapper(open_file(path, MAX_JSONL_BYTES, what="a CSV file"), encoding="utf-8", newline="") as fh:
        yield from csv.DictReader(_short_lines(fh, path))


def _read_hub(hub: str, split: str, revision: str, max_rows: int, images: str | None = None) -> list[dict[str, Any]]:
    """Rows of a pinned split of a Hugging Face dataset (``datasets`` honours its offline cache);
    an ``Image`` column named by ``images``, or a list of them (``Sequence(Image())``), is read
    undecoded (its bytes, checked by evalkit; :func:`evalkit.images.undecoded`).

    Raises:
        DataError: unreachable, unknown, or more rows than ``max_rows``.
    """
    try:
        import datasets  # deferred: only hub tasks need it

        ds = datasets.load_dataset(hub, split=split, revision=revision)
        feature = undecoded(ds.features.get(images)) if images is not None else None
        if feature is not None:  # an Image column, or a list of them: read undecoded (evalkit checks the bytes)
            ds = ds.cast_column(images, feature)
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, bad split: one line
        raise DataError(f"benchmark.dataset.hub: cannot load split {split!r} of {hub!r}@{revision} ({type(exc).__name__})") from None
    if len(ds) > max_rows:
        raise DataError(f"benchmark.dataset.hub: {hub} {split} has {len(ds)} rows, more than dataset.max_rows={max_rows}")
    return [dict(r) for r in ds]
