"""A run holds at most ``dataset.image_limits.max_held_bytes`` of images at once (issue 49):
the driver once held every image of the run (376 MiB for 5 rows of 4.1 MB photos, 604 MiB for
60). Image files are checked when the data loads and read again when a request needs them
(:class:`evalkit.images.ImageStore`); a built request holds digests
(:class:`evalkit.images.LazyImages`); Ray's object store keeps references to at most as
much (:class:`evalkit.images.ImageRefs`); one line says when a task's images are over the
bound; a bound under one request's images is refused in one line."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image as PILImage

from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings
from evalkit.errors import DataError
from evalkit.images import ImageRefs, ImageStore, LazyImages, Limits, load_image
from tests.conftest import REPO_ROOT
from tests.support.host import time_limit


def noise_png(seed: int, side: int = 64) -> bytes:
    """A PNG of random pixels (it does not compress: about 3 × side² bytes)."""
    import random

    rng = random.Random(seed)
    out = io.BytesIO()
    PILImage.frombytes("RGB", (side, side), rng.randbytes(side * side * 3)).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _task(root: Path, n: int, side: int, **limits: int) -> TaskBenchmark:
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        (data / f"p{i}.png").write_bytes(noise_png(i, side))
        rows.append({"id": f"r{i}", "q": f"Q{i}", "a": "1", "img": f"p{i}.png"})
    (data / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {"name": "photos", "kind": "task", "dataset": {"path": str(data / "rows.jsonl"), "image_limits": limits,
            "fields": {"id": "id", "input": "q", "target": "a", "images": "img"}}, "prompt": {"template": "{{ input }}"},
            "scorers": [{"kind": "exact_match"}]}  # fmt: skip
    return TaskBenchmark(TaskSettings(**spec))


# ---- the store -----------------------------------------------------------------------------------


def test_the_store_holds_at_most_its_bound_and_reads_a_file_again() -> None:
    images = [load_image(noise_png(i), Limits(), f"i{i}") for i in range(10)]
    size = len(images[0].data)
    reads = {im.sha256: 0 for im in images}

    def reload(im):
        def again():
            reads[im.sha256] += 1
            return im
        return again

    store = ImageStore(max_bytes=3 * size + 100)
    facts = [store.register(im, reload(im)) for im in images]
    assert store.total == sum(len(im.data) for im in images) and store.peak <= 3 * size + 100
    assert store.get(facts[9].sha256) == images[9].data and store.reloads == 0  # among the three kept
    assert [store.get(f.sha256) for f in facts] == [im.data for im in images]  # in order: each read again
    assert store.reloads == 10 and sum(reads.values()) == 10
    assert store.peak <= 3 * size + 100
    assert store.get(facts[9].sha256) == images[9].data and store.reloads == 10  # the most recent: cached


def test_inline_images_are_kept_and_a_changed_file_is_one_line() -> None:
    kept = load_image(noise_png(1), Limits(), "inline")
    store = ImageStore(max_bytes=10)
    store.register(kept, None)  # a data: URI's: the data held it anyway
    assert store.get(kept.sha256) == kept.data and store.pinned == len(kept.data) and store.reloads == 0
    first, other = load_image(noise_png(2), Limits(), "a"), load_image(noise_png(3), Limits(), "b")
    store.register(first, lambda: other)  # the file now holds other bytes
    store.register(load_image(noise_png(4), Limits(), "c"), lambda: None)  # pushes the first out of the cache
    with pytest.raises(DataError) as info:
        store.get(first.sha256)
    assert "its file changed since the run read it" in str(info.value) and "\n" not in str(info.value)


def test_a_request_holds_digests_and_pickles_to_its_bytes(tmp_path: Path) -> None:
    bench = _task(tmp_path, 3, 32)
    request = bench.build(bench.load()[1], 0)
    assert isinstance(request.images, LazyImages) and len(request.images) == 1
    digest = next(iter(request.images))
    assert vars(request.images)["_digests"] == (digest,)  # no bytes in the request itself
    data = (tmp_path / "data" / "p1.png").read_bytes()
    assert request.images[digest] == data and hashlib.sha256(data).hexdigest() == digest
    assert pickle.loads(pickle.dumps(request)).images == {digest: data}  # a copy that leaves the driver is plain bytes
    with pytest.raises(TypeError):
        pickle.dumps(bench.image_store)


def test_a_task_over_the_bound_holds_only_the_bound_and_says_so_once(tmp_path: Path, caplog) -> None:
    side = 96
    size = len(noise_png(0, side))
    bench = _task(tmp_path, 30, side, max_request_bytes=4 * size, max_held_bytes=4 * size)
    with caplog.at_level(logging.WARNING, logger="evalkit"):
        samples = bench.load()
    lines = [r.getMessage() for r in caplog.records if "max_held_bytes" in r.getMessage()]
    assert len(lines) == 1 and "task photos: its images are" in lines[0] and "reads an image file again" in lines[0]
    store = bench.image_store
    assert store.total > 29 * size and store.peak <= 4 * size
    for i, sample in enumerate(samples):  # every request, as dispatched: the right bytes, the bound kept
        request = bench.build(sample, 0)
        assert list(request.images.values()) == [(tmp_path / "data" / f"p{i}.png").read_bytes()]
    assert store.peak <= 4 * size and store.reloads >= 26


def test_a_bound_under_one_requests_images_is_one_line() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_held_bytes=1000 is under max_request_bytes=2000"):
        TaskSettings(**{"name": "t", "kind": "task", "dataset": {"path": "x.jsonl", "image_limits": {"max_held_bytes": 1000,
                        "max_request_bytes": 2000}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]})  # fmt: skip


def test_ray_references_are_kept_for_at_most_the_bound() -> None:
    put: list[bytes] = []
    refs = ImageRefs(lambda data: put.append(data) or len(put), max_bytes=3 * 1000)
    images = {f"{i:064x}": bytes([i]) * 1000 for i in range(6)}
    for digest, data in images.items():
        assert refs.by_reference({digest: data}) == {digest: len(put)}
    assert len(refs.refs) == 3 and list(refs.refs) == list(images)[3:]  # the three most recent
    refs.by_reference({list(images)[0]: images[list(images)[0]]})  # dropped before: put again, counted again
    assert (refs.n_put, refs.bytes_put) == (7, 7000) and len(refs.refs) == 3
    big = {f"{i:064x}": bytes(1000) for i in range(10, 15)}  # one call over the bound: all its references kept for it
    assert len(refs.by_reference(big)) == 5 and set(big) <= set(refs.refs)


# ---- the driver's memory, measured ---------------------------------------------------------------

#: what the probe does in a fresh interpreter: load the task, build every request and read
#: its images as a dispatch does, store the run's images; prints its baseline and peak RSS
PROBE = r"""
import resource, sys
from pathlib import Path
from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings
from evalkit.engine.finalize import store_images
from evalkit.images import image_loaders
import json
spec = json.loads(sys.argv[1])
bench = TaskBenchmark(TaskSettings(**spec))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
images = {}
for sample in bench.load():
    request = bench.build(sample, 0)
    sum(len(b) for b in request.images.values())
    images.update(image_loaders(request.images))
