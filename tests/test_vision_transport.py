"""Images on their way (issue 33's leftovers): a Hugging Face column holding a list of
``Image`` features loads as several images of a row, in order; ``run.batch`` input files
split by bytes and request count under the providers' limits, images inline; model workers
given each image by object reference (put once per digest), never its bytes in every call."""

from __future__ import annotations

import asyncio
import io
import json
import pickle
from pathlib import Path

import pytest
from PIL import Image as PILImage

from evalkit.benchmarks.task.benchmark import TaskBenchmark
from evalkit.benchmarks.task.settings import TaskSettings


def png(colour: tuple[int, int, int], size: tuple[int, int] = (16, 12)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


# ---- a list of Image features: several images of one row ------------------------------------
def _image_list_parquet(path: Path, images: list[list[bytes]], hf_type: str | None) -> None:
    """A Parquet file whose ``imgs`` column is a list of ``{"bytes", "path"}`` structs (what
    ``datasets`` writes for ``Sequence(Image())``); ``hf_type``: the feature's type recorded in
    the schema's ``huggingface`` metadata, as a dataset on the hub carries it (``List`` or
    ``Sequence``), ``None`` for none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    meta = None
    if hf_type is not None:
        features = {"id": {"dtype": "string", "_type": "Value"}, "q": {"dtype": "string", "_type": "Value"},
                    "a": {"dtype": "string", "_type": "Value"}, "imgs": {"feature": {"_type": "Image"}, "_type": hf_type}}  # fmt: skip
        meta = {"huggingface": json.dumps({"info": {"features": features}})}
    schema = pa.schema([("id", pa.string()), ("q", pa.string()), ("a", pa.string()), ("imgs", pa.list_(struct))], metadata=meta)
    rows = {"id": [f"r{i}" for i in range(len(images))], "q": [f"Q{i}" for i in range(len(images))],
            "a": ["1"] * len(images), "imgs": [[{"bytes": b, "path": f"{j}.png"} for j, b in enumerate(row)] for row in images]}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows, schema=schema), path)


def _spec(dataset: dict) -> TaskSettings:
    return TaskSettings(**{"name": "vislist", "kind": "task", "dataset": {**dataset, "fields": {"id": "id", "input": "q", "target": "a",
                        "images": "imgs"}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}]})  # fmt: skip


def _sent_images(bench: TaskBenchmark) -> list[list[bytes]]:
    """Each request's images as its messages order them (bytes)."""
    out = []
    for sample in bench.load():
        request = bench.build(sample, 0)
        parts = [p for m in request.messages for p in (m["content"] if isinstance(m["content"], list) else [])]
        out.append([request.images[p["evalkit_image"]["sha256"]] for p in parts if "evalkit_image" in p])
    return out


IMAGES = [[png((200, 0, 0)), png((0, 200, 0)), png((0, 0, 200))], [png((9, 9, 9))]]


def test_a_local_parquet_list_of_image_structs_is_several_images_in_order(tmp_path: Path) -> None:
    path = tmp_path / "data" / "rows.parquet"
    _image_list_parquet(path, IMAGES, None)
    bench = TaskBenchmark(_spec({"path": str(path)}))
    bench.check()
    assert _sent_images(bench) == IMAGES


@pytest.mark.slow  # datasets' first import and its builder take seconds
@pytest.mark.parametrize("hf_type", ["List", "Sequence"])
def test_a_hub_column_that_is_a_list_of_image_features_is_several_images_in_order(tmp_path: Path, monkeypatch,
                                                                                     hf_type: str) -> None:  # fmt: skip
    """A dataset whose column is ``Sequence(Image())``: ``datasets`` decodes each image to a
    Pillow object unless told otherwise; evalkit reads them undecoded (its own checks, its own
    bytes), several per row, in the row's order. The dataset is a local folder (``hub`` takes a
    path as ``datasets.load_dataset`` does): nothing is downloaded."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "hubdata"
    _image_list_parquet(folder / "test.parquet", IMAGES, hf_type)
    features = datasets.load_dataset(str(folder), split="test", cache_dir=str(tmp_path / "hf-cache")).features
    assert isinstance(features["imgs"].feature, datasets.Image) and features["imgs"].feature.decode  # decoded by default
    bench = TaskBenchmark(_spec({"hub": str(folder), "revision": "main", "split": "test"}))
    bench.check()
    assert _sent_images(bench) == IMAGES


# ---- images to model workers by reference ----------------------------------------------------
def noise_png(seed: int, size: tuple[int, int] = (64, 64)) -> bytes:
    """A PNG of pseudo-random pixels (about 12 KB: it does not compress)."""
    import random

    rng = random.Random(seed)
    out = io.BytesIO()
    PILImage.frombytes("RGB", size, bytes(rng.randrange(256) for _ in range(size[0] * size[1] * 3))).save(out, format="PNG")
    return out.getvalue()


def ten_image_unit(sample_id: str = "s0", first: int = 0):
    """A work item whose request carries 10 distinct images (``first`` … ``first + 9``)."""
    from evalkit.benchmarks.content import chat_request
    from evalkit.engine.work import WorkItem
    from evalkit.images import Limits, Text, load_image
    from evalkit.types import Sample

    images = [load_image(noise_png(first + i), Limits(), f"image {i}") for i in range(10)]
    request = chat_request(sample_id, "all", [("user", [Text("How many images?"), *images])])
    return WorkItem(Sample(sample_id, "all"), request)


class _Store:
    """An object store in process: ``put`` keeps the bytes and gives a reference that pickles
    to its key alone and is awaited to the bytes (as a Ray ``ObjectRef`` in an async actor)."""

    objects: dict[int, bytes] = {}

    class Ref:
        def __init__(self, key: int):
            self.key = key

        def __await__(self):
            yield from asyncio.sleep(0).__await__()
            return _Store.objects[self.key]

    def put(self, data: bytes) -> "_Store.Ref":
        key = len(self.objects)
        self.objects[key] = data
        return self.Ref(key)


def test_a_call_carries_each_image_by_reference_and_each_image_is_put_once() -> None:
    from evalkit.images import ImageRefs

    unit = ten_image_unit()
    data = list(unit.request.images.values())
    refs = ImageRefs(_Store().put)
    sent = unit.with_images(refs.by_reference(unit.request.images))
    inline, by_ref = len(pickle.dumps(("run", [], None, unit))), len(pickle.dumps(("run", [], None, sent)))
    print(f"\n10-image unit: {inline} bytes pickled per call inline, {by_ref} by reference "
          f"(images {sum(map(len, data))} bytes)")  # fmt: skip
    payload = pickle.dumps(("run", [], None, sent))
    assert all(d[100:164] in pickle.dumps(unit) for d in data)  # inline: every image's bytes are in the call
    assert not any(d[100:164] in payload for d in data)  # by reference: none is
    assert by_ref < sum(map(len, data)) // 10
    assert sent.request.request_hash("m") == unit.request.request_hash("m")  # the same request, by its identity
    assert list(unit.request.images.values()) == data  # the driver's unit keeps its bytes
    again = ten_image_unit("s1")  # another sample (or epoch) with the same 10 images, and 5 of them with 5 new ones
    refs.by_reference(again.request.images)
    refs.by_reference(ten_image_unit("s2", first=5).request.images)
    assert (refs.n_put, refs.bytes_put) == (15, sum(len(noise_png(i)) for i in range(15)))


def test_a_worker_reads_the_references_back_and_sends_the_same_bytes() -> None:
    """An in-process ModelWorker (the Ray actor's code) given a unit by reference: the model
    is asked with the images' own bytes, as a unit sent inline (the in-process path) is."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.executor import ModelWorker
    from evalkit.images import ImageRefs, resolve_images, sendable
    from evalkit.models.factory import Agents
    from evalkit.types import Completion

    seen = []

    class Model:
        model_id = "m"

        async def generate(self, request):
            seen.append(sendable(request.messages, request.images))  # raises when an image's bytes are not there
            return Completion(text="10", finish_reason="stop")

    unit = ten_image_unit()
    worker = ModelWorker(lambda: Agents(Model()), None)

    async def state():
        return Generate(), {}, {}, None

    async def scenario():
        holder = [asyncio.ensure_future(state())]
        by_ref = unit.with_images(ImageRefs(_Store().put).by_reference(unit.request.images))
        return [pickle.loads((await worker.solve("run", holder, None, u))[0]) for u in (by_ref, unit)]

    out = asyncio.run(scenario())
    assert [t.final_output for t in out] == ["10", "10"] and seen[0] == seen[1]
    with pytest.raises(ValueError, match="did not read back"):
        asyncio.run(resolve_images({"0" * 64: _Store().put(b"other bytes")}, lambda refs: asyncio.gather(*refs)))


@pytest.mark.slow  # starts Ray and a run through its model workers
def test_ray_workers_get_each_image_once_by_reference_and_the_server_the_same_bytes(ray_address, fake_openai, tmp_path) -> None:
    """What Ray itself serializes for a call (its serialization context, as ``solve.remote``
    sends it): a 10-image unit inline vs by reference; then the example vision task, twice
    over (``run.repeats=2``), through Ray model workers against the fake server: each image
    put once, every request carrying its images' own bytes."""
    import base64
    import hashlib

    import ray

    from evalkit.compose import compose, resolve
    from evalkit.images import ImageRefs
    from evalkit.job import run_validated

    unit = ten_image_unit()
    context = ray._private.worker.global_worker.get_serialization_context()
    sent = unit.with_images(ImageRefs(ray.put).by_reference(unit.request.images))
    inline, by_ref = context.serialize(("run", [], None, unit)), context.serialize(("run", [], None, sent))
    print(f"\nRay's serialized call of a 10-image unit: {inline.total_bytes} bytes inline, {by_ref.total_bytes} by reference")
    assert len(by_ref.contained_object_refs) == 10 and not inline.contained_object_refs
    assert by_ref.total_bytes < inline.total_bytes // 10

    fake_openai.set_plan({"default": {"content": "2"}})
    args = ["benchmark=shapes_count", "model=openai_compatible", "model.provider_model=openai/vision-test", "model.vision=true",
            f"backend.api_base={fake_openai.api_base}", f"runner.address={ray_address}", "run.repeats=2", "run.cache=false",
            "tracking=none", "run.progress=false", f"run.output_root={tmp_path}", "backend.max_retries=0"]  # fmt: skip
    _, cfg = resolve(compose(args))
    res = run_validated(cfg)
    assert res.summary["status"] == "complete"
    stored = {p.stem: p.read_bytes() for p in (res.run_dir / "images").iterdir()}
    assert res.summary["engine"]["images_by_reference"] == {"put": len(stored), "bytes": sum(map(len, stored.values()))}
    assert len(fake_openai.log) == 24  # 12 samples × 2 epochs, each by its own call
    sent_images = 0
    for entry in fake_openai.log:
        for part in entry["messages"][-1]["content"]:
            if part["type"] == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                assert stored[hashlib.sha256(data).hexdigest()] == data
                sent_images += 1
    assert sent_images > len(stored)  # the images went in several calls each, put once each
    # resumed with nothing left to send: no image is put, and the figure says so (issue 49: it was null)
    _, cfg = resolve(compose(args + [f"run.resume={res.run_dir}"]))
    again = run_validated(cfg)
    assert again.summary["status"] == "complete" and len(fake_openai.log) == 24
    assert again.summary["engine"]["images_by_reference"] == {"put": 0, "bytes": 0}


# ---- run.batch with images: input files cut by bytes -------------------------------------------
@pytest.mark.slow  # a whole batch run against the fake server
def test_a_vision_batch_is_split_by_bytes_under_the_limit_each_request_once_answers_joined(fake_openai, tmp_path,
                                                                                           monkeypatch) -> None:  # fmt: skip
    """Eight rows of 1-3 incompressible images (each about 16 KB as base64 in its line), with a
    60,000-byte and 2-request limit per input file (the fake server refuses a larger file): the
    files are cut greedily under both limits, every request is in exactly one file, and each
    sample is scored on the answer to its own line."""
    import yaml

    from evalkit.compose import compose, resolve
    from evalkit.engine.journal import read_jsonl
    from evalkit.job import run_validated

    counts = [1, 1, 1, 2, 1, 3, 1, 1]
    data = tmp_path / "data"
    data.mkdir()
    rows = []
    for k, n in enumerate(counts):
        names = []
        for j in range(n):
            (data / f"r{k}_{j}.png").write_bytes(noise_png(100 * k + j))
            names.append(f"r{k}_{j}.png")
        rows.append({"id": f"r{k}", "q": f"Row r{k}: how many images?", "a": str(n), "img": names})
    (data / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {"name": "visbatch", "kind": "task", "dataset": {"path": str(data / "rows.jsonl"), "fields": {"id": "id", "input": "q",
            "target": "a", "images": "img"}}, "prompt": {"template": "{{ input }}"}, "scorers": [{"kind": "exact_match"}],
            "generation": {"max_tokens": 16}}  # fmt: skip
    (tmp_path / "conf" / "benchmark").mkdir(parents=True)
    (tmp_path / "conf" / "benchmark" / "visbatch.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    monkeypatch.setenv("EVALKIT_CONFIG_DIR", str(tmp_path / "conf"))
    limit, most = 60_000, 2
    fake_openai.set_plan({"rules": [{"match": r["q"], "content": r["a"]} for r in rows],
                          "batch": {"max_bytes": limit, "max_requests": most}})  # fmt: skip
    args = ["benchmark=visbatch", "model=openai_compatible", "model.provider_model=openai/gpt-4o-2024-11-20", "model.vision=true",
            f"backend.api_base={fake_openai.api_base}", "run.batch=true", "run.batch_poll_s=0.01", "run.batch_poll_max_s=0.05",
            f"run.batch_max_bytes={limit}", f"run.batch_max_requests={most}", "run.cache=false", "tracking=none",
            "run.progress=false", f"run.output_root={tmp_path / 'out'}", "backend.max_retries=0"]  # fmt: skip
    _, cfg = resolve(compose(args))
    res = run_validated(cfg)
    assert res.summary["status"] == "complete" and res.summary["metrics"]["exact_match"] == 1.0
    assert fake_openai.log == []  # nothing sent live
    sizes = [fake_openai.files[b["input_file_id"]]["bytes"] for b in fake_openai.batch_log]
    ids = [b["custom_ids"] for b in fake_openai.batch_log]
    print(f"\n{len(ids)} input files of {sizes} bytes, {[len(i) for i in ids]} requests")
    assert len(ids) > 2 and all(s <= limit for s in sizes) and all(len(i) <= most for i in ids)
    flat = [h for i in ids for h in i]
    assert len(flat) == len(set(flat)) == len(rows)  # every request sent exactly once
    lines = {h: len(line) for b in fake_openai.batch_log for h, line in zip(b["custom_ids"], _lines_of(fake_openai, b))}
    for this, after in zip(ids, ids[1:]):  # cut greedily: the next file's first line did not fit this one
        assert len(this) == most or sum(lines[h] for h in this) + lines[after[0]] > limit
    n_of = {r["q"]: len(r["img"]) for r in rows}
    for body in (body for b in fake_openai.batch_log for body in b["bodies"]):  # each line carries its row's images inline
        parts = body["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert len(urls) == n_of[parts[0]["text"]] and all(u.startswith("data:image/png;base64,") for u in urls)
    predictions = {r["sample_id"]: r for r in read_jsonl(res.run_dir / "predictions.jsonl")}
    assert {sid: r["output"] for sid, r in predictions.items()} == {r["id"]: r["a"] for r in rows}
    assert all(len(predictions[r["id"]]["images"]) == n for r, n in zip(rows, counts))


def _lines_of(fake, batch: dict) -> list[bytes]:
    """The lines of a submitted batch's input file, as uploaded."""
    return [line + b"\n" for line in fake.files[batch["input_file_id"]]["_data"].splitlines()]