store_images(Path(sys.argv[2]), images)
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, bench.image_store.total)
"""


@pytest.mark.slow
def test_the_driver_holds_the_bound_not_the_run(tmp_path: Path) -> None:
    """48 photos of 1.7 MB (79 MiB in all) under an 8 MiB bound: loading, building every
    request, reading its images and storing them grow the driver by far less than the images
    (it held them all before: 376 MiB for five 4.1 MB photos)."""
    side = 760
    bench = _task(tmp_path, 48, side, max_request_bytes=8 * 2**20, max_held_bytes=8 * 2**20)
    spec = bench.settings.model_dump(mode="json")
    (tmp_path / "run").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec), str(tmp_path / "run")], capture_output=True,
                          text=True, env=env, timeout=time_limit(300))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    base_kib, peak_kib, total = map(int, proc.stdout.split()[-3:])
    grew_mb = (peak_kib - base_kib) / 1024
    print(f"\nimages {total / 2**20:.0f} MiB under an 8 MiB bound: the driver grew {grew_mb:.0f} MiB")
    assert total > 75 * 2**20
    assert grew_mb < 45, f"the driver grew {grew_mb:.0f} MiB for {total / 2**20:.0f} MiB of images"
    assert len(list((tmp_path / "run" / "images").iterdir())) == 48  # every image stored, one at a time
